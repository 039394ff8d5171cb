"""Merging records into a source, and deriving its chunks again only where they changed.

Chat, mail and record sources **merge**: each record is kept under its key (see
:mod:`stratamem.store.records`), a record seen again is updated only when its content
changed (an edit), a record absent from a later export is kept, and the same key twice in one
ingest is stored once (a duplicate, counted). Removal happens only when asked: ``sync`` (the
export is the whole truth: records it lacks are removed) or a delete by key. Documents keep
replace-on-change (:mod:`stratamem.ingest.pipeline`).

A source's chunks are a function of its records: :func:`~stratamem.ingest.chunking.chunk_records`
over them in canonical order. A merge re-derives only the parts a change can reach:

- **chat**: windows close at a silence longer than ``chat_gap``, so a source's records fall into
  *segments* (runs with no such silence inside) that are chunked independently. A change
  re-chunks the segments holding the changed instants, computed over the old and new records
  together (adding a record can join two segments, removing one can split one). Records
  without a time form one segment of their own.
- **mail and records**: each record is chunked alone; a change re-chunks that record.

A derived chunk's id covers its first record's key and every field it holds, not its place, so
a window whose text did not change keeps its id, its vector and its summary. Only new ids are
written (and later embedded); ids no longer produced are deleted. Then the source's chunks are
renumbered in canonical order. A merge of the same records in any order, in any split, leaves
the same records and the same chunks as one ingest of them all.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from stratamem.embed.indexing import carry_vectors, vectors_by_text
from stratamem.entities.extract import record_mentions, text_mentions, topic_mentions
from stratamem.ingest.chunking import ChunkingConfig, Draft, chunk_records
from stratamem.store.base import Store
from stratamem.store.records import RecordRow, RecordState, StoredRecord
from stratamem.timeparse import to_ms
from stratamem.types import Chunk, Mention, Record, SourceKind

# A chunk, the entities of its records' fields and its topics, and the handles the pattern
# extraction must skip (the writer finds the patterns: in a parallel ingest that spreads the
# regex work over both cores).
Row = tuple[Chunk, list[Mention], frozenset[str]]

MERGING_KINDS = frozenset({SourceKind.CHAT, SourceKind.EMAIL, SourceKind.RECORD})
_BATCH = 256
# A batch read is ``batch`` chunks, or this many times as many records when they make fewer.
_RECORDS_PER_CHUNK = 16


def merges(kind: SourceKind) -> bool:
    """Whether sources of this kind merge their records (documents are replaced)."""
    return kind in MERGING_KINDS


@dataclass(slots=True)
class MergeCounts:
    """What a merge did to a source's records and chunks."""

    new: int = 0
    updated: int = 0
    unchanged: int = 0
    duplicates: int = 0
    removed: int = 0
    chunks_added: int = 0
    chunks_removed: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.chunks_added or self.chunks_removed or self.new or self.updated)


