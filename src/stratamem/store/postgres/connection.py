"""A PostgreSQL connection that the store's table classes speak to as they speak to SQLite.

The table classes build their SQL from the store's dialect
(:class:`~stratamem.store.postgres.dialect.PostgresDialect`: ``%s`` for a parameter, and the
few other places where the engines differ); :class:`PgConnection` runs it as it is.

Parameters are bound on the client (:class:`psycopg.ClientCursor`), as SQLite binds them: a
parameter whose type PostgreSQL could not infer is never an error. Rows come back as
:class:`Row`, which reads by position and by column name, as ``sqlite3.Row`` does; Python
booleans are written as integers, and ``numeric`` (what ``sum`` of integers gives) is read
back as an ``int`` (or a ``float`` where it has a fraction).

Transactions are explicit, as on SQLite: the connection is in autocommit mode, and
:func:`atomic` opens one. A write transaction takes the store's advisory lock first, so writers
take turns as they do on SQLite (what the store derives from its writes, such as the
generation counters, assumes one writer at a time), while readers never wait.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, TypeVar

import psycopg
from psycopg import pq
from psycopg.adapt import Dumper, Loader
from psycopg.rows import RowMaker

from stratamem.errors import StoreBusyError, StoreError, StoreFull, full_error, is_disk_full
from stratamem.store.settings import WRITE_WAIT_S

T = TypeVar("T")
# The advisory lock every write transaction of a store holds (pg_advisory_xact_lock's key).
WRITE_LOCK = 0x5374_7261_7461  # "Strata"
# The first word of a statement that only reads: run again on a new connection where the
# server dropped the old one outside a transaction.
_READS = frozenset({"SELECT", "WITH", "BEGIN", "SHOW"})


def _reads(sql: str) -> bool:
    first = sql.lstrip().split(None, 1)
    return bool(first) and first[0].upper() in _READS


class Row(tuple[Any, ...]):
    """A row read by position (``row[0]``) or by column name (``row["id"]``)."""

    __slots__ = ()
    _index: ClassVar[dict[str, int]] = {}

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self) -> list[str]:
        return list(self._index)


@functools.lru_cache(maxsize=512)
def _row_class(names: tuple[str, ...]) -> type[Row]:
    index = {name: i for i, name in enumerate(names)}
    index.update({name.lower(): i for i, name in enumerate(names) if name.lower() not in index})
    return type("Row", (Row,), {"__slots__": (), "_index": index})


def _rows(cursor: Any) -> RowMaker[Row]:
    if cursor.description is None:
        return tuple  # type: ignore[return-value]
    return _row_class(tuple(c.name for c in cursor.description))


class _BoolAsInt(Dumper):
    """Python booleans are SQLite's integers 0 and 1, and the columns are integers."""

    oid = psycopg.adapters.types["int8"].oid

    def dump(self, obj: Any) -> bytes:
        return b"1" if obj else b"0"

    def quote(self, obj: Any) -> bytes:
        return self.dump(obj)


class _NumericAsNumber(Loader):
    """``sum`` of integers is ``numeric``: an int when whole, a float otherwise."""

    def load(self, data: Any) -> Any:
        text = bytes(data).decode()
        if text in ("NaN", "Infinity", "-Infinity"):
            return float(text)
        if "." in text or "e" in text.lower():
            value = float(text)
            return int(value) if value.is_integer() and "." not in text.rstrip("0") else value
        return int(text)


def _adapt(raw: psycopg.Connection[Any]) -> None:
    raw.adapters.register_dumper(bool, _BoolAsInt)
    raw.adapters.register_loader("numeric", _NumericAsNumber)


