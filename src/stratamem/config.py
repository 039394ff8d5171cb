"""Typed settings for search: weight profiles and the pipeline's knobs, with defaults.

Nothing here reads the environment; the CLI and servers build these objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stratamem.errors import RegistryError


@dataclass(frozen=True, slots=True)
class WeightProfile:
    """Leg weights for fusion (they need not sum to 1; fusion normalises what is live)."""

    keyword: float
    vector: float
    graph: float
    freshness: float = 0.0
    freshness_half_life_days: float = 30.0

    def weights(self) -> dict[str, float]:
        return {
            "keyword": self.keyword,
            "vector": self.vector,
            "graph": self.graph,
            "freshness": self.freshness,
        }


PROFILES: dict[str, WeightProfile] = {
    "balanced": WeightProfile(keyword=0.45, vector=0.45, graph=0.10),
    "semantic": WeightProfile(keyword=0.25, vector=0.65, graph=0.10),
    "lexical": WeightProfile(keyword=0.70, vector=0.25, graph=0.05),
    "graph_first": WeightProfile(keyword=0.30, vector=0.30, graph=0.40),
    "recent": WeightProfile(keyword=0.40, vector=0.40, graph=0.05, freshness=0.15),
}


def profile(name: str) -> WeightProfile:
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise RegistryError(f"unknown weight profile {name!r}; known: {known}") from None


@dataclass(frozen=True, slots=True)
class SearchConfig:
    """The hybrid pipeline's knobs. ``pool`` candidates are taken from each leg."""

    profile: str = "balanced"
    fusion: str = "minmax"  # or "rrf"
    rrf_k: int = 60
    pool: int = 100
    expand_seeds: int = 5
    expand_damping: float = 0.6
    expand_per_seed: int = 3
    expand_window: int = 2
    hub_fraction: float = 0.05
    tier0_boost: float = 1.25
    tier0_tags: tuple[str, ...] = ("pinned", "decision")
    mmr_lambda: float = 0.7
    rerank_top: int = 20
    rerank_timeout_s: float = 5.0
    weights: dict[str, float] = field(default_factory=dict)

    def leg_weights(self) -> dict[str, float]:
        """The profile's weights, overridden by any explicit ``weights`` (e.g. tuned)."""
        return {**profile(self.profile).weights(), **self.weights}


@dataclass(frozen=True, slots=True)
class TreeConfig:
    """When buffers seal into summaries, and how big summaries are.

    Level 0 (chunks) seals when its buffered tokens reach ``input_token_budget``, or when it
    has gone stale: its oldest item is more than ``flush_age_days`` of source time older than
    the next item, or than the source's newest item (explicit ``flush`` seals it at once).
    Levels ≥ 1 seal every ``summary_fanout`` summaries and are never force-sealed. A cascade
    climbs at most ``max_depth`` levels. Document sources seal each document on its own.
    """

    input_token_budget: int = 8000
    summary_fanout: int = 10
    max_depth: int = 32
    flush_age_days: float = 7.0
    output_token_budget: int = 400
    max_entities: int = 32
    max_topics: int = 16

    def __post_init__(self) -> None:
        if self.input_token_budget < 1:
            raise ValueError("input_token_budget must be at least 1")
        if self.summary_fanout < 2:
            raise ValueError("summary_fanout must be at least 2")
        if not 1 <= self.max_depth <= 32:
            raise ValueError("max_depth must be between 1 and 32")
        if self.flush_age_days <= 0:
            raise ValueError("flush_age_days must be positive")
        if self.output_token_budget < 8:
            raise ValueError("output_token_budget must be at least 8")
