"""The reading half of an ingest: connector → chunker → entity extraction, as a stream of events.

It runs inline, or in a child process so that parsing (Python, one core) overlaps the writing
(SQLite, the other core). Events are plain picklable tuples:

    ("stream", StreamInfo)             a source begins
    ("rows", [Row, ...], records, files, [Note, ...])
                                       a batch of chunks with their entities, and what the
                                       notes they begin say of themselves (see
                                       memory.structure)
    ("records", [StoredRecord, ...], records, files, [Row, ...])
                                       a merging source's records, and the chunks derived
                                       from them as read (see merge.derive_while_reading)
    ("end", records, files, in_order, [Setting, ...])
                                       a merging source is complete; ``in_order``: the derived
                                       chunks hold (records in canonical order, no key twice);
                                       then what its structure says (see
                                       memory.structure_chat)
    ("end", records, files)            the source is complete
    ("stream_error", message)          the source failed part-way: roll it back
    ("problem", Problem)               an item was skipped
    ("fatal", message)                 the connector cannot go on: no more sources
    ("crash", traceback)               a bug in the reader (process mode only)

Bad input never ends an ingest with a traceback: whatever a source's records raise rolls back
that source alone (``stream_error``), and whatever the connector raises while opening the next
source ends the ingest with a one-line ``fatal``. Problems are sent before the event that
follows them, so they stay in the order they were found.

Text reaches the store as valid UTF-8: a lone surrogate (from a JSON ``\\ud800`` escape, or a
file name that is not UTF-8) becomes U+FFFD in records, source names and problems alike.
"""

from __future__ import annotations

import dataclasses
import gc
import multiprocessing
import os
import queue
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from stratamem.entities.aliases import Alias, record_aliases
from stratamem.entities.extract import record_mentions, topic_mentions
from stratamem.errors import IngestError, StratamemError
from stratamem.ingest.chunking import ChunkingConfig, Draft, chunk_records
from stratamem.ingest.merge import ReadOrder, Row, chunk_identity, derive_while_reading, merges
from stratamem.ingest.model import (
    DEFAULT_MAX_ITEM_BYTES,
    Connector,
    Problem,
    ReadContext,
    clean_text,
    describe_failure,
)
from stratamem.memory.structure import Note, note_of
from stratamem.store.records import StoredRecord, keyed
from stratamem.store.sources import source_id_for
from stratamem.types import Chunk, Record, SourceKind

BATCH = 512
Event = tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class StreamInfo:
    scope: str
    kind: SourceKind
    platform: str
    location: str
    title: str
    meta: dict[str, Any]
    merge: bool = False


def read_events(
    connector: Connector,
    path: Path,
    scope: str | None,
    config: ChunkingConfig | None,
    *,
    max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES,
    held: frozenset[str] = frozenset(),
    rename: Callable[[str], str] | None = None,
) -> Iterator[Event]:
    """The events of one ingest, read in this process. ``held``: the ids of the sources the
    store holds chunks of, whose chunks the reader does not derive (the writer derives them
    where records changed). ``rename``: the scope a stream the connector names is written
    under (see :func:`~stratamem.store.names.placer`), before any id is made of it."""
    problems: deque[Event] = deque()
    ctx = ReadContext(
        scope=scope,
        on_problem=lambda p: problems.append(("problem", _clean_problem(p))),
        max_item_bytes=max_item_bytes,
    )
    streams = connector.read(path, ctx)
    while True:
        try:
            stream = next(streams)
        except StopIteration:
            break
        except StratamemError as exc:
            yield from _drain(problems)
            yield ("fatal", str(exc))
            return
        except Exception as exc:  # bad input must not end in a traceback
            yield from _drain(problems)
            yield ("fatal", f"{clean_text(str(path))}: {describe_failure(exc)}")
            return
        yield from _drain(problems)
        scope_read = clean_text(stream.scope)
        info = StreamInfo(
            scope_read if rename is None else rename(scope_read),
            stream.kind,
            clean_text(stream.platform),
            clean_text(stream.location),
            clean_text(stream.title),
            _clean_value(stream.meta),
            merges(stream.kind) if stream.merge is None else stream.merge,
        )
        source_id = source_id_for(info.scope)
        yield ("stream", info)
        seq = 0
        try:
            records = _Counted(stream.records)
            if info.merge:
                yield from _record_events(
                    records,
                    ctx,
                    info,
                    source_id,
                    config,
                    problems,
                    derive=source_id not in held,
                    structure=stream.structure,
                )
                continue
            drafts = chunk_records(stream.kind, records, config)
            previous: Record | None = None
            while batch := list(islice(drafts, BATCH)):
                rows: list[Row] = []
                notes: list[Note] = []
                for draft in batch:
                    with ctx.item(info.location, draft.ref or f"chunk {seq + 1}"):
                        rows.append(_row(source_id, seq, draft, info))
                        seq += 1
                        if draft.records and draft.records[0] is not previous:
                            # A note's first chunk: the evidence of what its front matter says.
                            previous = draft.records[0]
                            note = note_of(previous, rows[-1][0].id)
                            if note is not None:
                                notes.append(note)
                yield from _drain(problems)
                yield ("rows", rows, *records.take(), notes)
        except StratamemError as exc:
            yield from _drain(problems)
            yield ("stream_error", str(exc))
            continue
        except Exception as exc:  # one source fails, the others go on
            yield from _drain(problems)
            yield ("stream_error", f"{info.location}: {describe_failure(exc)}")
            continue
        yield from _drain(problems)
        yield ("end", *records.take())
    yield from _drain(problems)