class Merge:
    """One source's merge, run inside the caller's transaction: :meth:`add` batches of
    records, optionally :meth:`remove` or :meth:`remove_unseen`, then :meth:`finish`."""

    def __init__(
        self,
        store: Store,
        source_id: str,
        *,
        scope: str,
        kind: SourceKind,
        config: ChunkingConfig | None = None,
        on_chunks: Callable[[int], None] | None = None,
        seen: Iterable[str] = (),
        watch: Iterable[str] = (),
    ) -> None:
        """``on_chunks`` is told how many chunks each batch of the derivation wrote; ``seen``
        holds the keys an earlier part of the same ingest read (a repeat is a duplicate, and
        :meth:`remove_unseen` keeps them); ``watch`` names records whose chunks the
        derivation notes (:meth:`chunks_of`)."""
        self.store = store
        self.on_chunks = on_chunks
        self.source_id = source_id
        self.scope = scope
        self.kind = kind
        self.config = config or ChunkingConfig()
        self.counts = MergeCounts()
        self.added_ids: list[str] = []
        self._taken: set[str] = set()
        self._seen: set[str] = set(seen)
        self._dirty_keys: set[str] = set()
        self._dirty_times: set[int | None] = set()
        self._gone_times: list[int] = []
        self._gone: list[str] = []  # derived chunks no longer produced
        self._made: list[Chunk] = []  # derived chunks written by a derivation
        self._watch = frozenset(watch)
        self._holding: dict[str, dict[str, None]] = {}  # watched key → chunk ids, in order

    def add(self, records: Iterable[RecordRow]) -> None:
        """Merge these records: new ones are stored, changed ones updated, the rest counted."""
        batch: dict[str, RecordRow] = {}
        for stored in records:
            earlier = batch.get(stored.key)
            if earlier is not None or stored.key in self._seen:
                self.counts.duplicates += 1
            if earlier is None or earlier.digest != stored.digest:
                # Of two versions in one ingest the later holds; of two copies, the first.
                batch[stored.key] = stored
        if not batch:
            return
        states = self.store.record_states(self.source_id, list(batch))
        changed: list[RecordRow] = []
        for key, stored in batch.items():
            state = states.get(key)
            repeat = key in self._seen
            self._seen.add(key)
            if state is not None and (state.digest == stored.digest or _older(stored, state)):
                if not repeat:
                    self.counts.unchanged += 1
                continue
            if not repeat:
                if state is None:
                    self.counts.new += 1
                else:
                    self.counts.updated += 1
            changed.append(stored)
            self._mark(key, stored.time_ms, state.time_ms if state else None, state is None)
        self.store.put_records(self.source_id, changed)

    def remove(self, keys: Sequence[str]) -> int:
        """Remove the records under ``keys``; returns how many the source held."""
        states = self.store.record_states(self.source_id, keys)
        for key, state in states.items():
            self._dirty_keys.add(key)
            self._dirty_times.add(state.time_ms)
            if state.time_ms is not None:
                self._gone_times.append(state.time_ms)
        removed = self.store.delete_records(self.source_id, list(states))
        self.counts.removed += removed
        return removed

    @property
    def seen(self) -> set[str]:
        """The keys of every record read, by this merge or the parts before it."""
        return self._seen

    def remove_unseen(self) -> int:
        """Remove every record this merge did not see (the export is the whole truth)."""
        unseen = [key for key in self.store.record_keys(self.source_id) if key not in self._seen]
        return self.remove(unseen)

    def _mark(self, key: str, new_time: int | None, old_time: int | None, fresh: bool) -> None:
        self._dirty_keys.add(key)
        self._dirty_times.add(new_time)
        if not fresh:
            self._dirty_times.add(old_time)
            if old_time is not None and old_time != new_time:
                self._gone_times.append(old_time)

    def finish(self, *, derived: bool = False) -> MergeCounts:
        """Derive the chunks again where records changed; renumber the source's chunks.
        ``derived``: the chunks were already derived from these records while they were read
        (:func:`derive_while_reading`) and written with :meth:`take`."""
        if self._dirty_keys and not derived:
            chat = self.kind is SourceKind.CHAT
            for old_ids, records in self._chat_parts() if chat else self._record_parts():
                self._rederive(old_ids, records)
            carry_vectors(self.store, self._made, vectors_by_text(self.store, self._gone))
            self.counts.chunks_removed += self.store.delete_chunks(self.source_id, self._gone)
            self._gone.clear()
        if self.counts.chunks_added or self.counts.chunks_removed:
            self.counts.chunks_removed += self.store.retire_replaced_chunks(self.source_id)
            self.store.renumber_chunks(self.source_id)
        return self.counts

    # -- what to derive again --------------------------------------------------------------

    def _chat_parts(self) -> Iterator[tuple[list[str], Iterator[StoredRecord]]]:
        timeline, _ = self.store.record_timeline(self.source_id)
        gap = int(self.config.chat_gap.total_seconds() * 1000)
        changed = sorted(t for t in self._dirty_times if t is not None)
        for start, end in dirty_segments(timeline + self._gone_times, changed, gap):
            old = self.store.derived_chunks_between(self.source_id, start, end)
            yield old, self.store.records_between(self.source_id, start, end)
        if None in self._dirty_times:
            old = self.store.derived_chunks_between(self.source_id, None, None)
            yield old, self.store.records_between(self.source_id, None, None)

    def _record_parts(self) -> Iterator[tuple[list[str], Iterator[StoredRecord]]]:
        keys = sorted(self._dirty_keys)
        for at in range(0, len(keys), _BATCH):
            part = keys[at : at + _BATCH]
            old = self.store.derived_chunks_of(self.source_id, part)
            yield old, iter(self.store.records_by_key(self.source_id, part))

    # -- deriving --------------------------------------------------------------------------

    def _rederive(self, old_ids: list[str], records: Iterator[StoredRecord]) -> None:
        old = set(old_ids)
        made: set[str] = set()
        drafts = chunk_records(self.kind, (stored.record for stored in records), self.config)
        batch: list[Draft] = []
        for draft in drafts:
            batch.append(draft)
            if len(batch) == _BATCH:
                self._write(batch, old, made)
                batch = []
        self._write(batch, old, made)
        # Deleted together in finish: a deletion's cost is mostly per call (summaries to
        # retire, the source's spent edges to sweep), not per chunk.
        self._gone.extend(node for node in old_ids if node not in made)

    def _write(self, drafts: list[Draft], old: set[str], made: set[str]) -> None:
        if not drafts:
            return
        rows = [derived_row(self.source_id, 0, d, scope=self.scope, kind=self.kind) for d in drafts]
        made.update(row[0].id for row in rows)
        if self._watch:
            for draft, row in zip(drafts, rows, strict=True):
                for record in draft.records:
                    if record.id in self._watch:
                        self._holding.setdefault(record.id, {})[row[0].id] = None
        candidates = [row for row in rows if row[0].id not in old]
        if not candidates:
            return
        # A chunk of this id stored outside what this part held is not where its record says
        # (a store written before it kept records): replace it, so that it is found next time.
        stray = self.store.existing_ids([row[0].id for row in candidates])
        self.counts.chunks_removed += self.store.delete_chunks(self.source_id, list(stray))
        self.take(list({row[0].id: row for row in candidates}.values()))

    def chunks_of(self, key: str) -> list[str]:
        """The ids of the chunks derived (this merge) from the watched record under ``key``:
        its own, or the chat windows holding it, in order."""
        return list(self._holding.get(key, ()))

    def discard_taken(self) -> None:
        """Delete the chunks :meth:`take` wrote (they do not hold: derive instead), and mark
        every record this merge stored to be derived."""
        self.store.delete_chunks(self.source_id, self.added_ids)
        self.counts.chunks_added -= len(self.added_ids)
        self.added_ids.clear()
        self._taken.clear()

    def take(self, rows: Sequence[Row]) -> None:
        """Write these derived rows as new chunks of the source: their ids are not stored,
        except by an earlier :meth:`take` of this merge (a repeated record read twice)."""
        fresh: list[Row] = []
        for row in rows:
            if row[0].id not in self._taken:
                self._taken.add(row[0].id)
                fresh.append(row)
        rows = fresh
        if not rows:
            return
        insert_rows(self.store, self.source_id, rows)
        self.added_ids.extend(row[0].id for row in rows)
        self.counts.chunks_added += len(rows)
        if self.on_chunks is not None:
            self.on_chunks(len(rows))


