"""Plain keyword search: FTS5's BM25 ranking, with snippets and the count of all matches,
filtered before the limit."""

from __future__ import annotations

from stratamem.retrieval.bm25_leg import sparse_index
from stratamem.retrieval.fts_query import match_expression, query_terms
from stratamem.store.base import Store
from stratamem.types import Filters, QueryResponse

DEFAULT_LIMIT = 10
MAX_LIMIT = 1000


def keyword_search(
    store: Store,
    query: str,
    *,
    filters: Filters | None = None,
    limit: int = DEFAULT_LIMIT,
    snippets: bool = True,
) -> QueryResponse:
    """Leaves ranked by BM25 relevance (higher is better), with the pre-limit match count.

    ``limit`` 0 or less means the default (10); it is clamped to 1000. A query with no
    searchable term (punctuation only) matches nothing.
    """
    if limit <= 0:
        limit = DEFAULT_LIMIT
    limit = min(limit, MAX_LIMIT)
    expression = match_expression(query)
    if expression is None:
        return QueryResponse.empty()
    filters = filters or Filters()
    # The sparse index ranks as FTS5 does (its idf over the whole store), without FTS5
    # scoring every match of every OR-ed word; FTS5 answers where it cannot.
    found = sparse_index(store).rank(query_terms(query), filters, limit, scoped_idf=False)
    if found is not None:
        ranked, total = found
        hits = store.keyword_hits(expression, [(r, s) for r, _, s in ranked], snippets=snippets)
        return QueryResponse(hits=tuple(hits), total=total)
    hits, total = store.fts_search(expression, filters, limit, snippets=snippets)
    return QueryResponse(hits=tuple(hits), total=total)
