"""A SQLite store copied into memory, where locked sources can be restored without a byte of
them reaching the disk.

The file is read with SQLite's online backup API (a consistent snapshot, its WAL included),
a database on a PostgreSQL server row by row (one snapshot of it), into a ``:memory:``
database whose temporary tables and sort spills stay in memory too. The copy's ``path`` is
``:memory:``, so the in-process indexes built over it never save a file.
Once :meth:`UnlockedCopy.freeze` is called every write is refused: what was written there
would be lost at close, and the file it came from still holds the sources locked.
"""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager
from pathlib import Path

from stratamem.errors import StoreError
from stratamem.store.sqlite.store import SQLiteStore


class UnlockedCopy(SQLiteStore):
    """The store at ``location``, copied into memory; writable until frozen."""

    def __init__(self, location: str | Path, *, on_server: bool = False) -> None:
        if not on_server and not Path(location).is_file():
            raise StoreError(f"{location}: no store there to open")
        self.copied_from = str(location)
        self._frozen = False
        super().__init__(":memory:")
        self.conn.execute("PRAGMA temp_store = MEMORY")
        if on_server:
            from stratamem.store.copy import copy_store

            # Row by row into a store in memory first: a copy refuses a destination that
            # can be frozen, and this one can.
            with SQLiteStore(":memory:") as staging:
                copy_store(self.copied_from, staging, verify=False)
                staging.conn.backup(self.conn)
            return
        with SQLiteStore(location) as disk:  # migrated to the current schema first
            disk.conn.backup(self.conn)

    @classmethod
    def of_server(cls, location: str) -> UnlockedCopy:
        """The store in the database a ``postgresql://`` URL names, copied into memory (its
        rows, with :func:`~stratamem.store.copy.copy_store`): a SQLite store, which ranks as
        the server's does."""
        return cls(location, on_server=True)

    def freeze(self) -> None:
        """Refuse every write from now on."""
        self._frozen = True

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        if self._frozen:
            raise StoreError(
                f"{self.copied_from}: opened with sources unlocked in memory, so read-only: "
                "open it without unlocking to write"
            )
        return super().transaction()
