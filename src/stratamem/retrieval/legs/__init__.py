"""The retrieval legs behind one protocol, and the table the hybrid pipeline iterates.

A leg turns a query into candidate scores (node id → score, higher is better) for the nodes
the filters admit, the gate applied before the leg's own limit. Each leg has one required
method, :meth:`Leg.start`: it begins the work and returns a call that finishes it. A leg that
answers at once does everything in ``start``; the vector leg only sets the query's embedding
under way there, so that the model runs while the other legs query the store.

A leg's :class:`LegResult` says how it went in one line (``ok: …`` or ``off: …``); scores of
None mean the leg did not run and is left out of fusion, an empty mapping that it ran and
found nothing (its weight then goes to the others).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from stratamem.config import SearchConfig
from stratamem.errors import StratamemError
from stratamem.retrieval.legs.graph import GRAPH_MODES, graph_leg
from stratamem.retrieval.legs.keyword import keyword_leg_scored
from stratamem.retrieval.legs.vector import VectorLeg
from stratamem.store.base import Store
from stratamem.types import Filters

# What a failing vector leg may raise; it turns the leg off and never fails the search.
_VECTOR_FAILURES = (StratamemError, OSError, ValueError, RuntimeError)
_GRAPH_QUERY_WORDS = 48
_EMBEDDING_THREAD: tuple[int, ThreadPoolExecutor] | None = None
_EMBEDDING_THREAD_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class LegResult:
    """How the leg went, its scores, and (the keyword leg) the query's Σ idf, the scale its
    scores are read on for a hit's relevance (None where the leg cannot say)."""

    status: str
    scores: dict[str, float] | None = None
    ceiling: float | None = None


Finish = Callable[[], LegResult]


class Leg(Protocol):
    name: str

    def start(self, query: str, filters: Filters, k: int) -> Finish:
        """Begin finding the ``k`` best admitted nodes for ``query``; the call returned
        finishes and gives the result."""
        ...


def _done(result: LegResult) -> Finish:
    return lambda: result


class KeywordLeg:
    """BM25 over the full-text index (see :mod:`~stratamem.retrieval.legs.keyword`)."""

    name = "keyword"

    def __init__(self, store: Store) -> None:
        self.store = store

    def start(self, query: str, filters: Filters, k: int) -> Finish:
        scores, status, ceiling = keyword_leg_scored(self.store, query, filters, k)
        return _done(LegResult(status, scores, ceiling))


class GraphLeg:
    """Entities named in the query and the nodes mentioning them (see
    :mod:`~stratamem.retrieval.legs.graph`); only the query's first 48 words are read.
    ``graph_mode`` is ``idf`` (direct matches) or ``bm25`` (their co-mention neighbourhood
    too)."""

    name = "graph"

    def __init__(self, store: Store, *, hub_fraction: float, graph_mode: str = "idf") -> None:
        if graph_mode not in GRAPH_MODES:
            raise ValueError(f"unknown graph_mode {graph_mode!r}; use {' or '.join(GRAPH_MODES)}")
        self.store = store
        self.hub_fraction = hub_fraction
        self.graph_mode = graph_mode

    def start(self, query: str, filters: Filters, k: int) -> Finish:
        words = " ".join(query.split()[:_GRAPH_QUERY_WORDS])
        nodes, entities = graph_leg(
            self.store,
            words,
            filters,
            k,
            hub_fraction=self.hub_fraction,
            graph_mode=self.graph_mode,
        )
        status = (
            f"ok: {len(nodes)} nodes via {', '.join(sorted(entities))}"
            if entities
            else "ok: no known entity in the query"
        )
        return _done(LegResult(status, nodes))


class VectorSearchLeg:
    """Nearest chunks to the query's embedding (see :mod:`~stratamem.retrieval.legs.vector`).
    Off, with the reason, when there is no embedder, the store's vectors are of another model,
    or the query cannot be embedded."""

    name = "vector"

    def __init__(self, vectors: VectorLeg | None) -> None:
        self.vectors = vectors

    def start(self, query: str, filters: Filters, k: int) -> Finish:
        vectors = self.vectors
        if vectors is None:
            return _done(LegResult("off: no embedder configured", {}))
        try:
            reason = vectors.status()
        except _VECTOR_FAILURES as exc:
            return _done(LegResult(f"off: {exc}", {}))
        if reason is not None:
            return _done(LegResult(f"off: {reason}", {}))
        embedding = _embedding_thread().submit(vectors.embed_query, query)

        def finish() -> LegResult:
            try:
                found = vectors.search(embedding.result(), filters, k)
            except _VECTOR_FAILURES as exc:
                return LegResult(f"off: the query could not be embedded ({exc})", {})
            return LegResult(f"ok: {len(found)} nearest", found)

        return finish


def _embedding_thread() -> ThreadPoolExecutor:
    """The one thread that embeds queries, started on first use (again in a forked child,
    which has the executor but not its thread). onnxruntime lets go of the GIL, and so does
    the store, so the two overlap."""
    global _EMBEDDING_THREAD
    with _EMBEDDING_THREAD_LOCK:
        if _EMBEDDING_THREAD is None or _EMBEDDING_THREAD[0] != os.getpid():
            executor = ThreadPoolExecutor(1, thread_name_prefix="stratamem-embed")
            _EMBEDDING_THREAD = (os.getpid(), executor)
        return _EMBEDDING_THREAD[1]


LegFactory = Callable[[Store, VectorLeg | None, SearchConfig], Leg]

#: Every leg by name, in the order their scores are fused. Started in reverse, so the query's
#: embedding is under way while the store answers the others.
LEGS: Mapping[str, LegFactory] = {
    "keyword": lambda store, vectors, cfg: KeywordLeg(store),
    "graph": lambda store, vectors, cfg: GraphLeg(
        store, hub_fraction=cfg.hub_fraction, graph_mode=cfg.graph_mode
    ),
    "vector": lambda store, vectors, cfg: VectorSearchLeg(vectors),
}

__all__ = ["LEGS", "GraphLeg", "KeywordLeg", "Leg", "LegResult", "VectorSearchLeg"]
