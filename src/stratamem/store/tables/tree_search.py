"""The SQL behind the tree primitives: summaries and leaves by source, time, entity and id
(the :class:`~stratamem.store.trees.TreeSearch` half of ``store.trees``).

Every query joins the owning source and applies the caller's :class:`Filters` (locked
sources never match) and the time window in SQL, before any cap. For a principal, summaries
are read by tree, of the trees it may see (:func:`trees_sql`): what it may not see adds no
work to the read. Summaries are read latest-wins: a deleted summary, or one of a document
version that a newer live version superseded, is never returned.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from stratamem.store.base import from_ms, to_ms
from stratamem.store.dialect import Connection, Dialect, Row
from stratamem.store.tables.chunks import CHUNK_COLUMNS, chunk_from_row
from stratamem.store.tables.filters import filter_sql, of_visible_sql, trees_sql
from stratamem.store.trees import TreeLeaf, TreeSummary
from stratamem.types import Filters, SummaryNode, TreeKind

LIVE = """sm.deleted = 0 AND (sm.doc_id IS NULL OR sm.version = (
    SELECT max(v.version) FROM summaries v
    WHERE v.tree_id = sm.tree_id AND v.doc_id = sm.doc_id AND v.deleted = 0))"""

_SUMMARY_COLUMNS = "sm.*, t.scope AS scope, t.kind AS tree_kind"

_SUMMARY_FROM = """FROM summaries sm JOIN trees t ON t.id = sm.tree_id
    JOIN sources s ON s.id = sm.source_id"""

_LEAF_COLUMNS = f"""{CHUNK_COLUMNS}, s.scope AS scope,
    CASE WHEN c.parent_summary IS NULL THEN '' ELSE coalesce(t.id, '') END AS tree_id"""

_LEAF_FROM = """FROM chunks c JOIN sources s ON s.id = c.source_id
    LEFT JOIN trees t ON t.source_id = c.source_id AND t.kind = 'source'"""


class TreeHost(Protocol):
    """What the tree tables use of the store they belong to."""

    @property
    def conn(self) -> Connection: ...

    @property
    def dialect(self) -> Dialect: ...

    def visible_ids(self) -> list[str] | None: ...


class TreeSearchTables:
    """The reads of the tree primitives, over the connection of ``store.trees``."""

    if TYPE_CHECKING:
        store: TreeHost

        @property
        def conn(self) -> Connection: ...

        @property
        def dialect(self) -> Dialect: ...

    def summaries_matching(
        self, filters: Filters, *, platforms: Sequence[str] = (), limit: int
    ) -> tuple[list[TreeSummary], int]:
        """Live summaries whose time range overlaps the filters' window; (capped, total)."""
        d = self.dialect
        visible = self.store.visible_ids()
        trees, params = trees_sql(self.dialect, visible)
        where, more = filter_sql(self.dialect, filters, visible, chunk="sm")
        params += more
        if platforms:
            where += f" AND s.platform IN ({d.marks(len(platforms))})"
            params.extend(platforms)
        sql_where = f"{_SUMMARY_FROM} WHERE {trees} AND {LIVE} AND {where}"
        (total,) = self.conn.execute(f"SELECT count(*) {sql_where}", params).fetchone()
        rows = self.conn.execute(
            f"""SELECT {_SUMMARY_COLUMNS} {sql_where}
                ORDER BY sm.ts_end IS NULL, sm.ts_end DESC, sm.id LIMIT {d.p}""",
            (*params, limit),
        ).fetchall()
        return [_tree_summary(row) for row in rows], int(total)

    def summaries_by_id(self, ids: Sequence[str], filters: Filters) -> dict[str, TreeSummary]:
        d = self.dialect
        where, params = filter_sql(self.dialect, filters, self.store.visible_ids(), chunk="sm")
        out: dict[str, TreeSummary] = {}
        for part, marks in d.batches(ids):
            for row in self.conn.execute(
                f"""SELECT {_SUMMARY_COLUMNS} {_SUMMARY_FROM}
                    WHERE sm.id IN ({marks}) AND {LIVE} AND {where}""",
                (*part, *params),
            ):
                out[row["id"]] = _tree_summary(row)
        return out

    def leaves_by_id(self, ids: Sequence[str], filters: Filters) -> dict[str, TreeLeaf]:
        d = self.dialect
        where, params = filter_sql(self.dialect, filters, self.store.visible_ids())
        out: dict[str, TreeLeaf] = {}
        for part, marks in d.batches(ids):
            for row in self.conn.execute(
                f"SELECT {_LEAF_COLUMNS} {_LEAF_FROM} WHERE c.id IN ({marks}) AND {where}",
                (*part, *params),
            ):
                out[row["id"]] = _tree_leaf(row)
        return out

    def topic_nodes(
        self, entity_id: str | Sequence[str], filters: Filters, cap: int
    ) -> tuple[list[str], int]:
        """Leaves and summaries indexed under ``entity_id`` (or any of several ids) in the
        window, newest first: their ids capped at ``cap``, and the count before the cap."""
        d = self.dialect
        ids = [entity_id] if isinstance(entity_id, str) else sorted(set(entity_id))
        marks = d.marks(len(ids))
        visible = self.store.visible_ids()
        leaf_where, leaf_params = filter_sql(self.dialect, filters, visible)
        sum_where, sum_params = filter_sql(self.dialect, filters, visible, chunk="sm")
        leaf_mine, leaf_mine_params = of_visible_sql(self.dialect, visible, "e.source_id")
        sum_mine, sum_mine_params = of_visible_sql(self.dialect, visible, "se.source_id")
        body = f"""
            SELECT c.id AS id, coalesce(c.ts_end, c.ts_start) AS ts
            FROM entity_index e JOIN chunks c ON c.id = e.node_id
            JOIN sources s ON s.id = c.source_id
            WHERE e.entity_id IN ({marks}) AND {leaf_mine} AND {leaf_where}
            UNION
            SELECT sm.id, sm.ts_end
            FROM summary_entities se JOIN summaries sm ON sm.id = se.summary_id
            JOIN sources s ON s.id = sm.source_id
            WHERE se.entity_id IN ({marks}) AND {sum_mine} AND {LIVE} AND {sum_where}"""
        params = (
            *ids,
            *leaf_mine_params,
            *leaf_params,
            *ids,
            *sum_mine_params,
            *sum_params,
        )
        (total,) = self.conn.execute(f"SELECT count(*) FROM ({body}) t", params).fetchone()
        rows = self.conn.execute(
            f"SELECT id FROM ({body}) t ORDER BY ts IS NULL, ts DESC, id LIMIT {d.p}",
            (*params, cap),
        ).fetchall()
        return [str(row[0]) for row in rows], int(total)

    def window_cover(
        self, since: datetime, until: datetime, filters: Filters, max_leaves: int
    ) -> tuple[list[TreeSummary], list[TreeLeaf], int]:
        """The maximal summaries inside [since, until] (their parent is not inside it) and the
        in-window leaves no such summary covers (at most ``max_leaves``, oldest first), with
        the count of such leaves before that cap."""
        d = self.dialect
        since_ms, until_ms = to_ms(since), to_ms(until)
        inside = f"p.ts_start >= {d.p} AND p.ts_end <= {d.p} AND p.deleted = 0"
        visible = self.store.visible_ids()
        trees, tree_params = trees_sql(self.dialect, visible)
        where, params = filter_sql(self.dialect, filters, visible, chunk="sm")
        frontier = self.conn.execute(
            f"""SELECT {_SUMMARY_COLUMNS} {_SUMMARY_FROM}
                WHERE {trees} AND {LIVE} AND sm.ts_start >= {d.p} AND sm.ts_end <= {d.p} AND {where}
                  AND NOT EXISTS (SELECT 1 FROM summaries p
                                  WHERE p.id = sm.parent_id AND {inside})
                ORDER BY s.scope, sm.ts_start, sm.id""",
            (*tree_params, since_ms, until_ms, *params, since_ms, until_ms),
        ).fetchall()
        leaf_where, leaf_params = filter_sql(self.dialect, filters, visible)
        uncovered = f"""{_LEAF_FROM}
            WHERE c.ts_start >= {d.p} AND coalesce(c.ts_end, c.ts_start) <= {d.p} AND {leaf_where}
              AND NOT EXISTS (SELECT 1 FROM summaries p
                              WHERE p.rowid = c.parent_summary AND {inside})"""
        args: tuple[Any, ...] = (since_ms, until_ms, *leaf_params, since_ms, until_ms)
        (count,) = self.conn.execute(f"SELECT count(*) {uncovered}", args).fetchone()
        leaves = self.conn.execute(
            f"""SELECT {_LEAF_COLUMNS} {uncovered}
                ORDER BY s.scope, c.ts_start, c.seq LIMIT {d.p}""",
            (*args, max_leaves),
        ).fetchall()
        return (
            [_tree_summary(row) for row in frontier],
            [_tree_leaf(row) for row in leaves],
            int(count),
        )


