"""Ingesting a path: connector → chunker → entities → store, one transaction per source.

A source that fails part-way is rolled back whole and reported; the other sources of the same
path go on. Malformed items inside a source are skipped and reported by the connector.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

from stratamem.entities.extract import extract
from stratamem.errors import IngestError, StratamemError
from stratamem.ingest import registry
from stratamem.ingest.chunking import ChunkingConfig, Draft, chunk_records
from stratamem.ingest.model import Problem, ReadContext, SourceStream
from stratamem.ingest.tokens import estimate_tokens
from stratamem.store.sqlite.store import SQLiteStore, to_ms
from stratamem.types import Chunk

_BATCH = 512


@dataclass(slots=True)
class SourceResult:
    scope: str
    source_id: str = ""
    kind: str = ""
    platform: str = ""
    records: int = 0
    chunks: int = 0
    added: int = 0
    removed: int = 0
    error: str | None = None

    @property
    def unchanged(self) -> int:
        return self.chunks - self.added


@dataclass(slots=True)
class IngestReport:
    path: str
    connector: str
    sources: list[SourceResult] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    seconds: float = 0.0

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
            "sources": [
                {
                    "scope": s.scope, "source_id": s.source_id, "kind": s.kind,
                    "platform": s.platform, "records": s.records, "chunks": s.chunks,
                    "added": s.added, "unchanged": s.unchanged, "removed": s.removed,
                    "error": s.error,
                }
                for s in self.sources
            ],
            "problems": [str(p) for p in self.problems],
        }


@dataclass(slots=True)
class Progress:
    """Running counts handed to the progress callback after every batch."""

    scope: str = ""
    records: int = 0
    chunks: int = 0
    started: float = field(default_factory=time.perf_counter)


ProgressCallback = Callable[[Progress], None]


def ingest_path(
    store: SQLiteStore,
    path: str | Path,
    *,
    kind: str | None = None,
    scope: str | None = None,
    config: ChunkingConfig | None = None,
    progress: ProgressCallback | None = None,
) -> IngestReport:
    path = Path(path).expanduser()
    if not path.exists():
        raise IngestError(f"{path}: no such file or directory")
    connector = registry.get(kind) if kind else registry.detect(path)
    ctx = ReadContext(scope=scope)
    report = IngestReport(path=str(path), connector=connector.name, problems=ctx.problems)
    counts = Progress()
    started = time.perf_counter()
    streams = connector.read(path, ctx)
    while True:
        try:
            stream = next(streams)
        except StopIteration:
            break
        except StratamemError as exc:
            # The connector could not even open the next source: nothing of it was written.
            report.sources.append(SourceResult(scope=scope or str(path), error=str(exc)))
            break
        result = SourceResult(scope=stream.scope, kind=stream.kind.value, platform=stream.platform)
        report.sources.append(result)
        try:
            with store.transaction():
                _ingest_stream(store, stream, result, config, counts, progress)
        except (StratamemError, OSError, UnicodeError, ValueError) as exc:
            result.error = str(exc)
            result.added = result.removed = 0
    report.seconds = time.perf_counter() - started
    return report


def _ingest_stream(
    store: SQLiteStore,
    stream: SourceStream,
    result: SourceResult,
    config: ChunkingConfig | None,
    counts: Progress,
    progress: ProgressCallback | None,
) -> None:
    sid = store.upsert_source(
        scope=stream.scope,
        kind=stream.kind,
        platform=stream.platform,
        location=stream.location,
        title=stream.title,
        meta=stream.meta,
    )
    result.source_id = sid
    counts.scope = stream.scope
    store.begin_keep()

    def counted() -> Iterator[Any]:
        for record in stream.records:
            result.records += 1
            counts.records += 1
            yield record

    drafts = chunk_records(stream.kind, counted(), config)
    seq = 0
    while batch := list(islice(drafts, _BATCH)):
        chunks = []
        for draft in batch:
            chunks.append(_make_chunk(sid, seq, draft))
            seq += 1
        ids = [c.id for c, _ in chunks]
        existing = store.existing_ids(ids)
        fresh = [(c, d) for (c, d) in chunks if c.id not in existing]
        store.insert_chunks((c, d.meta) for c, d in fresh)
        store.insert_mentions(
            (c.id, sid, m, to_ms(c.time_start))
            for c, d in fresh
            for m in extract(c.content, d.records, scope=stream.scope, kind=stream.kind)
        )
        store.keep(ids)
        result.chunks += len(chunks)
        result.added += len(fresh)
        counts.chunks += len(chunks)
        if progress is not None:
            progress(counts)
    result.removed = store.prune_source(sid)
    if result.added or result.removed:
        store.rebuild_edges(sid)


def _make_chunk(source_id: str, seq: int, draft: Draft) -> tuple[Chunk, Draft]:
    sha = hashlib.sha256(draft.content.encode()).hexdigest()
    node = hashlib.sha256(f"{source_id}\x00{seq}\x00{sha}".encode()).hexdigest()[:32]
    start, end = draft.time_range
    chunk = Chunk(
        id=node,
        source_id=source_id,
        seq=seq,
        content=draft.content,
        token_count=estimate_tokens(draft.content),
        time_start=start,
        time_end=end,
        author=draft.author,
        title=draft.title,
        tags=draft.tags,
        source_ref=draft.ref,
        thread=draft.thread,
        doc_id=draft.doc,
        content_sha256=sha,
    )
    return chunk, draft
