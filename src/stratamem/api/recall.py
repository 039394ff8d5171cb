"""``mem.recall``: the agent's one call, documents, turns, items and facts in one ranked,
typed, cited list (see :mod:`stratamem.memory.recall`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from stratamem.api._core import When, check_sources, when
from stratamem.api.reads import Reads
from stratamem.config import SearchConfig
from stratamem.embed.base import Embedder, Role, Vectors
from stratamem.memory import recall as recalling
from stratamem.memory.search import FactHit
from stratamem.retrieval.legs.vector import VectorLeg
from stratamem.retrieval.relevance import Calibration, check_min_relevance, floor
from stratamem.types import Filters, RetrievalHit, SearchResponse, SourceKind

__all__ = ["Recalls"]

CHUNK_TYPES = frozenset(recalling.TYPES) - {"fact"}


class Recalls(Reads):
    """:meth:`recall` beside search and the primitives."""

    def recall(
        self,
        query: str,
        *,
        types: Sequence[str] = (),
        sources: Sequence[str] = (),
        kinds: Sequence[str | SourceKind] = (),
        since: When | None = None,
        until: When | None = None,
        as_of: When | None = None,
        limit: int = 10,
        budget: int | None = None,
        config: SearchConfig | None = None,
        fusion: recalling.Fusion | None = None,
        user: str | Sequence[str] | None = None,
        agent: str | Sequence[str] | None = None,
        session: str | Sequence[str] | None = None,
        min_relevance: float | None = None,
    ) -> SearchResponse:
        """The best turns, messages, documents, items and facts for ``query``, in one ranked
        list; each hit's ``explain["type"]`` says which (``types`` keeps only those named:
        turn, message, document, record, item, fact; none: all; the chunks are searched
        among the source kinds those types may come from). Chunks are found as
        :meth:`search` finds them, with the same filters; facts are those true at ``as_of``
        (None: now) of the sources the filters admit, whose ``valid_from`` lies between
        ``since`` and ``until``; a fact closed or retracted before ``as_of`` is not there.
        ``budget`` packs the hits into that many tokens as cards, as search does. ``fusion``
        overrides how the two are merged (see ``docs/search.md``).

        Each hit carries ``relevance``, the calibrated chance in [0, 1] that it answers the
        query (a chunk's as search gives it, a fact's from its own BM25 and cosine), shown
        going down the merged list; ``min_relevance`` drops the hits below it, and
        ``nothing_relevant`` says that no hit reached it (or the calibration's default
        threshold when none is given)."""
        min_relevance = check_min_relevance(min_relevance)
        wanted = set(types) or set(recalling.TYPES)
        unknown = sorted(wanted - set(recalling.TYPES))
        if unknown:
            raise ValueError(
                f"unknown recall type {unknown[0]!r}; use {', '.join(recalling.TYPES)}"
            )
        config = config or self.config
        calibration = Calibration.load(config.calibration)
        depth = recalling.leg_depth(limit)
        start, end = when(since, "since"), when(until, "until")
        valid_at = when(as_of, "as_of")
        store = self.store
        check_sources(store, sources)
        with store.read_snapshot():
            known = store.sources(counts=False)
            chunks: Sequence[RetrievalHit] = ()
            found = SearchResponse(hits=(), total=0)
            searched = recalling.chunk_kinds(wanted, [SourceKind(k) for k in kinds])
            if wanted & CHUNK_TYPES and searched is not None:
                found = self.search(
                    query,
                    sources=sources,
                    kinds=searched,
                    since=start,
                    until=end,
                    limit=depth,
                    config=config,
                    user=user,
                    agent=agent,
                    session=session,
                )
                chunks = found.hits
            facts: Sequence[FactHit] = ()
            matched = 0
            noted: tuple[str, ...] = ()
            if "fact" in wanted and query.strip():
                filters = Filters(
                    sources=tuple(sources),
                    kinds=tuple(SourceKind(k) for k in kinds),
                    since=start,
                    until=end,
                    users=_ids(user),
                    agents=_ids(agent),
                    sessions=_ids(session),
                )
                facts, matched, noted = recalling.fact_matches(
                    store,
                    query,
                    filters=filters,
                    as_of=valid_at,
                    limit=depth,
                    embedder=self._fact_embedder(query),
                    prior=config.recall_fact_prior,
                    calibration=calibration,
                )
            merged, count = recalling.recalled(
                store,
                chunks,
                facts,
                wanted=wanted,
                limit=limit,
                fusion=fusion or recalling.DEFAULT_FUSION,
                sources=known,
            )
        shown = recalling.relevant(merged)
        kept, nothing = floor(shown, min_relevance, calibration.threshold)
        legs = dict(found.legs)
        if "fact" in wanted:
            legs["facts"] = "ok"
        response = SearchResponse(
            hits=tuple(kept),
            total=max(count, found.total + matched),
            budget=budget,
            legs=legs,
            notes=found.notes + noted,
            nothing_relevant=nothing,
        )
        return recalling.packed(response, budget) if budget is not None else response

    def _fact_embedder(self, query: str) -> Embedder | None:
        """The embedder the fact leg ranks by (None: BM25 alone), sharing the vector leg's
        query vector where both are of one model."""
        embedder = self._query_embedder(query)
        vectors = self.vectors
        if embedder is None or vectors is None:
            return embedder
        if vectors.embedder.spec.signature != embedder.spec.signature:
            return embedder
        return _SharedQuery(embedder, vectors)


class _SharedQuery:
    """The embedder as the fact leg uses it (one query), its vector taken from the vector
    leg's cache of query vectors: a recall embeds its query once for both legs."""

    def __init__(self, embedder: Embedder, vectors: VectorLeg) -> None:
        self.spec = embedder.spec
        self._vectors = vectors

    def embed_batch(self, texts: Sequence[str], *, role: Role = "passage") -> Vectors:
        if role != "query":
            raise ValueError("the shared query embedder embeds queries only")
        return np.stack([self._vectors.embed_query(text) for text in texts])


def _ids(value: str | Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)
