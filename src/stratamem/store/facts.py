"""The facts role: bitemporal facts, each owned by a source (see :mod:`stratamem.memory.facts`
for what they mean and how a statement changes them).

A fact belongs to the source its evidence is in, or, asserted without evidence, to the source
it was asserted into; it is read through that source's gate, sealed when it is locked and
removed when it is forgotten. Each source keeps its own timeline of a (subject, predicate):
what one source says never closes or changes what another says, so a source hidden from a
reader shapes nothing of what it reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

Origin = Literal["asserted", "structure", "model"]
ORIGINS: tuple[Origin, ...] = ("asserted", "structure", "model")
FACTS_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class Fact:
    """One row of the fact store."""

    id: str
    subject: str
    predicate: str
    object: str
    valid_from: datetime | None  # None: since before anything known
    valid_to: datetime | None  # None: still true
    recorded_at: datetime
    expired_at: datetime | None = None  # None: believed now
    evidence: tuple[str, ...] = ()
    confidence: float = 1.0
    origin: Origin = "asserted"
    object_is_entity: bool = False
    source_id: str = ""
    single: bool = True  # one value at a time; False: one of a set of values
    # Why a model recorded the row: the reason its decision gave (see memory/decide.py);
    # empty for a statement made by anyone else.
    reason: str = ""

    @property
    def believed(self) -> bool:
        return self.expired_at is None

    def holds_at(self, when: datetime | None) -> bool:
        """Whether the fact was true at valid time ``when`` (None: now, the open end)."""
        if when is None:
            return self.valid_to is None
        starts = self.valid_from is None or self.valid_from <= when
        return starts and (self.valid_to is None or when < self.valid_to)

    def known_at(self, when: datetime) -> bool:
        """Whether the store believed the row at transaction time ``when``."""
        return self.recorded_at <= when and (self.expired_at is None or when < self.expired_at)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "subject": self.subject,
            "predicate": self.predicate,
            "object": self.object,
            "object_is_entity": self.object_is_entity,
            "valid_from": iso(self.valid_from),
            "valid_to": iso(self.valid_to),
            "recorded_at": iso(self.recorded_at),
            "expired_at": iso(self.expired_at),
            "evidence": list(self.evidence),
            "confidence": self.confidence,
            "origin": self.origin,
            "source_id": self.source_id,
            "single": self.single,
            "reason": self.reason,
        }


def iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


class FactStore(Protocol):
    def fact_rows(self, source_id: str, subject: str, predicate: str) -> list[Fact]:
        """Every row (believed or not) of one source's (subject, predicate), unfiltered: for
        the writer working out a change."""
        ...

    def write_facts(
        self, source_id: str, expire: Sequence[str], record: Sequence[Fact], now: datetime
    ) -> None:
        """End the transaction time of ``expire`` (rows of ``source_id``) at ``now`` and
        record ``record`` under ``source_id``, in the caller's transaction."""
        ...

    def facts(
        self,
        *,
        subject: str | None = None,
        predicate: str | None = None,
        ids: Sequence[str] | None = None,
        believed_only: bool = True,
        limit: int = FACTS_LIMIT,
    ) -> list[Fact]:
        """Rows the reader may see (of sources it may read), newest valid time first; all
        transaction times unless ``believed_only``."""
        ...

    def write_fact_vectors(self, model: str, vectors: Sequence[tuple[str, bytes]]) -> None:
        """Store (fact id, float32 vector) pairs of ``model``, in the caller's transaction."""
        ...

    def fact_vectors(self, model: str, ids: Sequence[str]) -> dict[str, bytes]:
        """The vectors of ``model`` of these facts (those that have one)."""
        ...


@dataclass(frozen=True, slots=True)
class FactWrite:
    """What one statement did: the rows it expired and those it recorded."""

    expired: tuple[str, ...]
    recorded: tuple[Fact, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"expired": list(self.expired), "recorded": [f.to_dict() for f in self.recorded]}
