"""Facts read from a chat channel's structure at ingest: its topic and purpose, and their
changes over time, as the chat connectors read them without a model.

A connector hands the reader, once a channel's records are read, the :class:`Setting` objects
it found: the values the channel describes itself with now (Slack's ``channels.json``, the
channel object of a DiscordChatExporter export) and the notices of each change in its history
(Slack's ``channel_topic`` / ``channel_purpose`` messages). Each becomes a fact of the
channel's source, with origin ``structure``:

- **subject**: the channel as the entity index names it, ``channel:<its source's scope>`` in
  canonical form (``channel:slack:#eng``);
- **predicate**: ``topic``, ``purpose`` (single-valued) or ``created_by`` (a person);
- **object**: the value as the connector renders message text;
- **valid_from**: the time of the change; a value that holds now without a time (a channel
  list without ``last_set``) counts only for a timeline that holds nothing else, from an
  unknown start;
- **evidence**: none: the notices are not kept as messages, so no node holds them; the facts
  belong to the channel's source and go with it.

A chat export may hold only part of the history (a later export of the last month), so each
ingest adds what it read to the timeline and removes nothing: the believed structure rows
give the changes known so far, the settings read add theirs (a change at a time already known
takes the value read now), and the timeline is rebuilt from all of them in time order. A value
holds until the next change; an empty value (the topic was cleared) ends the one before and
starts none. Reading the same export again changes nothing, and an older export read after a
newer one fills in the past without touching the present: values only move forward.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from stratamem.embed.base import Embedder
from stratamem.entities.extract import canonical
from stratamem.memory.facts import Change, reconcile
from stratamem.memory.remember import entity_id, predicate_name, statement
from stratamem.memory.structure import embed_facts, ms
from stratamem.store.base import Store
from stratamem.store.facts import Fact, iso

# The value of a property that was cleared.
CLEARED = ""

_Start = tuple[int, datetime | None]


@dataclass(frozen=True, slots=True)
class Setting:
    """A channel's ``predicate`` set to ``value`` (:data:`CLEARED`: emptied) at ``at`` (None:
    unknown). ``current``: read from the channel's description of itself as it is now, rather
    than from a notice of the change. Small and picklable: it travels from the reading process
    to the writer."""

    predicate: str
    value: str
    at: datetime | None
    current: bool = False


def channel_subject(scope: str) -> str:
    """The entity id of the channel a chat source of ``scope`` is, as the entity index
    writes it (``slack:#eng`` → ``channel:slack:#eng``)."""
    return entity_id(canonical("channel", scope))


def channel_change(
    rows: Sequence[Fact],
    subject: str,
    predicate: str,
    settings: Iterable[Setting],
    now: datetime,
    *,
    source: str,
) -> Change:
    """The change that adds ``settings`` (of ``predicate``) to one (subject, predicate)
    timeline of ``source`` (``rows``, every row of it), recorded at ``now``; empty when the
    timeline already says it all."""
    known = sorted(
        (r for r in rows if r.believed and r.origin == "structure" and r.single),
        key=lambda r: _start(r.valid_from),
    )
    points: dict[_Start, tuple[str, tuple[str, ...]]] = {}
    for row in known:
        points[_start(row.valid_from)] = (row.object, row.evidence)
    for row in known:
        if row.valid_to is not None:
            points.setdefault(_start(row.valid_to), (CLEARED, ()))
    settings = list(settings)
    notices = [s for s in settings if not s.current and s.at is not None]
    for notice in sorted(notices, key=lambda s: _start(s.at)):
        points[_start(notice.at)] = (_value(subject, predicate, notice.value), ())
    for now_said in (s for s in settings if s.current):
        value = _value(subject, predicate, now_said.value)
        if now_said.at is None:
            if not points and value != CLEARED:
                points[_start(None)] = (value, ())
            continue
        at = ms(now_said.at)
        # A channel list's time is whole seconds: the notice of the same change within that
        # second is the same change.
        if any(
            when is not None and said == value and abs((when - at).total_seconds()) < 1
            for (_, when), (said, _) in points.items()
        ):
            continue
        points.setdefault(_start(at), (value, ()))
    wanted = _spans(points)
    have = {(r.valid_from, r.valid_to, r.object, r.evidence): r for r in known}
    if set(wanted) == set(have):
        return Change()
    _check_forward(rows, now)
    working = list(rows)
    change = Change()
    stale = [r for key, r in have.items() if key not in wanted]
    for row in sorted(stale, key=lambda r: r.id):
        change.expire.append(row.id)
    gone = set(change.expire)
    working = [replace(r, expired_at=now) if r.id in gone else r for r in working]
    for start, end, value, evidence in wanted:
        if (start, end, value, evidence) in have:
            continue
        said = statement(
            subject,
            predicate,
            value,
            valid_from=start,
            valid_to=end,
            evidence=evidence,
            origin="structure",
        )
        step = reconcile(working, said, now, source=source)
        dropped = set(step.expire)
        working = [replace(r, expired_at=now) if r.id in dropped else r for r in working]
        working.extend(step.record)
        change.expire.extend(step.expire)
        change.record.extend(step.record)
    return change


def write_channel_facts(
    store: Store,
    source_id: str,
    scope: str,
    settings: Iterable[Setting],
    now: datetime,
    *,
    embedder: Embedder | None = None,
) -> list[Fact]:
    """Add what ``settings`` say to the structure facts of the channel ``source_id`` (of
    ``scope``), in the caller's transaction; returns the rows recorded. With ``embedder``, what
    each recorded row says is embedded in the same transaction."""
    now = ms(now)
    try:
        subject = channel_subject(scope)
    except ValueError:
        return []
    by_predicate: dict[str, list[Setting]] = defaultdict(list)
    for setting in settings:
        try:
            by_predicate[predicate_name(setting.predicate)].append(setting)
        except ValueError:
            continue
    recorded: list[Fact] = []
    for predicate in sorted(by_predicate):
        rows = store.fact_rows(source_id, subject, predicate)
        change = channel_change(
            rows, subject, predicate, by_predicate[predicate], now, source=source_id
        )
        if change.empty:
            continue
        store.write_facts(source_id, change.expire, change.record, now)
        recorded.extend(change.record)
    if embedder is not None:
        embed_facts(store, embedder, recorded)
    return recorded


def _value(subject: str, predicate: str, value: str) -> str:
    """``value`` as the fact's object would be written (an entity id in canonical form), or
    :data:`CLEARED`."""
    text = " ".join(value.split())
    if not text:
        return CLEARED
    try:
        return statement(subject, predicate, text).object
    except ValueError:
        return CLEARED


def _spans(
    points: dict[_Start, tuple[str, tuple[str, ...]]],
) -> list[tuple[datetime | None, datetime | None, str, tuple[str, ...]]]:
    """The timeline the change points make: each value holds from its point to the next point
    of another value; a cleared point starts nothing."""
    spans: list[tuple[datetime | None, datetime | None, str, tuple[str, ...]]] = []
    open_value: tuple[datetime | None, str, tuple[str, ...]] | None = None
    for (_, when), (value, evidence) in sorted(points.items()):
        if open_value is not None and value == open_value[1]:
            continue
        if open_value is not None:
            spans.append((open_value[0], when, open_value[1], open_value[2]))
            open_value = None
        if value != CLEARED:
            open_value = (when, value, evidence)
    if open_value is not None:
        spans.append((open_value[0], None, open_value[1], open_value[2]))
    return spans


def _check_forward(rows: Sequence[Fact], now: datetime) -> None:
    latest = max(
        (when for r in rows for when in (r.recorded_at, r.expired_at) if when is not None),
        default=None,
    )
    if latest is not None and now < latest:
        raise ValueError(
            f"now ({iso(now)}) is before the last change of this fact ({iso(latest)}): "
            "transaction time only moves forward"
        )


def _start(when: datetime | None) -> _Start:
    return (0, None) if when is None else (1, ms(when))
