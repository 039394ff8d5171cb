"""Opening a SQLite file the way stratamem needs it: WAL, foreign keys, durable commits."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from stratamem.errors import StoreError

BATCH = 500
T = TypeVar("T")


def connect(path: str | Path) -> sqlite3.Connection:
    """A connection in autocommit mode; transactions are opened explicitly by :func:`atomic`."""
    target = str(path)
    if target != ":memory:":
        Path(target).expanduser().parent.mkdir(parents=True, exist_ok=True)
        target = str(Path(target).expanduser())
    try:
        conn = sqlite3.connect(target, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA busy_timeout = 10000")
        conn.execute("PRAGMA cache_size = -32768")
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path}: cannot open as a stratamem database: {exc}") from exc
    return conn


@contextmanager
def atomic(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A transaction, or a savepoint when one is already open; rolled back on any exception."""
    if conn.in_transaction:
        name = f"sp_{next(_savepoints)}"
        conn.execute(f"SAVEPOINT {name}")
        try:
            yield conn
        except BaseException:
            conn.execute(f"ROLLBACK TO {name}")
            conn.execute(f"RELEASE {name}")
            raise
        conn.execute(f"RELEASE {name}")
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


_savepoints = itertools.count(1)


def batches(values: Sequence[T]) -> Iterator[tuple[list[T], str]]:
    """``values`` in slices of :data:`BATCH`, each with its ``?,?,…`` placeholder list, so an
    ``IN (…)`` query never passes SQLite's limit on bound parameters."""
    for start in range(0, len(values), BATCH):
        part = list(values[start : start + BATCH])
        yield part, ",".join("?" * len(part))
