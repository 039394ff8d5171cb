"""The vectors role on PostgreSQL, and the vector leg's search inside the server (pgvector).

Each vector is kept twice in its row: as ``bytea`` (as packed on SQLite, what the other
reads of the role return, as on SQLite) and as a pgvector ``vector`` column, which the leg
searches. Every process and every server then shares one index, built once by the server,
rather than each holding its own copy in memory.

Search (:meth:`PgVectorTables.vector_search`) orders by cosine distance (``<=>``) and takes
the top ``k``; the score is the cosine similarity, ``1 - distance``, as the in-process index
gives it. Below :data:`HNSW_THRESHOLD` vectors of a model the server scans them all (exact);
from there on an HNSW index does, one per model (a partial index over ``embedding::vector(d)``
for ``model = …``, since a model fixes the dimension), built once by
:meth:`PgVectorTables.build_vector_index` (``stratamem ingest``/``embed`` and the first search
that finds it missing). The access gate and the filters are conditions of the same query, and
pgvector's iterative scan (``hnsw.iterative_scan``) keeps reading the index until ``k`` rows
pass them, so a narrow filter still gets its ``k`` nearest rather than what is left of the
first ``ef_search``.
"""

from __future__ import annotations

import hashlib
import json
import struct
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Final, TypeVar

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import pq
from psycopg.adapt import Dumper
from psycopg.types import TypeInfo

from stratamem.errors import StoreError
from stratamem.store.postgres.dialect import POSTGRES
from stratamem.store.tables.filters import filter_sql
from stratamem.store.tables.vectors import VectorTables
from stratamem.store.vectors import ChunkVector, VectorMark, packed_rows, unpack_vectors
from stratamem.types import Filters

if TYPE_CHECKING:
    from stratamem.store.postgres.connection import PgConnection

T = TypeVar("T")
HNSW_THRESHOLD: Final = 20_000
# Candidates the HNSW search keeps (pgvector's default is 40): recall ≥ 0.99 on real vectors.
EF_SEARCH: Final = 100


def vector_text(blob: bytes, dim: int) -> str:
    """A stored vector as pgvector's text form, exactly (stored width → float32 → float64 →
    repr)."""
    return json.dumps(unpack_vectors([blob], dim)[0].astype(np.float64).tolist())


class Embedding:
    """A stored vector (see :func:`~stratamem.store.vectors.pack_vector`) to be written to a
    ``vector`` column."""

    __slots__ = ("blob", "dim")

    def __init__(self, blob: bytes, dim: int) -> None:
        self.blob, self.dim = blob, dim


class _EmbeddingDumper(Dumper):
    """pgvector's binary input: the dimension and a reserved zero (int16 each), then the
    values as big-endian float32."""

    format = pq.Format.BINARY

    def dump(self, obj: Any) -> bytes:
        values: npt.NDArray[np.float32] = unpack_vectors([obj.blob], obj.dim)[0]
        return struct.pack(">HH", len(values), 0) + values.astype(">f4").tobytes()


def register_vector(raw: psycopg.Connection[Any]) -> None:
    """Teach ``raw`` to send :class:`Embedding` values (once per connection)."""
    if raw.adapters.types.get("vector") is not None:
        return
    info = TypeInfo.fetch(raw, "vector")
    if info is None:
        raise StoreError("the pgvector type 'vector' is not in this database")
    info.register(raw)
    dumper = type("EmbeddingDumper", (_EmbeddingDumper,), {"oid": info.oid})
    raw.adapters.register_dumper(Embedding, dumper)


def index_name(model: str) -> str:
    return "embeddings_hnsw_" + hashlib.sha256(model.encode()).hexdigest()[:12]


