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
    expand_damping: float = 0.5
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
