"""One SQLite file opened by every thread that uses it (see :mod:`stratamem.store.threads`):
each thread reads through its own connection, so reads run side by side and never wait for
a write (WAL), and a write on one thread leaves the readers on the others their snapshots."""

from __future__ import annotations

from pathlib import Path

from stratamem.errors import StoreError
from stratamem.store.sqlite.dialect import SQLITE
from stratamem.store.sqlite.store import SQLiteStore
from stratamem.store.threads import PerThread


class PerThreadStore(PerThread[SQLiteStore]):
    """A :class:`SQLiteStore` per calling thread, all over one file; any attribute or method
    not defined here is the calling thread's store's."""

    name = "sqlite"
    dialect = SQLITE

    def __init__(self, path: str | Path, *, principal: str | None = None) -> None:
        if str(path) == ":memory:":
            raise StoreError("a store in memory has one connection: open a file per thread")
        self.path = str(path)
        super().__init__(principal=principal)

    def _connect(self) -> SQLiteStore:
        return SQLiteStore(self.path)
