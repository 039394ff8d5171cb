"""Chunks and their entity mentions in the store (the ``ChunkStore`` role).

A chunk id is the first 32 hex digits of sha256(source id, seq, content). Every read here
passes the reader's gate (:meth:`~stratamem.store.tables.sources.SourceTables.visible_ids`)
but those of the writer's own bookkeeping, which name one source or its chunks by id.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from stratamem.store.base import from_ms, to_ms
from stratamem.store.dialect import Connection, Dialect, Row
from stratamem.store.jobs import SEAL_KIND, seal_job_key
from stratamem.store.sources import ChunkHead, ChunkPlace
from stratamem.store.tables.filters import gate_sql
from stratamem.types import Chunk, Mention

T = TypeVar("T")

if TYPE_CHECKING:
    from stratamem.store.tables.jobs import JobQueue
    from stratamem.store.tables.trees import TreeTables


class ChunkTables:
    """The chunks half of a store (SQLite's or PostgreSQL's)."""

    conn: Connection
    dialect: Dialect

    if TYPE_CHECKING:
        trees: TreeTables
        jobs: JobQueue

        def visible_ids(self) -> list[str] | None: ...

        def bump_generation(self, *, chunks: bool = True) -> None: ...

        def add_edges(self, source_id: str, node_ids: Sequence[str], *, sign: int = 1) -> None: ...

        def _cached_read(self, what: Hashable, read: Callable[[], T]) -> T: ...

    def existing_ids(self, ids: Sequence[str]) -> set[str]:
        d = self.dialect
        found: set[str] = set()
        for part, marks in d.batches(ids):
            found.update(
                row[0]
                for row in self.conn.execute(f"SELECT id FROM chunks WHERE id IN ({marks})", part)
            )
        return found

    def insert_chunks(self, chunks: Iterable[Chunk]) -> None:
        d = self.dialect
        self.conn.executemany(
            f"""INSERT INTO chunks (id, source_id, seq, content, title, token_count, author,
                 ts_start, ts_end, tags, source_ref, thread, doc_id, version, content_sha256,
                 record_key, meta)
               VALUES ({d.marks(17)})""",
            map(_chunk_row, chunks),
        )

    def insert_mentions(self, mentions: Iterable[tuple[Chunk, Iterable[Mention]]]) -> None:
        self.insert_mentions_rows(mention_rows(mentions))

    def insert_mentions_rows(self, rows: Iterable[MentionRow]) -> int:
        """Store mention rows (see :func:`mention_rows`); how many were new."""
        d = self.dialect
        cursor = self.conn.executemany(
            f"""INSERT INTO entity_index (entity_id, node_id, kind, surface, source_id, ts)
               VALUES ({d.marks(6)}) ON CONFLICT DO NOTHING""",
            rows,
        )
        return max(int(cursor.rowcount), 0)  # DB-API: -1 where a driver cannot count

    def chunk_places(self, source_id: str, ids: Sequence[str]) -> dict[str, ChunkPlace]:
        """The place and the facets of each of these chunks the source holds."""
        d = self.dialect
        found: dict[str, ChunkPlace] = {}
        for part, marks in d.batches(ids):
            rows = self.conn.execute(
                f"""SELECT id, seq, ts_start, ts_end, tags, author, source_ref FROM chunks
                    WHERE source_id = {d.p} AND id IN ({marks})""",
                [source_id, *part],
            )
            for node, seq, start, end, tags, author, ref in rows:
                found[node] = ChunkPlace(seq, start, end, tuple(json.loads(tags)), author, ref)
        return found

    def move_chunks(self, places: Sequence[tuple[str, int]]) -> None:
        """Give chunks (id, place) new places in their source."""
        d = self.dialect
        self.conn.executemany(
            f"UPDATE chunks SET seq = {d.p} WHERE id = {d.p}", [(s, i) for i, s in places]
        )

    def chunk_ids(self, source_id: str) -> list[str]:
        """The ids of the source's chunks, in place order."""
        d = self.dialect
        sql = f"SELECT id FROM chunks WHERE source_id = {d.p} ORDER BY seq"
        return [row[0] for row in self.conn.execute(sql, (source_id,))]

    def _delete_chunks(self, where: str, params: list[Any]) -> int:
        nodes = [
            row[0] for row in self.conn.execute(f"SELECT id FROM chunks WHERE {where}", params)
        ]
        return self._delete_nodes(params[0], nodes)

    def _delete_nodes(self, source_id: str, nodes: list[str]) -> int:
        """Delete these chunks of the source with everything derived from them."""
        d = self.dialect
        if not nodes:
            return 0
        # Summaries over the doomed chunks summarise text that is going away: retire them and
        # have the tree sealed again.
        for tree_id in self.trees.invalidate_chunks(nodes):
            self.jobs.enqueue(SEAL_KIND, seal_job_key(tree_id), {"tree_id": tree_id})
        for part, marks in d.batches(nodes):
            self.add_edges(source_id, part, sign=-1)
            # The pairs taken back to nothing go, found by their first entity: one of these
            # chunks' (edges have no index by source).
            self.conn.execute(
                f"""DELETE FROM entity_edges WHERE source_id = {d.p} AND weight <= 0
                    AND a IN (SELECT entity_id FROM entity_index WHERE node_id IN ({marks}))""",
                (source_id, *part),
            )
            self.conn.execute(f"DELETE FROM entity_index WHERE node_id IN ({marks})", part)
            self.conn.execute(f"DELETE FROM embeddings WHERE node_id IN ({marks})", part)
            self.conn.execute(f"DELETE FROM chunks WHERE id IN ({marks})", part)
        self.bump_generation()
        return len(nodes)

    def content_keys(self, ids: Sequence[str]) -> dict[str, tuple[str, int]]:
        """(content digest, place in its source) of each of these chunks."""
        d = self.dialect
        found: dict[str, tuple[str, int]] = {}
        for part, marks in d.batches(ids):
            for node, sha, seq in self.conn.execute(
                f"SELECT id, content_sha256, seq FROM chunks WHERE id IN ({marks})", part
            ):
                found[str(node)] = (str(sha), int(seq))
        return found

    def chunks(self, ids: Sequence[str]) -> list[Chunk]:
        """Chunks by id, in the order asked; unknown ids, and those the reader may not see,
        are left out."""
        found = {c.id: c for c in map(chunk_from_row, self._visible_rows(CHUNK_COLUMNS, ids))}
        return [found[i] for i in ids if i in found]

    def chunk_heads(self, ids: Sequence[str]) -> dict[str, ChunkHead]:
        columns = "c.id, c.source_id, c.seq, c.content_sha256, c.tags"
        return {
            row[0]: ChunkHead(row[1], row[2], row[3], _tags(row[4]))
            for row in self._visible_rows(columns, ids)
        }

    def chunks_and_mentions(self, ids: Sequence[str]) -> tuple[list[Chunk], dict[str, list[str]]]:
        """:meth:`chunks` and :meth:`mentions_of` of these ids in one read."""
        named = f"""(SELECT {self.dialect.group_array("e.entity_id")} FROM entity_index e
                     WHERE e.node_id = c.id)"""
        found: dict[str, Chunk] = {}
        mentions: dict[str, list[str]] = {i: [] for i in ids}
        for row in self._visible_rows(f"{CHUNK_COLUMNS}, {named}", ids):
            chunk = chunk_from_row(row)
            found[chunk.id] = chunk
            mentions[chunk.id] = sorted(json.loads(row[_CHUNK_WIDTH]))
        return [found[i] for i in ids if i in found], mentions

    def _visible_rows(self, columns: str, ids: Sequence[str]) -> Iterator[Row]:
        """``columns`` (over chunks ``c``) of the chunks of these ids the reader may see, in
        no set order: every read of chunks by id goes through the gate here."""
        d = self.dialect
        gate, params = gate_sql(d, self.visible_ids(), probe=True)
        for part, marks in d.batches(ids):
            yield from self.conn.execute(
                f"""SELECT {columns} FROM chunks c JOIN sources s ON s.id = c.source_id
                    WHERE c.id IN ({marks}) AND {gate}""",
                (*part, *params),
            )

    def iter_chunks(self, source_id: str) -> Iterator[Chunk]:
        d = self.dialect
        for row in self.conn.execute(
            f"SELECT {CHUNK_COLUMNS} FROM chunks c WHERE c.source_id = {d.p} ORDER BY c.seq",
            (source_id,),
        ):
            yield chunk_from_row(row)

    def mentions_of(self, node_ids: Sequence[str]) -> dict[str, list[str]]:
        """The entities each chunk names (none for one the reader may not see)."""
        d = self.dialect
        out: dict[str, list[str]] = {i: [] for i in node_ids}
        gate, params = gate_sql(self.dialect, self.visible_ids(), probe=True)
        for part, marks in d.batches(node_ids):
            for node, entity in self.conn.execute(
                f"""SELECT e.node_id, e.entity_id FROM entity_index e
                    JOIN sources s ON s.id = e.source_id
                    WHERE e.node_id IN ({marks}) AND {gate}
                    ORDER BY e.node_id, e.entity_id""",
                (*part, *params),
            ):
                out[node].append(entity)
        return out

    def source_chunk_count(self, source_id: str) -> int:
        d = self.dialect
        row = self.conn.execute(
            f"SELECT chunks FROM source_counts WHERE source_id = {d.p}", (source_id,)
        ).fetchone()
        return int(row[0]) if row else 0

    def chunk_count(self) -> int:
        """The number of chunks the reader may see: the sum of their sources' counts (kept as
        chunks are written and deleted), cached until this or another connection writes (not
        inside a transaction, which may yet roll back what it counted)."""

        def read() -> int:
            gate, params = gate_sql(self.dialect, self.visible_ids())
            row = self.conn.execute(
                f"""SELECT coalesce(sum(n.chunks), 0) FROM source_counts n
                    JOIN sources s ON s.id = n.source_id WHERE {gate}""",
                params,
            ).fetchone()
            return int(row[0])

        return self._cached_read("chunk count", read)


