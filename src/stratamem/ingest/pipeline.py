"""Ingesting a path: connector → chunker → entities → store, one transaction per source.

A source that fails part-way is rolled back whole and reported; the other sources of the same
path go on. Malformed items inside a source are skipped and reported by the connector. A source
of which nothing could be read (every item skipped) writes nothing and is left as it was: an
empty source row would be a source without content, and a damaged export must not wipe what an
earlier ingest stored.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stratamem.access.writes import refuse_foreign
from stratamem.embed.base import Embedder
from stratamem.embed.indexing import carry_vectors, vectors_by_text
from stratamem.entities.aliases import Alias
from stratamem.errors import AccessDenied, IngestError, InvalidArgument, NotFoundError, StoreFull
from stratamem.ingest import registry
from stratamem.ingest.chunking import ChunkingConfig
from stratamem.ingest.merge import Merge, Row, insert_rows
from stratamem.ingest.model import DEFAULT_MAX_ITEM_BYTES, Connector, Problem, walk
from stratamem.ingest.reader import (
    Event,
    StreamInfo,
    fork_available,
    read_events,
    read_in_process,
)
from stratamem.memory.structure import Note, write_note_facts
from stratamem.memory.structure_chat import Setting, write_channel_facts
from stratamem.store.access import default_access, parse_scopes
from stratamem.store.base import Store
from stratamem.store.jobs import SEAL_KIND, seal_job_key
from stratamem.store.names import placer
from stratamem.store.sources import ChunkPlace, source_id_for
from stratamem.types import Chunk, Source

if TYPE_CHECKING:
    from stratamem.tree.builder import SealReport

# Shown each source before it is written: the stored one (None if new), and it as it will be;
# returns the scopes to give it instead (None: as it will be), or raises AccessDenied.
Admit = Callable[[Source | None, Source], tuple[str, ...] | None]


@dataclass(slots=True)
class SourceResult:
    """What an ingest did to one source. ``records`` counts what was read; a merging source
    (``merged``) also says how many of its records were new, updated, unchanged, repeated
    within the ingest (``duplicates``, stored once) and removed (by ``sync``). ``chunks`` is
    how many chunks the source holds afterwards; ``added`` and ``removed`` are the chunks
    written and deleted."""

    scope: str
    source_id: str = ""
    kind: str = ""
    platform: str = ""
    records: int = 0
    chunks: int = 0
    added: int = 0
    removed: int = 0
    error: str | None = None
    merged: bool = False
    new: int = 0
    updated: int = 0
    duplicates: int = 0
    records_removed: int = 0

    @property
    def unchanged(self) -> int:
        return self.chunks - self.added

    def fold(self, later: SourceResult) -> None:
        """Add what a later part of the same source, read after other sources, did."""
        self.error = self.error or later.error
        self.chunks = later.chunks if later.error is None else self.chunks
        for name in ("records", "added", "removed", "new", "updated", "duplicates"):
            setattr(self, name, getattr(self, name) + getattr(later, name))
        self.records_removed += later.records_removed


@dataclass(slots=True)
class IngestReport:
    path: str
    connector: str
    sources: list[SourceResult] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    seconds: float = 0.0
    trees: SealReport | None = None
    # Said of the ingest as a whole: why nothing was read from a path that holds something.
    warnings: list[str] = field(default_factory=list)
    # True when the path holds something and no source took a single item from it.
    read_nothing: bool = False
    # Why the ingest stopped before the end of the path (the disk filled up), or None.
    stopped: str | None = None
    embedded: int | None = None  # chunks embedded after the ingest (None: not asked to)

    @property
    def chunks(self) -> int:
        return sum(s.chunks for s in self.sources if s.error is None)

    @property
    def added(self) -> int:
        return sum(s.added for s in self.sources if s.error is None)

    @property
    def records(self) -> int:
        return sum(s.records for s in self.sources if s.error is None)

    @property
    def duplicates(self) -> int:
        return sum(s.duplicates for s in self.sources if s.error is None)

    @property
    def failed(self) -> list[SourceResult]:
        return [s for s in self.sources if s.error is not None]

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "connector": self.connector,
            "seconds": round(self.seconds, 3),
            "records": self.records,
            "chunks": self.chunks,
            "added": self.added,
            "duplicates": self.duplicates,
            "sources": [_source_dict(s) for s in self.sources],
            "problems": [str(p) for p in self.problems],
            "warnings": list(self.warnings),
            "read_nothing": self.read_nothing,
            "stopped": self.stopped,
            "trees": None if self.trees is None else self.trees.to_dict(),
            **({} if self.embedded is None else {"embedded": self.embedded}),
        }


def _source_dict(s: SourceResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "scope": s.scope,
        "source_id": s.source_id,
        "kind": s.kind,
        "platform": s.platform,
        "records": s.records,
        "chunks": s.chunks,
        "added": s.added,
        "unchanged": s.unchanged,
        "removed": s.removed,
        "error": s.error,
        "merged": s.merged,
    }
    if s.merged:
        out["record_changes"] = {
            "new": s.new,
            "updated": s.updated,
            "duplicates": s.duplicates,
            "removed": s.records_removed,
        }
    return out


@dataclass(slots=True)
class Progress:
    """Running counts handed to the progress callback after every batch."""

    scope: str = ""
    files: int = 0
    records: int = 0
    chunks: int = 0
    started: float = field(default_factory=time.perf_counter)


ProgressCallback = Callable[[Progress], None]


def ingest_path(
    store: Store,
    path: str | Path,
    *,
    kind: str | None = None,
    scope: str | None = None,
    config: ChunkingConfig | None = None,
    progress: ProgressCallback | None = None,
    parallel: bool | None = None,
    connector: Connector | None = None,
    max_item_bytes: int | None = None,
    sync: bool = False,
    access: Sequence[str] | None = None,
    admit: Admit | None = None,
    embedder: Embedder | None = None,
    now: datetime | None = None,
    writer: str | None = None,
    join: bool = True,
) -> IngestReport:
    """Ingest ``path``. Chat, mail and record sources merge into what the store holds (see
    :mod:`stratamem.ingest.merge`); ``sync`` takes each source read as the whole truth and
    removes the records it lacks. Documents are replaced where they changed.

    ``parallel`` reads in a child process while this one writes; by default it does so where
    ``fork`` exists and there is more than one CPU. ``connector`` bypasses the registry (for
    readers built in code, such as evaluation datasets). ``max_item_bytes`` bounds one item (a
    file, a zip member, a line); larger ones are skipped and reported (default 64 MiB).
    ``access`` sets the access scopes of every source read (default: a new source gets its
    kind's, an existing one keeps its own). ``admit`` is shown each source before anything of
    it is written (the stored one or None, and the source as it will be); it may return other
    scopes to give it, or refuse it by raising :class:`~stratamem.errors.AccessDenied`: that
    source fails, the others go on. With ``embedder``, the facts read from the sources'
    structure are embedded as they are written, in their source's transaction. ``now`` is
    the transaction time of those facts (default: the clock, when the ingest starts).

    ``writer`` is the principal the ingest writes for (None: the owner): a source the
    connector names goes to the existing source of that name where ``admit`` lets it write
    there, else to one of that name in the writer's namespace (``<writer>/<scope>``, see
    :mod:`stratamem.store.names`), made as its own. ``join=False`` refuses (that source
    fails, the others go on) a source a principal made."""
    scopes = None if access is None else parse_scopes(access)
    if max_item_bytes is None:
        max_item_bytes = DEFAULT_MAX_ITEM_BYTES
    elif max_item_bytes < 1:
        raise ValueError(f"max_item_bytes must be positive, not {max_item_bytes}")
    path = Path(path).expanduser()
    if connector is None:
        if not path.exists():
            raise IngestError(f"{path}: no such file or directory")
        connector = registry.get(kind) if kind else registry.detect(path)
    report = IngestReport(path=str(path), connector=connector.name)
    counts = Progress()
    started = time.perf_counter()
    # The transaction time of every fact the ingest writes.
    if now is None:
        now = datetime.now(UTC)
    elif now.tzinfo is None:
        raise ValueError("now needs a time zone")
    use_process = fork_available() if parallel is None else parallel
    # A reader that checks what it reads against what the store holds (an IRC log saved
    # again from a later line) reads the store as it goes: in this process.
    bind = getattr(connector, "bind_store", None)
    bound = bind(store, None if admit is None else _admits(admit)) if bind is not None else None
    if bound is not None:
        connector, use_process = bound, False
    reader = read_in_process if use_process else read_events
    known = store.sources()
    # The reader derives the chunks of a source it reads only where the store holds none.
    held = frozenset(source.id for source in known if source.chunk_count)
    # A writer's names: those of the sources it may write; any other goes in its namespace.
    writable = None if admit is None or writer is None else _admits(admit)
    place = placer({s.scope for s in known if writable is None or writable(s)}, writer)
    events = _Lookahead(
        reader(
            connector,
            path,
            scope,
            config,
            max_item_bytes=max_item_bytes,
            held=held,
            rename=place,
        )
    )
    # What this ingest read of each source so far, should it come again after other sources.
    read_before: dict[str, _ReadBefore] = {}
    with store.bulk_writes():
        for event in events:
            tag = event[0]
            if tag == "problem":
                report.problems.append(event[1])
            elif tag == "fatal":
                # The connector could not even open the next source: nothing of it was written.
                report.sources.append(SourceResult(scope=scope or str(path), error=event[1]))
            elif tag == "crash":
                raise IngestError(f"{path}: reading failed unexpectedly:\n{event[1]}")
            elif tag == "stream":
                info: StreamInfo = event[1]
                result = SourceResult(
                    scope=info.scope,
                    kind=info.kind.value,
                    platform=info.platform,
                    merged=info.merge,
                )
                before = read_before.setdefault(info.scope, _ReadBefore())
                write = _merge_stream if info.merge else _write_stream
                try:
                    given = _admit(store, info, scopes, admit, join=join)
                    with store.transaction():
                        write(
                            store,
                            info,
                            events,
                            result,
                            report,
                            counts,
                            progress,
                            config,
                            sync,
                            given,
                            now,
                            embedder,
                            before,
                            writer,
                        )
                except (_StreamFailed, AccessDenied) as exc:
                    result.error = str(exc)
                    result.added = result.removed = 0
                except _StreamEmpty:
                    continue
                except StoreFull as exc:
                    # Nothing of this source was written, and nothing after it can be: the
                    # sources written before it stay, and the report says so.
                    result.error = str(exc)
                    result.added = result.removed = 0
                    report.sources.append(result)
                    report.stopped = f"stopped at {info.scope}: {exc}"
                    events.close()
                    break
                if before.result is None:
                    before.result = result
                    report.sources.append(result)
                else:
                    before.result.fold(result)
    if sum(result.added for result in report.sources) >= STATISTICS_AFTER:
        store.refresh_statistics()
    if report.records == 0 and not report.failed:
        why = _why_nothing(path, connector.name, report.problems)
        report.read_nothing = why is not None
        if why is not None:
            report.warnings.append(f"{path}: nothing was read: {why}")
    report.seconds = time.perf_counter() - started
    return report


# The chunks an ingest adds from which it has the store refresh its planner's statistics.
STATISTICS_AFTER = 5000

# How many files a folder is looked through for to say what it holds.
_LOOK = 2000


def _why_nothing(path: Path, connector: str, problems: Sequence[Problem]) -> str | None:
    """Why the connector read no item from ``path``; None when there was nothing to read (an
    empty file or a folder of no visible file)."""
    if problems:
        return f"every item was skipped ({len(problems):,} problems; the first: {problems[0]})"
    if path.is_file():
        if path.stat().st_size == 0:
            return None
        return f"the {connector} reader found nothing it reads in this file"
    suffixes: dict[str, int] = {}
    for files in _visible_files(path):
        for name in files:
            suffix = Path(name).suffix.lower() or "(no suffix)"
            suffixes[suffix] = suffixes.get(suffix, 0) + 1
        if sum(suffixes.values()) >= _LOOK:
            break
    if not suffixes:
        return None
    common = sorted(suffixes.items(), key=lambda item: (-item[1], item[0]))[:3]
    held = ", ".join(f"{count:,} {suffix}" for suffix, count in common)
    return (
        f"the {connector} reader found nothing it reads in this folder (it holds {held} "
        "files); name the format with --format if it is one stratamem reads"
    )


def _visible_files(root: Path) -> Iterator[list[str]]:
    """The names of the visible files of each folder under ``root``."""
    for _, folders, files in walk(root):
        folders[:] = [name for name in folders if not name.startswith(".")]
        yield [name for name in files if not name.startswith(".")]


def _admits(admit: Admit) -> Callable[[Source], bool]:
    """Whether ``admit`` lets the ingest write a source as it stands."""

    def admits(source: Source) -> bool:
        try:
            admit(source, source)
        except AccessDenied:
            return False
        return True

    return admits


def _admit(
    store: Store,
    info: StreamInfo,
    access: tuple[str, ...] | None,
    admit: Admit | None,
    *,
    join: bool,
) -> tuple[str, ...] | None:
    """Show ``admit`` the source before and after the write: the scopes to write it with.
    Refused (by ``admit``, or without ``join`` where a principal made the source), the
    source's events are still read (the reader streams every source in turn) but nothing of
    it is written."""
    if admit is None and join:
        return access
    sid = source_id_for(info.scope)
    try:
        before: Source | None = store.resolve_source(sid)
    except NotFoundError:
        before = None
    after = Source(
        id=sid,
        scope=info.scope,
        kind=info.kind,
        platform=info.platform,
        location=info.location,
        title=info.title,
        access=access
        if access is not None
        else (before.access if before is not None else default_access(info.kind)),
    )
    if before is not None:
        refuse_foreign(before, join=join)
    return (None if admit is None else admit(before, after)) or access


class _StreamFailed(Exception):
    pass


class _StreamEmpty(Exception):
    """Nothing of the source could be read: roll back its (empty) source row."""


def _source_events(
    info: StreamInfo,
    events: Iterator[Event],
    result: SourceResult,
    report: IngestReport,
    counts: Progress,
) -> Iterator[Event]:
    """One source's ``rows`` or ``records`` events, then its ``end``: the records and files
    they read are counted, problems go to the report, and a source that failed raises."""
    counts.scope = info.scope
    for event in events:
        tag = event[0]
        if tag in ("rows", "records", "end"):
            read, files = event[1:3] if tag == "end" else event[2:4]
            result.records += read
            counts.records += read
            counts.files += files
            yield event
            if tag == "end":
                return
        elif tag == "problem":
            report.problems.append(event[1])
        elif tag == "stream_error":
            raise _StreamFailed(event[1])
        elif tag == "crash":
            raise IngestError(f"{info.location}: reading failed unexpectedly:\n{event[1]}")
        else:
            raise IngestError(f"{info.location}: the source ended without being completed")


class _Lookahead:
    """The reader's events, with a look at the next one before taking it."""

    def __init__(self, events: Iterator[Event]) -> None:
        self._events = events
        self._next: list[Event] = []

    def __iter__(self) -> _Lookahead:
        return self

    def __next__(self) -> Event:
        return self._next.pop() if self._next else next(self._events)

    def close(self) -> None:
        """Stop the reader (a child process is terminated)."""
        close = getattr(self._events, "close", None)
        if close is not None:
            close()

    def peek(self) -> Event | None:
        if not self._next:
            try:
                self._next.append(next(self._events))
            except StopIteration:
                return None
        return self._next[0]


