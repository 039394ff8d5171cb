"""The entity-graph role: entity lookup, co-mention edges, and nodes by entity."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Protocol

from stratamem.types import EntityMatch, Filters


class GraphStore(Protocol):
    def add_edges(self, source_id: str, node_ids: Sequence[str], *, sign: int = 1) -> None: ...

    def add_new_edges(self, source_id: str, mentions: Iterable[Collection[str]]) -> None: ...

    def rebuild_edges(self, source_id: str) -> None: ...

    def search_entities(
        self, needle: str, kinds: Sequence[str], limit: int
    ) -> list[EntityMatch]: ...

    def neighbours(self, entity_id: str, limit: int) -> list[tuple[str, float]]: ...

    def entity_frequencies(self, entity_ids: Sequence[str]) -> dict[str, int]: ...

    def nodes_by_entities(
        self,
        weights: dict[str, float],
        filters: Filters,
        limit: int,
        *,
        exclude: Sequence[str] = (),
    ) -> dict[str, float]: ...

    def nodes_by_entities_many(
        self,
        weights: Sequence[dict[str, float]],
        filters: Filters,
        limit: int,
        *,
        exclude: Sequence[str] = (),
    ) -> list[dict[str, float]]:
        """:meth:`nodes_by_entities` of each of ``weights``, in one read."""
        ...

    def neighbour_chunks(
        self, node_ids: Sequence[str], filters: Filters, *, window: int = 1
    ) -> dict[str, list[tuple[str, int]]]: ...
