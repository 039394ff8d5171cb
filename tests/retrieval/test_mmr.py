from __future__ import annotations

import numpy as np
import pytest

from stratamem.retrieval.mmr import mmr


def unit(*xs: float) -> np.ndarray:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def test_lambda_one_is_relevance_order() -> None:
    vecs = {"a": unit(1, 0), "b": unit(1, 0.01), "c": unit(0, 1)}
    rel = {"a": 1.0, "b": 0.9, "c": 0.5}
    assert mmr(["a", "b", "c"], rel, vecs, lam=1.0) == ["a", "b", "c"]


def test_near_duplicate_is_pushed_down_by_hand() -> None:
    # rel rescaled: a=1, b=0.8, c=0 ; sim(a,b)≈1, sim(a,c)=0.
    # second pick: b → .7*.8 - .3*1 = .26 ; c → .7*0 - .3*0 = 0 → b still wins at λ=.7
    # at λ=.3: b → .3*.8 - .7*1 = -.46 ; c → 0 → c wins.
    vecs = {"a": unit(1, 0), "b": unit(1, 0), "c": unit(0, 1)}
    rel = {"a": 1.0, "b": 0.9, "c": 0.5}
    assert mmr(["a", "b", "c"], rel, vecs, lam=0.7) == ["a", "b", "c"]
    assert mmr(["a", "b", "c"], rel, vecs, lam=0.3) == ["a", "c", "b"]


def test_candidates_without_vectors_keep_their_relevance_place() -> None:
    vecs = {"a": unit(1, 0), "b": unit(1, 0)}
    rel = {"a": 1.0, "b": 0.9, "x": 0.8}
    assert mmr(["a", "b", "x"], rel, vecs, lam=0.5) == ["a", "x", "b"]


def test_limit_and_bad_lambda() -> None:
    vecs = {"a": unit(1, 0)}
    assert mmr(["a"], {"a": 1.0}, vecs, limit=0) == []
    with pytest.raises(ValueError, match="lam"):
        mmr(["a"], {"a": 1.0}, vecs, lam=1.5)


def test_a_threshold_penalises_only_near_duplicates() -> None:
    # a is the most relevant; d nearly repeats it (cosine .95); b is related (cosine .6); c is
    # unrelated. rel rescaled: a=1, d=.9, b=.8, c=0.
    vecs = {"a": unit(1, 0), "d": unit(0.95, 0.312), "b": unit(0.6, 0.8), "c": unit(0, 1)}
    rel = {"a": 1.0, "d": 0.95, "b": 0.9, "c": 0.5}
    ids = ["a", "d", "b", "c"]
    # Classic MMR at λ .3: d → .27 - .7·.95 < 0, b → .24 - .42 < 0, c → 0: c comes second.
    assert mmr(ids, rel, vecs, lam=0.3) == ["a", "c", "b", "d"]
    # Only cosines ≥ .9 count: b's .6 is no penalty, d's .95 is (.27 - .665 < .24).
    assert mmr(ids, rel, vecs, lam=0.3, threshold=0.9) == ["a", "b", "c", "d"]
    # A threshold above every similarity leaves the relevance order.
    assert mmr(ids, rel, vecs, lam=0.3, threshold=1.0) == ids


def test_threshold_zero_is_the_classic_rule() -> None:
    rng = np.random.default_rng(7)
    ids = [f"n{i}" for i in range(30)]
    vecs = {i: unit(*rng.normal(size=8)) for i in ids}
    rel = {i: float(s) for i, s in zip(ids, rng.random(30), strict=True)}
    ids.sort(key=lambda i: -rel[i])
    assert mmr(ids, rel, vecs, lam=0.7, threshold=0.0) == mmr(ids, rel, vecs, lam=0.7)
    assert mmr(ids, rel, vecs, lam=0.7) != ids  # the random case does get diversified


def test_bad_threshold() -> None:
    with pytest.raises(ValueError, match="threshold"):
        mmr(["a"], {"a": 1.0}, {"a": unit(1, 0)}, threshold=1.5)
