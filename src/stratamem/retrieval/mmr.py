"""Maximal marginal relevance (Carbonell & Goldstein, SIGIR 1998).

Greedily picks the candidate maximising ``λ · rel(d) − (1 − λ) · max_{s ∈ S} sim(d, s)``,
where ``rel`` is the candidate's fused score rescaled to [0, 1] and ``sim`` the cosine between
unit vectors. λ = 1 is the relevance order; λ = 0 only diversity. Candidates without a vector
keep their relevance rank among the picks (no similarity penalty can be computed for them).
Ties go to the earlier candidate, so the result is deterministic.

``threshold`` limits the penalty to near-duplicates: a similarity below it counts as 0, so a
candidate is pushed down only by an already picked one at least that similar. 0 (the default)
is the classic rule (negative cosines never count); a threshold above every similarity gives
the relevance order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt


def mmr(
    ids: Sequence[str],
    relevance: Mapping[str, float],
    vectors: Mapping[str, npt.NDArray[np.float32]],
    *,
    lam: float = 0.7,
    limit: int | None = None,
    threshold: float = 0.0,
) -> list[str]:
    if not 0.0 <= lam <= 1.0:
        raise ValueError("lam must be within [0, 1]")
    if not 0.0 <= threshold <= 1.0:
        raise ValueError("threshold must be within [0, 1]")
    limit = len(ids) if limit is None else min(limit, len(ids))
    if limit <= 0:
        return []
    scores = np.array([relevance[i] for i in ids], dtype=np.float64)
    low, high = float(scores.min()), float(scores.max())
    rel = (scores - low) / (high - low) if high > low else np.ones_like(scores)
    has = np.array([i in vectors for i in ids])
    dim = next((len(v) for v in vectors.values()), 0)
    matrix = np.zeros((len(ids), dim), dtype=np.float32)
    for row, key in enumerate(ids):
        if has[row]:
            matrix[row] = vectors[key]
    max_sim = np.zeros(len(ids), dtype=np.float64)
    chosen = np.zeros(len(ids), dtype=bool)
    picked: list[str] = []
    for _ in range(limit):
        value = lam * rel - (1.0 - lam) * max_sim
        value[chosen] = -np.inf
        best = int(np.argmax(value))  # first maximum: the earlier candidate wins ties
        chosen[best] = True
        picked.append(ids[best])
        if has[best] and dim:
            sims = matrix @ matrix[best]
            sims[~has] = 0.0
            sims[sims < threshold] = 0.0
            np.maximum(max_sim, sims, out=max_sim)
    return picked
