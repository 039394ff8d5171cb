"""Opening a store in memory, to restore locked sources where nothing of them reaches the
disk (:func:`stratamem.access.locks.open_unlocked`)."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from stratamem.errors import LockError
from stratamem.store.base import Store
from stratamem.store.urls import sqlite_path, url_scheme


class InMemoryStore(Store, Protocol):
    """A copy of a store in memory; writable until :meth:`freeze`."""

    def freeze(self) -> None:
        """Refuse every write from now on (a write raises
        :class:`~stratamem.errors.StoreError`)."""
        ...


def open_in_memory(location: str | Path) -> InMemoryStore:
    """The store at ``location`` (a SQLite file, by path or ``sqlite://`` URL, or a database
    on a server, by ``postgresql://`` URL) copied into memory. The store is opened as any
    open does (migrated, an interrupted scrub finished), then only read."""
    target = str(location)
    scheme = None if isinstance(location, Path) else url_scheme(target)
    from stratamem.store.sqlite.unlocked import UnlockedCopy

    if scheme in ("postgresql", "postgres"):
        return UnlockedCopy.of_server(target)
    path = sqlite_path(target) if scheme in (None, "sqlite") else ":memory:"
    if path == ":memory:":
        raise LockError(
            f"{target}: only a SQLite file or a PostgreSQL database can be opened with "
            "sources unlocked"
        )
    return UnlockedCopy(path)
