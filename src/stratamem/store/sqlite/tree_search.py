"""The SQL behind the tree primitives: summaries and leaves by source, time, entity and id.

Every query joins the owning source and applies the caller's :class:`Filters` (locked
sources never match) and the time window in SQL, before any cap. Summaries are read
latest-wins: a deleted summary, or one of a document version that a newer live version
superseded, is never returned.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from stratamem.store.sqlite.filters import filter_sql
from stratamem.types import Filters

if TYPE_CHECKING:
    from stratamem.store.sqlite.store import SQLiteStore

_BATCH = 500

LIVE = """sm.deleted = 0 AND (sm.doc_id IS NULL OR sm.version = (
    SELECT max(v.version) FROM summaries v
    WHERE v.tree_id = sm.tree_id AND v.doc_id = sm.doc_id AND v.deleted = 0))"""

_SUMMARY_FROM = """FROM summaries sm JOIN trees t ON t.id = sm.tree_id
    JOIN sources s ON s.id = sm.source_id"""

_LEAF_COLUMNS = """c.*, s.scope AS scope,
    CASE WHEN c.parent_summary_id IS NULL THEN '' ELSE coalesce(t.id, '') END AS tree_id"""

_LEAF_FROM = """FROM chunks c JOIN sources s ON s.id = c.source_id
    LEFT JOIN trees t ON t.source_id = c.source_id AND t.kind = 'source'"""


def summaries_where(
    store: SQLiteStore,
    filters: Filters,
    *,
    platforms: Sequence[str] = (),
    order: str = "sm.ts_end DESC, sm.id",
    limit: int,
) -> tuple[list[sqlite3.Row], int]:
    """Live summaries whose time range overlaps the filters' window; (capped rows, total)."""
    where, params = filter_sql(filters, chunk="sm")
    if platforms:
        where += f" AND s.platform IN ({','.join('?' * len(platforms))})"
        params.extend(platforms)
    sql_where = f"{_SUMMARY_FROM} WHERE {LIVE} AND {where}"
    (total,) = store.conn.execute(f"SELECT count(*) {sql_where}", params).fetchone()
    rows = store.conn.execute(
        f"""SELECT sm.*, t.scope AS scope, t.kind AS tree_kind {sql_where}
            ORDER BY sm.ts_end IS NULL, {order} LIMIT ?""",
        (*params, limit),
    ).fetchall()
    return rows, int(total)


def summaries_by_id(
    store: SQLiteStore, ids: Sequence[str], filters: Filters
) -> dict[str, sqlite3.Row]:
    where, params = filter_sql(filters, chunk="sm")
    out: dict[str, sqlite3.Row] = {}
    for start in range(0, len(ids), _BATCH):
        part = list(ids[start : start + _BATCH])
        marks = ",".join("?" * len(part))
        for row in store.conn.execute(
            f"""SELECT sm.*, t.scope AS scope, t.kind AS tree_kind {_SUMMARY_FROM}
                WHERE sm.id IN ({marks}) AND {LIVE} AND {where}""",
            (*part, *params),
        ):
            out[row["id"]] = row
    return out


def leaves_by_id(
    store: SQLiteStore, ids: Sequence[str], filters: Filters
) -> dict[str, sqlite3.Row]:
    where, params = filter_sql(filters)
    out: dict[str, sqlite3.Row] = {}
    for start in range(0, len(ids), _BATCH):
        part = list(ids[start : start + _BATCH])
        marks = ",".join("?" * len(part))
        for row in store.conn.execute(
            f"SELECT {_LEAF_COLUMNS} {_LEAF_FROM} WHERE c.id IN ({marks}) AND {where}",
            (*part, *params),
        ):
            out[row["id"]] = row
    return out


def topic_nodes(
    store: SQLiteStore, entity_id: str, filters: Filters, cap: int
) -> tuple[list[tuple[str, str, int | None]], int]:
    """Leaves and summaries indexed under ``entity_id`` in the window, newest first:
    (node kind, node id, end time) capped at ``cap``, and the count before the cap."""
    leaf_where, leaf_params = filter_sql(filters)
    sum_where, sum_params = filter_sql(filters, chunk="sm")
    body = f"""
        SELECT 'leaf' AS kind, c.id AS id, coalesce(c.ts_end, c.ts_start) AS ts
        FROM entity_index e JOIN chunks c ON c.id = e.node_id JOIN sources s ON s.id = c.source_id
        WHERE e.entity_id = ? AND {leaf_where}
        UNION ALL
        SELECT 'summary', sm.id, sm.ts_end
        FROM summary_entities se JOIN summaries sm ON sm.id = se.summary_id
        JOIN sources s ON s.id = sm.source_id
        WHERE se.entity_id = ? AND {LIVE} AND {sum_where}"""
    params = (entity_id, *leaf_params, entity_id, *sum_params)
    (total,) = store.conn.execute(f"SELECT count(*) FROM ({body})", params).fetchone()
    rows = store.conn.execute(
        f"SELECT kind, id, ts FROM ({body}) ORDER BY ts IS NULL, ts DESC, id LIMIT ?",
        (*params, cap),
    ).fetchall()
    return [(str(k), str(i), None if t is None else int(t)) for k, i, t in rows], int(total)


def window_cover(
    store: SQLiteStore, since_ms: int, until_ms: int, filters: Filters, max_leaves: int
) -> tuple[list[sqlite3.Row], list[sqlite3.Row], int]:
    """The maximal summaries inside [since, until] (their parent is not inside it) and the
    in-window leaves no such summary covers (at most ``max_leaves``, oldest first), with the
    count of such leaves before that cap."""
    inside = "p.ts_start >= ? AND p.ts_end <= ? AND p.deleted = 0"
    where, params = filter_sql(filters, chunk="sm")
    frontier = store.conn.execute(
        f"""SELECT sm.*, t.scope AS scope, t.kind AS tree_kind {_SUMMARY_FROM}
            WHERE {LIVE} AND sm.ts_start >= ? AND sm.ts_end <= ? AND {where}
              AND NOT EXISTS (SELECT 1 FROM summaries p WHERE p.id = sm.parent_id AND {inside})
            ORDER BY s.scope, sm.ts_start, sm.id""",
        (since_ms, until_ms, *params, since_ms, until_ms),
    ).fetchall()
    leaf_where, leaf_params = filter_sql(filters)
    uncovered = f"""{_LEAF_FROM}
        WHERE c.ts_start >= ? AND coalesce(c.ts_end, c.ts_start) <= ? AND {leaf_where}
          AND NOT EXISTS (SELECT 1 FROM summaries p
                          WHERE p.id = c.parent_summary_id AND {inside})"""
    args: tuple[Any, ...] = (since_ms, until_ms, *leaf_params, since_ms, until_ms)
    (count,) = store.conn.execute(f"SELECT count(*) {uncovered}", args).fetchone()
    leaves = store.conn.execute(
        f"""SELECT {_LEAF_COLUMNS} {uncovered}
            ORDER BY s.scope, c.ts_start, c.seq LIMIT ?""",
        (*args, max_leaves),
    ).fetchall()
    return frontier, leaves, int(count)
