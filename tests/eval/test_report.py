from __future__ import annotations

import json
from dataclasses import dataclass
from math import log2
from pathlib import Path

import pytest

from stratamem.eval import (
    Baseline,
    Dataset,
    EvalResult,
    Query,
    load_dataset,
    run_retriever,
    write_report,
)
from stratamem.eval.report import format_metric, metric_label


@pytest.fixture
def graded(fixtures_dir: Path) -> Dataset:
    return load_dataset(fixtures_dir / "eval" / "beir-graded")


@pytest.fixture
def locomo(fixtures_dir: Path) -> Dataset:
    return load_dataset(fixtures_dir / "eval" / "locomo-json")


@dataclass
class Perfect:
    """Judged docs by grade, best first: the ideal ranking."""

    dataset: Dataset

    def retrieve(self, query: Query, k: int) -> list[str]:
        rels = self.dataset.qrels.get(query.id, {})
        return sorted(rels, key=lambda doc: -rels[doc])[:k]


@dataclass
class Fixed:
    """The same list for every query, whatever ``k`` asks."""

    ranking: list[str]
    mode: str = "fixed"

    def retrieve(self, query: Query, k: int) -> list[str]:
        return self.ranking


@dataclass
class WholeGroup:
    """Every doc of the query's group, in corpus order; optionally every doc there is."""

    dataset: Dataset
    ignore_groups: bool = False

    def retrieve(self, query: Query, k: int) -> list[str]:
        group = self.dataset.group_of(query)
        return [
            doc.id
            for doc in self.dataset.docs
            if self.ignore_groups or self.dataset.group_of(doc) == group
        ]


def test_perfect_retriever_scores_one(graded: Dataset) -> None:
    result = run_retriever(graded, Perfect(graded))

    assert result.metrics == pytest.approx(
        {"ndcg_cut_10": 1.0, "recall_100": 1.0, "recip_rank": 1.0}
    )
    assert result.dataset == "beir-graded"
    assert result.mode == "Perfect"
    assert result.counts["queries"] == 3
    assert result.per_category == {}


def test_reversed_ranking_by_hand(graded: Dataset) -> None:
    # Docs 5, 4, 3, 2, 1 for every query. Judged: q1 {2: 3, 3: 2, 1: 1}, q3 {5: 4},
    # q4 {4: 4, 3: 1}; q2 has no relevant doc and is not evaluated.
    result = run_retriever(graded, Fixed(["5", "4", "3", "2", "1"]))

    ndcg_q1 = (2 / log2(4) + 3 / log2(5) + 1 / log2(6)) / (3 + 2 / log2(3) + 1 / 2)
    ndcg_q3 = 1.0
    ndcg_q4 = (4 / log2(3) + 1 / 2) / (4 + 1 / log2(3))
    assert result.metrics == pytest.approx(
        {
            "ndcg_cut_10": (ndcg_q1 + ndcg_q3 + ndcg_q4) / 3,
            "recall_100": 1.0,
            "recip_rank": (1 / 3 + 1 + 1 / 2) / 3,
        }
    )
    assert result.per_query["4"]["recip_rank"] == pytest.approx(0.5)
    assert result.mode == "fixed"


def test_returned_ids_are_cleaned_and_counted(graded: Dataset) -> None:
    result = run_retriever(graded, Fixed(["nope", "2", "2", "3"]), k=2, mode="messy")

    assert result.counts["dropped_unknown"] == 3
    assert result.counts["dropped_repeated"] == 3
    assert result.per_query["1"]["recall_100"] == pytest.approx(2 / 3)
    assert "3 returned ids dropped unknown" in result.notes
    assert "recall_100 counts only the top 2" in result.notes


def test_split_and_progress(graded: Dataset) -> None:
    seen: list[tuple[int, int]] = []
    result = run_retriever(
        graded, Perfect(graded), split="heldout", progress=lambda i, n: seen.append((i, n))
    )

    assert result.split == "heldout"
    assert list(result.per_query) == graded.splits["heldout"]
    assert seen == [(1, 1)]
    with pytest.raises(ValueError, match="no split 'dev'"):
        run_retriever(graded, Perfect(graded), split="dev")
    with pytest.raises(ValueError, match="k must be positive"):
        run_retriever(graded, Perfect(graded), k=0)


def test_locomo_evidence_recall_per_category(locomo: Dataset) -> None:
    result = run_retriever(locomo, WholeGroup(locomo), k=50)

    # conv-1 ranks D1:1 D1:2 D1:3 D2:1 D2:2 D2:3: only q2's D2:3 (rank 6) is past 5.
    assert result.metrics == pytest.approx({"R@5": 6.5 / 7, "R@10": 1.0, "R@25": 1.0, "R@50": 1.0})
    assert result.per_category["multi-hop"]["R@5"] == pytest.approx(0.75)
    assert list(result.per_category) == ["multi-hop", "temporal", "single-hop", "adversarial"]
    assert result.counts["questions"] == 7
    assert {c: result.counts[c] for c in result.per_category} == {
        "multi-hop": 2,
        "temporal": 2,
        "single-hop": 2,
        "adversarial": 1,
    }
    assert result.counts["dropped_out_of_group"] == 0


