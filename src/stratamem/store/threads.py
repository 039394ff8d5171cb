"""One store opened by every thread that uses it, for a server answering many calls at once.

A connection runs one statement at a time (a ``sqlite3`` connection must not even be used by
two threads at once), and a read snapshot or a write transaction belongs to the connection
it was begun on, so one store shared by a server's threads would make every call wait for
the one before it and mix their transactions. :class:`PerThread` opens the store once per
thread that calls it: each thread reads through its own connection, so reads run side by
side and never wait for a write, while writes still take turns as the backend has them do.
The in-memory indexes built over the store (the sparse keyword index, the vector index, the
entity postings) are made once and shared: they are keyed on this object, and each of their
reads goes through the calling thread's connection.

Who reads is the store's (:meth:`PerThread.read_as`, as for any store) unless a thread says
otherwise for a block (:meth:`PerThread.reading_as`), as a server's thread does for each call
it serves. A connection is closed by its own thread (see :meth:`PerThread.close`) or, once
its thread has ended, by the next thread that opens one, by :meth:`PerThread.connections`, or
by :meth:`PerThread.close`: never under a statement another thread is running, which neither
SQLite nor libpq survives.

Each backend's class says how to open its store: :class:`~stratamem.store.sqlite.threads.
PerThreadStore` (a SQLite file) and :class:`~stratamem.store.postgres.threads.
PerThreadPostgresStore` (a database).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from stratamem.errors import StoreError
from stratamem.store.dialect import Connection, Dialect
from stratamem.store.tables.postings import COUNTED_MENTIONS, EntityPostings


class _Opened(Protocol):
    """What this class needs of a backend's store."""

    conn: Any
    principal_name: str | None
    postings: Any

    def read_as(self, principal: str | None) -> None: ...
    def close(self) -> None: ...
    def write_state(self) -> Any: ...
    def chunk_generation(self) -> int: ...
    def read_snapshot(self) -> Any: ...
    def in_transaction(self) -> bool: ...


S = TypeVar("S", bound=_Opened)


class PerThread(Generic[S]):
    """A store per calling thread, all over one database; any attribute or method not
    defined here is the calling thread's store's. A backend's class names itself
    (``name``), its ``dialect``, how a thread's store is opened (:meth:`_connect`) and sets
    ``path`` (what errors name) before calling ``__init__``."""

    name: ClassVar[str]
    dialect: ClassVar[Dialect]
    path: str

    def __init__(self, *, principal: str | None = None) -> None:
        self._principal = principal
        self._local = threading.local()
        self._lock = threading.Lock()
        # Each open store's thread: a store is closed only by its own thread, or once that
        # thread has ended (closing a connection under a statement can crash the process).
        self._open: dict[S, threading.Thread] = {}
        self._closed = False
        self._serials = itertools.count()
        self.postings = EntityPostings(
            self._connection,
            state=lambda: self._mine().write_state(),
            generation=lambda: self._mine().chunk_generation(),
            snapshot=lambda: self._mine().read_snapshot(),
            writing=lambda: self._mine().in_transaction(),
            reader=self._reader,
            count_sql=COUNTED_MENTIONS,
            dialect=self.dialect,
        )
        first = self._mine()  # opens (and migrates) the store now: a bad location fails here
        first.read_as(principal)

    def _connect(self) -> S:
        """A new store for the calling thread."""
        raise NotImplementedError

    def _connection(self) -> Connection:
        conn: Connection = self._mine().conn
        return conn

    def _mine(self) -> S:
        store: S | None = getattr(self._local, "store", None)
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
        store = self._connect()
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

    def connections(self) -> int:
        """How many threads have a connection open (those of ended threads are closed
        first)."""
        self._reap()
        with self._lock:
            return len(self._open)

    def __enter__(self) -> PerThread[S]:
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
