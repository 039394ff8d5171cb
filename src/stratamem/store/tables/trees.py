"""Summary-tree tables of the store: trees, sealed summaries, their entities and vectors
(the :class:`~stratamem.store.trees.TreeStore` role, reached as ``store.trees``).

A tree's level-L buffer is the set of its level-L items without a parent: chunks whose
``parent_summary`` (the rowid of their summary) is NULL, summaries whose ``parent_id`` is
NULL. Sealing a summary sets
the parents of exactly the items it covers, only if they are still unparented, so a seal that
raced with another writer changes nothing and is planned again. Ids: see
:mod:`stratamem.store.trees`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from stratamem.store.base import from_ms, to_ms
from stratamem.store.dialect import Connection, Dialect, Row
from stratamem.store.tables.filters import gate_sql
from stratamem.store.tables.tree_search import TreeHost, TreeSearchTables, summary_from_row
from stratamem.store.trees import BufferItem, SealRaced, tree_id_for
from stratamem.types import SummaryNode, Tree, TreeKind


# A seal claims its children by id. The unary ``+`` keeps SQLite from reading the claim through
# the index on the parent column instead: without statistics it takes "parent IS NULL" for a
# selective lookup, and with a few dozen ids it then visits every unclaimed row of the store,
# once per summary, which made sealing quadratic in the store's size.
def claim_sql(d: Dialect, level: int, marks: str) -> str:
    if level == 1:
        return f"""UPDATE chunks SET parent_summary = (SELECT rowid FROM summaries WHERE id = {d.p})
                   WHERE id IN ({marks}) AND {d.hint}parent_summary IS NULL"""
    return f"""UPDATE summaries SET parent_id = {d.p}
               WHERE id IN ({marks}) AND {d.hint}parent_id IS NULL AND deleted = 0"""


class TreeTables(TreeSearchTables):
    """The tree half of a store; reached as ``store.trees``."""

    def __init__(self, store: TreeHost) -> None:
        self.store = store

    @property
    def conn(self) -> Connection:
        return self.store.conn

    @property
    def dialect(self) -> Dialect:
        return self.store.dialect

    # -- trees -----------------------------------------------------------------------------

    def ensure(self, source_id: str, scope: str) -> str:
        d = self.dialect
        tree_id = tree_id_for(scope)
        self.conn.execute(
            f"""INSERT INTO trees (id, kind, scope, source_id, created_at)
               VALUES ({d.p}, 'source', {d.marks(3)}) ON CONFLICT DO NOTHING""",
            (tree_id, scope, source_id, to_ms(datetime.now(UTC))),
        )
        return tree_id

    def _trees(self, where: str, params: Sequence[object]) -> list[Tree]:
        """Trees of sources the reader may see (the gate joins each tree's source)."""
        gate, gate_params = gate_sql(self.dialect, self.store.visible_ids())
        rows = self.conn.execute(
            f"""SELECT t.* FROM trees t JOIN sources s ON s.id = t.source_id
                WHERE {where} AND {gate} ORDER BY t.scope""",
            (*params, *gate_params),
        )
        return [_tree(row) for row in rows]

    def get(self, tree_id: str) -> Tree | None:
        d = self.dialect
        found = self._trees(f"t.id = {d.p}", (tree_id,))
        return found[0] if found else None

    def of_source(self, source_id: str) -> Tree | None:
        d = self.dialect
        found = self._trees(f"t.source_id = {d.p} AND t.kind = 'source'", (source_id,))
        return found[0] if found else None

    def all(self) -> list[Tree]:
        return self._trees("1 = 1", ())

    def raise_root(self, tree_id: str, summary_id: str, level: int) -> None:
        """A summary just sealed at ``level`` is the root when no level above it exists yet
        (seals climb in order, so the newest of the top level wins)."""
        d = self.dialect
        self.conn.execute(
            f"""UPDATE trees SET root_id = {d.p}, max_level = {d.p}
                WHERE id = {d.p} AND max_level <= {d.p}""",
            (summary_id, level, tree_id, level),
        )

    def refresh_root(self, tree_id: str) -> None:
        """Point the tree at its highest live summary (the newest one when several share the
        top level, since upper levels are never force-sealed)."""
        d = self.dialect
        row = self.conn.execute(
            f"""SELECT id, level FROM summaries WHERE tree_id = {d.p} AND deleted = 0
               ORDER BY level DESC, (parent_id IS NULL) DESC, rowid DESC LIMIT 1""",
            (tree_id,),
        ).fetchone()
        root, level = (row[0], row[1]) if row else (None, 0)
        self.conn.execute(
            f"UPDATE trees SET root_id = {d.p}, max_level = {d.p} WHERE id = {d.p}",
            (root, level, tree_id),
        )

    # -- buffers ---------------------------------------------------------------------------

    def leaf_buffer(self, source_id: str) -> list[BufferItem]:
        """The source's unsealed chunks, in source order."""
        d = self.dialect
        return [
            _buffer_item(row)
            for row in self.conn.execute(
                f"""SELECT id, token_count, ts_start, ts_end, doc_id FROM chunks
                   WHERE source_id = {d.p} AND parent_summary IS NULL ORDER BY seq""",
                (source_id,),
            )
        ]

    def summary_buffer(self, tree_id: str, level: int) -> list[BufferItem]:
        """The tree's unparented live summaries at ``level``, in the order they were sealed."""
        d = self.dialect
        return [
            _buffer_item(row)
            for row in self.conn.execute(
                f"""SELECT id, token_count, ts_start, ts_end, doc_id FROM summaries
                   WHERE tree_id = {d.p} AND level = {d.p} AND parent_id IS NULL AND deleted = 0
                   ORDER BY rowid""",
                (tree_id, level),
            )
        ]

    def highest_open_level(self, tree_id: str) -> int:
        """The highest level holding an unparented live summary (0 when there is none)."""
        d = self.dialect
        row = self.conn.execute(
            f"""SELECT max(level) FROM summaries
               WHERE tree_id = {d.p} AND parent_id IS NULL AND deleted = 0""",
            (tree_id,),
        ).fetchone()
        return int(row[0] or 0)

    def newest_leaf_time(self, source_id: str) -> datetime | None:
        """The latest end (or start, where a chunk has no end) of the source's chunks."""
        d = self.dialect
        row = self.conn.execute(
            f"SELECT max(coalesce(ts_end, ts_start)) FROM chunks WHERE source_id = {d.p}",
            (source_id,),
        ).fetchone()
        return from_ms(None if row[0] is None else int(row[0]))

    def next_version(self, tree_id: str, doc_id: str) -> int:
        d = self.dialect
        row = self.conn.execute(
            f"SELECT max(version) FROM summaries WHERE tree_id = {d.p} AND doc_id = {d.p}",
            (tree_id, doc_id),
        ).fetchone()
        return 1 if row[0] is None else int(row[0]) + 1

    def grown_document_summaries(self, tree_id: str, source_id: str) -> list[str]:
        """The live level-1 summaries of documents that also have unsealed leaves."""
        d = self.dialect
        return [
            row[0]
            for row in self.conn.execute(
                f"""SELECT s.id FROM summaries s
                   WHERE s.tree_id = {d.p} AND s.level = 1 AND s.deleted = 0 AND s.doc_id IN (
                       SELECT DISTINCT doc_id FROM chunks WHERE source_id = {d.p}
                       AND parent_summary IS NULL AND doc_id IS NOT NULL)
                   ORDER BY s.rowid""",
                (tree_id, source_id),
            )
        ]

    # -- summaries -------------------------------------------------------------------------

    def insert(self, node: SummaryNode, *, vector: tuple[str, int, bytes] | None = None) -> None:
        """Write a sealed summary and claim its children. Run inside a transaction: raises
        :class:`SealRaced` when a child is gone or already has a parent, and the caller's
        rollback undoes the partial claim."""
        d = self.dialect
        children = list(node.child_ids)
        self._drop_entity_rows([node.id])  # of the summary's earlier seal under this id
        self.conn.execute(
            f"""INSERT INTO summaries (id, tree_id, source_id, level, parent_id, child_ids,
                 content, token_count, entities, topics, ts_start, ts_end, score, sealed_at,
                 deleted, doc_id, version, summarizer, content_sha256)
               VALUES ({d.marks(4)}, NULL, {d.marks(9)}, 0, {d.marks(4)})
               ON CONFLICT (id) DO UPDATE SET deleted = 0, parent_id = NULL,
                 content = excluded.content, token_count = excluded.token_count,
                 entities = excluded.entities, topics = excluded.topics,
                 score = excluded.score, sealed_at = excluded.sealed_at,
                 summarizer = excluded.summarizer, content_sha256 = excluded.content_sha256""",
            (
                node.id,
                node.tree_id,
                node.source_id,
                node.level,
                json.dumps(children),
                node.content,
                node.token_count,
                json.dumps(list(node.entities)),
                json.dumps(list(node.topics)),
                to_ms(node.time_start),
                to_ms(node.time_end),
                node.score,
                to_ms(node.sealed_at),
                node.doc_id,
                node.version,
                node.summarizer,
                hashlib.sha256(node.content.encode()).hexdigest(),
            ),
        )
        # The summary's row first: its chunks are claimed by its rowid.
        claimed = 0
        for part, marks in d.batches(children):
            claim = claim_sql(d, node.level, marks)
            claimed += self.conn.execute(claim, (node.id, *part)).rowcount
        if claimed != len(children):
            raise SealRaced
        self.conn.executemany(
            f"""INSERT INTO summary_entities (entity_id, summary_id, source_id)
               VALUES ({d.marks(3)}) ON CONFLICT DO NOTHING""",
            [(e, node.id, node.source_id) for e in node.entities],
        )
        if vector is not None:
            model, dim, blob = vector
            self.conn.execute(
                _upsert_summary_vector(d),
                (node.id, model, dim, blob),
            )

    def summaries(self, ids: Sequence[str], *, live_only: bool = True) -> list[SummaryNode]:
        """Summaries by id, in the order asked; unknown (and, with ``live_only``, deleted) ids
        are left out."""
        d = self.dialect
        found: dict[str, SummaryNode] = {}
        for part, marks in d.batches(ids):
            extra = " AND deleted = 0" if live_only else ""
            for row in self.conn.execute(
                f"SELECT * FROM summaries WHERE id IN ({marks}){extra}", part
            ):
                found[row["id"]] = summary_from_row(row)
        return [found[i] for i in ids if i in found]

    def vectors(self, model: str, ids: Sequence[str]) -> dict[str, bytes]:
        d = self.dialect
        out: dict[str, bytes] = {}
        for part, marks in d.batches(ids):
            out.update(
                (row[0], row[1])
                for row in self.conn.execute(
                    f"""SELECT summary_id, vector FROM summary_vectors
                        WHERE model = {d.p} AND summary_id IN ({marks})""",
                    (model, *part),
                )
            )
        return out

    def unembedded(self, model: str, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` live summaries without a vector of ``model``, oldest first:
        (summary id, content)."""
        d = self.dialect
        return [
            (str(row[0]), str(row[1]))
            for row in self.conn.execute(
                f"""SELECT s.id, s.content FROM summaries s
                   WHERE s.deleted = 0 AND NOT EXISTS (
                       SELECT 1 FROM summary_vectors v
                       WHERE v.summary_id = s.id AND v.model = {d.p})
                   ORDER BY s.rowid LIMIT {d.p}""",
                (model, limit),
            )
        ]

    def insert_vectors(self, rows: Iterable[tuple[str, str, int, bytes]]) -> None:
        d = self.dialect
        self.conn.executemany(
            _upsert_summary_vector(d),
            rows,
        )

    def delete_vectors(self, *, keep_model: str | None = None) -> None:
        d = self.dialect
        self.conn.execute(
            f"DELETE FROM summary_vectors WHERE model {d.is_not} {d.p}", (keep_model,)
        )

    def invalidate_chunks(self, chunk_ids: Sequence[str]) -> set[str]:
        """Retire every live summary above these chunks (about to be deleted): they summarise
        text that no longer exists. Returns the trees touched, which need a new seal."""
        d = self.dialect
        parents: set[str] = set()
        for part, marks in d.batches(chunk_ids):
            parents.update(
                row[0]
                for row in self.conn.execute(
                    f"""SELECT DISTINCT s.id FROM chunks c
                        JOIN summaries s ON s.rowid = c.parent_summary
                        WHERE c.id IN ({marks})""",
                    part,
                )
            )
        return self.invalidate(sorted(parents))

    def invalidate(self, summary_ids: Sequence[str]) -> set[str]:
        """Mark these summaries, their ancestors and (for a document) every summary of the same
        document deleted; their surviving children go back to the buffers. Superseded
        versions stay in the table for the record and are never read."""
        d = self.dialect
        doomed: set[str] = set()
        frontier = list(summary_ids)
        trees: set[str] = set()
        while frontier:
            rows = self.summaries(frontier)
            frontier = []
            for node in rows:
                if node.id in doomed:
                    continue
                doomed.add(node.id)
                trees.add(node.tree_id)
                if node.parent_id:
                    frontier.append(node.parent_id)
            for node in rows:
                if node.doc_id is None:
                    continue
                frontier.extend(
                    r[0]
                    for r in self.conn.execute(
                        f"""SELECT id FROM summaries
                           WHERE tree_id = {d.p} AND doc_id = {d.p} AND deleted = 0
                             AND level = 1""",
                        (node.tree_id, node.doc_id),
                    )
                    if r[0] not in doomed
                )
        ids = sorted(doomed)
        for part, marks in d.batches(ids):
            self.conn.execute(
                f"UPDATE summaries SET deleted = 1, parent_id = NULL WHERE id IN ({marks})", part
            )
            self.conn.execute(
                f"UPDATE summaries SET parent_id = NULL WHERE parent_id IN ({marks})", part
            )
            self.conn.execute(
                f"""UPDATE chunks SET parent_summary = NULL WHERE parent_summary IN (
                        SELECT rowid FROM summaries WHERE id IN ({marks}))""",
                part,
            )
            self._drop_entity_rows(part)
        for tree_id in trees:
            self.refresh_root(tree_id)
        return trees

    def _drop_entity_rows(self, summary_ids: Sequence[str]) -> None:
        """Delete these summaries' ``summary_entities`` rows, found by their key: a summary's
        entities are the ones its row lists (``summaries.entities``), written beside it."""
        d = self.dialect
        keys = [
            (entity, source_id, summary_id)
            for part, marks in d.batches(summary_ids)
            for summary_id, source_id, entities in self.conn.execute(
                f"SELECT id, source_id, entities FROM summaries WHERE id IN ({marks})", part
            )
            for entity in json.loads(entities)
        ]
        if keys:
            self.conn.executemany(
                f"""DELETE FROM summary_entities
                    WHERE entity_id = {d.p} AND source_id = {d.p} AND summary_id = {d.p}""",
                keys,
            )

    def parents_of_chunks(self, chunk_ids: Sequence[str]) -> dict[str, str]:
        """chunk id → its level-1 summary, for the sealed ones."""
        return self._pairs(
            """SELECT c.id, s.id FROM chunks c JOIN summaries s ON s.rowid = c.parent_summary
               WHERE c.id IN ({marks})""",
            chunk_ids,
        )

    def parents_of_summaries(self, summary_ids: Sequence[str]) -> dict[str, str]:
        """summary id → its parent, for the live summaries that have one."""
        return self._pairs(
            "SELECT id, parent_id FROM summaries WHERE id IN ({marks}) AND parent_id IS NOT NULL",
            summary_ids,
        )

    def _pairs(self, sql: str, ids: Sequence[str]) -> dict[str, str]:
        """The (key, value) rows ``sql`` reads for ``ids``, a batch at a time."""
        out: dict[str, str] = {}
        for part, marks in self.dialect.batches(ids):
            out.update((row[0], row[1]) for row in self.conn.execute(sql.format(marks=marks), part))
        return out

    def top_ids(self, tree_id: str) -> list[str]:
        """The tree's unparented live summaries: highest level first, then newest first (those
        without a time last)."""
        d = self.dialect
        if self.get(tree_id) is None:
            return []
        return [
            row[0]
            for row in self.conn.execute(
                f"""SELECT id FROM summaries WHERE tree_id = {d.p} AND parent_id IS NULL
                   AND deleted = 0 ORDER BY level DESC, ts_end IS NULL, ts_end DESC, id""",
                (tree_id,),
            )
        ]

    def stats(self, tree_id: str) -> dict[int, tuple[int, int]]:
        """Per level: (live summaries, of which still unparented)."""
        d = self.dialect
        if self.get(tree_id) is None:
            return {}
        return {
            int(level): (int(n), int(open_))
            for level, n, open_ in self.conn.execute(
                f"""SELECT level, count(*), count(*) - count(parent_id) FROM summaries
                   WHERE tree_id = {d.p} AND deleted = 0 GROUP BY level ORDER BY level""",
                (tree_id,),
            )
        }


def _buffer_item(row: Row) -> BufferItem:
    return BufferItem(
        id=row[0],
        tokens=int(row[1]),
        time_start=from_ms(row[2]),
        time_end=from_ms(row[3]),
        doc_id=row[4],
    )


def _tree(row: Row) -> Tree:
    return Tree(
        id=row["id"],
        kind=TreeKind(row["kind"]),
        scope=row["scope"],
        source_id=row["source_id"],
        root_id=row["root_id"],
        max_level=row["max_level"],
        status=row["status"],
        created_at=from_ms(row["created_at"]),
    )


def _upsert_summary_vector(d: Dialect) -> str:
    return d.upsert(
        "summary_vectors", ("summary_id", "model", "dim", "vector"), key=("summary_id", "model")
    )
