"""The keyword leg: BM25 over the full-text index, filtered inside the query before the limit."""

from __future__ import annotations

from stratamem.retrieval.fts_query import match_expression
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
    hits, total = store.fts_search(expression, filters or Filters(), limit, snippets=snippets)
    return QueryResponse(hits=tuple(hits), total=total)