@dataclass(slots=True)
class _ReadBefore:
    """What an ingest wrote of one source so far: its result, the record keys it read (a
    merging source) and the chunks it produced (a document source)."""

    result: SourceResult | None = None
    seen: set[str] = field(default_factory=set)
    produced: set[str] = field(default_factory=set)


def _group_events(
    info: StreamInfo,
    events: _Lookahead,
    result: SourceResult,
    report: IngestReport,
    counts: Progress,
) -> Iterator[Event]:
    """:func:`_source_events` of a stream and of every stream of the same source that follows
    it (a channel exported in parts, a folder of files of one source): one source, written in
    one transaction. The ``end`` event is the last part's, its ``in_order`` true only for a
    source read in one part, with what every part's structure said."""
    parts = 0
    said: list[Setting] = []
    while True:
        parts += 1
        for event in _source_events(info, events, result, report, counts):
            if event[0] != "end":
                yield event
            elif info.merge:
                said += event[4]
                end = ("end", *event[1:3], event[3] and parts == 1, said)
            else:
                end = event
        while (following := events.peek()) is not None and following[0] == "problem":
            report.problems.append(next(events)[1])
        if following is None or following[0] != "stream":
            break
        more: StreamInfo = following[1]
        if (more.scope, more.merge) != (info.scope, info.merge):
            break
        next(events)
    yield end


