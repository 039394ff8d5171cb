"""The default store: one SQLite file holding sources, chunks, FTS5 and the entity graph.

On-disk format: see ``migrations.py``. Ids: a source id is ``src_`` + the first 16 hex digits of
sha256(scope); a chunk id is the first 32 hex digits of sha256(source id, seq, content).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stratamem.errors import NotFoundError, StoreError
from stratamem.store.base import ChunkRow, MentionRow, from_ms, source_id_for, to_ms
from stratamem.store.sqlite.connection import atomic, connect
from stratamem.store.sqlite.migrations import migrate
from stratamem.types import Chunk, EntityMatch, Filters, RetrievalHit, Source, SourceKind

_BATCH = 500
MAX_EDGE_NODE_ENTITIES = 24


class SQLiteStore:
    """Owns one connection; use as a context manager or call :meth:`close`."""

    name = "sqlite"

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self.conn = connect(path)
        try:
            migrate(self.conn)
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            raise StoreError(f"{path}: cannot open as a stratamem database: {exc}") from exc

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        return atomic(self.conn)

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
            self.conn.execute("DELETE FROM sources WHERE id = ?", (source_id,))
        return int(count)

    # -- chunks ----------------------------------------------------------------------------

    def existing_ids(self, ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for start in range(0, len(ids), _BATCH):
            part = ids[start : start + _BATCH]
            marks = ",".join("?" * len(part))
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
        for start in range(0, len(seqs), _BATCH):
            part = list(seqs[start : start + _BATCH])
            marks = ",".join("?" * len(part))
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
        for start in range(0, len(nodes), _BATCH):
            part = nodes[start : start + _BATCH]
            self.add_edges(source_id, part, sign=-1)
            marks = ",".join("?" * len(part))
            self.conn.execute(f"DELETE FROM entity_index WHERE node_id IN ({marks})", part)
            self.conn.execute(f"DELETE FROM chunks WHERE id IN ({marks})", part)
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
        for start in range(0, len(nodes), _BATCH):
            self.add_edges(source_id, nodes[start : start + _BATCH])

    def chunks(self, ids: Sequence[str]) -> list[Chunk]:
        """Chunks by id, in the order asked; unknown ids are left out."""
        found: dict[str, Chunk] = {}
        for start in range(0, len(ids), _BATCH):
            part = list(ids[start : start + _BATCH])
            marks = ",".join("?" * len(part))
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
        for start in range(0, len(node_ids), _BATCH):
            part = list(node_ids[start : start + _BATCH])
            marks = ",".join("?" * len(part))
            for node, entity in self.conn.execute(
                f"""SELECT node_id, entity_id FROM entity_index WHERE node_id IN ({marks})
                    ORDER BY node_id, entity_id""",
                part,
            ):
                out[node].append(entity)
        return out

    # -- reads (SQL in search.py) ---------------------------------------------------------

    def fts_search(
        self, expression: str, filters: Filters, limit: int, *, snippets: bool = True
    ) -> tuple[list[RetrievalHit], int]:
        from stratamem.store.sqlite import search

        return search.fts_search(self, expression, filters, limit, snippets=snippets)

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
                parts.append(f"{source}.scope LIKE ? ESCAPE '\\'")
                params.append(_like_prefix(ref[:-1]))
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


def _like_prefix(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"