def _chunk_row(c: Chunk) -> tuple[object, ...]:
    """The values of a chunk in the column order of :meth:`ChunkTables.insert_chunks`."""
    return (
        c.id,
        c.source_id,
        c.seq,
        c.content,
        c.title,
        c.token_count,
        c.author,
        to_ms(c.time_start),
        to_ms(c.time_end),
        json.dumps(list(c.tags)) if c.tags else "[]",
        c.source_ref,
        c.thread,
        c.doc_id,
        c.version,
        c.content_sha256,
        c.record_key,
        json.dumps(c.meta, default=str) if c.meta else "{}",
    )


MentionRow = tuple[str, str, str, str, str, int | None]


def mention_rows(mentions: Iterable[tuple[Chunk, Iterable[Mention]]]) -> Iterator[MentionRow]:
    """(entity id, node id, kind, surface, source id, ts in ms) of each mention."""
    for chunk, found in mentions:
        node, source, ts = chunk.id, chunk.source_id, to_ms(chunk.time_start)
        for m in found:
            yield (m.entity_id, node, m.kind, m.surface, source, ts)


# The columns :func:`chunk_from_row` reads, in its order (first in any query it reads).
CHUNK_COLUMNS = """c.id, c.source_id, c.seq, c.content, c.token_count, c.ts_start, c.ts_end,
    c.author, c.title, c.tags, c.source_ref, c.thread, c.doc_id, c.version, c.content_sha256,
    c.record_key, c.meta"""
_CHUNK_WIDTH = CHUNK_COLUMNS.count(",") + 1


def chunk_from_row(row: Row) -> Chunk:
    """The chunk of a row that begins with :data:`CHUNK_COLUMNS` (read by place: a search
    makes dozens a query)."""
    (
        node,
        source,
        seq,
        content,
        tokens,
        start,
        end,
        author,
        title,
        tags,
        ref,
        thread,
        doc,
        version,
        sha,
        record,
        meta,
    ) = row[:_CHUNK_WIDTH]
    return Chunk(
        id=node,
        source_id=source,
        seq=seq,
        content=content,
        token_count=tokens,
        time_start=from_ms(start),
        time_end=from_ms(end),
        author=author,
        title=title,
        tags=_tags(tags),
        source_ref=ref,
        thread=thread,
        doc_id=doc,
        version=version,
        content_sha256=sha,
        record_key=record,
        meta={} if meta == "{}" else json.loads(meta),
    )


def _tags(stored: str) -> tuple[str, ...]:
    return () if stored == "[]" else tuple(json.loads(stored))
