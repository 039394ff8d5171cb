"""The SQL a store runs, seen from a test: on SQLite and on PostgreSQL alike (both connections
take a trace callback)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

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
