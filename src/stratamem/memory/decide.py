"""Reconciling extraction: the model reads the facts already held before it writes, and
answers with decisions, each applied through the bitemporal machinery so history is kept.

The prompt. Before the records, the user message lists the facts held now about the
subjects the batch mentions (the entities its chunks name, and the subjects of facts whose
evidence lies in the batch), at most :data:`MAX_SUBJECTS` subjects and :data:`MAX_HELD` facts
(the most recently recorded first; a line says how many more were left out). Each behind a
label the model cites, ``[F1] person:carol diaz | leads | on-call | from 2024-03-01``. Only
facts the caller may read are shown (a principal's gate; a locked source's facts never),
and of those only the facts of sources that every principal reading the batch's source also
reads (:func:`~stratamem.store.access.read_no_wider`): what the model writes lands there.

The answer (:data:`DECISIONS_SCHEMA`): ``{"decisions": [{"action", "fact", "subject",
"predicate", "object", "valid_from", "many", "confidence", "evidence", "reason"}, ...]}``:

==========  ===========================================================================
``add``     a new fact: subject, predicate, object (and valid_from, many, confidence)
``update``  fact ``fact`` (a label shown) no longer holds from ``valid_from`` (else the
            time of the evidence): it is closed there and ``object`` opens in its place,
            of the same subject and predicate
``retract`` fact ``fact`` no longer holds from ``valid_from`` (else the evidence's
            time): it is closed there, and nothing opens
``none``    fact ``fact`` (or nothing) stays as it is
==========  ===========================================================================

``evidence`` lists node ids of the batch (required but for ``none``); ``reason`` says why
(required for ``update`` and ``retract``) and is kept on the rows recorded
(:attr:`~stratamem.store.facts.Fact.reason`). Closing a fact expires its row and records a
copy ending at the close (see :func:`close`), so the value it had stays in the history.

The answer of earlier releases, ``{"facts": [...]}`` with the keys of
:data:`~stratamem.memory.extract.ITEM_KEYS`, is still read: each item an ``add``.

Refused, each as a skipped decision with its reason: a decision that is not an object, has
unknown keys or an unknown action; an unknown subject kind; a subject over
:data:`MAX_SUBJECT` characters, a predicate over :data:`MAX_PREDICATE`, an object over
:data:`MAX_OBJECT`; a ``valid_from`` that is
not a date of the calendar; evidence outside the batch; an ``update`` or ``retract`` naming a
fact that was not shown (whether or not it exists: the report says only that it was not
shown, never what a hidden fact says), or one whose source the caller may not write, or one
changed or locked since it was shown. An answer of more than :data:`MAX_DECISIONS` decisions
has the rest skipped in one entry.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal

from stratamem.errors import SkipDecision
from stratamem.memory.facts import Change, Statement, recorded_again
from stratamem.memory.remember import entity_id, predicate_name, remember, statement
from stratamem.store.base import Store
from stratamem.store.facts import Fact
from stratamem.timeparse import as_utc
from stratamem.types import Chunk

Action = Literal["add", "update", "retract", "none"]
ACTIONS: tuple[Action, ...] = ("add", "update", "retract", "none")
DECISION_KEYS = (
    "action",
    "fact",
    "subject",
    "predicate",
    "object",
    "valid_from",
    "many",
    "confidence",
    "evidence",
    "reason",
)
MAX_DECISIONS = 200
MAX_SUBJECTS = 30
MAX_HELD = 40
MAX_SUBJECT = 500
MAX_PREDICATE = 200
MAX_OBJECT = 2000
MAX_REASON = 500

SYSTEM_PROMPT = (
    "You keep a long-term memory of facts up to date from the records the user gives. A fact "
    "says that a subject's predicate is an object, e.g. subject 'person:carol diaz', "
    "predicate 'leads', object 'on-call'. The user first lists the facts the memory holds now "
    "about the subjects the records mention, each behind a label such as [F1]; then the "
    "records, each behind its id in brackets. For each thing the records state, decide: "
    "'add' a new fact; 'update' a held fact whose value the records change (give its label "
    "in fact and the new object; it keeps its subject and predicate); 'retract' a held fact "
    "the records say no longer holds (give its label); or 'none' when a held fact stays as "
    "it is. Write the subject as an entity id, kind:name, the kind one of person, email, "
    "handle, channel, tag, url or topic (person:carol diaz, topic:phoenix, channel:#eng); the "
    "object as an entity id when it names one, else as short text. The predicate is a short "
    "verb or noun phrase in lower case with words joined by underscores (leads, works_on, "
    "release_date). Set valid_from to the ISO 8601 date or time from which the decision "
    "holds only when the text says it, else null. Set many to true when the predicate holds "
    "many values at once (likes, attended, member_of), false when a new value replaces the "
    "old one (leads, status, lives_in). evidence lists the ids of the records the decision "
    "rests on, copied exactly from the brackets. confidence is how certain the text makes "
    "it, from 0 to 1. reason says briefly why. State only what the records say; do not "
    'guess. Answer with JSON only, {"decisions": [...]}, an empty list when nothing changes.'
)

_NULLABLE_TEXT = {"type": ["string", "null"]}
DECISIONS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decisions": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": list(ACTIONS)},
                    "fact": {**_NULLABLE_TEXT, "description": "a held fact's label, e.g. F1"},
                    "subject": {**_NULLABLE_TEXT, "description": "kind:name"},
                    "predicate": _NULLABLE_TEXT,
                    "object": _NULLABLE_TEXT,
                    "valid_from": {**_NULLABLE_TEXT, "description": "ISO 8601"},
                    "many": {"type": ["boolean", "null"]},
                    "confidence": {"type": ["number", "null"]},
                    "evidence": {"type": "array", "items": {"type": "string"}},
                    "reason": {"type": "string"},
                },
                "required": list(DECISION_KEYS),
                "additionalProperties": False,
            },
        }
    },
    "required": ["decisions"],
    "additionalProperties": False,
}


# What each action must give (the others may be left out, or null).
_NEEDED: dict[str, tuple[str, ...]] = {
    "add": ("subject", "predicate", "object", "evidence"),
    "update": ("fact", "object", "evidence", "reason"),
    "retract": ("fact", "evidence", "reason"),
}


@dataclass(frozen=True, slots=True)
class Held:
    """The facts shown to the model for one batch, by label (``F1``…), how many more about
    its subjects were left out, and how many subjects it mentions past the cap."""

    facts: Mapping[str, Fact]
    left_out: int = 0
    subjects_left_out: int = 0

    def named(self, label: Any) -> tuple[str, Fact]:
        """The fact a decision names by its label (``F1``, ``[F1]``) or its id, among those
        shown; :class:`SkipDecision` otherwise, saying only that it was not shown."""
        if not isinstance(label, str) or not label.strip():
            raise SkipDecision("names no fact: give the label of a fact shown (F1, F2, …)")
        key = label.strip().strip("[]").strip()
        if key in self.facts:
            return key, self.facts[key]
        for shown, fact in self.facts.items():
            if fact.id == key:
                return shown, fact
        raise SkipDecision(f"fact {_shown(label)} is not among the facts shown")

    def lines(self) -> str:
        """The facts as the prompt lists them, one a line."""
        out = [f"[{label}] {held_line(fact)}" for label, fact in self.facts.items()] or ["(none)"]
        if self.left_out:
            out.append(f"({self.left_out} more facts about these subjects are not shown)")
        if self.subjects_left_out:
            out.append(
                f"({self.subjects_left_out} more subjects are mentioned; their facts are not shown)"
            )
        return "\n".join(out)


def held_line(fact: Fact) -> str:
    """``person:carol diaz | leads | on-call | from 2024-03-01 | one of many``."""
    parts = [fact.subject, fact.predicate, " ".join(fact.object.split())]
    if fact.valid_from is not None:
        parts.append("from " + _day(fact.valid_from))
    if fact.valid_to is not None:
        parts.append("until " + _day(fact.valid_to))
    if not fact.single:
        parts.append("one of many")
    return " | ".join(parts)


def choose_held(
    facts: Sequence[Fact], *, limit: int = MAX_HELD, subjects_left_out: int = 0
) -> Held:
    """The believed facts to show, the most recently recorded first, at most ``limit``,
    labelled ``F1``… in that order."""
    believed = {f.id: f for f in facts if f.believed}
    ordered = sorted(believed.values(), key=lambda f: (f.recorded_at, f.id), reverse=True)
    shown = ordered[:limit]
    labelled = {f"F{n}": f for n, f in enumerate(shown, start=1)}
    return Held(labelled, len(ordered) - len(shown), subjects_left_out)


def mentioned_subjects(
    mentions: Mapping[str, Sequence[str]], evidenced: Sequence[Fact]
) -> list[str]:
    """The subjects a batch mentions: the entity ids its chunks name (those of a kind a fact
    may have) and the subjects of facts whose evidence is in it, first seen first (the caller
    keeps the first :data:`MAX_SUBJECTS`)."""
    found: dict[str, None] = {}
    for fact in evidenced:
        found.setdefault(fact.subject)
    for entities in mentions.values():
        for entity in entities:
            try:
                found.setdefault(entity_id(entity))
            except ValueError:
                continue
    return list(found)


# -- the answer --------------------------------------------------------------------------------


def decisions_of(body: Any) -> list[Any] | None:
    """The decisions of an answer's JSON body, the old ``facts`` shape read as adds; None when
    it holds neither list."""
    if not isinstance(body, dict):
        return None
    decisions = body.get("decisions")
    if isinstance(decisions, list):
        return decisions
    facts = body.get("facts")
    if isinstance(facts, list):
        return [_as_add(item) for item in facts]
    return None


def _as_add(item: Any) -> Any:
    if not isinstance(item, dict):
        return item
    return {"action": "add", "fact": None, "reason": "", **item}


@dataclass(frozen=True, slots=True)
class Decision:
    """One decision, checked: ``said`` the new value (add, update), ``fact`` the held fact it
    names (update, retract, none; ``label`` as shown), ``at`` when that fact stops holding
    (update, retract)."""

    action: Action
    reason: str
    evidence: tuple[str, ...]
    said: Statement | None = None
    fact: Fact | None = None
    label: str | None = None
    at: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "fact": None if self.fact is None else self.fact.id,
            "label": self.label,
            "reason": self.reason,
            "evidence": list(self.evidence),
        }


def check_decision(item: Any, batch: Mapping[str, Chunk], held: Held, *, now: datetime) -> Decision:
    """The decision an answer's item makes; :class:`SkipDecision` with the reason when it
    breaks the protocol (see the module docstring)."""
    if not isinstance(item, dict):
        raise SkipDecision(f"not an object: {_shown(item)}")
    extra = sorted(set(item) - set(DECISION_KEYS))
    if extra:
        raise SkipDecision(f"unknown keys {', '.join(map(str, extra))}")
    action = item.get("action")
    if action not in ACTIONS:
        raise SkipDecision(f"action must be one of {', '.join(ACTIONS)}, not {_shown(action)}")
    reason = item.get("reason")
    if reason is None:
        reason = ""
    if not isinstance(reason, str):
        raise SkipDecision(f"reason must be text, not {_shown(reason)}")
    reason = " ".join(reason.split())[:MAX_REASON]
    if action == "none":
        label, fact = (None, None)
        if item.get("fact") is not None:
            label, fact = held.named(item["fact"])
        return Decision("none", reason, (), fact=fact, label=label)
    missing = [k for k in _NEEDED[action] if k not in item]
    if missing:
        raise SkipDecision(f"missing {', '.join(missing)}")
    evidence = _evidence(item["evidence"], batch)
    valid_from = _date(item.get("valid_from"))
    if action == "add":
        said = _statement(item, item["subject"], item["predicate"], evidence, batch, valid_from)
        return Decision("add", reason, evidence, said=replace(said, reason=reason))
    if not reason:
        raise SkipDecision(f"an {action} needs a reason")
    label, fact = held.named(item.get("fact"))
    at = valid_from or _latest(evidence, batch) or now
    if action == "retract":
        return Decision("retract", reason, evidence, fact=fact, label=label, at=at)
    for name, held_value in (("subject", fact.subject), ("predicate", fact.predicate)):
        given = item.get(name)
        if given is None:
            continue
        try:
            same = (entity_id(given) if name == "subject" else predicate_name(given)) == held_value
        except (ValueError, AttributeError, TypeError):
            same = False
        if not same:
            raise SkipDecision(f"an update keeps the {name} of fact {label}")
    if item.get("many") is None:
        item = {**item, "many": not fact.single}
    said = _statement(item, fact.subject, fact.predicate, evidence, batch, at)
    return Decision(
        "update", reason, evidence, said=replace(said, reason=reason), fact=fact, label=label, at=at
    )


def _statement(
    item: Mapping[str, Any],
    subject: Any,
    predicate: Any,
    evidence: tuple[str, ...],
    batch: Mapping[str, Chunk],
    valid_from: datetime | None,
) -> Statement:
    for name, value in (("subject", subject), ("predicate", predicate), ("object", item["object"])):
        if not isinstance(value, str) or not value.strip():
            raise SkipDecision(f"{name} must be non-empty text, not {_shown(value)}")
    if len(subject) > MAX_SUBJECT:
        raise SkipDecision(f"subject is longer than {MAX_SUBJECT} characters")
    if len(predicate) > MAX_PREDICATE:
        raise SkipDecision(f"predicate is longer than {MAX_PREDICATE} characters")
    if len(item["object"]) > MAX_OBJECT:
        raise SkipDecision(f"object is longer than {MAX_OBJECT} characters")
    try:
        subject = entity_id(subject)
        predicate_name(predicate)
    except ValueError as exc:
        raise SkipDecision(str(exc)) from None
    many = item.get("many")
    if many is None:
        many = False
    if not isinstance(many, bool):
        raise SkipDecision(f"many must be true or false, not {_shown(many)}")
    confidence = item.get("confidence")
    if confidence is None:
        confidence = 1.0
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, int | float)
        or not math.isfinite(confidence)
    ):
        raise SkipDecision(f"confidence must be a number, not {_shown(confidence)}")
    if valid_from is None:
        times = [t for t in (batch[n].time_start for n in evidence) if t is not None]
        valid_from = min(times) if times else None
    try:
        return statement(
            subject,
            predicate,
            item["object"],
            valid_from=valid_from,
            evidence=evidence,
            confidence=min(1.0, max(0.0, float(confidence))),
            origin="model",
            many=many,
        )
    except ValueError as exc:
        raise SkipDecision(str(exc)) from None


def _evidence(value: Any, batch: Mapping[str, Chunk]) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise SkipDecision(f"evidence must be a non-empty list of node ids, not {_shown(value)}")
    for node in value:
        if not isinstance(node, str) or node not in batch:
            raise SkipDecision(f"evidence {_shown(node)} is not a record of this batch")
    return tuple(dict.fromkeys(value))


def _latest(evidence: Sequence[str], batch: Mapping[str, Chunk]) -> datetime | None:
    times = [t for t in (batch[n].time_start for n in evidence) if t is not None]
    return max(times) if times else None


def _date(value: Any) -> datetime | None:
    if value is None:
        return None
    text = value.strip() if isinstance(value, str) else ""
    if len(text) < 10 or not text[:4].isdigit() or text[4] != "-" or text[7] != "-":
        raise SkipDecision(
            f"valid_from must be null or an ISO 8601 date or time, not {_shown(value)}"
        )
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise SkipDecision(f"valid_from {_shown(value)} is not a date of the calendar") from None
    return as_utc(when)


# -- applying ----------------------------------------------------------------------------------


def close(
    row: Fact,
    at: datetime,
    now: datetime,
    serial: int,
    *,
    reason: str,
    evidence: Sequence[str] = (),
) -> Change:
    """The change that makes ``row`` stop holding at valid time ``at``, recorded at ``now``:
    its row expires, and a copy ending at ``at`` is recorded with ``reason`` (its evidence
    joined by ``evidence``), so what held before stays in the history. A row that starts at
    or after ``at`` never held by this account: it only expires. A row that already ends by
    ``at`` is left as it is. ``serial``: how many rows its timeline holds."""
    if not row.believed or (row.valid_to is not None and row.valid_to <= at):
        return Change()
    if row.valid_from is not None and row.valid_from >= at:
        return Change(expire=[row.id])
    copy = replace(
        recorded_again(row, row.valid_from, at, now, serial, row.source_id),
        evidence=tuple(dict.fromkeys((*row.evidence, *evidence))),
        reason=reason,
    )
    return Change(expire=[row.id], record=[copy])


def apply(
    store: Store,
    decision: Decision,
    *,
    source_id: str,
    now: datetime,
    may_change: Callable[[Fact], bool],
) -> list[Fact]:
    """The rows one decision records, in the caller's transaction, ``source_id`` the batch's
    source: the named fact closed (:func:`close`) and the new value remembered (its home the
    evidence's source). :class:`SkipDecision` for one naming a fact ``may_change`` refuses
    (another source the caller may not write, a locked one), or one changed since it was
    shown."""
    recorded: list[Fact] = []
    named = decision.fact
    if decision.action == "none":
        return recorded
    if named is not None and decision.at is not None:
        label = decision.label or named.id
        if not may_change(named):
            raise SkipDecision(f"fact {label} lies in a source the caller may not write")
        rows = store.fact_rows(named.source_id, named.subject, named.predicate)
        current = next((r for r in rows if r.id == named.id), None)
        if current is None or not current.believed:
            raise SkipDecision(f"fact {label} changed since it was shown")
        here = named.source_id == source_id
        change = close(
            current,
            decision.at,
            now,
            len(rows),
            # What another source says stays that source's: its row records only that a model
            # closed it, not the words read elsewhere.
            reason=decision.reason if here else "closed by a model reading another source",
            evidence=decision.evidence if here else (),
        )
        store.write_facts(named.source_id, change.expire, change.record, now)
        recorded.extend(change.record)
    if decision.said is not None:
        recorded.extend(remember(store, decision.said, now=now).recorded)
    return recorded


def _day(when: datetime) -> str:
    when = when.astimezone(UTC)
    if (when.hour, when.minute, when.second) == (0, 0, 0):
        return when.strftime("%Y-%m-%d")
    return when.strftime("%Y-%m-%d %H:%M UTC")


def _shown(value: Any) -> str:
    import json

    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:79] + "…"