class PgVectorTables(VectorTables):
    """The vectors half of :class:`~stratamem.store.postgres.store.PostgresStore`."""

    conn: PgConnection
    _indexed_models: set[str]

    if TYPE_CHECKING:

        def read_snapshot(self) -> AbstractContextManager[None]: ...

        def _cached_read(self, what: Hashable, read: Callable[[], T]) -> T: ...

    def vector_mark(self) -> VectorMark | None:
        """None: the table has no row key in write order (the server searches the vectors,
        so no index here follows them)."""
        return None

    def insert_vectors(self, rows: Iterable[ChunkVector]) -> None:
        """Each row's fields go to the columns of the same name, and its vector to
        ``embedding`` too, sent in pgvector's binary form (its text form costs a hundred
        times as much to make)."""
        register_vector(self.conn.raw)
        self.conn.executemany_bound(
            """INSERT INTO embeddings
               (node_id, model, source_id, dim, vector, content_sha256, embedding)
               VALUES (%s, %s, %s, %s, %b, %s, %b)
               ON CONFLICT (node_id, model) DO UPDATE SET source_id = EXCLUDED.source_id,
                 dim = EXCLUDED.dim, vector = EXCLUDED.vector,
                 content_sha256 = EXCLUDED.content_sha256, embedding = EXCLUDED.embedding""",
            [(*row, Embedding(row.vector, row.dim)) for row in packed_rows(rows)],
        )
        self.bump_generation(chunks=False)

    # -- the index --------------------------------------------------------------------------

    def vector_index_of(self, model: str) -> bool:
        """Whether ``model``'s HNSW index exists (and is valid)."""
        known = self.__dict__.setdefault("_indexed_models", set())
        if model in known:
            return True
        row = self.conn.execute(
            """SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
               WHERE c.relname = %s""",
            (index_name(model),),
        ).fetchone()
        if row is not None and row[0]:
            known.add(model)
            return True
        return False

    def build_vector_index(self, model: str, *, threshold: int = HNSW_THRESHOLD) -> float | None:
        """Build ``model``'s HNSW index where it has at least ``threshold`` vectors and none
        exists; the seconds it took, or None where nothing was built."""
        if self.vector_index_of(model):
            return None
        row = self.conn.execute(
            "SELECT count(*), max(dim) FROM embeddings WHERE model = %s", (model,)
        ).fetchone()
        count, dim = (int(row[0]), row[1]) if row is not None else (0, None)
        if count < threshold or dim is None:
            return None
        start = time.perf_counter()
        name = index_name(model)
        literal = model.replace("'", "''")
        raw = self.conn.raw
        # An index left invalid by a build that was interrupted is dropped first.
        raw.execute(f"DROP INDEX IF EXISTS {name}".encode())
        raw.execute(b"SET maintenance_work_mem = '1GB'")
        try:
            raw.execute(
                f"""CREATE INDEX IF NOT EXISTS {name} ON embeddings
                    USING hnsw ((embedding::vector({int(dim)})) vector_cosine_ops)
                    WHERE model = '{literal}'""".encode()
            )
        finally:
            raw.execute(b"RESET maintenance_work_mem")
        # Statistics for the planner, which weighs walking the index under a principal's
        # sources against reading those sources' vectors and sorting them.
        raw.execute(b"ANALYZE embeddings")
        self.__dict__.setdefault("_indexed_models", set()).add(model)
        return time.perf_counter() - start

    # -- search -----------------------------------------------------------------------------

    def vector_search(
        self, model: str, query: npt.NDArray[np.float32], filters: Filters, k: int
    ) -> dict[str, float]:
        """node id → cosine similarity of the ``k`` nearest admitted chunks with a vector
        of ``model``."""
        if k <= 0:
            return {}
        dim = int(query.shape[-1])
        unit = np.asarray(query, dtype=np.float64).reshape(-1)
        norm = float(np.linalg.norm(unit))
        if norm > 0:
            unit = unit / norm
        literal = json.dumps(unit.tolist())
        visible = self.visible_ids()
        if visible is not None and not visible:
            return {}
        where, params = _admitted(filters, visible)
        # Whether the index is there (and built, where it is due but missing) is looked at
        # again only once the store changed.
        self._cached_read(
            ("vector index", model),
            lambda: self.vector_index_of(model) or self.build_vector_index(model) is not None,
        )
        distance = f"e.embedding::vector({dim}) <=> CAST(%s AS vector({dim}))"
        sql = f"""SELECT e.node_id, {distance} AS d FROM embeddings e
                  WHERE e.model = '{model.replace("'", "''")}' AND {where}
                  ORDER BY d LIMIT %s"""
        with self.read_snapshot():
            # Both settings in one round trip.
            self.conn.command(
                f"SET LOCAL hnsw.ef_search = {max(EF_SEARCH, k)};"
                " SET LOCAL hnsw.iterative_scan = relaxed_order".encode()
            )
            rows = self.conn.execute(sql, (literal, *params, k)).fetchall()
        # relaxed_order may hand rows back slightly out of order: sort them again.
        return {str(node): 1.0 - float(d) for node, d in sorted(rows, key=lambda r: r[1])}


def _admitted(filters: Filters, visible: Sequence[str] | None) -> tuple[str, list[object]]:
    """The gate and the filters over an embeddings alias ``e``, written so that the planner
    keeps walking the vector index and tests each row it meets (a join would make it read
    every vector and sort them). A locked source has no vectors in the table (they are
    sealed), so the owner needs no condition; a principal's sources are a list of constants;
    a filter on the chunk or its source is a subquery per row."""
    if filters == Filters():
        if visible is None:
            return "TRUE", []
        return "e.source_id = ANY (%s)", [list(visible)]
    where, params = filter_sql(POSTGRES, filters, visible)
    return (
        f"""coalesce((SELECT TRUE FROM chunks c JOIN sources s ON s.id = c.source_id
                     WHERE c.id = e.node_id AND {where}), FALSE)""",
        list(params),
    )
