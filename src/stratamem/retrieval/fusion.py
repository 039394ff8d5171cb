"""Fusing the scores of several retrieval legs into one ranking.

Two methods:

- **Weighted min-max** (default). Each leg's scores are rescaled to [0, 1] over that leg's own
  candidates, ``(s - min) / (max - min)`` (a leg whose candidates all score the same gives
  them 1.0), then summed with the profile's weights. A candidate a leg did not return gets 0
  from it. A leg that returned nothing hands its weight to the others in proportion to their
  weights, so a keyword-only store ranks exactly as the keyword leg does.
- **Reciprocal rank fusion** (Cormack, Clarke & Büttcher, SIGIR 2009):
  ``score(d) = Σ_leg w_leg / (k + rank_leg(d))`` with ``k = 60`` and ranks from 1.

Ties are broken by ``tie``, a key function over ids (by default the id itself; the search
passes :meth:`~stratamem.retrieval.ties.TieOrder.key`, which orders by content), so the same
inputs always give the same order, whatever order the legs or their candidates came in.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from typing import Any

LegScores = Mapping[str, float]
TieBreak = Callable[[str], Any]


def _by_id(key: str) -> str:
    return key


def minmax(scores: LegScores) -> dict[str, float]:
    """Scores rescaled to [0, 1]; all-equal scores (or a single one) become 1.0."""
    if not scores:
        return {}
    low, high = min(scores.values()), max(scores.values())
    if high == low:
        return dict.fromkeys(scores, 1.0)
    span = high - low
    return {key: (value - low) / span for key, value in scores.items()}


def effective_weights(
    legs: Mapping[str, LegScores], weights: Mapping[str, float]
) -> dict[str, float]:
    """The weights after empty or unweighted legs hand theirs to the rest, summing to 1."""
    live = {name: weights.get(name, 0.0) for name, scores in legs.items() if scores}
    live = {name: w for name, w in live.items() if w > 0}
    total = sum(live.values())
    if total <= 0:
        return {}
    return {name: w / total for name, w in live.items()}


def weighted_minmax(
    legs: Mapping[str, LegScores], weights: Mapping[str, float]
) -> dict[str, dict[str, float]]:
    """Per candidate, each leg's weighted normalised contribution (the parts of the sum)."""
    used = effective_weights(legs, weights)
    parts: dict[str, dict[str, float]] = {}
    for name, weight in used.items():
        for key, value in minmax(legs[name]).items():
            parts.setdefault(key, {})[name] = weight * value
    return parts


def rrf(
    legs: Mapping[str, LegScores],
    weights: Mapping[str, float] | None = None,
    *,
    k: int = 60,
    tie: TieBreak = _by_id,
) -> dict[str, dict[str, float]]:
    """Per candidate, each leg's ``w / (k + rank)`` (ranks by score, ties by ``tie``)."""
    if k < 0:
        raise ValueError("k must be >= 0")
    parts: dict[str, dict[str, float]] = {}
    for name, scores in legs.items():
        weight = 1.0 if weights is None else weights.get(name, 0.0)
        if weight <= 0:
            continue
        ranked = sorted(scores.items(), key=lambda item: (-item[1], tie(item[0])))
        for rank, (key, _) in enumerate(ranked, 1):
            parts.setdefault(key, {})[name] = weight / (k + rank)
    return parts


def ranking(totals: Mapping[str, float], *, tie: TieBreak = _by_id) -> list[str]:
    """Ids by descending score, ties by ``tie``."""
    return [key for key, _ in sorted(totals.items(), key=lambda item: (-item[1], tie(item[0])))]


def at_least_top(totals: Mapping[str, float], n: int) -> list[str]:
    """Every id that can be among ``top(totals, n)``, whatever the tie break: those scoring
    at least the ``n``-th highest score (all of them when there are no more than ``n``)."""
    if n <= 0:
        return []
    if n >= len(totals):
        return list(totals)
    least = heapq.nlargest(n, totals.values())[-1]
    return [key for key, value in totals.items() if value >= least]


def top(totals: Mapping[str, float], n: int, *, tie: TieBreak = _by_id) -> list[str]:
    """``ranking(totals)[:n]`` without sorting all of them: only those scoring at least the
    ``n``-th highest score can be among the first ``n``, and only they are ordered (``tie``
    keys are unique, so the order of the first ``n`` is the same)."""
    if n <= 0:
        return []
    if n >= len(totals):
        return ranking(totals, tie=tie)
    best = sorted(at_least_top(totals, n), key=lambda key: (-totals[key], tie(key)))
    return best[:n]
