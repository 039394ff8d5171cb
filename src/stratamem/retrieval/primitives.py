"""The seven retrieval primitives: deterministic, read-only views over trees, chunks and the
entity index, each returning the unified :class:`RetrievalHit` shape.

================  =====================  ==============================================
primitive         returns                axis
================  =====================  ==============================================
query_source      QueryResponse          summaries of one source, a kind, or all
query_global      QueryResponse          summaries of every source over a time window
query_topic       QueryResponse          summaries and leaves naming an entity
cover_window      QueryResponse          fewest nodes covering every leaf in a window
search_entities   list[EntityMatch]      fuzzy lookup of canonical entity ids
drill_down        list[RetrievalHit]     a summary's descendants, breadth first
fetch_leaves      list[RetrievalHit]     chunks by id, for citing
================  =====================  ==============================================

Access filters and time windows are applied in the store before any cap (filters naming users,
agents or sessions are first resolved to their sources by
:func:`~stratamem.retrieval.scope.resolve`); ``total`` counts matches before the caller's
``limit``. Deciding which primitive to call, and how to combine them, is the caller's job.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Concatenate, ParamSpec, TypeVar

from stratamem.embed.base import Embedder
from stratamem.entities.search import search_entities
from stratamem.retrieval.item_nodes import item_hits
from stratamem.retrieval.scope import kind_or_platform, narrow_kinds, resolve, source_filters
from stratamem.retrieval.tree_hits import leaf_hits, rerank, summary_hit
from stratamem.store.base import Store
from stratamem.timeparse import as_utc, optional_utc
from stratamem.types import Filters, QueryResponse, RetrievalHit

DEFAULT_LIMIT = 10
RERANK_POOL = 2_000
TOPIC_LOOKUP_CAP = 200
COVER_DEFAULT_LIMIT = 200
MAX_WINDOW_CHUNKS = 5_000
MAX_BATCH = 20
MAX_LIMIT = 10_000
P = ParamSpec("P")
R = TypeVar("R")

__all__ = [
    "COVER_DEFAULT_LIMIT",
    "DEFAULT_LIMIT",
    "MAX_BATCH",
    "MAX_LIMIT",
    "MAX_WINDOW_CHUNKS",
    "TOPIC_LOOKUP_CAP",
    "cover_window",
    "drill_down",
    "fetch_leaves",
    "nodes",
    "query_global",
    "query_source",
    "query_topic",
    "search_entities",
]


def _one_version(
    primitive: Callable[Concatenate[Store, P], R],
) -> Callable[Concatenate[Store, P], R]:
    """Run the primitive in one read snapshot: the summaries, the leaves they cover and the
    mentions it reads are one committed version of the store, whatever another process
    commits meanwhile."""

    @functools.wraps(primitive)
    def read(store: Store, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with store.read_snapshot():
            return primitive(store, *args, **kwargs)

    return read


@_one_version
def query_source(
    store: Store,
    *,
    source: str | None = None,
    source_kind: str | None = None,
    time_window_days: float | None = None,
    query: str | None = None,
    embedder: Embedder | None = None,
    evidence: Mapping[str, float] | None = None,
    limit: int = DEFAULT_LIMIT,
    now: datetime | None = None,
    filters: Filters | None = None,
) -> QueryResponse:
    """Summaries of one source (id or scope), else of every source of a kind (``chat``,
    ``email``, ``document``, ``record``, or a platform such as ``slack``), else of all sources.

    ``time_window_days`` keeps summaries overlapping the last that many days. With a ``query``
    the newest :data:`RERANK_POOL` matches are ranked by cosine similarity to it; without, the
    newest come first. ``limit`` 0 means 10 (and at most :data:`MAX_LIMIT` are
    returned). An unknown source gives an empty response. The narrowing is
    :func:`~stratamem.retrieval.scope.source_filters`.
    """
    narrowed = source_filters(
        store,
        filters,
        source=source,
        source_kind=source_kind,
        days=time_window_days,
        now=now,
    )
    if narrowed is None:
        return QueryResponse.empty()
    _, platforms = kind_or_platform(source_kind)
    return _summaries(store, narrowed, platforms, query, embedder, evidence, limit)


@_one_version
def query_global(
    store: Store,
    *,
    since: datetime,
    until: datetime,
    source_kind: str | None = None,
    query: str | None = None,
    embedder: Embedder | None = None,
    evidence: Mapping[str, float] | None = None,
    limit: int = DEFAULT_LIMIT,
    filters: Filters | None = None,
) -> QueryResponse:
    """Summaries of every source whose time range overlaps [since, until], newest first or by
    similarity to ``query``. ``until`` before ``since`` is a ``ValueError``."""
    since, until = _check_window(since, until)
    base = resolve(store, filters or Filters())
    if base is None:
        return QueryResponse.empty()
    kinds, platforms = kind_or_platform(source_kind)
    allowed_kinds = narrow_kinds(base.kinds, kinds)
    if allowed_kinds is None:
        return QueryResponse.empty()
    narrowed = Filters(sources=base.sources, kinds=allowed_kinds, since=since, until=until)
    return _summaries(store, narrowed, platforms, query, embedder, evidence, limit)


@_one_version
def query_topic(
    store: Store,
    entity_id: str,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    query: str | None = None,
    embedder: Embedder | None = None,
    evidence: Mapping[str, float] | None = None,
    limit: int = DEFAULT_LIMIT,
    filters: Filters | None = None,
) -> QueryResponse:
    """Summaries and leaves indexed under a canonical entity id (``topic:phoenix``,
    ``email:alice@example.com``) or any other id of its entity, the window applied before
    the lookup cap of :data:`TOPIC_LOOKUP_CAP` newest nodes; then ranked by ``query`` when one
    is given. A blank id gives an empty response."""
    entity = entity_id.strip()
    if not entity:
        return QueryResponse.empty()
    since, until = optional_utc(since, name="since"), optional_utc(until, name="until")
    if since is not None and until is not None:
        _check_window(since, until)
    base = resolve(store, filters or Filters())
    if base is None:
        return QueryResponse.empty()
    narrowed = Filters(sources=base.sources, kinds=base.kinds, since=since, until=until)
    # Every id of the entity (its aliases, what merges joined: see store.resolution).
    members = store.entity_resolution().members(entity)
    found, total = store.trees.topic_nodes(members, narrowed, TOPIC_LOOKUP_CAP)
    hits = nodes(store, found, filters=narrowed)
    hits = rerank(store, hits, query, embedder, evidence=evidence)
    return QueryResponse(hits=tuple(hits[: _limit(limit)]), total=total)


@_one_version
def cover_window(
    store: Store,
    *,
    since: datetime,
    until: datetime,
    limit: int = COVER_DEFAULT_LIMIT,
    filters: Filters | None = None,
) -> QueryResponse:
    """The fewest nodes that cover every leaf inside [since, until]: each summary whose whole
    time range lies in the window and whose parent's does not, plus the in-window leaves no
    such summary covers (at most :data:`MAX_WINDOW_CHUNKS` of them are scanned). Grouped by
    source, then by start time. ``limit`` 0 means 200."""
    since, until = _check_window(since, until)
    base = resolve(store, filters or Filters())
    if base is None:
        return QueryResponse.empty()
    narrowed = Filters(sources=base.sources, kinds=base.kinds)
    frontier, leaves, uncovered = store.trees.window_cover(
        since, until, narrowed, MAX_WINDOW_CHUNKS
    )
    hits = [summary_hit(s) for s in frontier] + leaf_hits(store, leaves)
    hits.sort(key=lambda h: (h.tree_scope, _start(h), h.level == 0, h.node_id))
    capped = hits[: _limit(limit, COVER_DEFAULT_LIMIT)]
    return QueryResponse(hits=tuple(capped), total=len(frontier) + uncovered)


@_one_version
def drill_down(
    store: Store,
    node_id: str,
    *,
    max_depth: int = 1,
    query: str | None = None,
    embedder: Embedder | None = None,
    evidence: Mapping[str, float] | None = None,
    limit: int | None = None,
    filters: Filters | None = None,
) -> list[RetrievalHit]:
    """A summary's descendants, breadth first, ``max_depth`` levels down (0 gives nothing).

    An unknown id, a leaf id or a summary the caller may not see gives nothing, not an error.
    Each level is one batched read; deleted and superseded summaries are skipped, duplicates
    dropped. With a ``query`` the visited nodes are ranked by similarity to it.
    """
    if max_depth <= 0:
        return []
    base = resolve(store, filters or Filters())
    if base is None:
        return []
    access = Filters(sources=base.sources, kinds=base.kinds)
    root = store.trees.summaries_by_id([node_id], access).get(node_id)
    if root is None:
        return []
    out: list[RetrievalHit] = []
    seen: set[str] = {node_id}
    frontier = [root]
    for _ in range(max_depth):
        leaf_ids: list[str] = []
        summary_ids: list[str] = []
        for summary in frontier:
            target = leaf_ids if summary.node.level == 1 else summary_ids
            for child in summary.node.child_ids:
                if child not in seen:
                    seen.add(child)
                    target.append(child)
        frontier = []
        if summary_ids:
            found = store.trees.summaries_by_id(summary_ids, access)
            frontier = [found[i] for i in summary_ids if i in found]
            out.extend(summary_hit(s) for s in frontier)
        if leaf_ids:
            leaves = store.trees.leaves_by_id(leaf_ids, access)
            out.extend(leaf_hits(store, [leaves[i] for i in leaf_ids if i in leaves]))
        if not frontier:
            break
    out = rerank(store, out, query, embedder, evidence=evidence)
    return out if limit is None else out[: max(0, limit)]


@_one_version
def fetch_leaves(
    store: Store, chunk_ids: Sequence[str], *, filters: Filters | None = None
) -> list[RetrievalHit]:
    """Chunks by id in the order asked, for citing. At most :data:`MAX_BATCH` ids are read
    (the rest are ignored); unknown or hidden ids are skipped, so fewer hits than ids means
    some were missing."""
    ids = list(dict.fromkeys(chunk_ids))[:MAX_BATCH] if chunk_ids else []
    base = resolve(store, filters or Filters())
    if base is None:
        return []
    leaves = store.trees.leaves_by_id(ids, Filters(sources=base.sources, kinds=base.kinds))
    return leaf_hits(store, [leaves[i] for i in ids if i in leaves])


@_one_version
def nodes(
    store: Store,
    node_ids: Sequence[str],
    *,
    filters: Filters | None = None,
    items: bool = True,
) -> list[RetrievalHit]:
    """Chunks and summaries by id, in the order asked, with no cap; unknown ids left out.
    With ``items`` (and no ``filters``), an id that is no chunk or summary may name an item:
    its id reads as the item as it is now, a chunk id it had before an edit or a removal as
    that version (see :mod:`stratamem.retrieval.item_nodes`)."""
    base = resolve(store, filters or Filters())
    if base is None:
        return []
    access = Filters(sources=base.sources, kinds=base.kinds)
    ids = list(dict.fromkeys(node_ids))
    summaries = store.trees.summaries_by_id(ids, access)
    found = store.trees.leaves_by_id([i for i in ids if i not in summaries], access)
    leaves = {h.node_id: h for h in leaf_hits(store, list(found.values()))}
    rest = [i for i in ids if i not in summaries and i not in leaves]
    named = item_hits(store, rest) if rest and items and filters is None else {}
    out: list[RetrievalHit] = []
    for i in ids:
        if i in summaries:
            out.append(summary_hit(summaries[i]))
        elif i in leaves:
            out.append(leaves[i])
        else:
            out.extend(named.get(i, ()))
    return out


# -- helpers -------------------------------------------------------------------------------


def _summaries(
    store: Store,
    filters: Filters,
    platforms: Sequence[str],
    query: str | None,
    embedder: Embedder | None,
    evidence: Mapping[str, float] | None,
    limit: int,
) -> QueryResponse:
    want = _limit(limit)
    ranked = bool(query and query.strip() and (embedder is not None or evidence))
    found, total = store.trees.summaries_matching(
        filters, platforms=platforms, limit=RERANK_POOL if ranked else want
    )
    hits = rerank(store, [summary_hit(s) for s in found], query, embedder, evidence=evidence)
    return QueryResponse(hits=tuple(hits[:want]), total=total)


def _check_window(since: datetime, until: datetime) -> tuple[datetime, datetime]:
    """The window in UTC (naive times taken as UTC); ``until`` before ``since`` is an error."""
    since, until = as_utc(since, name="since"), as_utc(until, name="until")
    if until < since:
        raise ValueError(f"until ({until.isoformat()}) is before since ({since.isoformat()})")
    return since, until


def _limit(limit: int, default: int = DEFAULT_LIMIT) -> int:
    """``limit`` 0 or less means ``default``; more than :data:`MAX_LIMIT` means that many."""
    return default if limit <= 0 else min(limit, MAX_LIMIT)


def _start(hit: RetrievalHit) -> float:
    return float("inf") if hit.time_start is None else hit.time_start.timestamp()
