"""The default store: one SQLite file holding sources, chunks, FTS5 and the entity graph.

On-disk format: see ``migrations.py``. Ids: a source id is ``src_`` + the first 16 hex digits of
sha256(scope); a chunk id is the first 32 hex digits of sha256(source id, seq, content).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stratamem.errors import NotFoundError, StoreError
from stratamem.store.base import from_ms, to_ms
from stratamem.store.sources import ChunkRow, MentionRow, source_id_for
from stratamem.store.sqlite.connection import atomic, batches, connect
from stratamem.store.sqlite.jobs import JobQueue
from stratamem.store.sqlite.migrations import migrate
from stratamem.store.sqlite.postings import EntityPostings
from stratamem.store.sqlite.trees import TreeTables
from stratamem.types import Chunk, EntityMatch, Filters, RetrievalHit, Source, SourceKind

MAX_EDGE_NODE_ENTITIES = 24


class SQLiteStore:
    """Owns one connection; use as a context manager or call :meth:`close`."""

    name = "sqlite"

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self.conn = connect(path)
        self._count_cache: tuple[tuple[int, int], int] | None = None
        try:
            migrate(self.conn)
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            raise StoreError(f"{path}: cannot open as a stratamem database: {exc}") from exc
        if self.get_setting("store.id") is None:
            with self.transaction():
                self.conn.execute(
                    "INSERT OR IGNORE INTO settings (key, value) "
                    "VALUES ('store.id', lower(hex(randomblob(16))))"
                )
        self.trees = TreeTables(self)
        self.jobs = JobQueue(self.conn)
        self.postings = EntityPostings(
            self.conn, state=self.write_state, generation=self.generation
        )

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return atomic(self.conn)

    @contextmanager
    def rebuildable_writes(self) -> Iterator[None]:
        """Commits made inside skip the fsync (``synchronous = NORMAL``): for derived data such
        as summaries, which a crash can cost but never corrupt (WAL keeps each commit atomic)
        and which their durable job rebuilds. Everything else stays ``FULL``."""
        self.conn.execute("PRAGMA synchronous = NORMAL")
        try:
            yield
        finally:
            self.conn.execute("PRAGMA synchronous = FULL")

    # -- sources ---------------------------------------------------------------------------

    def upsert_source(
        self,
        *,
        scope: str,
        kind: SourceKind,
        platform: str,
        location: str,
        title: str = "",
        meta: dict[str, Any] | None = None,
    ) -> str:
        """Create the source or refresh its descriptive fields; access and lock are kept."""
        sid = source_id_for(scope)
        self.conn.execute(
            """INSERT INTO sources (id, scope, kind, platform, location, title, meta, ingested_at)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT(id) DO UPDATE SET kind = excluded.kind, platform = excluded.platform,
                 location = excluded.location, title = excluded.title, meta = excluded.meta,
                 ingested_at = excluded.ingested_at""",
            (
                sid,
                scope,
                kind.value,
                platform,
                location,
                title,
                json.dumps(meta or {}, default=str),
                to_ms(datetime.now(UTC)),
            ),
        )
        return sid

    def sources(self) -> list[Source]:
        rows = self.conn.execute(
            """SELECT s.*, (SELECT count(*) FROM chunks c WHERE c.source_id = s.id) AS n
               FROM sources s ORDER BY s.scope"""
        ).fetchall()
        return [_source(row) for row in rows]

    def resolve_source(self, ref: str) -> Source:
        """A source by id or exact scope."""
        for source in self.sources():
            if ref in (source.id, source.scope):
                return source
        raise NotFoundError(f"no source with id or scope {ref!r}")

    def delete_source(self, source_id: str) -> int:
        """Remove a source and everything derived from it; returns the chunk count removed."""
        with self.transaction():
            (count,) = self.conn.execute(
                "SELECT count(*) FROM chunks WHERE source_id = ?", (source_id,)
            ).fetchone()
            self.conn.execute(
                """DELETE FROM jobs WHERE dedupe_key IN (
                       SELECT 'seal:' || id FROM trees WHERE source_id = ?)""",
                (source_id,),
            )
            # Trees, summaries, their entities and vectors go with the source (foreign keys).
            self.conn.execute("DELETE FROM sources WHERE id = ?", (source_id,))
            self.bump_generation()
        self.scrub()
        return int(count)

    def scrub(self) -> None:
        """Leave no copy of deleted text in the files. ``secure_delete`` (set on connect)
        zeroes a deleted row where it lies, but not the stale copies B-tree rebalancing
        leaves in a page's free space, and FTS5 keeps a deleted row's tokens in its old
        segments until they are merged. So: ``optimize`` merges every segment into one,
        ``VACUUM`` rewrites every page from the live rows, and a ``TRUNCATE`` checkpoint
        empties the WAL. VACUUM rewrites the whole file (it costs time and transient disk
        in proportion to the store), which is why only a forget calls this. A no-op inside
        an open transaction; a checkpoint a reader blocks completes on a later one."""
        if self.conn.in_transaction:
            return
        with self.transaction():
            self.conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('optimize')")
        self.conn.execute("VACUUM")
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()

    # -- chunks ----------------------------------------------------------------------------

    def existing_ids(self, ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for part, marks in batches(ids):
            found.update(
                row[0]
                for row in self.conn.execute(f"SELECT id FROM chunks WHERE id IN ({marks})", part)
            )
        return found

    def insert_chunks(self, rows: Iterable[ChunkRow]) -> None:
        """Rows made by :func:`chunk_row`."""
        self.conn.executemany(
            """INSERT INTO chunks (id, source_id, seq, content, title, token_count, author,
                 ts_start, ts_end, tags, source_ref, thread, doc_id, version, content_sha256, meta)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            rows,
        )

    def insert_mentions(self, rows: Iterable[MentionRow]) -> None:
        """Rows of (entity id, node id, kind, surface, source id, ts in ms)."""
        self.conn.executemany(
            """INSERT OR IGNORE INTO entity_index (entity_id, node_id, kind, surface, source_id, ts)
               VALUES (?, ?, ?, ?, ?, ?)""",
            rows,
        )

    def replace_seqs(self, source_id: str, seqs: Sequence[int]) -> int:
        """Delete the source's chunks at ``seqs`` (about to be replaced); returns how many.

        A chunk id covers (source, seq, content), so a changed chunk comes back with a new id
        at the same seq, and the old one must go. Memory stays flat: no set of kept ids.
        """
        removed = 0
        for part, marks in batches(seqs):
            where = f"source_id = ? AND seq IN ({marks})"
            removed += self._delete_chunks(where, [source_id, *part])
        return removed

    def truncate_source(self, source_id: str, length: int) -> int:
        """Delete the source's chunks at seq ≥ ``length`` (it got shorter); returns how many."""
        return self._delete_chunks("source_id = ? AND seq >= ?", [source_id, length])

    def _delete_chunks(self, where: str, params: list[Any]) -> int:
        nodes = [
            row[0] for row in self.conn.execute(f"SELECT id FROM chunks WHERE {where}", params)
        ]
        if not nodes:
            return 0
        source_id = params[0]
        # Summaries over the doomed chunks summarise text that is going away: retire them and
        # have the tree sealed again.
        for tree_id in self.trees.invalidate_chunks(nodes):
            self.jobs.enqueue("seal", f"seal:{tree_id}", {"tree_id": tree_id})
        for part, marks in batches(nodes):
            self.add_edges(source_id, part, sign=-1)
            self.conn.execute(f"DELETE FROM entity_index WHERE node_id IN ({marks})", part)
            self.conn.execute(f"DELETE FROM embeddings WHERE node_id IN ({marks})", part)
            self.conn.execute(f"DELETE FROM chunks WHERE id IN ({marks})", part)
        self.bump_generation()
        self.conn.execute(
            "DELETE FROM entity_edges WHERE source_id = ? AND weight <= 0", (source_id,)
        )
        return len(nodes)

    def add_edges(self, source_id: str, node_ids: Sequence[str], *, sign: int = 1) -> None:
        """Add (or with ``sign=-1`` take back) the co-mention pairs of these nodes' entities.

        Edges are kept up to date batch by batch as chunks come and go, so an ingest never
        pays for a whole-source rebuild. A node with more than :data:`MAX_EDGE_NODE_ENTITIES`
        entities adds none: such lists (a long CC line, a digest) say little about which
        entities belong together, and cost n².
        """
        if not node_ids:
            return
        marks = ",".join("?" * len(node_ids))
        self.conn.execute(
            f"""INSERT INTO entity_edges (a, b, source_id, weight)
                SELECT x.entity_id, y.entity_id, ?, ? * count(*)
                FROM entity_index x
                JOIN entity_index y ON y.node_id = x.node_id AND x.entity_id < y.entity_id
                WHERE x.node_id IN (
                    SELECT node_id FROM entity_index WHERE node_id IN ({marks})
                    GROUP BY node_id HAVING count(*) <= ?)
                GROUP BY x.entity_id, y.entity_id
                ON CONFLICT (a, b, source_id) DO UPDATE SET weight = weight + excluded.weight""",
            (source_id, sign, *node_ids, MAX_EDGE_NODE_ENTITIES),
        )

    def rebuild_edges(self, source_id: str) -> None:
        """Recompute the source's edges from scratch (a repair; ingest keeps them current)."""
        self.conn.execute("DELETE FROM entity_edges WHERE source_id = ?", (source_id,))
        nodes = [
            row[0]
            for row in self.conn.execute(
                "SELECT DISTINCT node_id FROM entity_index WHERE source_id = ?", (source_id,)
            )
        ]
        for part, _ in batches(nodes):
            self.add_edges(source_id, part)

    def chunks(self, ids: Sequence[str]) -> list[Chunk]:
        """Chunks by id, in the order asked; unknown ids are left out."""
        found: dict[str, Chunk] = {}
        for part, marks in batches(ids):
            for row in self.conn.execute(f"SELECT * FROM chunks WHERE id IN ({marks})", part):
                found[row["id"]] = chunk_from_row(row)
        return [found[i] for i in ids if i in found]

    def iter_chunks(self, source_id: str) -> Iterator[Chunk]:
        for row in self.conn.execute(
            "SELECT * FROM chunks WHERE source_id = ? ORDER BY seq", (source_id,)
        ):
            yield chunk_from_row(row)

    def mentions_of(self, node_ids: Sequence[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {i: [] for i in node_ids}
        for part, marks in batches(node_ids):
            for node, entity in self.conn.execute(
                f"""SELECT node_id, entity_id FROM entity_index WHERE node_id IN ({marks})
                    ORDER BY node_id, entity_id""",
                part,
            ):
                out[node].append(entity)
        return out

    # -- settings and vectors --------------------------------------------------------------

    def get_setting(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_setting(self, key: str, value: str) -> None:
        self.conn.execute(
            "INSERT INTO settings (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def bump_generation(self) -> None:
        """Mark the vectors changed, so a persisted vector index knows it is stale."""
        self.conn.execute(
            "INSERT INTO settings (key, value) VALUES ('vectors.generation', '1') "
            "ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1"
        )

    def generation(self) -> int:
        return int(self.get_setting("vectors.generation") or 0)

    def store_id(self) -> str:
        """The random id this database was given when created: a copy or a restored backup
        keeps it, a new database at the same path gets another. Index files beside the
        database record it and are not used by any other."""
        return self.get_setting("store.id") or ""

    def pending_embeddings(self, model: str, limit: int) -> list[sqlite3.Row]:
        """Chunks with no vector for ``model``, oldest first: rowid, id, source_id, title,
        content, content_sha256."""
        return self.conn.execute(
            """SELECT c.rowid, c.id, c.source_id, c.title, c.content, c.content_sha256
               FROM chunks c JOIN sources s ON s.id = c.source_id
               WHERE s.locked = 0 AND NOT EXISTS (
                   SELECT 1 FROM embeddings e WHERE e.node_id = c.id AND e.model = ?)
               ORDER BY c.rowid LIMIT ?""",
            (model, limit),
        ).fetchall()

    def count_pending_embeddings(self, model: str) -> int:
        return int(
            self.conn.execute(
                """SELECT count(*) FROM chunks c JOIN sources s ON s.id = c.source_id
                   WHERE s.locked = 0 AND NOT EXISTS (
                       SELECT 1 FROM embeddings e WHERE e.node_id = c.id AND e.model = ?)""",
                (model,),
            ).fetchone()[0]
        )

    def cached_vectors(self, model: str, hashes: Sequence[str]) -> dict[str, bytes]:
        """Vectors already made by ``model`` for these content hashes (any node)."""
        found: dict[str, bytes] = {}
        for part, marks in batches(hashes):
            for sha, blob in self.conn.execute(
                f"""SELECT content_sha256, vector FROM embeddings
                    WHERE model = ? AND content_sha256 IN ({marks})""",
                (model, *part),
            ):
                found[sha] = blob
        return found

    def insert_vectors(self, rows: Iterable[tuple[str, str, str, int, bytes, str]]) -> None:
        """Rows of (node id, model signature, source id, dim, float32 LE blob, content sha)."""
        self.conn.executemany(
            """INSERT OR REPLACE INTO embeddings
               (node_id, model, source_id, dim, vector, content_sha256)
               VALUES (?, ?, ?, ?, ?, ?)""",
            rows,
        )
        self.bump_generation()

    def vector_models(self) -> dict[str, int]:
        """Model signature → vector count."""
        return dict(
            self.conn.execute("SELECT model, count(*) FROM embeddings GROUP BY model").fetchall()
        )

    def delete_vectors(self, *, keep_model: str | None = None) -> int:
        """Delete the vectors of every model but ``keep_model`` (all when None)."""
        if keep_model is None:
            cursor = self.conn.execute("DELETE FROM embeddings")
        else:
            cursor = self.conn.execute("DELETE FROM embeddings WHERE model != ?", (keep_model,))
        self.bump_generation()
        return cursor.rowcount

    def iter_vectors(self, model: str, batch: int = 10_000) -> Iterator[tuple[list[int], bytes]]:
        """(chunk rowids, concatenated float32 blobs) of ``model``'s vectors, in rowid order."""
        cursor = self.conn.execute(
            """SELECT c.rowid, e.vector FROM embeddings e JOIN chunks c ON c.id = e.node_id
               WHERE e.model = ? ORDER BY c.rowid""",
            (model,),
        )
        while rows := cursor.fetchmany(batch):
            yield [r[0] for r in rows], b"".join(r[1] for r in rows)

    def vector_keys(self, model: str) -> list[tuple[int, str]]:
        """(chunk rowid, chunk id) of the chunks that have a vector of ``model``, by rowid."""
        return [
            (int(row[0]), str(row[1]))
            for row in self.conn.execute(
                """SELECT c.rowid, c.id FROM embeddings e JOIN chunks c ON c.id = e.node_id
                   WHERE e.model = ? ORDER BY c.rowid""",
                (model,),
            )
        ]

    def vectors_by_rowid(self, model: str, rowids: Sequence[int]) -> dict[int, bytes]:
        found: dict[int, bytes] = {}
        for part, marks in batches(rowids):
            for rowid, blob in self.conn.execute(
                f"""SELECT c.rowid, e.vector FROM chunks c
                    JOIN embeddings e ON e.node_id = c.id AND e.model = ?
                    WHERE c.rowid IN ({marks})""",
                (model, *part),
            ):
                found[rowid] = blob
        return found

    def rowids_to_ids(self, rowids: Sequence[int]) -> dict[int, str]:
        found: dict[int, str] = {}
        for part, marks in batches([int(r) for r in rowids]):
            for rowid, node in self.conn.execute(
                f"SELECT rowid, id FROM chunks WHERE rowid IN ({marks})", part
            ):
                found[rowid] = node
        return found

    def ids_to_rowids(self, node_ids: Sequence[str]) -> dict[str, int]:
        found: dict[str, int] = {}
        for part, marks in batches(node_ids):
            for node, rowid in self.conn.execute(
                f"SELECT id, rowid FROM chunks WHERE id IN ({marks})", part
            ):
                found[node] = rowid
        return found

    def allowed_rowids(self, filters: Filters) -> list[int] | None:
        """The chunk rowids ``filters`` admit, or None when every chunk is admitted (no
        filter and no locked source), which lets the vector leg skip building a mask."""
        locked = self.conn.execute("SELECT 1 FROM sources WHERE locked = 1 LIMIT 1").fetchone()
        if filters == Filters() and locked is None:
            return None
        where, params = filter_sql(filters)
        return [
            row[0]
            for row in self.conn.execute(
                f"""SELECT c.rowid FROM chunks c JOIN sources s ON s.id = c.source_id
                    WHERE {where}""",
                params,
            )
        ]

    def vectors_of(self, model: str, node_ids: Sequence[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        for part, marks in batches(node_ids):
            for node, blob in self.conn.execute(
                f"SELECT node_id, vector FROM embeddings WHERE model = ? AND node_id IN ({marks})",
                (model, *part),
            ):
                found[node] = blob
        return found

    # -- graph -----------------------------------------------------------------------------

    def write_state(self) -> tuple[int, int]:
        """Moves whenever this connection or another one changes the database: what caches
        of its contents are keyed on."""
        return self.conn.execute("PRAGMA data_version").fetchone()[0], self.conn.total_changes

    def chunk_count(self) -> int:
        """The number of chunks, cached until this or another connection writes (not inside
        a transaction, which may yet roll back what it counted)."""
        key = self.write_state()
        if self._count_cache is not None and self._count_cache[0] == key:
            return self._count_cache[1]
        count = int(self.conn.execute("SELECT count(*) FROM chunks").fetchone()[0])
        self._count_cache = None if self.conn.in_transaction else (key, count)
        return count

    def scopes(self) -> dict[str, str]:
        """Source id → scope, without the per-source counts :meth:`sources` makes."""
        return dict(self.conn.execute("SELECT id, scope FROM sources").fetchall())

    def entity_frequencies(self, entity_ids: Sequence[str]) -> dict[str, int]:
        """How many nodes mention each of these entities (absent ones are left out)."""
        return self.postings.frequencies(entity_ids)

    def nodes_by_entities(
        self,
        weights: dict[str, float],
        filters: Filters,
        limit: int,
        *,
        exclude: Sequence[str] = (),
    ) -> dict[str, float]:
        """Nodes mentioning any of these entities, scored by the summed entity weights,
        filtered before the limit (ties to the smaller id).

        Without a time filter the gate is a set of sources and the in-memory postings
        answer; with one, the chunks' times are needed and SQL does.
        """
        if not weights:
            return {}
        if filters.since is None and filters.until is None:
            where, params = filter_sql(filters)
            sources = [
                row[0]
                for row in self.conn.execute(f"SELECT s.id FROM sources s WHERE {where}", params)
            ]
            return self.postings.score(weights, sources, limit, exclude=exclude)
        values = ",".join("(?, ?)" for _ in weights)
        where, params = filter_sql(filters)
        skip = ""
        if exclude:
            skip = f"AND e.node_id NOT IN ({','.join('?' * len(exclude))})"
        rows = self.conn.execute(
            f"""WITH q(entity_id, weight) AS (VALUES {values})
                SELECT e.node_id, sum(q.weight) AS score
                FROM q JOIN entity_index e ON e.entity_id = q.entity_id
                JOIN chunks c ON c.id = e.node_id JOIN sources s ON s.id = c.source_id
                WHERE {where} {skip}
                GROUP BY e.node_id ORDER BY score DESC, e.node_id LIMIT ?""",
            (*[x for pair in weights.items() for x in pair], *params, *exclude, limit),
        ).fetchall()
        return {row[0]: float(row[1]) for row in rows}

    def neighbour_chunks(
        self, node_ids: Sequence[str], filters: Filters, *, window: int = 1
    ) -> dict[str, list[tuple[str, int]]]:
        """For each chat chunk, the chunks up to ``window`` places before and after it in its
        source, with their distance: the turns around it in the conversation. Independent
        documents have no such link."""
        out: dict[str, list[tuple[str, int]]] = {n: [] for n in node_ids}
        if not node_ids:
            return out
        where, params = filter_sql(filters, chunk="n")
        marks = ",".join("?" * len(node_ids))
        for seed, node, distance in self.conn.execute(
            f"""SELECT c.id, n.id, abs(n.seq - c.seq) FROM chunks c
                JOIN chunks n ON n.source_id = c.source_id
                    AND n.seq BETWEEN c.seq - ? AND c.seq + ? AND n.seq != c.seq
                JOIN sources s ON s.id = n.source_id
                WHERE c.id IN ({marks}) AND s.kind = 'chat' AND {where}
                ORDER BY c.id, n.seq""",
            (window, window, *node_ids, *params),
        ):
            out[seed].append((node, int(distance)))
        return out

    # -- reads (SQL in search.py) ---------------------------------------------------------

    def fts_search(
        self,
        expression: str,
        filters: Filters,
        limit: int,
        *,
        snippets: bool = True,
        count: bool = True,
    ) -> tuple[list[RetrievalHit], int]:
        from stratamem.store.sqlite import search

        return search.fts_search(self, expression, filters, limit, snippets=snippets, count=count)

    def keyword_hits(
        self, expression: str, ranked: Sequence[tuple[int, float]], *, snippets: bool = True
    ) -> list[RetrievalHit]:
        from stratamem.store.sqlite import search

        return search.keyword_hits(self, expression, ranked, snippets=snippets)

    def search_entities(self, needle: str, kinds: Sequence[str], limit: int) -> list[EntityMatch]:
        from stratamem.store.sqlite import search

        return search.search_entities(self, needle, kinds, limit)

    def neighbours(self, entity_id: str, limit: int) -> list[tuple[str, float]]:
        from stratamem.store.sqlite import search

        return search.neighbours(self, entity_id, limit)

    # -- stats -----------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        one = self.conn.execute
        return {
            "path": self.path,
            "sources": one("SELECT count(*) FROM sources").fetchone()[0],
            "chunks": one("SELECT count(*) FROM chunks").fetchone()[0],
            "tokens": one("SELECT coalesce(sum(token_count), 0) FROM chunks").fetchone()[0],
            "entities": one("SELECT count(DISTINCT entity_id) FROM entity_index").fetchone()[0],
            "mentions": one("SELECT count(*) FROM entity_index").fetchone()[0],
            "edges": one("SELECT count(*) FROM entity_edges").fetchone()[0],
            "by_kind": dict(
                one(
                    """SELECT s.kind, count(c.id) FROM sources s
                       LEFT JOIN chunks c ON c.source_id = s.id GROUP BY s.kind ORDER BY s.kind"""
                ).fetchall()
            ),
            "bytes": Path(self.path).stat().st_size if Path(self.path).exists() else 0,
        }


def chunk_from_row(row: sqlite3.Row) -> Chunk:
    return Chunk(
        id=row["id"],
        source_id=row["source_id"],
        seq=row["seq"],
        content=row["content"],
        token_count=row["token_count"],
        time_start=from_ms(row["ts_start"]),
        time_end=from_ms(row["ts_end"]),
        author=row["author"],
        title=row["title"],
        tags=tuple(json.loads(row["tags"])),
        source_ref=row["source_ref"],
        thread=row["thread"],
        doc_id=row["doc_id"],
        version=row["version"],
        content_sha256=row["content_sha256"],
    )


def _source(row: sqlite3.Row) -> Source:
    return Source(
        id=row["id"],
        scope=row["scope"],
        kind=SourceKind(row["kind"]),
        platform=row["platform"],
        location=row["location"],
        title=row["title"],
        access=tuple(json.loads(row["access"])),
        locked=bool(row["locked"]),
        ingested_at=from_ms(row["ingested_at"]),
        chunk_count=row["n"],
    )


def filter_sql(filters: Filters, *, chunk: str = "c", source: str = "s") -> tuple[str, list[Any]]:
    """The WHERE fragment for ``filters`` over a chunks alias joined to a sources alias.

    Locked sources never match: the access gate sits inside every query, before any limit.
    """
    clauses = [f"{source}.locked = 0"]
    params: list[Any] = []
    if filters.sources:
        parts = []
        for ref in filters.sources:
            if ref.endswith("*"):
                # LIKE's ASCII-only case folding, without its limit on a pattern's length.
                parts.append(f"lower(substr({source}.scope, 1, ?)) = lower(?)")
                params.extend([len(ref) - 1, ref[:-1]])
            else:
                parts.append(f"({source}.id = ? OR {source}.scope = ?)")
                params.extend([ref, ref])
        clauses.append("(" + " OR ".join(parts) + ")")
    if filters.kinds:
        clauses.append(f"{source}.kind IN ({','.join('?' * len(filters.kinds))})")
        params.extend(k.value for k in filters.kinds)
    if filters.since is not None:
        clauses.append(f"coalesce({chunk}.ts_end, {chunk}.ts_start) >= ?")
        params.append(to_ms(filters.since))
    if filters.until is not None:
        clauses.append(f"{chunk}.ts_start <= ?")
        params.append(to_ms(filters.until))
    return " AND ".join(clauses), params
