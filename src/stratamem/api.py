"""The Python API: ``mem = stratamem.open(path)``, then ingest, search and inspect."""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from stratamem.entities.search import neighbours, search_entities
from stratamem.errors import NotFoundError
from stratamem.ingest.chunking import ChunkingConfig
from stratamem.ingest.pipeline import IngestReport, ProgressCallback, ingest_path
from stratamem.retrieval.keyword import keyword_search
from stratamem.store.sqlite.store import SQLiteStore
from stratamem.types import (
    EntityMatch,
    Filters,
    NodeKind,
    QueryResponse,
    RetrievalHit,
    Source,
    SourceKind,
    TreeKind,
)


def default_db_path() -> Path:
    """``$STRATAMEM_DB``, else ``stratamem.db`` in the per-user data directory."""
    env = os.environ.get("STRATAMEM_DB")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "stratamem" / "stratamem.db"


class Memory:
    """A store opened for ingest and retrieval. Use as a context manager or call :meth:`close`."""

    def __init__(self, path: str | Path) -> None:
        self.store = SQLiteStore(path)

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.store.close()

    @property
    def path(self) -> str:
        return self.store.path

    def ingest(
        self,
        path: str | Path,
        *,
        kind: str | None = None,
        scope: str | None = None,
        chunking: ChunkingConfig | None = None,
        progress: ProgressCallback | None = None,
        parallel: bool | None = None,
    ) -> IngestReport:
        """Read ``path`` with the detected (or named) connector into the store.

        Each source is written in one transaction; a source that fails is rolled back whole
        and reported in the result, the others go on. ``parallel`` reads in a child process
        while this one writes (default: where fork exists and there are two or more CPUs).
        """
        return ingest_path(
            self.store,
            path,
            kind=kind,
            scope=scope,
            config=chunking,
            progress=progress,
            parallel=parallel,
        )

    def search(
        self,
        query: str,
        *,
        sources: Sequence[str] = (),
        kinds: Sequence[str | SourceKind] = (),
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 10,
    ) -> QueryResponse:
        """Leaves ranked by BM25 relevance over the filtered sources."""
        filters = Filters(
            sources=tuple(sources),
            kinds=tuple(SourceKind(k) for k in kinds),
            since=since,
            until=until,
        )
        return keyword_search(self.store, query, filters=filters, limit=limit)

    def sources(self) -> list[Source]:
        return self.store.sources()

    def stats(self) -> dict[str, Any]:
        return self.store.stats()

    def get(self, node_id: str) -> RetrievalHit:
        """One leaf by id, with its entities and provenance."""
        found = self.store.chunks([node_id])
        if not found:
            raise NotFoundError(f"no node with id {node_id!r}")
        chunk = found[0]
        scope = next((s.scope for s in self.sources() if s.id == chunk.source_id), "")
        return RetrievalHit(
            node_id=chunk.id,
            node_kind=NodeKind.LEAF,
            tree_id="",
            tree_kind=TreeKind.SOURCE,
            tree_scope=scope,
            level=0,
            content=chunk.content,
            entities=tuple(self.store.mentions_of([chunk.id])[chunk.id]),
            topics=chunk.tags,
            time_range_start=chunk.time_start,
            time_range_end=chunk.time_end,
            score=0.0,
            source_ref=chunk.source_ref,
            source_id=chunk.source_id,
            author=chunk.author,
            title=chunk.title,
        )

    def search_entities(
        self, query: str, *, kinds: Sequence[str] = (), limit: int = 5
    ) -> list[EntityMatch]:
        return search_entities(self.store, query, kinds=kinds, limit=limit)

    def related(self, entity_id: str, *, limit: int = 10) -> list[tuple[str, float]]:
        """Entities most often mentioned together with ``entity_id``."""
        return neighbours(self.store, entity_id, limit=limit)

    def forget(self, source: str) -> int:
        """Remove a source (by id or scope) and everything derived from it."""
        found = self.store.resolve_source(source)
        return self.store.delete_source(found.id)


def open(path: str | Path | None = None) -> Memory:
    """Open (creating if needed) the store at ``path``, or at :func:`default_db_path`."""
    return Memory(path if path is not None else default_db_path())