def _older(incoming: RecordRow, held: RecordState) -> bool:
    """Whether ``incoming`` is an older version of the record held: the held one was edited
    later, or was edited when the incoming one was not (an export taken before the edit)."""
    if held.revised_ms is None:
        return False
    return incoming.revised_ms is None or incoming.revised_ms < held.revised_ms


def dirty_segments(times: Sequence[int], changed: Sequence[int], gap: int) -> list[tuple[int, int]]:
    """The [first, last] instants of the segments of ``times`` (runs with no step over
    ``gap``) that hold one of ``changed``, merged where they touch. ``times`` need not be
    sorted and may repeat; ``changed`` must be among them."""
    line = np.unique(np.asarray(times, dtype=np.int64))
    if not changed or line.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(line) > gap) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks - 1, [len(line) - 1]))
    where = np.searchsorted(line, np.asarray(changed, dtype=np.int64))
    segments = np.unique(np.searchsorted(starts, where, side="right") - 1)
    return [(int(line[starts[s]]), int(line[ends[s]])) for s in segments]


def chunk_identity(
    source_id: str, anchor: str, draft: Draft, *, facets: bool = True
) -> tuple[str, str]:
    """A chunk's id and its content's sha256. The id covers the source, the ``anchor`` (the
    key of the chunk's first record, or the note it was cut from) and what the chunk holds
    (content, title, thread, document, place in its note and, with ``facets``, its author,
    times, tags and reference), never its place in the whole source: text that did not
    change keeps its id wherever the records around it come and go. A note's chunks leave
    the facets out: its front matter sets them (and the line a reference names moves with
    its length), so a chunk whose facets alone changed is the same passage, rewritten under
    its id."""
    sha = hashlib.sha256(draft.content.encode()).hexdigest()
    start, end = draft.time_range
    shown: list[object]
    if facets:
        shown = [draft.title, draft.author, to_ms(start), to_ms(end), draft.ref, draft.thread]
        shown += [draft.doc, list(draft.tags), draft.meta]
    else:
        shown = [draft.title, draft.thread, draft.doc, draft.meta]
    fields = json.dumps(shown, default=str, ensure_ascii=False)
    digest = hashlib.sha256(f"{source_id}\x00{anchor}\x00{sha}\x00{fields}".encode())
    return digest.hexdigest()[:32], sha


