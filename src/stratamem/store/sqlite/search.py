"""Read queries of the SQLite store: the BM25 keyword leg and the entity lookups.

Every query joins ``sources`` and applies :func:`filter_sql` (locks, sources, kinds, times)
inside the SQL, so filtering always happens before the limit.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from stratamem.store.base import from_ms
from stratamem.store.sqlite.store import filter_sql
from stratamem.types import EntityMatch, Filters, NodeKind, RetrievalHit, TreeKind

if TYPE_CHECKING:
    from stratamem.store.sqlite.store import SQLiteStore

# BM25 column weights: body text, then the title (subject, note title, heading path).
BM25_WEIGHTS = (1.0, 0.6)


def fts_search(
    store: SQLiteStore, expression: str, filters: Filters, limit: int, *, snippets: bool = True
) -> tuple[list[RetrievalHit], int]:
    """Leaves matching an FTS5 expression, best BM25 first (ties by id), and the match count."""
    where, params = filter_sql(filters)
    base = f"""FROM chunks_fts f
               JOIN chunks c ON c.rowid = f.rowid
               JOIN sources s ON s.id = c.source_id
               WHERE chunks_fts MATCH ? AND {where}"""
    snippet = "snippet(chunks_fts, 0, '[', ']', '…', 24)" if snippets else "''"
    rows = store.conn.execute(
        f"""SELECT c.id, c.content, c.title, c.author, c.ts_start, c.ts_end, c.tags,
                   c.source_ref, c.source_id, s.scope,
                   bm25(chunks_fts, {BM25_WEIGHTS[0]}, {BM25_WEIGHTS[1]}) AS rank,
                   {snippet} AS snip
            {base} ORDER BY rank, c.id LIMIT ?""",
        (expression, *params, limit),
    ).fetchall()
    if len(rows) < limit:
        total = len(rows)
    else:
        total = store.conn.execute(f"SELECT count(*) {base}", (expression, *params)).fetchone()[0]
    entities = store.mentions_of([r["id"] for r in rows])
    return [_hit(row, entities[row["id"]]) for row in rows], int(total)


def search_entities(
    store: SQLiteStore, needle: str, kinds: Sequence[str], limit: int
) -> list[EntityMatch]:
    """Entities whose id or surface contains ``needle`` (lowercased; LIKE wildcards escaped),
    grouped by canonical id, most mentioned first, then most recently mentioned."""
    pattern = "%" + needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    kind_sql = f"AND e.kind IN ({','.join('?' * len(kinds))})" if kinds else ""
    rows = store.conn.execute(
        f"""SELECT e.entity_id, min(e.kind) AS kind, min(e.surface) AS surface,
                   count(*) AS mentions, max(e.ts) AS last_seen
            FROM entity_index e JOIN sources s ON s.id = e.source_id
            WHERE s.locked = 0
              AND (lower(e.entity_id) LIKE ? ESCAPE '\\' OR lower(e.surface) LIKE ? ESCAPE '\\')
              {kind_sql}
            GROUP BY e.entity_id
            ORDER BY mentions DESC, last_seen DESC, e.entity_id
            LIMIT ?""",
        (pattern, pattern, *kinds, limit),
    ).fetchall()
    return [
        EntityMatch(
            canonical_id=row["entity_id"],
            kind=row["kind"],
            surface=row["surface"],
            mention_count=row["mentions"],
            last_seen=from_ms(row["last_seen"]),
        )
        for row in rows
    ]


def neighbours(store: SQLiteStore, entity_id: str, limit: int) -> list[tuple[str, float]]:
    """Entities co-mentioned with ``entity_id``, strongest first, over unlocked sources."""
    rows = store.conn.execute(
        """SELECT other, sum(weight) AS w FROM (
               SELECT b AS other, weight, source_id FROM entity_edges WHERE a = ?
               UNION ALL
               SELECT a AS other, weight, source_id FROM entity_edges WHERE b = ?
           ) x JOIN sources s ON s.id = x.source_id
           WHERE s.locked = 0
           GROUP BY other ORDER BY w DESC, other LIMIT ?""",
        (entity_id, entity_id, limit),
    ).fetchall()
    return [(row["other"], float(row["w"])) for row in rows]


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
