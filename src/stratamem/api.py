"""The Python API: ``mem = stratamem.open(path)``, then ingest, search and inspect."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from stratamem.config import SearchConfig
from stratamem.embed.base import Embedder
from stratamem.embed.indexing import EmbedProgress, EmbedReport, embed_pending, reindex
from stratamem.embed.registry import get_embedder
from stratamem.entities.search import neighbours, search_entities
from stratamem.errors import NotFoundError, StratamemError
from stratamem.ingest.chunking import ChunkingConfig
from stratamem.ingest.model import Connector
from stratamem.ingest.pipeline import IngestReport, ProgressCallback, ingest_path
from stratamem.retrieval.hybrid import HybridSearcher
from stratamem.retrieval.keyword import keyword_search
from stratamem.retrieval.rerank import Reranker
from stratamem.retrieval.vector_leg import VectorLeg
from stratamem.store.sqlite.store import SQLiteStore
from stratamem.types import (
    EntityMatch,
    Filters,
    NodeKind,
    RetrievalHit,
    SearchResponse,
    Source,
    SourceKind,
    TreeKind,
)

DEFAULT_EMBEDDER = "minilm"


def default_db_path() -> Path:
    """``$STRATAMEM_DB``, else ``stratamem.db`` in the per-user data directory."""
    env = os.environ.get("STRATAMEM_DB")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "stratamem" / "stratamem.db"


class Memory:
    """A store opened for ingest and retrieval. Use as a context manager or call :meth:`close`."""

    def __init__(
        self,
        path: str | Path,
        *,
        embedder: str | Embedder | None = DEFAULT_EMBEDDER,
        reranker: Reranker | None = None,
        config: SearchConfig | None = None,
    ) -> None:
        self.store = SQLiteStore(path)
        self._embedder_choice = embedder
        self._embedder: Embedder | None = None
        self._embedder_error: str | None = None
        self._vectors: VectorLeg | None = None
        self.reranker = reranker
        self.config = config or SearchConfig()

    @property
    def embedder(self) -> Embedder | None:
        """The configured embedder, created on first use (None if none or it cannot load)."""
        if self._embedder is None and self._embedder_error is None:
            choice = self._embedder_choice
            if choice is None:
                self._embedder_error = "no embedder configured"
            elif isinstance(choice, str):
                try:
                    self._embedder = get_embedder(choice)
                except StratamemError as exc:
                    self._embedder_error = str(exc)
            else:
                self._embedder = choice
        return self._embedder

    def _require_embedder(self) -> Embedder:
        embedder = self.embedder
        if embedder is None:
            raise StratamemError(f"cannot embed: {self._embedder_error}")
        return embedder

    @property
    def vectors(self) -> VectorLeg | None:
        if self._vectors is None and self.embedder is not None:
            self._vectors = VectorLeg(self.store, self.embedder)
        return self._vectors

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
        connector: Connector | None = None,
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
            connector=connector,
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
        budget: int | None = None,
        mode: str = "hybrid",
        profile: str | None = None,
        rerank: bool = True,
        diversify: bool = True,
        config: SearchConfig | None = None,
    ) -> SearchResponse:
        """The best evidence for ``query`` among the filtered sources.

        ``mode`` is ``hybrid`` (keyword, vector and graph legs fused, expanded, diversified),
        ``keyword`` (BM25 only, with snippets), ``vector`` or ``graph`` (one leg through the
        same pipeline). ``budget`` packs the hits into that many tokens as cards.
        """
        filters = Filters(
            sources=tuple(sources),
            kinds=tuple(SourceKind(k) for k in kinds),
            since=since,
            until=until,
        )
        if mode == "keyword":
            found = keyword_search(self.store, query, filters=filters, limit=limit)
            return SearchResponse(
                hits=found.hits, total=found.total, legs={"keyword": "ok"}, budget=budget
            )
        legs = {
            "hybrid": ("keyword", "vector", "graph"),
            "vector": ("vector",),
            "graph": ("graph",),
        }.get(mode)
        if legs is None:
            raise ValueError(f"unknown search mode {mode!r}; use hybrid, keyword, vector or graph")
        config = config or self.config
        if profile is not None:
            config = replace(config, profile=profile)
        searcher = HybridSearcher(
            self.store, vectors=self.vectors, reranker=self.reranker, config=config
        )
        return searcher.search(
            query,
            filters=filters,
            limit=limit,
            budget=budget,
            legs=legs,
            rerank=rerank,
            diversify=diversify,
        )

    def embed(self, *, progress: Callable[[EmbedProgress], None] | None = None) -> EmbedReport:
        """Embed every chunk that has no vector yet with the configured model."""
        return embed_pending(self.store, self._require_embedder(), progress=progress)

    def reindex(self, *, progress: Callable[[EmbedProgress], None] | None = None) -> EmbedReport:
        """Switch the store's vectors to the configured model, re-embedding every chunk."""
        return reindex(self.store, self._require_embedder(), progress=progress)

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


def open(
    path: str | Path | None = None,
    *,
    embedder: str | Embedder | None = DEFAULT_EMBEDDER,
    reranker: Reranker | None = None,
    config: SearchConfig | None = None,
) -> Memory:
    """Open (creating if needed) the store at ``path``, or at :func:`default_db_path`.

    ``embedder`` is a registered name (default ``minilm``, bundled and offline), an
    :class:`Embedder`, or None for keyword and graph search only.
    """
    return Memory(
        path if path is not None else default_db_path(),
        embedder=embedder,
        reranker=reranker,
        config=config,
    )
