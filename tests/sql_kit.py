"""The SQL a store runs, seen from a test: on SQLite and on PostgreSQL alike (both connections
take a trace callback), and the round trips a PostgreSQL store makes to its server."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

import stratamem


@contextmanager
def statements(memory: stratamem.Memory) -> Iterator[list[str]]:
    """The SQL statements ``memory``'s store runs meanwhile, their parameters bound."""
    seen: list[str] = []
    conn = memory.store.conn  # type: ignore[attr-defined]
    conn.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        conn.set_trace_callback(None)


@contextmanager
def round_trips(memory: stratamem.Memory) -> Iterator[list[str]]:
    """What ``memory``'s store asks its database meanwhile, one entry per request: on
    PostgreSQL every query sent to the server by this process (transaction control, settings
    and several statements sent as one included), whichever connection or path sent it; on
    SQLite, which has no round trip, every statement it runs."""
    if memory.store.name != "postgresql":
        with statements(memory) as seen:
            yield seen
        return
    sent: list[str] = []
    execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany

    def counted_execute(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(query.decode() if isinstance(query, bytes) else str(query))
        return execute(cursor, query, *args, **kwargs)

    def counted_executemany(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(query.decode() if isinstance(query, bytes) else str(query))
        return executemany(cursor, query, *args, **kwargs)

    psycopg.Cursor.execute = counted_execute  # type: ignore[method-assign]
    psycopg.Cursor.executemany = counted_executemany  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]
        psycopg.Cursor.executemany = executemany  # type: ignore[method-assign]
