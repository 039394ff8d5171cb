"""Chunk embeddings per model signature in the store (the ``VectorStore`` role).

A chunk's row key is its ``chunks.rowid``; the in-process vector index is addressed by it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

from stratamem.store.dialect import Connection, Dialect
from stratamem.store.tables.filters import filter_sql, gate_sql
from stratamem.store.vectors import ChunkVector, PendingChunk, VectorMark, packed_rows
from stratamem.types import Filters

T = TypeVar("T")
# The characters of a content digest (hex) that the ``embeddings_hash`` index is kept by.
DIGEST_PREFIX = 16


class VectorTables:
    """The vectors half of a store (SQLite\'s or PostgreSQL\'s)."""

    conn: Connection
    dialect: Dialect

    if TYPE_CHECKING:

        def visible_ids(self) -> list[str] | None: ...

        def _cached_read(self, what: Hashable, read: Callable[[], T]) -> T: ...

        def write_state(self) -> tuple[int, int]: ...

        def in_transaction(self) -> bool: ...

        def bump_generation(self, *, chunks: bool = True) -> None: ...

    def pending_embeddings(
        self, model: str, limit: int, *, after: int = 0, source: str | None = None
    ) -> list[PendingChunk]:
        """Chunks of unlocked sources (of ``source`` only, where given) with no vector for
        ``model``, oldest (lowest rowid) first."""
        d = self.dialect
        return [
            PendingChunk(*row)
            for row in self.conn.execute(
                f"""SELECT c.rowid, c.id, c.source_id, c.title, c.content, c.content_sha256
                   FROM chunks c JOIN sources s ON s.id = c.source_id
                   WHERE c.rowid > {d.p} AND s.locked = 0 AND ({d.p} IS NULL OR c.source_id = {d.p})
                     AND NOT EXISTS (
                       SELECT 1 FROM embeddings e WHERE e.node_id = c.id AND e.model = {d.p})
                   ORDER BY c.rowid LIMIT {d.p}""",
                (after, source, source, model, limit),
            )
        ]

    def count_pending_embeddings(self, model: str, *, source: str | None = None) -> int:
        """How many chunks the reader may see (of ``source`` only, where given) have no
        vector of ``model``."""
        d = self.dialect
        gate, params = gate_sql(self.dialect, self.visible_ids())
        return int(
            self.conn.execute(
                f"""SELECT count(*) FROM chunks c JOIN sources s ON s.id = c.source_id
                   WHERE {gate} AND ({d.p} IS NULL OR c.source_id = {d.p}) AND NOT EXISTS (
                       SELECT 1 FROM embeddings e WHERE e.node_id = c.id AND e.model = {d.p})""",
                (*params, source, source, model),
            ).fetchone()[0]
        )

    def has_vectors(self, model: str) -> bool:
        """Whether any chunk the reader may see has a vector of ``model``: looked for source
        by source among those it may see, so that what it may not see costs nothing."""
        gate, params = gate_sql(self.dialect, self.visible_ids())

        def read() -> bool:
            d = self.dialect
            return (
                self.conn.execute(
                    f"""SELECT 1 FROM sources s WHERE {gate} AND EXISTS (
                           SELECT 1 FROM embeddings e
                           WHERE e.source_id = s.id AND e.model = {d.p}) LIMIT 1""",
                    (*params, model),
                ).fetchone()
                is not None
            )

        return self._cached_read(("has vectors", model), read)

    def cached_vectors(self, model: str, hashes: Sequence[str]) -> dict[str, bytes]:
        """Vectors already made by ``model`` for these content hashes (any node).

        Looked up by the first :data:`DIGEST_PREFIX` characters of each hash, which is what
        the ``embeddings_hash`` index holds; the whole hash and the model are compared on
        the rows found."""
        d = self.dialect
        wanted = set(hashes)
        prefixes = sorted({sha[:DIGEST_PREFIX] for sha in wanted})
        found: dict[str, bytes] = {}
        for part, marks in d.batches(prefixes):
            for sha, found_model, blob in self.conn.execute(
                f"""SELECT content_sha256, model, vector FROM embeddings
                    WHERE substr(content_sha256, 1, {DIGEST_PREFIX}) IN ({marks})""",
                part,
            ):
                if found_model == model and sha in wanted:
                    found[sha] = blob
        return found

    def insert_vectors(self, rows: Iterable[ChunkVector]) -> None:
        """Each row's fields go to the columns of the same name, ``vector`` packed to half
        precision (:func:`~stratamem.store.vectors.pack_vector`)."""
        d = self.dialect
        self.conn.executemany(
            d.upsert(
                "embeddings",
                ("node_id", "model", "source_id", "dim", "vector", "content_sha256"),
                key=("node_id", "model"),
            ),
            packed_rows(rows),
        )
        self.bump_generation(chunks=False)

    def vector_models(self) -> dict[str, int]:
        """Model signature → vector count."""
        return dict(
            self.conn.execute("SELECT model, count(*) FROM embeddings GROUP BY model").fetchall()
        )

    def delete_vectors(self, *, keep_model: str | None = None) -> int:
        """Delete the vectors of every model but ``keep_model`` (all when None)."""
        d = self.dialect
        if keep_model is None:
            cursor = self.conn.execute("DELETE FROM embeddings")
        else:
            cursor = self.conn.execute(
                f"DELETE FROM embeddings WHERE model != {d.p}", (keep_model,)
            )
        self.bump_generation(chunks=False)
        return cursor.rowcount

    def iter_vectors(
        self, model: str, batch: int = 10_000
    ) -> Iterator[tuple[list[int], list[bytes]]]:
        """(chunk rowids, their stored vectors) of ``model``'s vectors, in the table's
        order: sorting them here would copy every vector into a temporary b-tree, and reading
        them through the model's index would visit the table in no order."""
        d = self.dialect
        cursor = self.conn.execute(
            f"""SELECT c.rowid, e.vector FROM embeddings e
               JOIN chunks c ON c.id = e.node_id WHERE {d.hint}e.model = {d.p}""",
            (model,),
        )
        while rows := cursor.fetchmany(batch):
            yield [r[0] for r in rows], [r[1] for r in rows]

    def vector_keys(self, model: str) -> list[tuple[int, str]]:
        """(chunk rowid, chunk id) of the chunks that have a vector of ``model``, by rowid:
        the chunks in rowid order, each looked up in the vectors' key (a join from the
        vectors would sort every row; at a million chunks 3.6 s against 6.2)."""
        d = self.dialect
        return [
            (int(row[0]), str(row[1]))
            for row in self.conn.execute(
                f"""SELECT c.rowid, c.id FROM chunks c WHERE EXISTS (
                       SELECT 1 FROM embeddings e WHERE e.node_id = c.id AND e.model = {d.p})
                   ORDER BY c.rowid""",
                (model,),
            )
        ]

    def vector_mark(self) -> VectorMark | None:
        """Where the vector rows written from now on begin: the highest row key of the
        ``embeddings`` table and the chunk that row names (an insert takes the next key up)."""
        row = self.conn.execute(
            "SELECT rowid, node_id FROM embeddings ORDER BY rowid DESC LIMIT 1"
        ).fetchone()
        return VectorMark(int(row[0]), str(row[1])) if row else VectorMark(0, None)

    def vector_row_node(self, row: int) -> str | None:
        """The chunk the vector row ``row`` names, None when there is no such row."""
        d = self.dialect
        found = self.conn.execute(f"SELECT node_id FROM embeddings WHERE rowid = {d.p}", (row,))
        hit = found.fetchone()
        return None if hit is None else str(hit[0])

    def vectors_after(self, model: str, mark: VectorMark) -> list[tuple[int, str, bytes]]:
        """(chunk rowid, chunk id, vector) of ``model``'s vector rows written after ``mark``,
        in the order they were written."""
        d = self.dialect
        return [
            (int(row[0]), str(row[1]), bytes(row[2]))
            for row in self.conn.execute(
                f"""SELECT c.rowid, c.id, e.vector FROM embeddings e
                   JOIN chunks c ON c.id = e.node_id
                   WHERE e.rowid > {d.p} AND e.model = {d.p} ORDER BY e.rowid""",
                (mark.row, model),
            )
        ]

    def count_vectors(self, model: str) -> int:
        """How many vectors of ``model`` the store holds."""
        d = self.dialect
        found = self.conn.execute(f"SELECT count(*) FROM embeddings WHERE model = {d.p}", (model,))
        return int(found.fetchone()[0])

    def vectors_by_rowid(self, model: str, rowids: Sequence[int]) -> dict[int, bytes]:
        d = self.dialect
        found: dict[int, bytes] = {}
        for part, marks in d.batches(rowids):
            for rowid, blob in self.conn.execute(
                f"""SELECT c.rowid, e.vector FROM chunks c
                    JOIN embeddings e ON e.node_id = c.id AND e.model = {d.p}
                    WHERE c.rowid IN ({marks})""",
                (model, *part),
            ):
                found[rowid] = blob
        return found

    def rowids_to_ids(self, rowids: Sequence[int]) -> dict[int, str]:
        d = self.dialect
        found: dict[int, str] = {}
        for part, marks in d.batches([int(r) for r in rowids]):
            for rowid, node in self.conn.execute(
                f"SELECT rowid, id FROM chunks WHERE rowid IN ({marks})", part
            ):
                found[rowid] = node
        return found

    def ids_to_rowids(self, node_ids: Sequence[str]) -> dict[str, int]:
        d = self.dialect
        found: dict[str, int] = {}
        for part, marks in d.batches(node_ids):
            for node, rowid in self.conn.execute(
                f"SELECT id, rowid FROM chunks WHERE id IN ({marks}) ORDER BY id", part
            ):
                found[node] = rowid
        return found

    def allowed_rowids(self, filters: Filters) -> list[int] | None:
        """The chunk rowids ``filters`` admit to the reader, or None when every chunk is
        admitted (the owner, no filter and no locked source), which lets the vector leg skip
        building a mask."""
        locked = self._cached_read(
            "a locked source",
            lambda: self.conn.execute("SELECT 1 FROM sources WHERE locked = 1 LIMIT 1").fetchone(),
        )
        visible = self.visible_ids()
        if filters == Filters() and locked is None and visible is None:
            return None

        def read() -> list[int]:
            where, params = filter_sql(self.dialect, filters, visible)
            rows = self.conn.execute(
                f"""SELECT c.rowid FROM chunks c JOIN sources s ON s.id = c.source_id
                    WHERE {where} ORDER BY c.rowid""",
                params,
            )
            return [row[0] for row in rows]

        if filters == Filters() and visible is not None:
            # The gate alone: the same list object while nothing changes (callers key their
            # masks on it).
            return self._cached_read("gate rowids", read)
        return read()

    def vectors_of(self, model: str, node_ids: Sequence[str]) -> dict[str, bytes]:
        d = self.dialect
        found: dict[str, bytes] = {}
        for part, marks in d.batches(node_ids):
            for node, blob in self.conn.execute(
                f"""SELECT node_id, vector FROM embeddings
                    WHERE model = {d.p} AND node_id IN ({marks})
                    ORDER BY node_id""",
                (model, *part),
            ):
                found[node] = blob
        return found
