"""Facts read from structure at ingest: a note's front-matter properties.

A note with YAML front matter (``Record.meta["front_matter"]``, kept by the Markdown
connector) says things about itself: ``status: accepted``, ``owner: Carol Diaz``,
``attendees: [Alice, Bob]``. Each such property becomes a fact of the note's source, with
origin ``structure``:

- **subject**: the note as an entity, ``topic:<its title>`` in canonical form. Facts know no
  ``note:`` kind (the entity index names a note that way only as the target of a link, by
  the name or path the link was written with), and a topic is what a note is about;
- **predicate**: the property's key (:func:`~stratamem.memory.remember.predicate_name`);
- **object**: a scalar's text (numbers as written by YAML, booleans ``true``/``false``, dates
  in ISO form), kept as a literal unless written as an entity id; a list of scalars gives one
  fact per item of a predicate of many values. Mappings, lists holding anything but scalars,
  empty values and the keys in :data:`SKIPPED_KEYS` give none;
- **valid_from**: the note's updated time (``meta["updated"]``: its ``updated`` property, else
  the file's modification time), else its time;
- **evidence**: the note's first chunk.

The source's structure facts follow its notes as they are now, each time it is ingested
(:func:`settle`, pure, over :func:`~stratamem.memory.facts.reconcile`): a changed value closes
the old one at the note's new time and opens the new one; a property the note no longer has is
closed at that time (it held until then: its row ends there, it is not retracted); the facts of
a note no longer read (removed, or retitled) close at the ingest's time. The same notes again
change nothing. A note whose front matter cannot be read changes none of its facts: unread is
not empty. Notes of one title in one source describe one subject: for each property, the note
updated last that has it decides its value.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import numpy as np

from stratamem.embed.base import Embedder
from stratamem.entities.aliases import Alias, note_aliases
from stratamem.memory.facts import Change, Statement, fact_id, fact_text, reconcile
from stratamem.memory.remember import entity_id, predicate_name, statement
from stratamem.store.base import Store
from stratamem.store.facts import Fact, iso
from stratamem.types import Record

# Keys the Markdown connector reads for itself (title, tags, aliases, author, times) and
# keys that only style a note: neither is a fact about what the note describes.
SKIPPED_KEYS = frozenset(
    {
        "alias",
        "aliases",
        "author",
        "created",
        "cssclass",
        "cssclasses",
        "date",
        "lastmod",
        "modified",
        "tag",
        "tags",
        "title",
        "updated",
    }
)
# Every believed row of the store: a page of them could hide one of the source's.
_EVERY_ROW = 2**62

_Timeline = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Note:
    """What one note says of itself: its subject, its time (None: unknown) and a statement per
    property value. Small and picklable: it travels with the note's chunks from the reading
    process to the writer."""

    subject: str
    valid_from: datetime | None
    doc: str
    statements: tuple[Statement, ...]
    readable: bool = True  # False: its front matter could not be read
    # Who is who, as its front matter says (see stratamem.entities.aliases).
    aliases: tuple[Alias, ...] = ()


def note_of(record: Record, chunk_id: str) -> Note | None:
    """The note ``record`` is, with ``chunk_id`` (its first chunk) as evidence; None for a
    record without front matter or whose title names no entity."""
    front = record.meta.get("front_matter")
    if not isinstance(front, Mapping):
        return None
    try:
        subject = entity_id(f"topic:{record.title or ''}")
    except ValueError:
        return None
    when = _updated(record.meta.get("updated")) or record.time
    shown = record.doc or record.ref
    if record.meta.get("front_matter_unreadable"):
        return Note(subject, None if when is None else ms(when), shown, (), readable=False)
    said: list[Statement] = []
    seen: set[str] = set()
    for key, value in front.items():
        try:
            predicate = predicate_name(str(key))
        except ValueError:
            continue
        if predicate in SKIPPED_KEYS or predicate in seen:
            continue
        values, many = property_values(value)
        if not values:
            continue
        seen.add(predicate)
        objects: set[str] = set()
        for item in values:
            try:
                one = statement(
                    subject,
                    predicate,
                    item,
                    valid_from=when,
                    evidence=(chunk_id,),
                    origin="structure",
                    many=many,
                )
            except ValueError:
                continue
            if one.object not in objects:
                objects.add(one.object)
                said.append(one)
    return Note(
        subject,
        None if when is None else ms(when),
        shown,
        tuple(said),
        aliases=tuple(note_aliases(record)),
    )


def property_values(value: Any) -> tuple[list[str], bool]:
    """A property's values as text, and whether it holds many (a list): a scalar gives one,
    a list of scalars one per item, anything else (a mapping, a list holding a list or a
    mapping) none. Empty values are dropped."""
    if isinstance(value, list):
        if any(isinstance(item, list | Mapping) for item in value):
            return [], True
        return [text for item in value if (text := _scalar(item))], True
    if isinstance(value, Mapping):
        return [], False
    text = _scalar(value)
    return ([text] if text else []), False


def settle(
    rows: Sequence[Fact],
    said: Sequence[Statement],
    close_at: datetime | None,
    now: datetime,
    *,
    source: str,
) -> Change:
    """The change that makes one (subject, predicate) timeline of ``source`` (``rows``, every
    row of it) say what its notes say now (``said``), recorded at ``now``.

    Open structure rows that no statement keeps (a single-valued one when nothing single is
    said, one of many values when that value is not said) close at ``close_at`` (None: they
    stay open, for a note whose front matter could not be read); then each statement is
    reconciled, and a value already open on other evidence is recorded again on the
    statement's (the chunk it rested on was replaced). A statement never starts before the
    latest structure row of its values: a note whose time went back still says what holds
    now.
    """
    working = list(rows)
    latest = max((r.recorded_at for r in working), default=None)
    if latest is not None and now < latest:
        raise ValueError(
            f"now ({iso(now)}) is before the last change of this fact ({iso(latest)}): "
            "transaction time only moves forward"
        )
    change = Change()

    def apply(step: Change) -> None:
        gone = set(step.expire)
        working[:] = [replace(r, expired_at=now) if r.id in gone else r for r in working]
        working.extend(step.record)
        change.expire.extend(step.expire)
        change.record.extend(step.record)

    single_said = any(s.single for s in said)
    many_said = {s.object for s in said if not s.single}
    unsaid = [
        r
        for r in rows
        if r.believed
        and r.valid_to is None
        and r.origin == "structure"
        and not (single_said if r.single else r.object in many_said)
    ]
    if close_at is not None:
        for row in sorted(unsaid, key=lambda r: r.id):
            apply(_close(row, close_at, now, len(working), source))
    for said_one in said:
        said_one = _no_earlier(said_one, working)
        step = reconcile(working, said_one, now, source=source)
        if step.empty:
            step = _on_new_evidence(working, said_one, now, source)
        apply(step)
    return change


def write_note_facts(
    store: Store,
    source_id: str,
    notes: Iterable[Note],
    now: datetime,
    *,
    embedder: Embedder | None = None,
) -> int:
    """Make ``source_id``'s structure facts say what ``notes`` (every note of it, as read
    now) say, in the caller's transaction; returns how many rows were expired or recorded.
    With ``embedder``, what each recorded row says is embedded in the same transaction, as
    a fact stated by :func:`~stratamem.memory.remember.remember` is.

    One read of the believed rows finds the timelines to change; only those are read whole.
    """
    now = ms(now)
    said: dict[_Timeline, list[Statement]] = defaultdict(list)
    close_at: dict[str, datetime | None] = {}
    for subject, (when, readable, statements) in _by_subject(notes).items():
        close_at[subject] = (when or now) if readable else None
        for one in statements:
            said[(one.subject, one.predicate)].append(one)
    believed: dict[_Timeline, list[Fact]] = defaultdict(list)
    for row in store.facts(believed_only=True, limit=_EVERY_ROW):
        if row.source_id == source_id:
            believed[(row.subject, row.predicate)].append(row)
    timelines = set(said) | {
        key
        for key, rows in believed.items()
        if any(r.origin == "structure" and r.valid_to is None for r in rows)
    }
    written = 0
    recorded: list[Fact] = []
    for subject, predicate in sorted(timelines):
        key = (subject, predicate)
        at = close_at.get(subject, now)
        # A timeline that needs no change is left alone even when a later change was stated
        # (a ``now`` ahead of the clock): only a change must not go back in time.
        probe = max([now, *(r.recorded_at for r in believed.get(key, []))])
        if settle(believed.get(key, []), said.get(key, []), at, probe, source=source_id).empty:
            continue
        rows = store.fact_rows(source_id, subject, predicate)
        change = settle(rows, said.get(key, []), at, now, source=source_id)
        store.write_facts(source_id, change.expire, change.record, now)
        written += len(change.expire) + len(change.record)
        recorded.extend(change.record)
    if embedder is not None:
        embed_facts(store, embedder, recorded)
    return written


def embed_facts(store: Store, embedder: Embedder, facts: Sequence[Fact]) -> None:
    """Embed what each of ``facts`` says (:func:`~stratamem.memory.facts.fact_text`) with
    ``embedder``, in the caller's transaction, for
    :func:`~stratamem.memory.search.search_facts`."""
    if not facts:
        return
    vectors = embedder.embed_batch([fact_text(f) for f in facts], role="passage")
    store.write_fact_vectors(
        embedder.spec.signature,
        [(f.id, np.asarray(v, dtype="<f4").tobytes()) for f, v in zip(facts, vectors, strict=True)],
    )


def _by_subject(
    notes: Iterable[Note],
) -> dict[str, tuple[datetime | None, bool, list[Statement]]]:
    """Per subject: the time of its latest note, whether all its notes could be read, and
    the statements it stands by: for each predicate, those of the latest note (by time, then
    path) that has it."""
    ordered = sorted(notes, key=lambda n: (_start_key(n.valid_from), n.doc))
    found: dict[str, tuple[datetime | None, bool, dict[str, list[Statement]]]] = {}
    for note in ordered:
        _, readable, by_predicate = found.get(note.subject, (None, True, {}))
        fresh: dict[str, list[Statement]] = defaultdict(list)
        for one in note.statements:
            fresh[one.predicate].append(one)
        by_predicate.update(fresh)
        found[note.subject] = (note.valid_from, readable and note.readable, by_predicate)
    return {
        subject: (when, readable, [one for group in by_predicate.values() for one in group])
        for subject, (when, readable, by_predicate) in found.items()
    }


def _close(row: Fact, at: datetime, now: datetime, serial: int, source: str) -> Change:
    """``row`` ends at ``at``: expired, and recorded again over [its start, at). A row that
    starts at or after ``at`` held at no time before it: it is only expired."""
    if row.valid_from is not None and at <= row.valid_from:
        return Change(expire=[row.id])
    closed = Statement(row.subject, row.predicate, row.object, row.valid_from, at)
    return Change(
        expire=[row.id],
        record=[
            replace(
                row,
                id=fact_id(closed, row.valid_from, at, now, serial, source),
                valid_to=at,
                recorded_at=now,
                expired_at=None,
            )
        ],
    )


def _no_earlier(said: Statement, rows: Sequence[Fact]) -> Statement:
    """``said`` starting no earlier than the latest believed structure row of its values."""
    starts = [
        r.valid_from
        for r in rows
        if r.believed
        and r.origin == "structure"
        and r.single == said.single
        and (said.single or r.object == said.object)
        and r.valid_from is not None
    ]
    latest = max(starts, default=None)
    if latest is None or (said.valid_from is not None and said.valid_from >= latest):
        return said
    return replace(said, valid_from=latest)


def _on_new_evidence(rows: Sequence[Fact], said: Statement, now: datetime, source: str) -> Change:
    """The open structure row saying ``said``'s value, recorded again on its evidence when
    that differs; else no change."""
    for row in rows:
        if (
            row.believed
            and row.valid_to is None
            and row.origin == "structure"
            and row.single == said.single
            and row.object == said.object
            and row.evidence != said.evidence
        ):
            again = Statement(row.subject, row.predicate, row.object, row.valid_from)
            return Change(
                expire=[row.id],
                record=[
                    replace(
                        row,
                        id=fact_id(again, row.valid_from, None, now, len(rows), source),
                        evidence=said.evidence,
                        recorded_at=now,
                        expired_at=None,
                    )
                ],
            )
    return Change()


def _scalar(value: Any) -> str:
    """A scalar property value as text ("" for none)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value).strip()
    return ""


def _updated(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return None if when.tzinfo is None else when


def ms(when: datetime) -> datetime:
    """``when`` in UTC to the millisecond, as the store keeps it."""
    when = when.astimezone(UTC)
    return when.replace(microsecond=when.microsecond // 1000 * 1000)


def _start_key(when: datetime | None) -> tuple[int, datetime | None]:
    return (0, None) if when is None else (1, when)
