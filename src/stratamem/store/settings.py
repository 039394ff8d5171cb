"""The handle role: opening, closing, transactions, settings and the store's identity."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol

# How long a write transaction waits for another process's write to finish, on either backend.
# Far longer than SQLite's busy timeout: an ingest holds the write lock for a whole source,
# which can take minutes, and a lock that is held belongs to a live process.
WRITE_WAIT_S = 30 * 60.0
# The settings the store's writes bump, named here so that a state check can read them in the
# same statement as the rest of the state: every vector written or deleted and every chunk
# deleted bumps the first (``StoreHandle.generation``); only a chunk deleted bumps the second
# (``chunk_generation``), so that an item embedded on write leaves the keyword index and the
# entity postings to take the new rows as an append.
GENERATION_KEY = "vectors.generation"
CHUNK_GENERATION_KEY = "chunks.generation"


class StoreHandle(Protocol):
    @property
    def path(self) -> str:
        """Where the store lives: a file path, ``:memory:``, or a URL."""
        ...

    def close(self) -> None: ...

    def transaction(self) -> AbstractContextManager[Any]:
        """All-or-nothing writes: everything inside commits together or not at all."""
        ...

    def in_transaction(self) -> bool:
        """Whether this handle has a write transaction open (what it has written is not yet
        what other readers, or the indexes' statistics, see). A read snapshot is not one."""
        ...

    def read_snapshot(self) -> AbstractContextManager[None]:
        """One version of the store for everything read inside: another process's commit
        is seen whole or not at all, and an in-process index checked against the store's
        state inside is checked against the very version it then serves. Cheap (no I/O of
        its own), nestable, and a no-op inside a write transaction. Nothing may be written
        inside one."""
        ...

    def rebuildable_writes(self) -> AbstractContextManager[None]: ...

    def bulk_writes(self) -> AbstractContextManager[None]:
        """Many writes to come (an ingest): the handle may keep more of the store in memory
        until they end. Changes nothing of what is written or when it is durable."""
        ...

    def refresh_statistics(self) -> None:
        """Bring the query planner's statistics up to date after a write of many rows, where
        the store's planner keeps any."""
        ...

    def get_setting(self, key: str) -> str | None: ...

    def set_setting(self, key: str, value: str) -> None: ...

    def generation(self) -> int:
        """A counter every deletion and every vector write bumps: in-process indexes compare
        it to know they are stale."""
        ...

    def chunk_generation(self) -> int:
        """A counter every chunk deletion bumps (vector writes do not)."""
        ...

    def committed_generations(self) -> tuple[int, int]:
        """(:meth:`generation`, the chunk generation) as last committed, read on a
        connection of its own: safe to call from any thread, while this handle's own
        connection is busy on another."""
        ...

    def store_id(self) -> str:
        """A random id made once per database; files beside it record it."""
        ...

    def index_base(self) -> str | None:
        """Where this process keeps index files for the store (``<base>.bm25.idx``,
        ``<base>.vectors-….idx``): the database file's own path on SQLite, a cache directory
        on a server; None where none are kept (a database in memory)."""
        ...