def test_locomo_docs_outside_the_group_are_dropped(locomo: Dataset) -> None:
    result = run_retriever(locomo, WholeGroup(locomo, ignore_groups=True))

    assert result.metrics["R@10"] == pytest.approx(1.0)
    # 5 conv-1 questions see conv-2's 2 turns, 2 conv-2 questions see conv-1's 6.
    assert result.counts["dropped_out_of_group"] == 5 * 2 + 2 * 6


def test_locomo_sessions_use_small_cutoffs(fixtures_dir: Path) -> None:
    sessions = load_dataset(fixtures_dir / "eval" / "locomo-json", level="session")
    result = run_retriever(sessions, WholeGroup(sessions), k=10)

    assert set(result.metrics) == {"R@1", "R@3", "R@5", "R@10"}
    # conv-1 ranks S1, S2: q2 and q3 (evidence in S2) miss at R@1.
    assert result.metrics["R@1"] == pytest.approx(5 / 7)


def test_locomo_k_must_reach_the_largest_cutoff(locomo: Dataset) -> None:
    with pytest.raises(ValueError, match="scored at R@50; k=10 is too small"):
        run_retriever(locomo, WholeGroup(locomo), k=10)


@pytest.mark.parametrize(
    ("name", "label", "value", "shown"),
    [
        ("ndcg_cut_10", "nDCG@10", 0.66549, "0.665"),
        ("recall_100", "Recall@100", 0.9, "0.900"),
        ("recip_rank", "MRR", 1 / 3, "0.333"),
        ("P_5", "P@5", 0.2, "0.200"),
        ("R@5", "R@5 (%)", 0.5672, "56.7"),
        ("R@50", "R@50 (%)", 1.0, "100.0"),
        ("bpref", "bpref", 0.5, "0.500"),
    ],
)
def test_labels_and_formats(name: str, label: str, value: float, shown: str) -> None:
    assert metric_label(name) == label
    assert format_metric(name, value) == shown


def test_write_report(tmp_path: Path, graded: Dataset, locomo: Dataset) -> None:
    results = [
        run_retriever(graded, Perfect(graded), mode="perfect"),
        run_retriever(graded, Fixed(["5", "4", "3", "2", "1"]), mode="reversed"),
        run_retriever(locomo, WholeGroup(locomo), k=50, mode="corpus-order"),
    ]
    baselines = [
        Baseline("beir-graded", "BM25", {"ndcg_cut_10": 0.35}, source="folklore"),
        Baseline(
            "locomo",
            "DRAGON",
            {"R@5": 0.567, "R@10": 0.662, "R@25": 0.767, "R@50": 0.827},
            source="LoCoMo paper, Table 3",
        ),
    ]

    json_path, md_path = write_report(
        results, tmp_path / "out", "eval-smoke", baselines=baselines, command="make eval"
    )

    assert (json_path.name, md_path.name) == ("eval-smoke.json", "eval-smoke.md")
    document = json.loads(json_path.read_text())
    assert document["command"] == "make eval"
    assert document["machine"]["cpu_count"] >= 1
    assert document["machine"]["python"].startswith("3.")
    assert [r["mode"] for r in document["results"]] == ["perfect", "reversed", "corpus-order"]
    assert "per_query" not in document["results"][0]
    assert document["results"][2]["per_category"]["multi-hop"]["R@5"] == pytest.approx(0.75)
    assert document["results"][2]["counts"]["questions"] == 7
    assert document["baselines"][1]["name"] == "DRAGON"

    markdown = md_path.read_text()
    assert "| mode | nDCG@10 | Recall@100 | MRR | queries | split | seconds |" in markdown
    assert "| perfect | 1.000 | 1.000 | 1.000 | 3 | test |" in markdown
    assert "| BM25 | 0.350 | – | – | folklore |" in markdown
    assert "| corpus-order | 92.9 | 100.0 | 100.0 | 100.0 | 7 | test |" in markdown
    assert "| multi-hop | 75.0 | 100.0 | 100.0 | 100.0 | 2 |" in markdown
    assert "| DRAGON | 56.7 | 66.2 | 76.7 | 82.7 | LoCoMo paper, Table 3 |" in markdown
    assert markdown.index("## beir-graded") < markdown.index("## locomo")
    assert "- 2 of 9 questions are not evaluated: 1 list no evidence" in markdown


def test_write_report_can_keep_per_query_values(tmp_path: Path, graded: Dataset) -> None:
    result = run_retriever(graded, Perfect(graded))
    json_path, _ = write_report([result], tmp_path, "r", per_query=True)
    assert json.loads(json_path.read_text())["results"][0]["per_query"]["1"]["recip_rank"] == 1.0


def test_eval_result_defaults() -> None:
    result = EvalResult(dataset="d", mode="m", metrics={"recip_rank": 0.5})
    assert (result.per_category, result.counts, result.notes, result.split) == ({}, {}, [], "test")