def _record_events(
    records: _Counted,
    ctx: ReadContext,
    info: StreamInfo,
    source_id: str,
    config: ChunkingConfig | None,
    problems: deque[Event],
    *,
    derive: bool,
    structure: Callable[[], Sequence[Any]] | None = None,
) -> Iterator[Event]:
    """A merging source's ``records`` events and its ``end``, each after the problems found
    before it, with the chunks derived from the records as read when ``derive`` (see
    :func:`derive_while_reading`); the ``end`` carries what ``structure`` says once the
    records are read."""
    order = ReadOrder(info.kind)
    # What the records say of who is who (an author's address or id and name), sent with
    # the structure: read here, where the records are at hand, not in the writer.
    stated: dict[Alias, None] = {}

    def noted(items: Iterable[Record]) -> Iterator[Record]:
        for record in items:
            for alias in record_aliases(record, info.platform):
                stated.setdefault(alias)
            yield record

    keyed_records = _keyed(noted(records), ctx, info.location)
    if not derive:
        order.in_order = False  # nothing derived here to hold
        while batch := list(islice(keyed_records, BATCH * 4)):
            yield from _drain(problems)
            yield ("records", [stored.row() for stored in batch], *records.take(), [])
    else:
        for read, derived in derive_while_reading(
            keyed_records,
            source_id=source_id,
            scope=info.scope,
            kind=info.kind,
            config=config,
            order=order,
            batch=BATCH,
        ):
            yield from _drain(problems)
            yield ("records", read, *records.take(), derived)
    said = [] if structure is None else list(structure())
    said += stated
    yield from _drain(problems)
    yield ("end", *records.take(), order.in_order, said)


def _keyed(records: Iterable[Record], ctx: ReadContext, location: str) -> Iterator[StoredRecord]:
    for record in records:
        stored = None
        with ctx.item(location, record.ref):
            try:
                stored = keyed(record)
            except UnicodeEncodeError:  # a lone surrogate in the metadata
                stored = keyed(dataclasses.replace(record, meta=_clean_value(record.meta)))
        if stored is not None:
            yield stored


def _row(source_id: str, seq: int, draft: Draft, info: StreamInfo) -> Row:
    chunk = make_chunk(source_id, seq, draft)
    mentions, skip = record_mentions(chunk.content, draft.records, scope=info.scope, kind=info.kind)
    mentions += topic_mentions(chunk.content, known=mentions, skip_words=skip)
    return (chunk, mentions, skip)


def _drain(problems: deque[Event]) -> Iterator[Event]:
    while problems:
        yield problems.popleft()


