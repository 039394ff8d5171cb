"""The PostgreSQL store: one database that many processes, on many machines, share.

It is the shared tables (:mod:`stratamem.store.tables`, their SQL built from
:class:`~stratamem.store.postgres.dialect.PostgresDialect`) put together over a PostgreSQL
connection (:class:`~stratamem.store.postgres.connection.PgConnection`), with what differs
between the engines here: the connection, transactions and read snapshots, the settings'
counters, what keys caches of the database's contents (:meth:`PostgresStore.write_state`),
scrubbing, and the keyword role (``keyword``), whose BM25 keeps the SQLite store's numbers.
On-disk format: see ``migrations.py``.

Concurrency: every write transaction holds the store's advisory lock, so writes take turns as
on SQLite, while reads run beside them, each read snapshot a ``REPEATABLE READ`` transaction.
A process's in-memory indexes (sparse keyword, vectors, entity postings) compare the counters
every write bumps and :meth:`write_state`, which moves with any commit on the server, so a
write made by another process is seen by the next search here.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from collections.abc import Collection, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import psycopg

from stratamem.errors import StoreError
from stratamem.store.caches import LastFew
from stratamem.store.postgres.connection import PgConnection, atomic, connect, redact
from stratamem.store.postgres.copying import PgCopyRows
from stratamem.store.postgres.derived import with_derived
from stratamem.store.postgres.dialect import POSTGRES
from stratamem.store.postgres.keyword import PgKeywordTables
from stratamem.store.postgres.migrations import migrate, require_vector_extension
from stratamem.store.postgres.vectors import PgVectorTables
from stratamem.store.settings import CHUNK_GENERATION_KEY, GENERATION_KEY
from stratamem.store.tables.aliases import AliasTables
from stratamem.store.tables.chunks import ChunkTables, _chunk_row, mention_rows
from stratamem.store.tables.facts import FactTables
from stratamem.store.tables.graph import GraphTables, co_mention_pairs
from stratamem.store.tables.items import ItemVersionTables
from stratamem.store.tables.jobs import JobQueue
from stratamem.store.tables.locks import LockTables, table_columns
from stratamem.store.tables.postings import COUNTED_MENTIONS, EntityPostings
from stratamem.store.tables.principals import PrincipalTables
from stratamem.store.tables.records import RecordTables
from stratamem.store.tables.rollups import RollupTables
from stratamem.store.tables.settings import SettingTables
from stratamem.store.tables.sources import SourceTables
from stratamem.store.tables.trees import TreeTables
from stratamem.types import Chunk, Mention

# Tables whose rows hold a source's text: vacuumed after a forget.
_TEXT_TABLES = (
    "chunks",
    "summaries",
    "records",
    "item_versions",
    "facts",
    "sealed",
    "embeddings",
)

# In the order of ``_chunk_row`` and ``mention_rows``; the chunks' token counts last.
_CHUNK_COLUMNS = (
    *("id", "source_id", "seq", "content", "title", "token_count", "author", "ts_start"),
    *("ts_end", "tags", "source_ref", "thread", "doc_id", "version", "content_sha256"),
    *("record_key", "meta", "terms_content", "terms_title"),
)
_MENTION_COLUMNS = ("entity_id", "node_id", "kind", "surface", "source_id", "ts")


class PostgresStore(
    PgCopyRows,
    SourceTables,
    ChunkTables,
    RecordTables,
    ItemVersionTables,
    PgVectorTables,
    GraphTables,
    AliasTables,
    PgKeywordTables,
    PrincipalTables,
    LockTables,
    FactTables,
    RollupTables,
    SettingTables,
):
    """Owns one connection to the server; use as a context manager or call :meth:`close`."""

    name = "postgresql"
    dialect = POSTGRES
    conn: PgConnection

    def __init__(self, location: str) -> None:
        self.location = location
        self.path = redact(location)
        self.conn = connect(location)
        self._reading = False
        self._memo: dict[Any, Any] | None = None
        self._reads_cache: LastFew[tuple[tuple[int, int], Any]] = LastFew(64)
        self.principal_name: str | None = None
        try:
            require_vector_extension(self.conn)
            migrate(self.conn)
        except BaseException:
            self.conn.close()
            raise
        if self.get_setting("store.id") is None:
            with self.transaction():
                self.conn.execute(
                    "INSERT INTO settings (key, value) VALUES ('store.id', md5(random()::text))"
                    " ON CONFLICT DO NOTHING"
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
        self._counters = CommittedCounters(self.location, self.path)
        self._index_base: str | None = None

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._counters.close()
        self.conn.close()

    def transaction(self) -> AbstractContextManager[PgConnection]:
        if self._reading:
            raise StoreError(f"{self.path}: a write cannot start inside a read snapshot")
        return atomic(self.conn)

    def in_transaction(self) -> bool:
        return self.conn.in_transaction and not self._reading

    @contextmanager
    def read_snapshot(self) -> Iterator[None]:
        """A ``REPEATABLE READ`` transaction: every read inside sees one commit of the
        database. Inside another transaction, read or write, this one joins it."""
        if self.conn.in_transaction:
            yield
            return
        # The snapshot, its write state and the store's settings come back with the BEGIN, in
        # one round trip: inside, nothing is written, so they hold until it ends, which
        # spares a search a dozen round trips.
        cursor = self.conn.command(_BEGIN_READ)
        self._reading = True
        self._memo = _snapshot_memo(cursor, self.conn.total_changes)
        try:
            yield
        finally:
            self._memo = None
            self._reading = False
            if self.conn.in_transaction:
                try:
                    self.conn.command(b"COMMIT")
                finally:
                    if self.conn.in_transaction:  # the COMMIT never ran: end it all the same
                        self.conn.command(b"ROLLBACK")

    @contextmanager
    def rebuildable_writes(self) -> Iterator[None]:
        """Commits made inside do not wait for the WAL to reach the disk: for derived data,
        which a crash of the server can cost but not corrupt, and which durable jobs rebuild."""
        self.conn.command(b"SET synchronous_commit = off")
        try:
            yield
        finally:
            self.conn.command(b"SET synchronous_commit = on")

    @contextmanager
    def bulk_writes(self) -> Iterator[None]:
        """Nothing: the server's own buffers hold the pages, whoever writes."""
        yield

    def refresh_statistics(self) -> None:
        """``ANALYZE``: a table PostgreSQL has no statistics of yet is planned as a small one,
        until autovacuum samples it (within about a minute). The summary trees built right
        after an ingest of 100k chunks took about 110 s without them and 35 s with them (about
        2 s for the ``ANALYZE``)."""
        self.conn.command(b"ANALYZE")

    def get_setting(self, key: str) -> str | None:
        memo = self._memo
        if memo is not None and ("setting", key) in memo:
            found: str | None = memo[("setting", key)]
            return found
        if memo is not None and _PREFETCHED in memo and ":" not in key:
            return None  # read with the snapshot's BEGIN: the store has no such setting
        row = self.conn.execute("SELECT value FROM settings WHERE key = %s", (key,)).fetchone()
        value = None if row is None else str(row[0])
        if memo is not None:
            memo[("setting", key)] = value
        return value

    def committed_generations(self) -> tuple[int, int]:
        """The counters as committed, whatever transaction this connection is in."""
        return self._counters.read()

    def write_state(self) -> tuple[int, int]:
        """Moves whenever this connection or another one changes the database: the server's
        snapshot (which transactions it sees as committed: it differs after any commit) and
        this connection's own changes, which its snapshot does not show."""
        memo = self._memo
        if memo is not None and "state" in memo:
            held: tuple[int, int] = memo["state"]
            return held
        row = self.conn.command(b"SELECT pg_current_snapshot()::text").fetchone()
        state = (_state_digest(str(row[0]) if row else ""), self.conn.total_changes)
        if memo is not None:
            memo["state"] = state
        return state

    def index_base(self) -> str | None:
        """Where this process keeps its index files for the store: a cache directory named
        by the store's id (the database itself is on the server)."""
        from stratamem.store.postgres.files import index_base

        if self._index_base is None:
            self._index_base = str(index_base(self.store_id()))
        return self._index_base

    # -- what differs from SQLite ---------------------------------------------------------------

    def insert_chunks(self, chunks: Iterable[Chunk]) -> None:
        """Store new chunks with one ``COPY``, their token counts computed here."""
        batch = list(chunks)
        counts = self.term_counts(batch)
        self.conn.copy_rows(
            "chunks",
            _CHUNK_COLUMNS,
            ((*_chunk_row(c), a, b) for c, (a, b) in zip(batch, counts, strict=True)),
        )

    def insert_mentions(self, mentions: Iterable[tuple[Chunk, Iterable[Mention]]]) -> None:
        """Store the entity mentions of new chunks with one ``COPY``: a mention named twice
        in a chunk is written once (the first), as SQLite's ``INSERT OR IGNORE`` keeps it;
        the chunks are new, so no stored row shares a key with them."""
        rows: dict[tuple[str, str, str], tuple[Any, ...]] = {}
        for row in mention_rows(mentions):
            rows.setdefault((row[0], row[4], row[1]), row)
        self.conn.copy_rows("entity_index", _MENTION_COLUMNS, rows.values())

    def add_new_edges(self, source_id: str, mentions: Iterable[Collection[str]]) -> None:
        """The co-mention pairs of new nodes in one statement over three arrays (one round
        trip, where a statement per pair is one each)."""
        pairs = co_mention_pairs(mentions)
        if not pairs:
            return
        a, b, n = (list(column) for column in zip(*pairs, strict=True))
        self.conn.execute(
            """INSERT INTO entity_edges (a, b, source_id, weight)
               SELECT x.a, x.b, %s, x.n
               FROM unnest(CAST(%s AS text[]), CAST(%s AS text[]), CAST(%s AS real[]))
                   AS x(a, b, n)
               ON CONFLICT (a, b, source_id)
               DO UPDATE SET weight = entity_edges.weight + excluded.weight""",
            (source_id, a, b, n),
        )

    def insert_restored(self, table: str, columns: list[str], rows: Iterator[list[Any]]) -> None:
        """Put sealed rows back as this store writes them: columns the table lacks left out,
        the derived ones computed now (a source may have been sealed by a SQLite store, then
        copied here), and a row key counter moved past the rowids put back."""
        have = set(table_columns(self.conn, table))
        known = [c for c in columns if c in have]
        keep = [columns.index(c) for c in known]
        names, marks, _ = with_derived(self, table, known, [])
        sql = f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join(marks)})"
        while batch := [[row[i] for i in keep] for row in itertools.islice(rows, 1000)]:
            self.conn.executemany(sql, with_derived(self, table, known, batch)[2])
        if "rowid" in known:
            self.conn.execute(
                f"""SELECT setval(pg_get_serial_sequence(%s, 'rowid'), greatest(
                       (SELECT coalesce(max(rowid), 1) FROM {table}),
                       coalesce(pg_sequence_last_value(
                           CAST(pg_get_serial_sequence(%s, 'rowid') AS regclass)), 1)))""",
                (table, table),
            )

    def scrub(self) -> None:
        """Vacuum the tables that hold text, so that a forgotten source's rows are no longer
        kept as dead row versions. (PostgreSQL reuses that space rather than zeroing it, and
        its WAL and backups keep what they kept: see docs/postgres.md.)"""
        if self.conn.in_transaction:
            return
        for table in _TEXT_TABLES:
            self.conn.raw.execute(f"VACUUM {table}".encode())

    def bytes_on_disk(self) -> int:
        """What the database takes on the server."""
        row = self.conn.execute("SELECT pg_database_size(current_database())").fetchone()
        return int(row[0]) if row is not None else 0


