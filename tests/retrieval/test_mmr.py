from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratamem.config import SearchConfig
from stratamem.retrieval.hybrid import _diversify
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


candidates = st.integers(min_value=1, max_value=14).flatmap(
    lambda n: st.tuples(
        st.lists(st.floats(0, 1, allow_nan=False), min_size=n, max_size=n),
        st.lists(
            st.tuples(st.integers(-3, 3), st.integers(-3, 3), st.integers(-3, 3)),
            min_size=n,
            max_size=n,
        ),
        st.lists(st.booleans(), min_size=n, max_size=n),  # which have a vector
        st.lists(st.booleans(), min_size=n, max_size=n),  # which are chat turns
    )
)


def _inputs(drawn: tuple) -> tuple[list[str], dict, dict, set[str]]:
    scores, points, has, chat = drawn
    ids = [f"n{i}" for i in range(len(scores))]
    relevance = dict(zip(ids, scores, strict=True))
    # Small integer points repeat, so equal vectors and equal scores (ties) are common.
    vectors = {
        key: unit(*(float(x) + 0.5 for x in point))
        for key, point, present in zip(ids, points, has, strict=True)
        if present
    }
    return ids, relevance, vectors, {k for k, c in zip(ids, chat, strict=True) if c}


@given(drawn=candidates, limit=st.integers(0, 16), threshold=st.sampled_from([0.0, 0.9, 1.0]))
def test_a_limit_picks_the_head_of_the_whole_order(
    drawn: tuple, limit: int, threshold: float
) -> None:
    ids, relevance, vectors, _ = _inputs(drawn)
    whole = mmr(ids, relevance, vectors, threshold=threshold)
    assert mmr(ids, relevance, vectors, threshold=threshold, limit=limit) == whole[:limit]


@given(
    drawn=candidates, limit=st.integers(1, 16), mode=st.sampled_from(["on", "duplicates", "auto"])
)
def test_the_search_diversifies_the_head_it_shows_as_the_whole_list(
    drawn: tuple, limit: int, mode: str
) -> None:
    """The search diversifies only the ``limit`` hits it shows; they are the head of what
    diversifying the whole candidate list gives, chat turns mixed with the rest included."""
    ids, relevance, vectors, chat = _inputs(drawn)
    cfg = SearchConfig(mmr=mode)
    in_chat = chat if mode == "auto" else set()
    whole = _diversify(ids, relevance, vectors, in_chat, cfg, len(ids))
    assert sorted(whole) == sorted(ids)
    assert _diversify(ids, relevance, vectors, in_chat, cfg, limit) == whole[:limit]
