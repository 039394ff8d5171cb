"""``mem.sources``: the sources a store holds, who may read them, and forgetting one."""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from stratamem.api._core import Facet, ready_indexes, rewrite_indexes
from stratamem.errors import StoreFull
from stratamem.store.access import parse_scopes
from stratamem.types import Source

__all__ = ["Sources"]


class Sources(Facet):
    """List and look up sources, change their access scopes, forget one."""

    def list(self) -> builtins.list[Source]:
        """The sources the reader may see; the owner also sees locked ones (marked so)."""
        return self._store.sources()

    def get(self, ref: str) -> Source:
        """A source by id or exact scope; :class:`NotFoundError` if there is none."""
        return self._store.resolve_source(ref)

    def set_access(
        self,
        source: str,
        *,
        scopes: str | Sequence[str] | None = None,
        add: str | Sequence[str] = (),
        remove: str | Sequence[str] = (),
    ) -> Source:
        """Change a source's access scopes: replace them (``scopes``), then ``add`` and
        ``remove`` some. A source left with none is readable by the owner only."""
        self._owner_only("change access")
        found = self._store.resolve_source(source)
        current = set(found.access if scopes is None else parse_scopes(scopes))
        current |= set(parse_scopes(add))
        current -= set(parse_scopes(remove))
        self._store.set_access(found.id, sorted(current))
        return self._store.resolve_source(found.id)

    def forget(self, source: str) -> int:
        """Remove a source (by id or scope) and everything derived from it, leaving no copy
        of its text behind: the database rewrites its full-text segments and empties its WAL
        (see the SQLite store's ``scrub``), and the index files beside it are rewritten
        without the removed rows, or removed. Returns how many chunks went."""
        self._owner_only("forget sources")
        store = self._store
        found = store.resolve_source(source)
        ready_indexes(self._memory.vectors)
        try:
            removed = store.delete_source(found.id)
        except StoreFull:
            # The source is gone and only the scrub is left: the index files still go.
            rewrite_indexes(store, self._memory.vectors)
            raise
        rewrite_indexes(store, self._memory.vectors)
        return removed