def _write_stream(
    store: Store,
    info: StreamInfo,
    events: _Lookahead,
    result: SourceResult,
    report: IngestReport,
    counts: Progress,
    progress: ProgressCallback | None,
    config: ChunkingConfig | None,
    sync: bool,
    access: tuple[str, ...] | None,
    now: datetime,
    embedder: Embedder | None,
    before: _ReadBefore,
    writer: str | None,
) -> None:
    """Consume one document source's events inside the caller's transaction: its chunks
    replace those it held (a chunk of the same note and content is kept where it was), and
    its notes' front matter its structure facts (see :mod:`stratamem.memory.structure`),
    recorded at ``now``. Chunks ``before`` says this ingest produced are kept too."""
    sid = _open_source(store, info, result, access, writer)
    produced = set(before.produced)
    held = store.source_chunk_count(sid) > 0  # else no chunk read can be one it holds
    fresh: list[Chunk] = []
    notes: list[Note] = []
    for event in _group_events(info, events, result, report, counts):
        if event[0] == "end":
            if len(produced) == len(before.produced):
                raise _StreamEmpty
            break
        rows: list[Row] = event[1]
        notes += event[4]
        fresh += _place_rows(store, sid, rows, produced, held=held)
        counts.chunks += len(rows)
        if progress is not None:
            progress(counts)
    result.added = len(fresh)
    gone = [node for node in store.chunk_ids(sid) if node not in produced]
    carry_vectors(store, fresh, vectors_by_text(store, gone))
    result.removed = store.delete_chunks(sid, gone)
    result.chunks = len(produced)  # with what earlier parts of this ingest produced
    before.produced = produced
    # A document source is read whole: what its notes say of who is who replaces what they
    # said before (unless an earlier part of this ingest wrote some already).
    store.add_aliases(
        sid, [a.row() for note in notes for a in note.aliases], replace=not before.produced
    )
    if notes:
        try:
            write_note_facts(store, sid, notes, now, embedder=embedder)
        except ValueError as exc:  # the clock went back past a fact's last change
            raise _StreamFailed(f"{info.location}: {exc}") from exc
    if result.added or result.removed:
        queue_seal(store, sid, info.scope)


