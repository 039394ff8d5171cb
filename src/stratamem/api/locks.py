"""``mem.locks``: sources encrypted at rest, and decrypted again."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stratamem.api._core import Facet, ready_indexes, rewrite_indexes

if TYPE_CHECKING:
    from stratamem.access.locks import LockReport

__all__ = ["Locks"]


class Locks(Facet):
    """Lock and unlock sources (the owner only; see ``docs/access.md``)."""

    def lock(self, source: str, *, passphrase: str | None = None) -> LockReport:
        """Encrypt a source at rest and purge every plaintext trace of it (chunks, full-text
        rows, vectors, entities, edges, summaries; the index files beside the store are
        rewritten). Nothing of it can be read until :meth:`unlock`. The passphrase is
        ``passphrase``, else ``STRATAMEM_PASSPHRASE``; see ``docs/access.md``."""
        self._owner_only("lock sources")
        from stratamem.access import locks

        found = self._store.resolve_source(source)
        ready_indexes(self._memory.vectors)
        report = locks.lock_source(self._store, found.id, locks.passphrase_for(found, passphrase))
        rewrite_indexes(self._store, self._memory.vectors)
        return report

    def unlock(self, source: str, *, passphrase: str | None = None) -> LockReport:
        """Decrypt a locked source for good and restore everything derived from it."""
        self._owner_only("unlock sources")
        from stratamem.access import locks

        found = self._store.resolve_source(source)
        return locks.unlock_source(
            self._store, found.id, locks.passphrase_for(found, passphrase, new=False)
        )
