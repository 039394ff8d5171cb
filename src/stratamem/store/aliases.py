"""The entity-alias role: what sources state about who is who, and the merges and splits
someone recorded (see :mod:`stratamem.store.resolution`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Protocol

from stratamem.store.resolution import Resolution
from stratamem.types import EntityDecision, EntityMatch


class AliasStore(Protocol):
    def add_aliases(
        self,
        source_id: str,
        aliases: Iterable[tuple[str, str, str]],
        *,
        replace: bool = False,
    ) -> None: ...

    def alias_rows(self) -> list[tuple[str, str, str]]: ...

    def entity_resolution(self) -> Resolution: ...

    def entity_decisions(self) -> list[EntityDecision]: ...

    def record_entity_decision(
        self, action: str, entity_a: str, entity_b: str, *, by: str | None, at: datetime
    ) -> int: ...

    def undo_entity_decision(self, decision_id: int, *, by: str | None, at: datetime) -> None: ...

    def entities_seen(self, entity_ids: Sequence[str]) -> set[str]: ...

    def entity_stats(self, entity_ids: Sequence[str]) -> list[EntityMatch]: ...

    def entity_mention_days(
        self, entity_ids: Sequence[str]
    ) -> list[tuple[str, str, int | None, int]]: ...

    def search_named_entities(self, needle: str, limit: int) -> list[str]: ...

    def fact_mentions(
        self, entity_ids: Sequence[str]
    ) -> dict[str, tuple[int, datetime | None]]: ...
