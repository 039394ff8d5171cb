"""What a store holds, read past the store: its rows through a connection of their own, on
either backend (a SQLite file, or a PostgreSQL URL)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from suite import PATIENCE_S, PastTheStore
from suite import is_postgres as is_postgres  # the tests import it from here too


def rows(location: str | Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """The rows of ``sql`` (written for SQLite, ``?`` for a parameter) on the store at
    ``location``, as committed."""
    if is_postgres(location):
        from stratamem.store.postgres.connection import connect

        pg = PastTheStore(connect(str(location)))
        try:
            return [tuple(row) for row in pg.execute(sql, args).fetchall()]
        finally:
            pg.close()
    conn = sqlite3.connect(location)
    try:
        return [tuple(row) for row in conn.execute(sql, args).fetchall()]
    finally:
        conn.close()


def execute(location: str | Path, sql: str, *args: Any) -> None:
    """Run the statement ``sql`` on the store at ``location``, past the store, and commit."""
    if is_postgres(location):
        from stratamem.store.postgres.connection import connect

        pg = PastTheStore(connect(str(location)))
        try:
            pg.execute(sql, args)
        finally:
            pg.close()
        return
    conn = sqlite3.connect(location)
    try:
        with conn:
            conn.execute(sql, args)
    finally:
        conn.close()


def connect(location: str | Path) -> Any:
    """A connection of its own to the store at ``location``, which reads what is committed:
    ``execute(sql, params)`` (SQL written for SQLite) and ``close()``."""
    if is_postgres(location):
        from stratamem.store.postgres.connection import connect as connect_pg

        return PastTheStore(connect_pg(str(location)))
    return sqlite3.connect(location, timeout=PATIENCE_S)
