from __future__ import annotations

from math import log2

import pytest

from stratamem.eval import evaluate, evaluate_per_query, run_from_ranking

GRADED = {"q": {"a": 3, "b": 2, "c": 1, "n": 0}}


def test_ndcg_with_graded_relevance_uses_linear_gain() -> None:
    # Ranked worst first: c (1), b (2), a (3). trec_eval's gain is the grade itself.
    run = run_from_ranking({"q": ["c", "b", "a"]})
    dcg = 1 / log2(2) + 2 / log2(3) + 3 / log2(4)
    ideal = 3 / log2(2) + 2 / log2(3) + 1 / log2(4)
    dcg_2 = 1 + 2 / log2(3)
    ideal_2 = 3 + 2 / log2(3)

    scores = evaluate(GRADED, run, ("ndcg_cut_10", "ndcg_cut_2"))

    assert scores["ndcg_cut_10"] == pytest.approx(dcg / ideal)
    assert scores["ndcg_cut_2"] == pytest.approx(dcg_2 / ideal_2)


def test_non_relevant_grade_adds_nothing() -> None:
    run = run_from_ranking({"q": ["n", "a", "b", "c"]})
    ideal = 3 + 2 / log2(3) + 1 / 2
    dcg = 3 / log2(3) + 2 / 2 + 1 / log2(5)
    assert evaluate(GRADED, run, ("ndcg_cut_10",))["ndcg_cut_10"] == pytest.approx(dcg / ideal)


def test_recall_precision_and_reciprocal_rank() -> None:
    qrels = {"q1": {"a": 1, "b": 1, "c": 1}, "q2": {"x": 1}}
    run = run_from_ranking({"q1": ["z", "a", "y", "b", "w"], "q2": ["v", "u", "x"]})

    per_query = evaluate_per_query(qrels, run, ("recall_2", "recall_5", "P_2", "recip_rank"))

    assert per_query["q1"] == pytest.approx(
        {"recall_2": 1 / 3, "recall_5": 2 / 3, "P_2": 1 / 2, "recip_rank": 1 / 2}
    )
    assert per_query["q2"] == pytest.approx(
        {"recall_2": 0.0, "recall_5": 1.0, "P_2": 0.0, "recip_rank": 1 / 3}
    )
    assert evaluate(qrels, run, ("recip_rank",)) == pytest.approx(
        {"recip_rank": (1 / 2 + 1 / 3) / 2}
    )


def test_perfect_ranking_scores_one() -> None:
    run = run_from_ranking({"q": ["a", "b", "c", "n"]})
    assert evaluate(GRADED, run) == pytest.approx(
        {"ndcg_cut_10": 1.0, "recall_100": 1.0, "recip_rank": 1.0}
    )


def test_a_query_missing_from_the_run_scores_zero() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    run = run_from_ranking({"q1": ["a"], "elsewhere": ["b"]})

    assert evaluate_per_query(qrels, run, ("recip_rank",)) == {
        "q1": {"recip_rank": 1.0},
        "q2": {"recip_rank": 0.0},
    }
    assert evaluate(qrels, run, ("recip_rank",)) == {"recip_rank": 0.5}


def test_a_query_without_relevant_docs_is_not_averaged() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 0}}
    run = run_from_ranking({"q1": ["a"], "q2": ["b"]})
    assert list(evaluate_per_query(qrels, run)) == ["q1"]
    assert evaluate({"q2": {"b": 0}}, run) == {
        "ndcg_cut_10": 0.0,
        "recall_100": 0.0,
        "recip_rank": 0.0,
    }


def test_trec_eval_breaks_ties_by_doc_id_descending() -> None:
    qrels = {"q": {"a": 1}}
    # We listed "a" first, but with equal scores trec_eval ranks "b" above it.
    assert evaluate(qrels, {"q": {"a": 1.0, "b": 1.0}}, ("recip_rank",)) == {"recip_rank": 0.5}
    # run_from_ranking gives strictly decreasing scores, so our order is the one scored.
    run = run_from_ranking({"q": ["a", "b"]})
    assert run == {"q": {"a": 2.0, "b": 1.0}}
    assert evaluate(qrels, run, ("recip_rank",)) == {"recip_rank": 1.0}


def test_run_from_ranking_rejects_a_doc_ranked_twice() -> None:
    with pytest.raises(ValueError, match="query 'q': doc 'a' is ranked twice"):
        run_from_ranking({"q": ["a", "b", "a"]})


def test_run_from_ranking_of_nothing() -> None:
    assert run_from_ranking({"q": []}) == {"q": {}}


@pytest.mark.parametrize(
    ("metric", "message"),
    [
        ("ndcg_at_10", "unknown metric 'ndcg_at_10'"),
        ("recall", "needs a cut-off, e.g. recall_10"),
        ("recall_0", "unknown metric 'recall_0'"),
        ("Rprec_mult", "unknown metric"),
    ],
)
def test_bad_metric_names(metric: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        evaluate(GRADED, {"q": {"a": 1.0}}, (metric,))


def test_uncut_trec_measures_pass_through() -> None:
    run = run_from_ranking({"q": ["b", "a", "c"]})
    scores = evaluate(GRADED, run, ("map", "Rprec", "ndcg"))
    assert set(scores) == {"map", "Rprec", "ndcg"}
    assert scores["map"] == pytest.approx((1 + 1 + 1) / 3)
