"""The reads an agent calls on a memory directly: hybrid :meth:`~Reads.search`, the seven
primitives over the summary trees, and nodes and entities by id. :class:`Memory` is made of
these and what opens the store (:mod:`stratamem.api.memory`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from stratamem.api._core import When, check_sources, in_one_snapshot, when
from stratamem.config import SearchConfig
from stratamem.embed.base import Embedder
from stratamem.embed.indexing import vector_status
from stratamem.entities.search import neighbours, search_entities
from stratamem.errors import NotFoundError, StratamemError
from stratamem.retrieval import primitives
from stratamem.retrieval.hybrid import HybridSearcher
from stratamem.retrieval.legs.keyword import keyword_search
from stratamem.retrieval.legs.vector import VectorLeg
from stratamem.retrieval.relevance import Calibration, check_min_relevance, floor
from stratamem.retrieval.rerank import Reranker
from stratamem.retrieval.scope import resolve, source_filters
from stratamem.retrieval.tree_hits import leaf_evidence
from stratamem.store.base import Store
from stratamem.types import (
    EntityMatch,
    Filters,
    QueryResponse,
    RetrievalHit,
    SearchResponse,
    SourceKind,
)

__all__ = ["EVIDENCE_POOL", "Reads"]

EVIDENCE_POOL = 100

log = logging.getLogger(__name__)


class Reads:
    """Search and the primitives, over the store, embedder, vectors and settings of the
    memory that is made of them. A source named in a filter that the reader may not see, or
    that does not exist, is a :class:`NotFoundError` naming the closest scopes it may see (a
    scope pattern ending in ``*`` is never an error)."""

    store: Store
    config: SearchConfig
    reranker: Reranker | None

    @property
    def embedder(self) -> Embedder | None:
        raise NotImplementedError

    @property
    def vectors(self) -> VectorLeg | None:
        raise NotImplementedError

    def search(
        self,
        query: str,
        *,
        sources: Sequence[str] = (),
        kinds: Sequence[str | SourceKind] = (),
        since: When | None = None,
        until: When | None = None,
        limit: int = 10,
        budget: int | None = None,
        mode: str = "hybrid",
        profile: str | None = None,
        weights: Mapping[str, float] | None = None,
        rerank: bool = True,
        diversify: bool = True,
        config: SearchConfig | None = None,
        user: str | Sequence[str] | None = None,
        agent: str | Sequence[str] | None = None,
        session: str | Sequence[str] | None = None,
        min_relevance: float | None = None,
    ) -> SearchResponse:
        """The best evidence for ``query`` among the filtered sources.

        ``mode`` is ``hybrid`` (keyword, vector and graph legs fused, expanded, diversified),
        ``keyword`` (BM25 only, with snippets), ``vector`` or ``graph`` (one leg through the
        same pipeline). ``budget`` packs the hits into that many tokens as cards (0: every
        hit whole). ``profile`` names a weight profile (dropping tuned weights); ``weights``
        (leg → weight) override the profile's for this call. ``user``, ``agent`` and
        ``session`` (one id or several each) keep the memory of those users, agents and
        sessions (their items, turns and facts' sources: see ``docs/memory.md``).

        Each hit carries ``relevance``, a calibrated chance in [0, 1] that it answers the
        query, comparable across queries and going down the list; ``min_relevance`` drops
        the hits below it, and ``nothing_relevant`` says that no hit reached it (or the
        calibration's default threshold when none is given: see ``docs/search.md``).
        """
        min_relevance = check_min_relevance(min_relevance)
        filters = Filters(
            sources=tuple(sources),
            kinds=tuple(SourceKind(k) for k in kinds),
            since=when(since, "since"),
            until=when(until, "until"),
            users=_ids(user),
            agents=_ids(agent),
            sessions=_ids(session),
        )
        check_sources(self.store, filters.sources)
        if mode == "keyword":
            calibration = Calibration.load((config or self.config).calibration)
            found = keyword_search(
                self.store, query, filters=filters, limit=limit, calibration=calibration
            )
            kept, nothing = floor(found.hits, min_relevance, calibration.threshold)
            return SearchResponse(
                hits=tuple(kept),
                total=found.total,
                legs={"keyword": "ok"},
                budget=budget,
                nothing_relevant=nothing,
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
            # A profile asked for by name is that profile, whatever weights were tuned.
            config = replace(config, profile=profile, weights={})
        if weights is not None:
            config = replace(config, weights=dict(weights))
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
            min_relevance=min_relevance,
        )

    @in_one_snapshot
    def query_source(
        self,
        source: str | None = None,
        *,
        source_kind: str | None = None,
        time_window_days: float | None = None,
        query: str | None = None,
        limit: int = primitives.DEFAULT_LIMIT,
        now: When | None = None,
        filters: Filters | None = None,
        sources: Sequence[str] = (),
        kinds: Sequence[str | SourceKind] = (),
        user: str | Sequence[str] | None = None,
        agent: str | Sequence[str] | None = None,
        session: str | Sequence[str] | None = None,
    ) -> QueryResponse:
        """Summaries of one source, a kind of source, or all; newest first or by ``query``."""
        at = when(now, "now")
        self._check_filters(None, source)
        filters = self._narrowed(filters, sources, kinds, user, agent, session)
        # The search evidence comes from the leaves the summaries cover; None: no summary can.
        scoped = source_filters(
            self.store,
            filters,
            source=source,
            source_kind=source_kind,
            days=time_window_days,
            now=at,
        )
        return primitives.query_source(
            self.store,
            source=source,
            source_kind=source_kind,
            time_window_days=time_window_days,
            query=query,
            embedder=self._query_embedder(query),
            evidence=None if scoped is None else self._evidence(query, scoped),
            limit=limit,
            now=at,
            filters=filters,
        )

    @in_one_snapshot
    def query_global(
        self,
        *,
        since: When,
        until: When,
        source_kind: str | None = None,
        query: str | None = None,
        limit: int = primitives.DEFAULT_LIMIT,
        filters: Filters | None = None,
        sources: Sequence[str] = (),
        kinds: Sequence[str | SourceKind] = (),
        user: str | Sequence[str] | None = None,
        agent: str | Sequence[str] | None = None,
        session: str | Sequence[str] | None = None,
    ) -> QueryResponse:
        """Summaries of every source overlapping [since, until]."""
        start, end = when(since, "since"), when(until, "until")
        filters = self._narrowed(filters, sources, kinds, user, agent, session)
        return primitives.query_global(
            self.store,
            since=start,
            until=end,
            source_kind=source_kind,
            query=query,
            embedder=self._query_embedder(query),
            evidence=self._evidence(query, filters, since=start, until=end),
            limit=limit,
            filters=filters,
        )

    @in_one_snapshot
    def query_topic(
        self,
        entity_id: str,
        *,
        since: When | None = None,
        until: When | None = None,
        query: str | None = None,
        limit: int = primitives.DEFAULT_LIMIT,
        filters: Filters | None = None,
        sources: Sequence[str] = (),
        kinds: Sequence[str | SourceKind] = (),
        user: str | Sequence[str] | None = None,
        agent: str | Sequence[str] | None = None,
        session: str | Sequence[str] | None = None,
    ) -> QueryResponse:
        """Summaries and leaves that name a canonical entity id."""
        start, end = when(since, "since"), when(until, "until")
        filters = self._narrowed(filters, sources, kinds, user, agent, session)
        return primitives.query_topic(
            self.store,
            entity_id,
            since=start,
            until=end,
            query=query,
            embedder=self._query_embedder(query),
            evidence=self._evidence(query, filters, since=start, until=end),
            limit=limit,
            filters=filters,
        )

    def cover_window(
        self,
        *,
        since: When,
        until: When,
        limit: int = primitives.COVER_DEFAULT_LIMIT,
        filters: Filters | None = None,
        sources: Sequence[str] = (),
        kinds: Sequence[str | SourceKind] = (),
        user: str | Sequence[str] | None = None,
        agent: str | Sequence[str] | None = None,
        session: str | Sequence[str] | None = None,
    ) -> QueryResponse:
        """The fewest summaries and leaves covering every leaf in [since, until]."""
        start, end = when(since, "since"), when(until, "until")
        filters = self._narrowed(filters, sources, kinds, user, agent, session)
        return primitives.cover_window(
            self.store, since=start, until=end, limit=limit, filters=filters
        )

    @in_one_snapshot
    def drill_down(
        self,
        node_id: str,
        *,
        max_depth: int = 1,
        query: str | None = None,
        limit: int | None = None,
        filters: Filters | None = None,
        sources: Sequence[str] = (),
        kinds: Sequence[str | SourceKind] = (),
        user: str | Sequence[str] | None = None,
        agent: str | Sequence[str] | None = None,
        session: str | Sequence[str] | None = None,
    ) -> list[RetrievalHit]:
        """A summary's descendants, ``max_depth`` levels down, breadth first."""
        filters = self._narrowed(filters, sources, kinds, user, agent, session)
        return primitives.drill_down(
            self.store,
            node_id,
            max_depth=max_depth,
            query=query,
            embedder=self._query_embedder(query),
            evidence=self._evidence(query, filters),
            limit=limit,
            filters=filters,
        )

    def fetch_leaves(
        self,
        ids: Sequence[str],
        *,
        filters: Filters | None = None,
        sources: Sequence[str] = (),
        kinds: Sequence[str | SourceKind] = (),
        user: str | Sequence[str] | None = None,
        agent: str | Sequence[str] | None = None,
        session: str | Sequence[str] | None = None,
    ) -> list[RetrievalHit]:
        """Up to 20 chunks by id, in the order asked; missing ids are skipped."""
        filters = self._narrowed(filters, sources, kinds, user, agent, session)
        return primitives.fetch_leaves(self.store, ids, filters=filters)

    def search_entities(
        self, query: str, *, kinds: Sequence[str] = (), limit: int = 5
    ) -> list[EntityMatch]:
        return search_entities(self.store, query, kinds=kinds, limit=limit)

    def related(self, entity_id: str, *, limit: int = 10) -> list[tuple[str, float]]:
        """Entities most often mentioned together with ``entity_id``."""
        return neighbours(self.store, entity_id, limit=limit)

    def get(self, node_id: str) -> RetrievalHit:
        """One node (a chunk or a summary) by id, with its entities and provenance. An
        item's id reads as the item as it is now, and a chunk id an item had before an edit
        or a removal as that version (see ``docs/memory.md``)."""
        found = self.nodes([node_id])
        if not found:
            raise NotFoundError(f"no node with id {node_id!r}")
        return found[0]

    def nodes(self, node_ids: Sequence[str]) -> list[RetrievalHit]:
        """Chunks and summaries by id, in the order asked (unknown ids left out), in two
        batched reads whatever their number."""
        return primitives.nodes(self.store, node_ids)

    def _narrowed(
        self,
        filters: Filters | None,
        sources: Sequence[str],
        kinds: Sequence[str | SourceKind],
        user: str | Sequence[str] | None,
        agent: str | Sequence[str] | None,
        session: str | Sequence[str] | None,
    ) -> Filters | None:
        """``filters`` with ``sources`` and ``kinds`` added, its sources checked (see
        :meth:`_check_filters`), then narrowed to the memory of ``user``, ``agent`` and
        ``session``: the filters' own sources (and users) resolved first, so that both
        apply."""
        if sources or kinds:
            base = filters or Filters()
            filters = replace(
                base,
                sources=(*base.sources, *sources),
                kinds=(*base.kinds, *(SourceKind(k) for k in kinds)),
            )
        self._check_filters(filters)
        wanted = Filters(users=_ids(user), agents=_ids(agent), sessions=_ids(session))
        if not wanted.names_identity:
            return filters
        found = resolve(self.store, filters or Filters())
        if found is None:
            return filters  # nothing matches them already: the read answers so
        return replace(found, users=wanted.users, agents=wanted.agents, sessions=wanted.sessions)

    def _check_filters(self, filters: Filters | None, source: str | None = None) -> None:
        """The sources a primitive is asked for name sources the reader may see."""
        refs = list(filters.sources) if filters is not None else []
        check_sources(self.store, [*refs, source] if source else refs)

    def _evidence(
        self,
        query: str | None,
        filters: Filters | None,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> dict[str, float] | None:
        """The hybrid search's best leaves for ``query`` under the same filters, their scores
        spread up the trees (see :func:`~stratamem.retrieval.tree_hits.leaf_evidence`)."""
        if not query or not query.strip():
            return None
        base = filters or Filters()
        try:
            found = self.search(
                query,
                sources=base.sources,
                kinds=base.kinds,
                since=since or base.since,
                until=until or base.until,
                user=base.users,
                agent=base.agents,
                session=base.sessions,
                limit=EVIDENCE_POOL,
                rerank=False,
                diversify=False,
            )
        except (StratamemError, ValueError) as exc:
            log.warning("no search evidence for ranking: %s", exc)
            return None
        return leaf_evidence(self.store, {h.node_id: h.score for h in found.hits})

    def _query_embedder(self, query: str | None) -> Embedder | None:
        """The embedder for ranking by ``query``, only when the store has vectors of it."""
        if not query or not query.strip():
            return None
        embedder = self.embedder
        if embedder is None or vector_status(self.store, embedder) is not None:
            return None
        return embedder


def _ids(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """One id or several as a tuple (none for None)."""
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)
