from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratamem.retrieval.fusion import (
    effective_weights,
    minmax,
    ranking,
    rrf,
    top,
    weighted_minmax,
)


def totals(parts: dict[str, dict[str, float]]) -> dict[str, float]:
    return {key: sum(values.values()) for key, values in parts.items()}


def test_minmax_by_hand() -> None:
    assert minmax({"a": 2.0, "b": 4.0, "c": 3.0}) == {"a": 0.0, "b": 1.0, "c": 0.5}
    assert minmax({"a": 7.0, "b": 7.0}) == {"a": 1.0, "b": 1.0}
    assert minmax({}) == {}


def test_weighted_minmax_by_hand() -> None:
    # keyword: a=10, b=6, c=2 → a=1, b=.5, c=0 ; vector: b=.9, c=.8, d=.5 → b=1, c=.75, d=0
    legs = {"keyword": {"a": 10.0, "b": 6.0, "c": 2.0}, "vector": {"b": 0.9, "c": 0.8, "d": 0.5}}
    fused = totals(weighted_minmax(legs, {"keyword": 0.6, "vector": 0.4}))
    assert fused == pytest.approx({"a": 0.6, "b": 0.3 + 0.4, "c": 0.0 + 0.3, "d": 0.0})
    assert ranking(fused) == ["b", "a", "c", "d"]


def test_an_empty_leg_hands_its_weight_over() -> None:
    legs = {"keyword": {"a": 3.0, "b": 1.0}, "vector": {}, "graph": {"b": 1.0}}
    weights = {"keyword": 0.5, "vector": 0.4, "graph": 0.1}
    assert effective_weights(legs, weights) == pytest.approx({"keyword": 5 / 6, "graph": 1 / 6})
    fused = totals(weighted_minmax(legs, weights))
    assert fused == pytest.approx({"a": 5 / 6, "b": 1 / 6})


def test_single_leg_ranks_as_that_leg() -> None:
    legs = {"keyword": {"a": 1.0, "b": 3.0, "c": 2.0}, "vector": {}}
    fused = totals(weighted_minmax(legs, {"keyword": 0.5, "vector": 0.5}))
    assert ranking(fused) == ["b", "c", "a"]


def test_rrf_by_hand() -> None:
    legs = {"keyword": {"a": 3.0, "b": 2.0}, "vector": {"b": 0.9, "c": 0.1}}
    fused = totals(rrf(legs, k=60))
    assert fused == pytest.approx({"a": 1 / 61, "b": 1 / 62 + 1 / 61, "c": 1 / 62})
    assert ranking(fused) == ["b", "a", "c"]


def test_ties_break_by_id() -> None:
    assert ranking({"z": 1.0, "a": 1.0, "m": 2.0}) == ["m", "a", "z"]


scores = st.dictionaries(st.text("abcdef", min_size=1, max_size=3), st.floats(0, 100), max_size=8)


@given(scores, scores)
def test_fusion_is_independent_of_leg_and_candidate_order(kw: dict, vec: dict) -> None:
    weights = {"keyword": 0.55, "vector": 0.45}
    forward = totals(weighted_minmax({"keyword": kw, "vector": vec}, weights))
    backward = totals(
        weighted_minmax(
            {"vector": dict(reversed(vec.items())), "keyword": dict(reversed(kw.items()))},
            weights,
        )
    )
    assert ranking(forward) == ranking(backward)
    assert ranking(totals(rrf({"keyword": kw, "vector": vec}))) == ranking(
        totals(rrf({"vector": vec, "keyword": kw}))
    )


@given(
    st.dictionaries(
        st.text(alphabet="abcdef", min_size=1, max_size=3),
        st.sampled_from([0.0, 0.25, 0.5, 1.0]) | st.floats(0, 1),
        max_size=30,
    ),
    st.integers(-1, 40),
)
def test_top_is_the_head_of_the_ranking(totals: dict[str, float], n: int) -> None:
    assert top(totals, n) == ranking(totals)[: max(n, 0)]
