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
