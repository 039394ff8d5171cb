"""A small bounded cache for what is worked out from a reader's view of the store.

Several readers (principals, threads) share one in-memory index; each asks with its own
list of admitted rows or sources, so a cache of one entry would be thrown out by every
other reader's call. :class:`LastFew` keeps the last few, dropping the least recently used.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

V = TypeVar("V")

READERS = 16


class LastFew(Generic[V]):
    """The ``size`` most recently used values by key; not thread-safe (hold the owner's lock)."""

    def __init__(self, size: int = READERS) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size = size
        self._items: OrderedDict[Hashable, V] = OrderedDict()

    def get(self, key: Hashable) -> V | None:
        found = self._items.get(key)
        if found is not None:
            self._items.move_to_end(key)
        return found

    def put(self, key: Hashable, value: V) -> V:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)
        return value

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)