def _clean_value(value: Any) -> Any:
    """Stream metadata with its strings cleaned (it is small: a few names and lists)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, Mapping):
        return {_clean_value(k): _clean_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean_value(v) for v in value]
    return value


def _clean_problem(problem: Problem) -> Problem:
    return Problem(clean_text(problem.path), clean_text(problem.where), clean_text(problem.reason))


_RECORD_TEXT = ("text", "ref", "author", "author_id", "id", "thread", "reply_to", "title")
_RECORD_MORE_TEXT = ("quoted", "signature", "doc")
_RECORD_LISTS = ("recipients", "mentions", "tags", "links")


def _clean_record(record: Record) -> Record:
    """The record, with lone surrogates replaced in every field that reaches the store."""
    fields = (*_RECORD_TEXT, *_RECORD_MORE_TEXT)
    texts = [getattr(record, name) or "" for name in fields]
    texts += [item for name in _RECORD_LISTS for item in getattr(record, name)]
    try:
        "\x00".join(texts).encode("utf-8")
    except UnicodeEncodeError:
        changes: dict[str, Any] = {
            name: clean_text(value)
            for name in fields
            if isinstance(value := getattr(record, name), str)
        }
        for name in _RECORD_LISTS:
            changes[name] = tuple(clean_text(item) for item in getattr(record, name))
        return dataclasses.replace(record, **changes)
    return record


class _Counted:
    """Counts the records a chunker pulls, and the files they come from, for progress.

    Connectors read one file at a time, so a change of the file part of ``ref`` (before
    ``#`` or a trailing ``:line``) is a new file: counting needs no set of names.
    """

    def __init__(self, records: Any) -> None:
        self.records = iter(records)
        self.count = 0
        self.files = 0
        self.last_file = ""

    def __iter__(self) -> Iterator[Record]:
        for raw in self.records:
            record = _clean_record(raw)
            self.count += 1
            name = _file_of(record.ref)
            if name != self.last_file:
                self.files += 1
                self.last_file = name
            yield record

    def take(self) -> tuple[int, int]:
        taken = (self.count, self.files)
        self.count = self.files = 0
        return taken


def _file_of(ref: str) -> str:
    name = ref.partition("#")[0]
    head, colon, tail = name.rpartition(":")
    return head if colon and tail.isdigit() else name


def make_chunk(source_id: str, seq: int, draft: Draft) -> Chunk:
    """A document chunk at ``seq``, identified by its note (the record's id, else its
    document, else its reference) and what it holds (see :func:`~stratamem.ingest.merge.
    chunk_identity`): an edit re-identifies only the chunks of the note it changed."""
    record = draft.records[0] if draft.records else None
    anchor = (record.id or record.doc or record.ref) if record is not None else draft.ref
    node, sha = chunk_identity(source_id, anchor or "", draft, facets=False)
    return draft.chunk(id=node, source_id=source_id, seq=seq, sha=sha)


# -- process mode --------------------------------------------------------------------------

_POLL = 0.5


def read_in_process(
    connector: Connector,
    path: Path,
    scope: str | None,
    config: ChunkingConfig | None,
    *,
    max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES,
    held: frozenset[str] = frozenset(),
    rename: Callable[[str], str] | None = None,
) -> Iterator[Event]:
    """The same events, produced by a forked child while the caller writes.

    The child stops by itself when the parent dies (it checks its parent while the queue is
    full), and the parent terminates the child if it stops reading early.
    """
    context = multiprocessing.get_context("fork")
    events: Any = context.Queue(maxsize=8)
    child = context.Process(
        target=_child,
        args=(connector, path, scope, config, max_item_bytes, held, rename, events, os.getpid()),
        daemon=True,
    )
    child.start()
    try:
        while True:
            try:
                with _collection_paused():
                    event = events.get(timeout=_POLL)
            except queue.Empty:
                if not child.is_alive():
                    raise IngestError(
                        f"{path}: the reader process died (exit code {child.exitcode})"
                    ) from None
                continue
            if event[0] == "done":
                return
            yield event
    finally:
        if child.is_alive():
            child.terminate()
        child.join()
        events.close()


@contextmanager
def _collection_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a batch is unpickled. A batch is thousands of
    new objects, none in a cycle (chunks, mentions, their strings and tuples), and each few
    hundred of them set off a collection that walks the objects already held: with the
    writer's heap, that tripled the cost of taking a batch in."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _child(
    connector: Connector,
    path: Path,
    scope: str | None,
    config: ChunkingConfig | None,
    max_item_bytes: int,
    held: frozenset[str],
    rename: Callable[[str], str] | None,
    events: Any,
    parent: int,
) -> None:
    def send(event: Event) -> None:
        while True:
            try:
                events.put(event, timeout=_POLL)
                return
            except queue.Full:
                if os.getppid() != parent:
                    os._exit(1)

    try:
        for event in read_events(
            connector, path, scope, config, max_item_bytes=max_item_bytes, held=held, rename=rename
        ):
            send(event)
    except BaseException:
        send(("crash", traceback.format_exc()))
    send(("done",))
    events.close()
    events.join_thread()


def fork_available() -> bool:
    return "fork" in multiprocessing.get_all_start_methods() and (os.cpu_count() or 1) > 1
