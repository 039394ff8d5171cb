"""Read queries of the SQLite store: the BM25 keyword leg and the entity lookups.

Every query joins ``sources`` and applies :func:`filter_sql` (locks, sources, kinds, times)
inside the SQL, so filtering always happens before the limit.
"""

from __future__ import annotations

import heapq
import json
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from stratamem.store.base import from_ms
from stratamem.types import EntityMatch, Filters, NodeKind, RetrievalHit, TreeKind

if TYPE_CHECKING:
    from stratamem.store.sqlite.store import SQLiteStore


def fts_search(
    store: SQLiteStore,
    expression: str,
    filters: Filters,
    limit: int,
    *,
    snippets: bool = True,
    count: bool = True,
) -> tuple[list[RetrievalHit], int]:
    """Leaves matching an FTS5 expression, best BM25 first (ties by id), and the match count
    (``count=False`` skips counting past the limit and reports what was returned).

    The ranking runs on the FTS index alone (its ``rank`` is bm25 with the column weights set
    by the schema), restricted by rowid to the admitted chunks when a filter or a lock is in
    force; only the top ``limit`` rows are then read from ``chunks``.
    """
    admitted = store.allowed_rowids(filters)
    if admitted is None:
        ranked = store.conn.execute(
            "SELECT rowid, rank FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rank LIMIT ?",
            (expression, limit),
        ).fetchall()
        matched = len(ranked)
    else:
        # A rowid constraint would make FTS5 rerun the whole query once per admitted rowid;
        # reading every match's (rowid, rank) and keeping the admitted ones is far cheaper.
        allowed = set(admitted)
        everything = store.conn.execute(
            "SELECT rowid, rank FROM chunks_fts WHERE chunks_fts MATCH ?", (expression,)
        ).fetchall()
        kept = [row for row in everything if row[0] in allowed]
        matched = len(kept)
        ranked = heapq.nsmallest(limit, kept, key=lambda row: (row[1], row[0]))
    if not ranked:
        return [], 0
    hits = keyword_hits(
        store, expression, [(rowid, -float(rank)) for rowid, rank in ranked], snippets=snippets
    )
    total = len(hits)
    if count and admitted is not None:
        total = matched
    elif count and len(ranked) >= limit:
        total = int(
            store.conn.execute(
                "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (expression,)
            ).fetchone()[0]
        )
    return hits, total


def keyword_hits(
    store: SQLiteStore,
    expression: str,
    ranked: Sequence[tuple[int, float]],
    *,
    snippets: bool = True,
) -> list[RetrievalHit]:
    """Hits for chunks already ranked, as (rowid, BM25 score): best first, ties by id, each
    with a snippet of where ``expression`` matches it."""
    if not ranked:
        return []
    rowids = [r[0] for r in ranked]
    marks = ",".join("?" * len(rowids))
    rows = {
        row["rowid"]: row
        for row in store.conn.execute(
            f"""SELECT c.rowid, c.id, c.content, c.title, c.author, c.ts_start, c.ts_end,
                       c.tags, c.source_ref, c.source_id, s.scope
                FROM chunks c JOIN sources s ON s.id = c.source_id
                WHERE c.rowid IN ({marks})""",
            rowids,
        )
    }
    snips: dict[int, str] = {}
    if snippets:
        snips = dict(
            store.conn.execute(
                f"""SELECT rowid, snippet(chunks_fts, 0, '[', ']', '…', 24) FROM chunks_fts
                    WHERE chunks_fts MATCH ? AND rowid IN ({marks})""",
                (expression, *rowids),
            ).fetchall()
        )
    order = sorted(
        ((score, rows[rowid]["id"], rowid) for rowid, score in ranked if rowid in rows),
        key=lambda item: (-item[0], item[1]),
    )
    entities = store.mentions_of([rows[rowid]["id"] for _, _, rowid in order])
    return [
        _hit(rows[rowid], entities[node], score, snips.get(rowid, ""))
        for score, node, rowid in order
    ]


def search_entities(
    store: SQLiteStore, needle: str, kinds: Sequence[str], limit: int
) -> list[EntityMatch]:
    """Entities whose id or surface contains ``needle`` (lowercased), grouped by canonical id,
    most mentioned first, then most recently mentioned.

    A substring test (``instr``) rather than ``LIKE``: no wildcard to escape, and no limit on
    the pattern's length or complexity.
    """
    kind_sql = f"AND e.kind IN ({','.join('?' * len(kinds))})" if kinds else ""
    rows = store.conn.execute(
        f"""SELECT e.entity_id, min(e.kind) AS kind, min(e.surface) AS surface,
                   count(*) AS mentions, max(e.ts) AS last_seen
            FROM entity_index e JOIN sources s ON s.id = e.source_id
            WHERE s.locked = 0
              AND (instr(lower(e.entity_id), ?) > 0 OR instr(lower(e.surface), ?) > 0)
              {kind_sql}
            GROUP BY e.entity_id
            ORDER BY mentions DESC, last_seen DESC, e.entity_id
            LIMIT ?""",
        (needle, needle, *kinds, limit),
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


def _hit(row: sqlite3.Row, entities: list[str], score: float, snippet: str) -> RetrievalHit:
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
        snippet=snippet,
        explain=explain,
    )
