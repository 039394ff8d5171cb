"""One PostgreSQL database opened by every thread that uses it (see
:mod:`stratamem.store.threads`): each thread gets a
:class:`~stratamem.store.postgres.store.PostgresStore` (one connection) of its own, so reads
run side by side and never wait for a write (each read snapshot is a ``REPEATABLE READ``
transaction of that connection), while writes still take turns on the store's advisory
lock. Connections are per thread rather than drawn from a pool for each call, since a
thread's snapshot, its change counter (half of what keys the caches of its reads) and its
lost-connection recovery all belong to one connection for as long as the thread uses it.
The committed counters the index savers compare (:meth:`committed_generations`) are read on
one connection that every thread shares, so a saver's short-lived thread opens nothing."""

from __future__ import annotations

from stratamem.store.postgres.connection import redact
from stratamem.store.postgres.dialect import POSTGRES
from stratamem.store.postgres.store import CommittedCounters, PostgresStore, open_postgres
from stratamem.store.threads import PerThread


class PerThreadPostgresStore(PerThread[PostgresStore]):
    """A :class:`PostgresStore` per calling thread, all on one database; any attribute or
    method not defined here is the calling thread's store's."""

    name = "postgresql"
    dialect = POSTGRES

    def __init__(self, location: str, *, principal: str | None = None) -> None:
        self._location = location
        self.path = redact(location)
        self._counters = CommittedCounters(location, self.path)
        try:
            super().__init__(principal=principal)
        except BaseException:
            self._counters.close()
            raise

    def _connect(self) -> PostgresStore:
        return open_postgres(self._location)

    def committed_generations(self) -> tuple[int, int]:
        """The counters as committed, read on the connection every thread shares for them."""
        return self._counters.read()

    def close(self) -> None:
        super().close()
        self._counters.close()