def _merge_stream(
    store: Store,
    info: StreamInfo,
    events: _Lookahead,
    result: SourceResult,
    report: IngestReport,
    counts: Progress,
    progress: ProgressCallback | None,
    config: ChunkingConfig | None,
    sync: bool,
    access: tuple[str, ...] | None,
    now: datetime,
    embedder: Embedder | None,
    before: _ReadBefore,
    writer: str | None,
) -> None:
    """Consume one merging source's events inside the caller's transaction: its records are
    merged, then its chunks derived again where they changed, and what its structure says
    (a channel's topic and purpose) added to its structure facts (see
    :mod:`stratamem.memory.structure_chat`), recorded at ``now``. With ``sync``, the records
    neither these events nor ``before`` hold are removed."""
    sid = _open_source(store, info, result, access, writer)
    # A source that held nothing takes the chunks the reader derived as it read, when the
    # records came in canonical order with no key twice; otherwise they are derived here.
    empty = store.record_count(sid) == 0 and store.source_chunk_count(sid) == 0

    def derived(chunks: int) -> None:
        counts.chunks += chunks
        if progress is not None:
            progress(counts)

    merge = Merge(
        store,
        sid,
        scope=info.scope,
        kind=info.kind,
        config=config,
        on_chunks=derived,
        seen=before.seen,
    )
    read = 0
    in_order = False
    settings: list[Setting] = []
    # Who is who, as the records and the source's structure (a Slack profile) say (the
    # reader sends it with the structure): added to what the source said before, as its
    # records are.
    aliases: set[tuple[str, str, str]] = set()
    for event in _group_events(info, events, result, report, counts):
        if event[0] == "end":
            if read == 0:
                raise _StreamEmpty
            in_order = event[3]
            settings = [x for x in event[4] if not isinstance(x, Alias)]
            aliases.update(x.row() for x in event[4] if isinstance(x, Alias))
            break
        merge.add(event[1])
        read += len(event[1])
        if empty:
            merge.take(event[4])
        if progress is not None:
            progress(counts)
    taken = empty and in_order
    if empty and not taken:
        merge.discard_taken()
    if sync:
        merge.remove_unseen()
    done = merge.finish(derived=taken)
    before.seen = merge.seen
    result.added, result.removed = done.chunks_added, done.chunks_removed
    result.new, result.updated, result.duplicates = done.new, done.updated, done.duplicates
    result.records_removed = done.removed
    result.chunks = store.source_chunk_count(sid)
    store.add_aliases(sid, aliases)
    if settings:
        try:
            write_channel_facts(store, sid, info.scope, settings, now, embedder=embedder)
        except ValueError as exc:  # the clock went back past a fact's last change
            raise _StreamFailed(f"{info.location}: {exc}") from exc
    if done.changed:
        queue_seal(store, sid, info.scope)


