"""``mem.items``: single items an agent writes (a memory, a message, a note), one at a time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stratamem.api._core import Facet, When, when
from stratamem.ingest import items
from stratamem.ingest.items import ItemWrite
from stratamem.types import Record, SourceKind

__all__ = ["Items"]


class Items(Facet):
    """Write, correct, remove and read single items: ``mem.items.add("…")``."""

    def add(
        self,
        text: str,
        *,
        source: str = items.DEFAULT_SOURCE,
        kind: SourceKind | str | None = None,
        author: str | None = None,
        time: When | None = None,
        id: str | None = None,
        title: str | None = None,
        thread: str | None = None,
        tags: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
    ) -> ItemWrite:
        """Write one item (a memory, a message, a note) to ``source`` and return its id.

        The item is found by keyword and graph search as soon as this returns, and by the
        vector leg too when the store's vectors are of the configured embedder's model (it
        is embedded in the same transaction; otherwise it waits for ``mem.indexes.embed``).
        ``time`` defaults to now, ``id`` to a new key; an ``id`` the source holds already is
        replaced. A new ``source`` is made as a record source (or ``kind``). The source's
        summary tree is queued to be sealed (see ``mem.trees.build``).
        """
        self._owner_only("write items")
        return items.add_item(
            self._store,
            text,
            source=source,
            kind=kind,
            author=author,
            time=when(time, "time"),
            id=id,
            title=title,
            thread=thread,
            tags=tags,
            meta=meta,
            embedder=self._memory._write_embedder(),
        )

    def edit(
        self,
        id: str,
        *,
        source: str | None = None,
        text: str | None = None,
        author: str | None = items.UNSET,
        time: When | None = items.UNSET,
        title: str | None = items.UNSET,
        tags: Sequence[str] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> ItemWrite:
        """Correct the item stored under ``id``: the fields given change, the others stay.
        ``source`` (id or scope) is needed only when several sources hold that id."""
        self._owner_only("write items")
        return items.update_item(
            self._store,
            id,
            source=source,
            text=text,
            author=author,
            time=time if time is items.UNSET else when(time, "time"),
            title=title,
            tags=tags,
            meta=meta,
            embedder=self._memory._write_embedder(),
        )

    def rm(self, id: str, *, source: str | None = None) -> ItemWrite:
        """Remove the item stored under ``id`` from every index at once."""
        self._owner_only("write items")
        return items.delete_item(
            self._store, id, source=source, embedder=self._memory._write_embedder()
        )

    def get(self, id: str, *, source: str | None = None) -> Record:
        """The item (record) stored under ``id``."""
        return items.find_item(self._store, id, source=source)[1].record
