"""Opening a SQLite file the way stratamem needs it: WAL, foreign keys, durable commits."""

from __future__ import annotations

import itertools
import logging
import shutil
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from stratamem.errors import StoreBusyError, StoreError, StoreFull, full_error, is_disk_full
from stratamem.store.modes import private_file
from stratamem.store.settings import WRITE_WAIT_S

BUSY_TIMEOUT_S = 60.0
PAGE_SIZE = 16384
# The pages a connection keeps in memory (KiB; SQLite takes a negative size as KiB), and
# those it may keep while a large write runs (see ``SQLiteStore.bulk_writes``).
CACHE_KIB = 32 << 10
BULK_CACHE_KIB = 128 << 10
_log = logging.getLogger(__name__)


def connect(path: str | Path, *, timeout: float = BUSY_TIMEOUT_S) -> sqlite3.Connection:
    """A connection in autocommit mode; transactions are opened explicitly by :func:`atomic`.

    ``timeout`` (seconds) is how long a statement waits for another process's lock before
    failing with "database is locked". It is given to ``connect`` itself, so it is in force
    before the first statement: even switching a new file to WAL waits for a second process
    doing the same, rather than failing at once.
    """
    target = str(path)
    if target != ":memory:":
        target = str(Path(target).expanduser())
        private_file(Path(target))
    try:
        conn = sqlite3.connect(
            target, timeout=timeout, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as exc:
        raise _open_error(path, exc) from exc
    try:
        conn.row_factory = sqlite3.Row
        # A new file is made with 16 KiB pages (an existing one keeps its own: the pragma
        # changes nothing once the file has a page): a chunk's row is about 1.3 KiB and a
        # vector's about 0.8 KiB, and a 4 KiB page leaves the part of a row that does not fit
        # empty, 15-20 % of those tables (see benchmarks/results/disk_build.md).
        conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
        _use_wal(conn, timeout)
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        # Deleted rows are overwritten with zeros, so a forgotten text leaves no bytes behind.
        conn.execute("PRAGMA secure_delete = ON")
        conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
    except sqlite3.Error as exc:
        conn.close()
        raise _open_error(path, exc) from exc
    return conn


# Less free room than this where an open fails, and the disk is taken to be why: the open
# makes the WAL's shared-memory file (32 KiB) and SQLite reports an I/O error when it cannot.
_ROOM_TO_OPEN = 64 << 10


def _open_error(path: str | Path, exc: sqlite3.Error) -> StoreError:
    """Why ``path`` could not be opened: a full disk (SQLite's "disk is full", or an I/O
    error or a file it cannot make where the disk has next to no room) or anything else."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    full = is_disk_full(exc)
    if not full and code in (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CANTOPEN):
        try:
            where = Path(str(path)).expanduser().parent
            full = shutil.disk_usage(where).free < _ROOM_TO_OPEN
        except OSError:
            full = False
    if full and str(path) != ":memory:":
        return StoreFull(
            f"{path}: cannot open: disk full ({exc}); nothing was changed. Free some space "
            "and run it again"
        )
    return StoreError(f"{path}: cannot open as a stratamem database: {exc}")


def _use_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Switch the file to WAL, which needs it to itself for a moment.

    SQLite does not call the busy handler for this switch, so a second process switching the
    same new file at that moment would fail at once with "database is locked": wait for it
    here, backing off from a millisecond to 50 ms, up to ``timeout``.
    """
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def is_busy(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` is SQLite's "database is locked" (another connection holds a lock)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc)


@contextmanager
def atomic(
    conn: sqlite3.Connection, *, wait_s: float = WRITE_WAIT_S
) -> Iterator[sqlite3.Connection]:
    """A write transaction, or a savepoint when one is already open; rolled back on any
    exception.

    The transaction is ``BEGIN IMMEDIATE``: it takes the write lock at once, waiting for it up
    to the busy timeout. A deferred one would start as a reader, and in WAL mode a reader that
    then writes after another connection has committed fails at once with "database is
    locked" (``SQLITE_BUSY_SNAPSHOT``), without waiting. Every write goes through here or is a
    single statement, which takes its lock the same waiting way. Taking the lock is retried
    for up to ``wait_s``, so a second ingest waits for a first one's long source instead of
    failing after the busy timeout.
    """
    if conn.in_transaction:
        name = f"sp_{next(_savepoints)}"
        conn.execute(f"SAVEPOINT {name}")
        try:
            yield conn
        except BaseException:
            # SQLite may have rolled the whole transaction back already (see below).
            if conn.in_transaction:
                conn.execute(f"ROLLBACK TO {name}")
                conn.execute(f"RELEASE {name}")
            raise
        conn.execute(f"RELEASE {name}")
        return
    _begin_immediate(conn, wait_s)
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException as exc:
        # On some errors (SQLITE_FULL, an I/O error, no memory) SQLite rolls the transaction
        # back itself: a ROLLBACK then fails with "no transaction is active", which would
        # hide the error that matters.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        if is_disk_full(exc) and not isinstance(exc, StoreFull):
            raise full_error(exc) from exc
        raise


_savepoints = itertools.count(1)


def _begin_immediate(conn: sqlite3.Connection, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    waited = False
    while True:
        try:
            conn.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
            if time.monotonic() >= deadline:
                raise StoreBusyError(
                    f"the store is busy: another process kept it locked for over "
                    f"{wait_s:g} s ({exc})"
                ) from exc
        if not waited:
            waited = True
            _log.warning("waiting for another process's write to the store to finish")
