"""The keyword leg: BM25 over the FTS5 index, filtered inside the query before the limit."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from stratamem.retrieval.fts_query import match_expression
from stratamem.store.sqlite.store import SQLiteStore, filter_sql, from_ms
from stratamem.types import Filters, NodeKind, QueryResponse, RetrievalHit, TreeKind

# BM25 column weights: body text, then the title (subject, note title, heading path).
_WEIGHTS = (1.0, 0.6)
DEFAULT_LIMIT = 10
MAX_LIMIT = 1000


def keyword_search(
    store: SQLiteStore,
    query: str,
    *,
    filters: Filters | None = None,
    limit: int = DEFAULT_LIMIT,
    snippets: bool = True,
) -> QueryResponse:
    """Leaves ranked by BM25 relevance (higher is better), with the pre-limit match count."""
    if limit <= 0:
        limit = DEFAULT_LIMIT
    limit = min(limit, MAX_LIMIT)
    expression = match_expression(query)
    if expression is None:
        return QueryResponse.empty()
    where, params = filter_sql(filters or Filters())
    base = f"""FROM chunks_fts f
               JOIN chunks c ON c.rowid = f.rowid
               JOIN sources s ON s.id = c.source_id
               WHERE chunks_fts MATCH ? AND {where}"""
    snippet = "snippet(chunks_fts, 0, '[', ']', '…', 24)" if snippets else "''"
    rows = store.conn.execute(
        f"""SELECT c.id, c.content, c.title, c.author, c.ts_start, c.ts_end, c.tags,
                   c.source_ref, c.source_id, s.scope,
                   bm25(chunks_fts, {_WEIGHTS[0]}, {_WEIGHTS[1]}) AS rank, {snippet} AS snip
            {base} ORDER BY rank, c.id LIMIT ?""",
        (expression, *params, limit),
    ).fetchall()
    if len(rows) < limit:
        total = len(rows)
    else:
        total = store.conn.execute(f"SELECT count(*) {base}", (expression, *params)).fetchone()[0]
    entities = store.mentions_of([r["id"] for r in rows])
    hits = tuple(_hit(row, entities[row["id"]]) for row in rows)
    return QueryResponse(hits=hits, total=int(total))


def _hit(row: sqlite3.Row, entities: list[str]) -> RetrievalHit:
    score = -float(row["rank"])
    explain: dict[str, Any] = {"keyword": round(score, 4)}
    return RetrievalHit(
        node_id=row["id"],
        node_kind=NodeKind.LEAF,
        tree_id="",
        tree_kind=TreeKind.SOURCE,
        tree_scope=row["scope"],
        level=0,
        content=row["content"],
        entities=tuple(entities),
        topics=tuple(json.loads(row["tags"])),
        time_range_start=from_ms(row["ts_start"]),
        time_range_end=from_ms(row["ts_end"]),
        score=score,
        source_ref=row["source_ref"],
        source_id=row["source_id"],
        author=row["author"],
        title=row["title"],
        snippet=row["snip"],
        explain=explain,
    )
