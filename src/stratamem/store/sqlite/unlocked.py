"""A SQLite store copied into memory, where locked sources can be restored without a byte of
them reaching the disk.

The file is read with SQLite's online backup API (a consistent snapshot, its WAL included)
into a ``:memory:`` database whose temporary tables and sort spills stay in memory too. The
copy's ``path`` is ``:memory:``, so the in-process indexes built over it never save a file.
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

    def __init__(self, location: str | Path) -> None:
        if not Path(location).is_file():
            raise StoreError(f"{location}: no store there to open")
        self.copied_from = str(location)
        self._frozen = False
        super().__init__(":memory:")
        self.conn.execute("PRAGMA temp_store = MEMORY")
        with SQLiteStore(location) as disk:  # migrated to the current schema first
            disk.conn.backup(self.conn)

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
