"""One PostgreSQL database opened by every thread that uses it, for a server answering many
calls at once.

A PostgreSQL connection runs one statement at a time, and a read snapshot or a write
transaction belongs to the connection it was begun on, so a store shared by the threads of a
server would make every call wait for the one before it and mix their transactions.
:class:`PerThreadPostgresStore` is the PostgreSQL twin of
:class:`~stratamem.store.sqlite.threads.PerThreadStore`, with the same contract: each thread
that calls it gets a :class:`~stratamem.store.postgres.store.PostgresStore` (one connection)
of its own, so reads run side by side and never wait for a write (each read snapshot is a
``REPEATABLE READ`` transaction of that connection), while writes still take turns on the
store's advisory lock. The in-memory indexes built over the store (the sparse keyword index,
the vector index, the entity postings) are made once and shared: they are keyed on this
object, and each of their reads goes through the calling thread's connection. The committed
counters the index savers compare (:meth:`committed_generations`) are read on one connection
that every thread shares, so a saver's short-lived thread opens nothing.

Who reads is the store's (:meth:`read_as`) unless a thread says otherwise for a block
(:meth:`reading_as`), as a server's thread does for each call it serves. A connection is
closed by its own thread (see :meth:`close`) or, once its thread has ended, by the next
thread that opens one, by :meth:`connections`, or by :meth:`close`: never under a statement
another thread is running, which libpq does not survive. Connections are per thread rather
than drawn from a pool for each call, since a thread's snapshot, its change counter (half of
what keys the caches of its reads) and its lost-connection recovery all belong to one
connection for as long as the thread uses it.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from stratamem.errors import StoreError
from stratamem.store.postgres.connection import redact
from stratamem.store.postgres.store import CommittedCounters, PostgresStore, open_postgres
from stratamem.store.tables.postings import COUNTED_MENTIONS, EntityPostings


class PerThreadPostgresStore:
    """A :class:`PostgresStore` per calling thread, all on one database; any attribute or
    method not defined here is the calling thread's store's."""

    name = "postgresql"

    def __init__(self, location: str, *, principal: str | None = None) -> None:
        self._location = location
        self.path = redact(location)
        self._principal = principal
        self._local = threading.local()
        self._lock = threading.Lock()
        # Each open store's thread: a store is closed only by its own thread, or once that
        # thread has ended (closing a connection under a statement can crash the process).
        self._open: dict[PostgresStore, threading.Thread] = {}
        self._closed = False
        self._serials = itertools.count()
        self._counters = CommittedCounters(location, self.path)
        self.postings = EntityPostings(
            lambda: self._mine().conn,
            state=lambda: self._mine().write_state(),
            generation=lambda: self._mine().chunk_generation(),
            snapshot=lambda: self._mine().read_snapshot(),
            writing=lambda: self._mine().in_transaction(),
            reader=self._reader,
            count_sql=COUNTED_MENTIONS,
            dialect=PostgresStore.dialect,
        )
        first = self._mine()  # connects (and migrates) now: a bad URL fails here
        first.read_as(principal)

    def _mine(self) -> PostgresStore:
        store: PostgresStore | None = getattr(self._local, "store", None)
        if store is not None and not self._closed:
            return store
        with self._lock:
            if self._closed:
                if store is not None and not store.conn.in_transaction:
                    self._local.store = None
                    self._open.pop(store, None)
                    store.close()
                raise StoreError(f"{self.path}: the store is closed")
        self._reap()
        store = open_postgres(self._location)
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

    def _reap(self) -> None:
        """Close the stores of threads that have ended."""
        with self._lock:
            ended = [s for s, t in self._open.items() if not t.is_alive()]
            for store in ended:
                self._open.pop(store, None)
        for store in ended:
            store.close()

    def _reader(self) -> int:
        """The calling thread's connection, by a number no other connection gets."""
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
            stores = list(self._open)
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

    def committed_generations(self) -> tuple[int, int]:
        """The counters as committed, read on the connection every thread shares for them."""
        return self._counters.read()

    def connections(self) -> int:
        """How many threads have a connection open (those of ended threads are closed
        first)."""
        self._reap()
        with self._lock:
            return len(self._open)

    def __enter__(self) -> PerThreadPostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections of this thread and of threads that have ended; a later call
        on any thread is an error, and a thread still running closes its own connection at
        its next call. A server shuts its threads down first, so that every connection
        closes here."""
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
        self._counters.close()
