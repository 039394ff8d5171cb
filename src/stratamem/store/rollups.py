"""The rollups role: what consolidation derives from facts — a score per fact and a profile
card (a rollup) per important or populous subject (see :mod:`stratamem.memory.consolidate`).

Both are derived, never sealed: a rollup names every source it was built from, is read only
by a reader who may read all of them, and is removed with any of them — when a source is
forgotten, and, in the same transaction, when it is locked. A score goes with its fact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from stratamem.store.facts import iso

ROLLUPS_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class FactScore:
    """A fact's composite score and its parts, each in [0, 1]."""

    fact_id: str
    recency: float
    importance: float
    relevance: float
    score: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "fact_id": self.fact_id,
            "recency": self.recency,
            "importance": self.importance,
            "relevance": self.relevance,
            "score": self.score,
        }


@dataclass(frozen=True, slots=True)
class Rollup:
    """A profile card of one subject, built from the facts of the sources of one scope."""

    id: str
    subject: str
    scope: str  # the access scopes of the sources it was built from, joined by ","
    fact_set_hash: str
    built_at: datetime
    score: float
    body: dict[str, Any]
    sources: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "subject": self.subject,
            "scope": self.scope,
            "fact_set_hash": self.fact_set_hash,
            "built_at": iso(self.built_at),
            "score": self.score,
            "sources": list(self.sources),
            **self.body,
        }


class RollupStore(Protocol):
    def write_fact_scores(self, scores: Sequence[FactScore], now: datetime) -> None:
        """Replace the scores of these facts, in the caller's transaction (a fact gone since
        it was read is skipped)."""
        ...

    def fact_scores(self, ids: Sequence[str] | None = None) -> dict[str, FactScore]:
        """The scores of these facts (all, for None) the reader may see."""
        ...

    def rollup_hashes(self) -> dict[tuple[str, str], tuple[str, str]]:
        """Every rollup, ungated, as ``(subject, scope) -> (id, fact_set_hash)``: for the
        consolidation pass deciding what to keep."""
        ...

    def write_rollup(self, rollup: Rollup) -> None:
        """Record ``rollup`` with its sources, replacing one of the same id, in the caller's
        transaction. Every source must exist and be unlocked."""
        ...

    def drop_rollups(self, ids: Sequence[str]) -> int:
        """Remove these rollups, in the caller's transaction; returns how many were there."""
        ...

    def rollups(self, *, subject: str | None = None, limit: int = ROLLUPS_LIMIT) -> list[Rollup]:
        """The rollups the reader may see (every one of their sources readable), best score
        first."""
        ...