def summary_from_row(row: Row) -> SummaryNode:
    return SummaryNode(
        id=row["id"],
        tree_id=row["tree_id"],
        source_id=row["source_id"],
        level=int(row["level"]),
        parent_id=row["parent_id"],
        child_ids=tuple(json.loads(row["child_ids"])),
        content=row["content"],
        token_count=row["token_count"],
        entities=tuple(json.loads(row["entities"])),
        topics=tuple(json.loads(row["topics"])),
        time_start=from_ms(row["ts_start"]),
        time_end=from_ms(row["ts_end"]),
        score=float(row["score"]),
        sealed_at=from_ms(row["sealed_at"]),
        summarizer=row["summarizer"],
        deleted=bool(row["deleted"]),
        doc_id=row["doc_id"],
        version=int(row["version"]),
    )


def _tree_summary(row: Row) -> TreeSummary:
    """A summaries row joined with its tree's ``scope`` and ``tree_kind``."""
    return TreeSummary(summary_from_row(row), row["scope"], TreeKind(row["tree_kind"]))


def _tree_leaf(row: Row) -> TreeLeaf:
    """A chunks row joined with its source's ``scope`` and its ``tree_id`` (empty while
    unsealed)."""
    return TreeLeaf(chunk_from_row(row), row["scope"], row["tree_id"])