class PgConnection:
    """The part of ``sqlite3.Connection`` the table classes use, over one psycopg connection."""

    def __init__(
        self, raw: psycopg.Connection[Any], *, location: str, application: str = "stratamem"
    ) -> None:
        self.raw = raw
        self.location = location
        self.application = application
        # Statements that changed something, on this connection: what ``total_changes`` is
        # on SQLite, and half of what keys the store's caches (the other half is the
        # server's snapshot, which moves with every other connection's commit).
        self.total_changes = 0
        self.lock = threading.RLock()
        self._trace: Callable[[str], object] | None = None
        self._pid = os.getpid()

    def _own(self) -> None:
        """In a process forked after the connection was made, a connection of its own: the
        parent's session is the parent's (two processes speaking on one socket interleave
        their statements and transactions), so the child leaves it untouched and unclosed
        (psycopg never ends a session from a process other than the one that opened it)."""
        if self._pid != os.getpid():
            self.raw = connect(self.location, application=self.application).raw
            self._pid = os.getpid()

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open (a lost connection holds none: it was rolled back)."""
        self._own()
        return self.raw.info.transaction_status not in (
            pq.TransactionStatus.IDLE,
            pq.TransactionStatus.UNKNOWN,
        )

    def execute(
        self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None
    ) -> psycopg.ClientCursor[Row]:
        statement = sql
        values = _values(params) if params is not None else ()

        def run() -> psycopg.ClientCursor[Row]:
            cursor: psycopg.ClientCursor[Row] = psycopg.ClientCursor(self.raw, row_factory=_rows)
            if self._trace is not None:
                self._trace(cursor.mogrify(statement, values))
            cursor.execute(statement, values)
            return cursor

        cursor = self._lost_safe(run, retry=_reads(statement))
        if cursor.rowcount > 0 and cursor.description is None:
            self.total_changes += cursor.rowcount
        return cursor

    def executemany(self, sql: str, seq: Iterable[Sequence[Any]]) -> psycopg.ClientCursor[Row]:
        statement = sql
        rows = [_values(p) for p in seq]

        def run() -> psycopg.ClientCursor[Row]:
            cursor: psycopg.ClientCursor[Row] = psycopg.ClientCursor(self.raw, row_factory=_rows)
            if rows:
                if self._trace is not None:
                    for row in rows:
                        self._trace(cursor.mogrify(statement, row))
                cursor.executemany(statement, rows)
            return cursor

        cursor = self._lost_safe(run, retry=False)
        if rows:
            self.total_changes += max(cursor.rowcount, len(rows))
        return cursor

    def copy_rows(self, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        """Write ``rows`` (of ``columns``) into ``table`` with one ``COPY ... FROM STDIN``, in
        the caller's transaction: a bulk write costs one round trip and the table's statement
        triggers run once. NUL in text becomes U+0001, as in every write."""
        statement = f"COPY {table} ({', '.join(columns)}) FROM STDIN".encode()
        written = 0

        def run() -> None:
            nonlocal written
            with self.raw.cursor() as cursor, cursor.copy(statement) as pipe:
                for row in rows:
                    values = _values(row)
                    if self._trace is not None:
                        self._trace(f"COPY {table} {values!r}")
                    pipe.write_row(values)
                    written += 1

        self._lost_safe(run, retry=False)
        self.total_changes += written

    def set_trace_callback(self, trace: Callable[[str], object] | None) -> None:
        """Call ``trace`` with each statement run from now on, its parameters bound (None
        stops), as ``sqlite3.Connection.set_trace_callback`` does."""
        self._trace = trace

    def executemany_bound(self, statement: str, rows: Sequence[Sequence[Any]]) -> None:
        """``statement``, written for PostgreSQL (``%s``, ``%b`` for a binary parameter), once
        per row with its parameters bound by the server: for bulk writes of values whose
        text form is costly to make (vectors)."""
        if not rows:
            return

        def run() -> None:
            with self.raw.cursor() as cursor:
                cursor.executemany(statement.encode(), rows)

        self._lost_safe(run, retry=False)
        self.total_changes += len(rows)

    def command(self, sql: bytes) -> psycopg.Cursor[Any]:
        """Run ``sql`` as written for PostgreSQL (no parameters, several statements allowed):
        transaction control and settings. Outside a transaction a lost connection is made
        again first, so a ``BEGIN`` after a server restart starts on a live one. These are
        never prepared on the server: they are cheap to parse, and a ``COMMIT`` that failed
        to prepare would leave its transaction open."""
        return self._lost_safe(
            lambda: self.raw.execute(sql, prepare=False), retry=sql.startswith(b"BEGIN")
        )

    def _lost_safe(self, run: Callable[[], T], *, retry: bool) -> T:
        """``run()``, on a connection made again where the server dropped it (a restart, a
        failover, an idle timeout). Outside a transaction a read (``retry``) is run again on
        the new connection; anything else is a :class:`StoreError` saying what was lost,
        never a wrong answer."""
        idle = not self.in_transaction  # (a forked child's connection is made here)
        if idle and (self.raw.closed or self.raw.broken):
            self._reconnect()
        try:
            return run()
        except psycopg.OperationalError as exc:
            if not (self.raw.closed or self.raw.broken):
                raise
            reason = _first_line(exc)
            if idle and retry:
                self._reconnect()
                return run()
            if idle:
                raise StoreError(
                    f"{redact(self.location)}: the connection to the server was lost during a "
                    f"write ({reason}); the write was applied whole or not at all: run it again"
                ) from exc
            raise StoreError(
                f"{redact(self.location)}: the connection to the server was lost inside a "
                f"transaction ({reason}); nothing of it was committed: run it again"
            ) from exc

    def _reconnect(self) -> None:
        fresh = connect(self.location, application=self.application)
        self.raw.close()
        self.raw = fresh.raw

    def close(self) -> None:
        if self._pid == os.getpid():  # a forked child never ends its parent's session
            self.raw.close()


def _values(params: Sequence[Any] | dict[str, Any]) -> Any:
    """Parameters as PostgreSQL takes them: its text cannot hold NUL, which SQLite's can and
    which record sort keys use as the lowest separator; U+0001 takes its place (it sorts
    just above it, and clean text holds neither)."""
    if isinstance(params, dict):
        return {k: _value(v) for k, v in params.items()}
    return tuple(_value(v) for v in params)


def _value(value: Any) -> Any:
    if isinstance(value, str) and "\x00" in value:
        return value.replace("\x00", "\x01")
    if isinstance(value, list):  # an array parameter
        return [_value(v) for v in value]
    return value


def connect(location: str, *, application: str = "stratamem") -> PgConnection:
    """A connection to the server a ``postgresql://`` URL names, in autocommit mode; a server
    that cannot be reached or refuses the login is a :class:`StoreError` of one line."""
    try:
        raw = psycopg.connect(
            location, autocommit=True, application_name=application, connect_timeout=10
        )
    except psycopg.OperationalError as exc:
        raise StoreError(f"{redact(location)}: cannot connect: {_first_line(exc)}") from exc
    _adapt(raw)
    return PgConnection(raw, location=location, application=application)


def redact(location: str) -> str:
    """The URL without its password, fit for messages and ``stats``."""
    return re.sub(r"(://[^:/@]*):[^@/]+@", r"\1:***@", location)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    # libpq's message starts with where it tried ("connection to server at … failed:").
    return "; ".join(lines[:2]) if lines else type(exc).__name__


@contextmanager
def atomic(conn: PgConnection, *, wait_s: float = WRITE_WAIT_S) -> Iterator[PgConnection]:
    """A write transaction holding the store's write lock, or a savepoint when one is already
    open; rolled back on any exception. The lock is waited for up to ``wait_s``, as on SQLite,
    then the write is a :class:`StoreBusyError`."""
    if conn.in_transaction:
        name = f"sp_{next(_savepoints)}"
        conn.command(f"SAVEPOINT {name}".encode())
        try:
            yield conn
        except BaseException:
            if conn.raw.info.transaction_status != pq.TransactionStatus.UNKNOWN:
                conn.raw.execute(f"ROLLBACK TO SAVEPOINT {name}".encode())
                conn.raw.execute(f"RELEASE SAVEPOINT {name}".encode())
            raise
        conn.raw.execute(f"RELEASE SAVEPOINT {name}".encode())
        return
    conn.command(b"BEGIN")
    try:
        _take_write_lock(conn, wait_s)
        yield conn
    except BaseException as exc:
        if conn.raw.info.transaction_status != pq.TransactionStatus.UNKNOWN:
            conn.raw.execute(b"ROLLBACK")
        if is_disk_full(exc) and not isinstance(exc, StoreFull):
            raise full_error(exc) from exc
        raise
    conn.command(b"COMMIT")


_savepoints = itertools.count(1)


def _take_write_lock(conn: PgConnection, wait_s: float) -> None:
    conn.command(b"SET LOCAL lock_timeout = %d" % max(1, round(wait_s * 1000)))
    try:
        conn.command(b"SELECT pg_advisory_xact_lock(%d)" % WRITE_LOCK)
    except psycopg.errors.LockNotAvailable as exc:
        raise StoreBusyError(
            f"the store is busy: another process kept it locked for over {wait_s:g} s"
        ) from exc
    # The rest of the transaction waits for row locks as the server is configured to.
    conn.command(b"SET LOCAL lock_timeout TO DEFAULT")