# A read snapshot's BEGIN, and what it reads: the server's snapshot (the write state) and the
# settings, but those keyed per source (``extract.done:<source>``), which are many and which
# searches do not read.
_BEGIN_READ = (
    b"BEGIN ISOLATION LEVEL REPEATABLE READ;"
    b" SELECT pg_current_snapshot()::text, NULL, NULL"
    b" UNION ALL SELECT NULL, key, value FROM settings WHERE strpos(key, ':') = 0"
)
_PREFETCHED = "settings read"


def _snapshot_memo(cursor: psycopg.Cursor[Any], changes: int) -> dict[Any, Any]:
    """What a read snapshot's BEGIN (``_BEGIN_READ``) read, as :meth:`PostgresStore.write_state`
    and :meth:`~PostgresStore.get_setting` keep it."""
    memo: dict[Any, Any] = {_PREFETCHED: True}
    cursor.nextset()
    for snapshot, key, value in cursor.fetchall():
        if snapshot is not None:
            memo["state"] = (_state_digest(str(snapshot)), changes)
        else:
            memo[("setting", str(key))] = None if value is None else str(value)
    return memo


def _state_digest(snapshot: str) -> int:
    return int.from_bytes(hashlib.blake2b(snapshot.encode(), digest_size=8).digest())