def _open_source(
    store: Store,
    info: StreamInfo,
    result: SourceResult,
    access: tuple[str, ...] | None,
    writer: str | None,
) -> str:
    """Create (as ``writer``'s) or refresh the source row; a locked source takes nothing
    until unlocked, and a name no new source may take nothing at all."""
    if store.is_locked(source_id_for(info.scope)):
        raise _StreamFailed(f"source {info.scope!r} is locked: unlock it to ingest into it")
    try:
        sid = store.upsert_source(
            scope=info.scope,
            kind=info.kind,
            platform=info.platform,
            location=info.location,
            title=info.title,
            meta=info.meta,
            access=access,
            created_by=writer,
        )
    except InvalidArgument as exc:
        raise _StreamFailed(f"{info.location}: {exc}") from exc
    result.source_id = sid
    return sid


def queue_seal(store: Store, source_id: str, scope: str) -> None:
    """Queue the source's tree to be sealed, in the caller's transaction: a crash after the
    commit still leaves the seal to do, and a write rolled back leaves no job."""
    tree_id = store.trees.ensure(source_id, scope)
    store.jobs.enqueue(SEAL_KIND, seal_job_key(tree_id), {"tree_id": tree_id})


def _place_rows(
    store: Store, sid: str, rows: list[Row], produced: set[str], *, held: bool = True
) -> list[Chunk]:
    """Write a document source's chunks at their places: a chunk already stored (its note's
    text around it unchanged) is kept, moved if its place changed, and rewritten under its id
    with its vector if only its facets did (the note's front matter changed its time, tags or
    author); the rest are inserted with their entity mentions. ``produced`` gathers the ids;
    ``held=False``: the source held no chunks before this ingest wrote any, so none is looked
    up. Returns the chunks written."""
    places = store.chunk_places(sid, [chunk.id for chunk, _, _ in rows]) if held else {}
    moved: list[tuple[str, int]] = []
    new: dict[str, Row] = {}
    refaced: list[Row] = []
    for row in rows:
        chunk = row[0]
        if chunk.id in produced:
            continue  # the same note twice (a repeated id): its first copy stands
        produced.add(chunk.id)
        place = places.get(chunk.id)
        if place is None:
            new[chunk.id] = row
        elif place._replace(seq=chunk.seq) != ChunkPlace.of(chunk):
            refaced.append(row)
        elif place.seq != chunk.seq:
            moved.append((chunk.id, chunk.seq))
    store.move_chunks(moved)
    if refaced:
        ids = [chunk.id for chunk, _, _ in refaced]
        vectors = vectors_by_text(store, ids)
        store.delete_chunks(sid, ids)
        insert_rows(store, sid, refaced)
        carry_vectors(store, [chunk for chunk, _, _ in refaced], vectors)
    insert_rows(store, sid, list(new.values()))
    return [chunk for chunk, _, _ in (*new.values(), *refaced)]
