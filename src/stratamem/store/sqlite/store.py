"""The default store: one SQLite file holding sources, chunks, FTS5, vectors, the entity
graph and the summary trees.

The class is its roles put together, one module each: the shared tables
(:mod:`stratamem.store.tables`: ``sources`` (sources, chunks, mentions, and the reader's
gate), ``records``, ``items`` (item versions), ``vectors``, ``graph``, ``principals``,
``locks`` (sealed sources), ``trees`` and ``jobs``), their SQL built from
:class:`~stratamem.store.sqlite.dialect.SqliteDialect`, and SQLite's own ``keyword`` (FTS5);
this module holds the connection, transactions, settings and the store's identity.
On-disk format: see ``migrations.py``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from stratamem.errors import StoreError
from stratamem.store.caches import LastFew
from stratamem.store.settings import CHUNK_GENERATION_KEY, GENERATION_KEY
from stratamem.store.sqlite.connection import BULK_CACHE_KIB, atomic, connect
from stratamem.store.sqlite.copying import SqliteCopyRows
from stratamem.store.sqlite.dialect import SQLITE
from stratamem.store.sqlite.keyword import KeywordTables
from stratamem.store.sqlite.migrations import migrate
from stratamem.store.sqlite.written import chunks_written
from stratamem.store.tables.aliases import AliasTables
from stratamem.store.tables.chunks import ChunkTables, mention_rows
from stratamem.store.tables.facts import FactTables
from stratamem.store.tables.graph import GraphTables
from stratamem.store.tables.items import ItemVersionTables
from stratamem.store.tables.jobs import JobQueue
from stratamem.store.tables.locks import LockTables
from stratamem.store.tables.postings import COUNTED_MENTIONS, EntityPostings
from stratamem.store.tables.principals import PrincipalTables
from stratamem.store.tables.records import RecordTables
from stratamem.store.tables.rollups import RollupTables
from stratamem.store.tables.settings import SettingTables
from stratamem.store.tables.sources import SourceTables
from stratamem.store.tables.trees import TreeTables
from stratamem.store.tables.vectors import VectorTables
from stratamem.types import Chunk, Mention

# The trigger that counts mentions as they are written, and the fewest a write takes it off
# for (see SQLiteStore.insert_mentions).
_COUNTED_IN = "entity_index_counted_in"
_BULK_MENTIONS = 256


class SQLiteStore(
    SqliteCopyRows,
    SourceTables,
    ChunkTables,
    RecordTables,
    ItemVersionTables,
    VectorTables,
    GraphTables,
    AliasTables,
    KeywordTables,
    PrincipalTables,
    LockTables,
    FactTables,
    RollupTables,
    SettingTables,
):
    """Owns one connection; use as a context manager or call :meth:`close`."""

    name = "sqlite"
    dialect = SQLITE
    conn: sqlite3.Connection

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self.conn = connect(path)
        self._reading = False
        # What the reader's reads work out, kept until the database changes (_cached_read).
        self._reads_cache: LastFew[tuple[tuple[int, int], Any]] = LastFew(64)
        self.principal_name: str | None = None
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
        self.jobs = JobQueue(self.conn, lambda: atomic(self.conn), self.dialect)
        self.postings = EntityPostings(
            lambda: self.conn,
            state=self.write_state,
            generation=self.chunk_generation,
            snapshot=self.read_snapshot,
            writing=self.in_transaction,
            count_sql=COUNTED_MENTIONS,
            dialect=self.dialect,
        )
        self.finish_scrub()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        if self._reading:
            # The write would turn the read snapshot into a write transaction, which SQLite
            # refuses at once (no waiting) once another connection has committed since.
            raise StoreError(f"{self.path}: a write cannot start inside a read snapshot")
        return atomic(self.conn)

    def in_transaction(self) -> bool:
        return self.conn.in_transaction and not self._reading

    @contextmanager
    def read_snapshot(self) -> Iterator[None]:
        """A deferred read transaction: SQLite fixes its snapshot at the first read inside and
        keeps it to the end (WAL readers neither wait for a writer nor hold one up). Inside
        another transaction, read or write, this one joins it."""
        if self.conn.in_transaction:
            yield
            return
        self.conn.execute("BEGIN")
        self._reading = True
        try:
            yield
        finally:
            self._reading = False
            if self.conn.in_transaction:
                self.conn.execute("COMMIT")

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

    @contextmanager
    def bulk_writes(self) -> Iterator[None]:
        """A page cache of 128 MiB in place of 32 while inside. An ingest writes each chunk
        into several B-trees keyed in no order of the writes (the entity index, its node
        index, the edges, FTS5); once they outgrow the cache, their pages are read back from
        the file again and again. At 100k chunks the ingest took 0.87× as long, 18.7 against
        21.4 s (medians of three rounds in turn, ``benchmarks/results/ingest_scale.md``); at
        10k it took the same. When it ends the cache is set back to what it was, so a bulk
        write inside another keeps the outer one's cache."""
        (before,) = self.conn.execute("PRAGMA cache_size").fetchone()
        self.conn.execute(f"PRAGMA cache_size = -{BULK_CACHE_KIB}")
        try:
            yield
        finally:
            self.conn.execute(f"PRAGMA cache_size = {int(before)}")

    def refresh_statistics(self) -> None:
        """Nothing: the store never runs SQLite's ``ANALYZE``, so its planner keeps no
        statistics to fall behind."""

    def insert_chunks(self, chunks: Iterable[Chunk]) -> None:
        """Store new chunks, then index them in FTS5 and count them in their sources, a
        statement each over their rowids (which ``AUTOINCREMENT`` hands out above every
        rowid the table ever held)."""
        (top,) = self.conn.execute("SELECT coalesce(max(rowid), 0) FROM chunks").fetchone()
        super().insert_chunks(chunks)
        chunks_written(self.conn, "rowid > ?", (top,))

    def insert_mentions(self, mentions: Iterable[tuple[Chunk, Iterable[Mention]]]) -> None:
        """Store the entity mentions of new chunks, counted in one statement.

        A trigger keeps the count of mentions row by row (migration 13), which doubles the
        cost of writing them. Inside a write transaction no other connection can write, so the
        trigger is taken off for the insert, the count raised by the rows written and the
        trigger put back as it was, in one savepoint: whatever fails puts all three back.
        """
        rows = list(mention_rows(mentions))
        found = None
        if len(rows) >= _BULK_MENTIONS and self.in_transaction():
            found = self.conn.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = ?",
                (_COUNTED_IN,),
            ).fetchone()
        if found is None:
            self.insert_mentions_rows(rows)
            return
        with atomic(self.conn):
            self.conn.execute(f"DROP TRIGGER {_COUNTED_IN}")
            written = self.insert_mentions_rows(rows)
            self.conn.execute(
                "UPDATE row_counts SET n = n + ? WHERE name = 'entity_index'", (written,)
            )
            self.conn.execute(found[0])

    def insert_restored(self, table: str, columns: list[str], rows: Iterator[list[Any]]) -> None:
        """Put sealed rows back; restored chunks are indexed in FTS5 and counted again."""
        if table != "chunks":
            super().insert_restored(table, columns, rows)
            return
        at, ids = columns.index("id"), []

        def noted() -> Iterator[list[Any]]:
            for row in rows:
                ids.append(row[at])
                yield row

        super().insert_restored(table, columns, noted())
        for part, marks in self.dialect.batches(ids):
            chunks_written(self.conn, f"id IN ({marks})", part)

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

    def committed_generations(self) -> tuple[int, int]:
        if self.path == ":memory:":
            return self.generation(), self.chunk_generation()
        conn = sqlite3.connect(f"file:{Path(self.path).resolve()}?mode=ro", uri=True, timeout=5)
        try:
            found = dict(
                conn.execute(
                    "SELECT key, value FROM settings WHERE key IN (?, ?)",
                    (GENERATION_KEY, CHUNK_GENERATION_KEY),
                ).fetchall()
            )
        finally:
            conn.close()
        return int(found.get(GENERATION_KEY, 0)), int(found.get(CHUNK_GENERATION_KEY, 0))

    def index_base(self) -> str | None:
        return None if self.path == ":memory:" else self.path

    def write_state(self) -> tuple[int, int]:
        """Moves whenever this connection or another one changes the database: what caches
        of its contents are keyed on."""
        return self.conn.execute("PRAGMA data_version").fetchone()[0], self.conn.total_changes

    def bytes_on_disk(self) -> int:
        """The database file's size (0 in memory)."""
        return Path(self.path).stat().st_size if Path(self.path).exists() else 0
