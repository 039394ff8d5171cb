"""One SQLite file opened by every thread that uses it, for a server answering many calls at once.

A ``sqlite3`` connection must not be used by two threads at the same moment, and one
connection per store makes every call wait for the one before it. :class:`PerThreadStore`
opens the file once per thread that calls it: each thread reads through its own connection,
so reads run side by side and never wait for a write (WAL), and a write on one thread leaves
the readers on the others their snapshots. The in-memory indexes built over the store (the
sparse keyword index, the vector index, the entity postings) are made once and shared: they
are keyed on this object, and each of their reads goes through the calling thread's
connection.

Who reads is the store's (:meth:`read_as`, as for any store) unless a thread says otherwise
for a block (:meth:`reading_as`), as a server's thread does for each call it serves. A
connection is closed by its own thread (see :meth:`close`), or when its thread has ended.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from stratamem.errors import StoreError
from stratamem.store.sqlite.store import SQLiteStore
from stratamem.store.tables.postings import COUNTED_MENTIONS, EntityPostings


class PerThreadStore:
    """A :class:`SQLiteStore` per calling thread, all over one file; any attribute or method
    not defined here is the calling thread's store's."""

    name = "sqlite"

    def __init__(self, path: str | Path, *, principal: str | None = None) -> None:
        if str(path) == ":memory:":
            raise StoreError("a store in memory has one connection: open a file per thread")
        self.path = str(path)
        self._principal = principal
        self._local = threading.local()
        self._lock = threading.Lock()
        # Each open connection's thread: a connection is closed only by its own thread, or
        # once that thread has ended (closing one under a query can crash the process).
        self._open: weakref.WeakKeyDictionary[SQLiteStore, threading.Thread]
        self._open = weakref.WeakKeyDictionary()
        self._closed = False
        self._serials = itertools.count()
        self.postings = EntityPostings(
            lambda: self._mine().conn,
            state=lambda: self._mine().write_state(),
            generation=lambda: self._mine().chunk_generation(),
            snapshot=lambda: self._mine().read_snapshot(),
            writing=lambda: self._mine().in_transaction(),
            reader=self._reader,
            count_sql=COUNTED_MENTIONS,
            dialect=SQLiteStore.dialect,
        )
        first = self._mine()  # opens (and migrates) the file now: a bad path fails here
        first.read_as(principal)

    def _mine(self) -> SQLiteStore:
        store: SQLiteStore | None = getattr(self._local, "store", None)
        if store is not None and not self._closed:
            return store
        with self._lock:
            if self._closed:
                if store is not None and not store.conn.in_transaction:
                    self._local.store = None
                    self._open.pop(store, None)
                    store.close()
                raise StoreError(f"{self.path}: the store is closed")
        store = SQLiteStore(self.path)
        store.postings = self.postings
        try:
            store.read_as(self._principal)
        except BaseException:
            store.close()
            raise
        with self._lock:
            if self._closed:  # closed while this thread's connection was being opened
                store.close()
                raise StoreError(f"{self.path}: the store is closed")
            self._open[store] = threading.current_thread()
        self._local.serial = next(self._serials)
        self._local.store = store
        return store

    def _reader(self) -> int:
        """The calling thread's connection, by a number no other connection gets (an ``id``
        comes back for a later thread's store once an ended thread's store is freed)."""
        self._mine()
        serial: int = self._local.serial
        return serial

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._mine(), name)

    def read_as(self, principal: str | None) -> None:
        """Read as ``principal`` (None: the owner) on every thread from now on (call it while
        no other thread reads)."""
        self._mine().read_as(principal)
        with self._lock:
            self._principal = principal
            stores = list(self._open.keys())
        for store in stores:
            store.principal_name = principal

    @contextmanager
    def reading_as(self, principal: str | None) -> Iterator[None]:
        """Read as ``principal`` on this thread until the block ends, then as before."""
        store = self._mine()
        before = store.principal_name
        store.read_as(principal)
        try:
            yield
        finally:
            store.principal_name = before

    def connections(self) -> int:
        """How many threads have a connection open."""
        with self._lock:
            return len(self._open)

    def __enter__(self) -> PerThreadStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections of this thread and of threads that have ended; a later call
        on any thread is an error, and a thread still running closes its own connection at
        its next call (closing one under a thread inside a query can crash the process). A
        server shuts its threads down first, so that every connection closes here."""
        me = threading.current_thread()
        with self._lock:
            self._closed = True
            done = [s for s, t in self._open.items() if t is me or not t.is_alive()]
            for store in done:
                self._open.pop(store, None)
        for store in done:
            store.close()
        if getattr(self._local, "store", None) is not None:
            self._local.store = None