def derived_chunk(source_id: str, draft: Draft) -> Chunk:
    """The chunk of a draft made from records: identified by its first record's key and what
    it holds, placed (``seq``) later by the source's renumbering."""
    anchor = draft.records[0].id or ""
    node, sha = chunk_identity(source_id, anchor, draft)
    return draft.chunk(id=node, source_id=source_id, seq=0, sha=sha, record_key=anchor)


def derived_row(source_id: str, seq: int, draft: Draft, *, scope: str, kind: SourceKind) -> Row:
    """The draft's chunk with the entities of its records' fields and its topics, and the
    handles its pattern extraction must skip (:func:`insert_rows` finds the patterns)."""
    chunk = derived_chunk(source_id, draft)
    if seq:
        chunk = dataclasses.replace(chunk, seq=seq)
    fields, skip = record_mentions(chunk.content, draft.records, scope=scope, kind=kind)
    fields += topic_mentions(chunk.content, known=fields, skip_words=skip)
    return (chunk, fields, skip)


def insert_rows(store: Store, source_id: str, rows: Sequence[Row]) -> None:
    """Store new chunks with every entity they mention (the fields' and topics' entities the
    rows carry, and the patterns found here: addresses, links, handles, tags) and their
    co-mention edges. The chunk ids must not be stored yet."""
    store.insert_chunks(chunk for chunk, _, _ in rows)
    mentions: list[tuple[Chunk, list[Mention]]] = []
    for chunk, fields, skip in rows:
        named = {m.entity_id for m in fields}
        found = text_mentions(chunk.content, skip_ids=named, skip_handles=skip)
        mentions.append((chunk, fields + found))
    store.insert_mentions(mentions)
    store.add_new_edges(source_id, ([m.entity_id for m in found] for _, found in mentions))


class ReadOrder:
    """Watches records as they are read: whether the chunks derived from them as read are
    those of the records merged. That needs no key twice with different content (a copy is
    left out, as the merge leaves it out) and, for chat, whose windows depend on the order,
    the records in canonical order."""

    def __init__(self, kind: SourceKind) -> None:
        self.ordered = kind is SourceKind.CHAT
        self.in_order = True
        self._digests: dict[str, str] = {}
        self._last: tuple[bool, int, str] | None = None

    def see(self, stored: StoredRecord) -> bool:
        """Note a record read; False for a copy of one read before (same key, same
        content), which is not chunked again."""
        seen = self._digests.get(stored.key)
        if seen is not None:
            if seen != stored.digest:
                self.in_order = False
            return False
        self._digests[stored.key] = stored.digest
        if self.ordered:
            time = stored.record.time
            place = (time is None, 0 if time is None else to_ms(time) or 0, stored.sort_key)
            if self._last is not None and place < self._last:
                self.in_order = False
            self._last = place
        return True


def derive_while_reading(
    records: Iterable[StoredRecord],
    *,
    source_id: str,
    scope: str,
    kind: SourceKind,
    config: ChunkingConfig | None,
    order: ReadOrder,
    batch: int,
) -> Iterator[tuple[list[RecordRow], list[Row]]]:
    """Batches of (records read, chunks derived from them so far), ``batch`` chunks at a time
    (or ``16 * batch`` records where they make fewer), chunked as :class:`Merge`
    would chunk them were they all a source held. That holds only when the source held
    nothing before and ``order.in_order`` is still true at the end; otherwise the writer
    throws the rows away and derives."""
    config = config or ChunkingConfig()
    pending: list[StoredRecord] = []
    source = iter(records)
    first_timeless: list[StoredRecord] = []

    def timed() -> Iterator[Record]:
        for stored in source:
            pending.append(stored)
            if not order.see(stored):
                continue
            if stored.record.time is None:
                first_timeless.append(stored)
                return
            yield stored.record

    def timeless() -> Iterator[Record]:
        # Records without a time come last in canonical order and are chunked on their own.
        if first_timeless:
            yield first_timeless[0].record
        for stored in source:
            pending.append(stored)
            if not order.see(stored):
                continue
            if stored.record.time is not None:
                order.in_order = False
            yield stored.record

    drafts = itertools.chain(
        chunk_records(kind, timed(), config), chunk_records(kind, timeless(), config)
    )
    rows: list[Row] = []
    for seq, draft in enumerate(drafts):
        rows.append(derived_row(source_id, seq, draft, scope=scope, kind=kind))
        if len(rows) >= batch or len(pending) >= batch * _RECORDS_PER_CHUNK:
            yield [stored.row() for stored in pending], rows
            pending.clear()
            rows = []
    if pending or rows:
        yield [stored.row() for stored in pending], rows
