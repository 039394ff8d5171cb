"""Bitemporal facts and how a new statement changes them.

A fact says that ``subject``'s ``predicate`` is ``object`` over a span of **valid time**
(``valid_from`` to ``valid_to``: when it was true in the world) and was believed over a span
of **transaction time** (``recorded_at`` to ``expired_at``: when the store held it). One
(subject, predicate) has one value at a time: its believed rows (``expired_at`` unset) form
a timeline of spans that do not overlap.

Nothing is ever deleted by a statement: :func:`reconcile` works out the rows to expire (their
transaction time ends now) and the rows to record, and the store applies both in one
transaction. A changed value closes the old row at the new ``valid_from`` — as an expired
row and a recorded copy ending there, so that what was believed at any moment can still be
read back (:func:`as_of`) — and opens a new one. The same value again changes nothing. A
statement about an earlier time than the present value's fills that span of history and
leaves the present alone. A correction (:func:`retract`) ends a row's transaction time and
leaves its valid time as it was.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from stratamem.store.facts import ORIGINS, Fact, Origin, iso


@dataclass(frozen=True, slots=True)
class Statement:
    """What someone (or something) says: ``subject``'s ``predicate`` is ``object`` from
    ``valid_from`` (None: as far back as known) to ``valid_to`` (None: until said otherwise)."""

    subject: str
    predicate: str
    object: str
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    evidence: tuple[str, ...] = ()
    confidence: float = 1.0
    origin: Origin = "asserted"
    object_is_entity: bool = False
    single: bool = True
    reason: str = ""  # why a model said it (see memory/decide.py), kept on the row recorded

    def __post_init__(self) -> None:
        for name, article in (("subject", "a"), ("predicate", "a"), ("object", "an")):
            if not str(getattr(self, name)).strip():
                raise ValueError(f"a fact needs {article} {name}")
        if (
            self.valid_from is not None
            and self.valid_to is not None
            and self.valid_to <= self.valid_from
        ):
            raise ValueError(
                f"valid_to ({iso(self.valid_to)}) must come after valid_from "
                f"({iso(self.valid_from)})"
            )
        if not 0.0 <= self.confidence <= 1.0:
            raise ValueError(f"confidence must be within 0 and 1, not {self.confidence}")
        if self.origin not in ORIGINS:
            raise ValueError(f"origin must be one of {', '.join(ORIGINS)}, not {self.origin!r}")


@dataclass(slots=True)
class Change:
    """What a statement does to the store: rows whose transaction time ends, rows recorded."""

    expire: list[str] = field(default_factory=list)
    record: list[Fact] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.expire and not self.record


def fact_id(
    statement: Statement,
    valid_from: datetime | None,
    valid_to: datetime | None,
    recorded_at: datetime,
    serial: int,
    source: str = "",
) -> str:
    """A row's id: a digest of what it says, when it was recorded, ``serial`` (how many
    rows its timeline held before), which keeps two rows of one timeline apart even when
    the same words are recorded twice within a millisecond, and ``source`` (the timeline's
    owner), which keeps apart the same words recorded by two sources at once."""
    payload = json.dumps(
        [
            statement.subject,
            statement.predicate,
            statement.object,
            iso(valid_from),
            iso(valid_to),
            iso(recorded_at),
            serial,
            *([source] if source else []),
        ]
    )
    return "fact_" + hashlib.sha256(payload.encode()).hexdigest()[:24]


def reconcile(
    rows: Iterable[Fact], statement: Statement, now: datetime, *, source: str = ""
) -> Change:
    """The change ``statement`` makes to ``rows`` (those of its subject and predicate in
    ``source``'s timeline; rows no longer believed are left alone), recorded at ``now``.

    The statement's value holds over [valid_from, end), where ``end`` is its ``valid_to`` or,
    when it gives none, the start of the first believed row after ``valid_from`` (so a later
    known change stays), else open. Believed rows that overlap that span are expired and
    what lies outside the span is recorded again as it was; the statement's own row is
    recorded over the span. If the believed rows already say the same value over the whole
    span, nothing changes.
    """
    rows = list(rows)
    serial = len(rows)
    _check_forward(rows, now)
    believed = sorted(
        (
            r
            for r in rows
            if r.believed
            and r.subject == statement.subject
            and r.predicate == statement.predicate
            and r.single == statement.single
            and (statement.single or r.object == statement.object)
        ),
        key=lambda r: _start_key(r.valid_from),
    )
    start = statement.valid_from
    end = statement.valid_to
    if end is None:
        later = [
            r.valid_from
            for r in believed
            if r.valid_from is not None and _start_key(r.valid_from) > _start_key(start)
        ]
        end = min(later) if later else None
    overlapping = [r for r in believed if _overlaps(r, start, end)]
    if _covers(overlapping, statement.object, start, end):
        return Change()
    change = Change()
    for row in overlapping:
        change.expire.append(row.id)
        if _start_key(row.valid_from) < _start_key(start):
            change.record.append(
                recorded_again(row, row.valid_from, start, now, serial + len(change.record), source)
            )
        if end is not None and (row.valid_to is None or row.valid_to > end):
            change.record.append(
                recorded_again(row, end, row.valid_to, now, serial + len(change.record), source)
            )
    change.record.append(
        Fact(
            id=fact_id(statement, start, end, now, serial + len(change.record), source),
            subject=statement.subject,
            predicate=statement.predicate,
            object=statement.object,
            valid_from=start,
            valid_to=end,
            recorded_at=now,
            evidence=statement.evidence,
            confidence=statement.confidence,
            origin=statement.origin,
            object_is_entity=statement.object_is_entity,
            single=statement.single,
            reason=statement.reason,
        )
    )
    return change


def fact_text(fact: Fact) -> str:
    """What a fact says, in words: ``carol diaz leads on-call``."""
    subject = fact.subject.split(":", 1)[-1]
    return f"{subject} {fact.predicate.replace('_', ' ')} {fact.object}"


def retract(row: Fact, now: datetime, rows: Iterable[Fact] = ()) -> Change:
    """A correction: the row was never true. Its transaction time ends; its valid time and
    every other row stay as they were. ``rows``: the rest of its timeline, whose last change
    ``now`` may not come before."""
    if not row.believed:
        return Change()
    _check_forward([row, *rows], now)
    return Change(expire=[row.id])


def as_of(
    rows: Iterable[Fact], *, valid_at: datetime | None = None, known_at: datetime | None = None
) -> list[Fact]:
    """The rows true at valid time ``valid_at`` (None: now) as the store believed them at
    transaction time ``known_at`` (None: now)."""
    found = [
        r
        for r in rows
        if (r.believed if known_at is None else r.known_at(known_at)) and r.holds_at(valid_at)
    ]
    return sorted(found, key=lambda r: (r.subject, r.predicate, _start_key(r.valid_from), r.id))


def history(rows: Iterable[Fact], *, known_at: datetime | None = None) -> list[Fact]:
    """The timeline of values as believed at ``known_at`` (None: now), oldest first."""
    found = [r for r in rows if (r.believed if known_at is None else r.known_at(known_at))]
    return sorted(found, key=lambda r: (r.subject, r.predicate, _start_key(r.valid_from), r.id))


def _check_forward(rows: Sequence[Fact], now: datetime) -> None:
    """Refuse ``now`` before the last change of ``rows``: a row recorded, or no longer
    believed (a correction records nothing, yet it changes what was believed from then)."""
    latest = max(
        (when for r in rows for when in (r.recorded_at, r.expired_at) if when is not None),
        default=None,
    )
    if latest is not None and now < latest:
        raise ValueError(
            f"now ({iso(now)}) is before the last change of this fact ({iso(latest)}): "
            "transaction time only moves forward"
        )


# -- spans -------------------------------------------------------------------------------------


def _start_key(when: datetime | None) -> tuple[int, datetime | None]:
    """Orders starts, None (since always) first."""
    return (0, None) if when is None else (1, when)


def _overlaps(row: Fact, start: datetime | None, end: datetime | None) -> bool:
    """Whether the row's span meets [start, end)."""
    row_starts_before_end = end is None or row.valid_from is None or row.valid_from < end
    row_ends_after_start = row.valid_to is None or start is None or row.valid_to > start
    return row_starts_before_end and row_ends_after_start


def _covers(rows: Sequence[Fact], value: str, start: datetime | None, end: datetime | None) -> bool:
    """Whether ``rows`` (sorted, not overlapping) say ``value`` over all of [start, end)."""
    if not rows or any(r.object != value for r in rows):
        return False
    if _start_key(rows[0].valid_from) > _start_key(start):
        return False
    for before, after in itertools.pairwise(rows):
        if before.valid_to is None or before.valid_to != after.valid_from:
            return False
    last = rows[-1].valid_to
    return last is None or (end is not None and last >= end)


def recorded_again(
    row: Fact,
    start: datetime | None,
    end: datetime | None,
    now: datetime,
    serial: int,
    source: str = "",
) -> Fact:
    """The part [start, end) of ``row``, recorded again at ``now``."""
    statement = Statement(
        row.subject,
        row.predicate,
        row.object,
        evidence=row.evidence,
        confidence=row.confidence,
        origin=row.origin,
        object_is_entity=row.object_is_entity,
        single=row.single,
    )
    return replace(
        row,
        id=fact_id(statement, start, end, now, serial, source),
        valid_from=start,
        valid_to=end,
        recorded_at=now,
        expired_at=None,
    )
