"""The HTTP API's request bodies: each route's arguments, checked before the store is asked."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from stratamem.config import PROFILES
from stratamem.entities.search import MAX_LIMIT as MAX_ENTITY_LIMIT
from stratamem.retrieval.hybrid import MAX_LIMIT as MAX_SEARCH_LIMIT
from stratamem.retrieval.primitives import (
    COVER_DEFAULT_LIMIT,
    DEFAULT_LIMIT,
    MAX_BATCH,
    MAX_LIMIT,
)
from stratamem.timeparse import parse_when
from stratamem.types import Filters, SourceKind

MAX_QUERY_CHARS = 10_000
MAX_FACT_LIMIT = 1000
MAX_ROLLUP_LIMIT = 1000


def _when(value: Any) -> Any:
    """A time as the command line takes it: ISO 8601 (``2024-03-12``) or a span back (``24h``)."""
    return parse_when(value) if isinstance(value, str) else value


When = Annotated[
    datetime,
    BeforeValidator(_when),
    Field(description="ISO 8601 (2024-03-12, 2024-03-12T09:30Z) or a span back: 24h, 7d, 2w."),
]


def _profile(name: str) -> str:
    if name not in PROFILES:
        raise ValueError(f"unknown weight profile; known: {', '.join(sorted(PROFILES))}")
    return name


Query = Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS)]
Names = Annotated[list[Annotated[str, Field(min_length=1, max_length=200)]], Field(max_length=100)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Filtered(_Body):
    sources: Names = Field(
        default_factory=list, description="Source ids or scopes (slack:* is a prefix)."
    )
    kinds: list[SourceKind] = Field(default_factory=list, max_length=4)

    def filters(self, *, since: datetime | None = None, until: datetime | None = None) -> Filters:
        return Filters(
            sources=tuple(self.sources), kinds=tuple(self.kinds), since=since, until=until
        )


class SearchBody(_Filtered):
    query: Query
    since: When | None = None
    until: When | None = None
    limit: int = Field(10, ge=1, le=MAX_SEARCH_LIMIT)
    budget: int | None = Field(
        None, ge=0, le=1_000_000, description="Pack hits into tokens as cards (0: every hit whole)."
    )
    mode: Literal["hybrid", "keyword", "vector", "graph"] = "hybrid"
    profile: Annotated[str, AfterValidator(_profile)] | None = Field(
        None, description=f"Fusion weights: {', '.join(sorted(PROFILES))} (default balanced)."
    )


class QuerySourceBody(_Filtered):
    source: str | None = Field(None, max_length=200, description="A source id or scope.")
    source_kind: SourceKind | None = None
    time_window_days: float | None = Field(None, gt=0, le=365_000)
    query: Query | None = None
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)


class QueryGlobalBody(_Filtered):
    since: When
    until: When
    source_kind: SourceKind | None = None
    query: Query | None = None
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)


class QueryTopicBody(_Filtered):
    entity_id: str = Field(min_length=1, max_length=500, description="person:alice chen")
    since: When | None = None
    until: When | None = None
    query: Query | None = None
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)


class CoverWindowBody(_Filtered):
    since: When
    until: When
    limit: int = Field(COVER_DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)


class SearchEntitiesBody(_Body):
    query: Query
    kinds: Names = Field(default_factory=list, description="Entity kinds: person, system, …")
    limit: int = Field(5, ge=1, le=MAX_ENTITY_LIMIT)


class DrillDownBody(_Filtered):
    node_id: str = Field(min_length=1, max_length=200)
    max_depth: int = Field(1, ge=1, le=32)
    query: Query | None = None
    limit: int | None = Field(None, ge=1, le=MAX_LIMIT)


class FetchLeavesBody(_Filtered):
    ids: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        min_length=1, max_length=MAX_BATCH
    )


class IngestBody(_Body):
    path: str = Field(min_length=1, max_length=4096, description="A path on the server.")
    format: str | None = Field(None, max_length=100, description="The connector (detected).")
    scope: str | None = Field(None, max_length=200)
    access: list[Annotated[str, Field(min_length=1, max_length=64)]] | None = Field(
        None, max_length=100, description="Access scopes (default: a principal's own)."
    )
    sync: bool = Field(False, description="Remove the records the export lacks.")
    embed: bool = Field(True, description="Embed the new chunks before answering.")
    trees: bool = Field(
        True, description="Seal the summary trees of what changed (false: leave them queued)."
    )


Entity = Annotated[
    str, Field(min_length=1, max_length=500, description="An entity id: person:carol diaz.")
]


class RecallBody(_Body):
    subject: Entity | None = None
    predicate: str | None = Field(None, min_length=1, max_length=200)
    as_of: When | None = Field(None, description="True at this time (default now).")
    known_at: When | None = Field(None, description="As known at this time (default now).")
    limit: int = Field(100, ge=1, le=10_000)


class QueryFactsBody(_Body):
    query: Query
    subject: Entity | None = None
    sources: Names = Field(default_factory=list, description="Source ids or scopes.")
    as_of: When | None = Field(None, description="True at this time (default now).")
    known_at: When | None = Field(None, description="As known at this time (default now).")
    limit: int = Field(10, ge=1, le=MAX_FACT_LIMIT)


class FactHistoryBody(_Body):
    subject: Entity
    predicate: str = Field(min_length=1, max_length=200)
    known_at: When | None = None


class RememberBody(_Body):
    subject: Entity
    predicate: str = Field(min_length=1, max_length=200)
    object: str = Field(min_length=1, max_length=10_000, description="An entity id or text.")
    valid_from: When | None = None
    valid_to: When | None = None
    evidence: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        default_factory=list, max_length=100, description="Node ids the fact rests on."
    )
    source: str | None = Field(None, min_length=1, max_length=200)