def open_postgres(location: str) -> PostgresStore:
    """The ``postgresql`` backend (also ``postgres://``)."""
    try:
        return PostgresStore(location)
    except psycopg.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StoreError(f"{redact(location)}: {first}") from exc


class CommittedCounters:
    """The store's generation counters as committed, read on a connection of their own
    (opened on first use), whatever transaction the store's connections are in: an index
    saver's thread compares them before it writes a file."""

    def __init__(self, location: str, path: str) -> None:
        self._location, self._path = location, path
        self._conn: PgConnection | None = None
        self._lock = threading.Lock()
        self._closed = False

    def read(self) -> tuple[int, int]:
        with self._lock:
            if self._closed:
                raise StoreError(f"{self._path}: the store is closed")
            if self._conn is None:
                self._conn = connect(self._location, application="stratamem-state")
            found: dict[str, str] = dict(
                self._conn.execute(
                    "SELECT key, value FROM settings WHERE key IN (%s, %s)",
                    (GENERATION_KEY, CHUNK_GENERATION_KEY),
                ).fetchall()
            )
        return int(found.get(GENERATION_KEY, 0)), int(found.get(CHUNK_GENERATION_KEY, 0))

    def close(self) -> None:
        """Close the connection; a saver reading meanwhile finishes first, and none opens
        another afterwards."""
        with self._lock:
            self._closed = True
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
