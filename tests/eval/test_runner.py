from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import stratamem
from stratamem.cli import main
from stratamem.embed.hashing import HashingEmbedder
from stratamem.eval.loading import load_dataset
from stratamem.eval.runner import evaluate, tune, weight_grid

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "eval"


@pytest.mark.parametrize("name", ["beir-standard", "beir-graded", "locomo-json"])
def test_every_mode_runs_through_the_real_pipeline(store_location: str, name: str) -> None:
    dataset = load_dataset(FIXTURES / name)
    with stratamem.open(store_location, embedder=HashingEmbedder()) as mem:
        results = evaluate(dataset, mem, ["keyword", "vector", "hybrid"])
        assert [r.mode for r in results] == ["keyword", "vector", "hybrid"]
        for result in results:
            assert result.metrics
            assert all(0.0 <= v <= 1.0 for v in result.metrics.values())
        assert mem.stats()["chunks"] == len(dataset.docs)
        assert mem.indexes.pending() == 0
        again = evaluate(dataset, mem, ["keyword"])  # the prepared store is reused as it is
        assert again[0].metrics == results[0].metrics
        assert mem.stats()["chunks"] == len(dataset.docs)


def test_locomo_questions_only_see_their_own_conversation(store_location: str) -> None:
    dataset = load_dataset(FIXTURES / "locomo-json")
    with stratamem.open(store_location, embedder=HashingEmbedder()) as mem:
        result = evaluate(dataset, mem, ["hybrid"])[0]
    assert result.counts.get("dropped_out_of_group", 0) == 0
    assert result.per_category


def test_the_keyword_mode_finds_an_exact_title(store_location: str) -> None:
    dataset = load_dataset(FIXTURES / "beir-standard")
    with stratamem.open(store_location, embedder=HashingEmbedder()) as mem:
        result = evaluate(dataset, mem, ["keyword"])[0]
    assert result.metrics["ndcg_cut_10"] > 0.5


def test_fts_is_still_read_as_the_keyword_mode(store_location: str) -> None:
    dataset = load_dataset(FIXTURES / "beir-standard")
    with stratamem.open(store_location, embedder=HashingEmbedder()) as mem:
        older, current = evaluate(dataset, mem, ["fts", "keyword"])
    assert older.mode == current.mode == "keyword"
    assert older.metrics == current.metrics


def test_unknown_mode_is_refused(store_location: str) -> None:
    dataset = load_dataset(FIXTURES / "beir-standard")
    with (
        stratamem.open(store_location, embedder=HashingEmbedder()) as mem,
        pytest.raises(ValueError, match="unknown mode"),
    ):
        evaluate(dataset, mem, ["bm42"])


def test_weight_grid_sums_to_one() -> None:
    grid = weight_grid(step=0.25, graph=(0.0, 0.2, 0.9))
    assert all(sum(w.values()) == pytest.approx(1.0) for w in grid)
    assert all(v >= 0 for w in grid for v in w.values())
    assert len(grid) == 5 + 4 + 1


def test_tune_reports_on_heldout(store_location: str) -> None:
    dataset = load_dataset(FIXTURES / "beir-graded")
    with stratamem.open(store_location, embedder=HashingEmbedder()) as mem:
        result = tune(dataset, mem, grid=weight_grid(step=0.5, graph=(0.0,)))
    assert result.tried == 3
    assert result.heldout.split == "heldout"
    assert result.default_heldout.split == "heldout"
    assert sum(result.weights.values()) == pytest.approx(1.0)


@pytest.mark.parametrize("mode", ["keyword", "fts"])
def test_eval_command_writes_reports(tmp_path: Path, store_location: str, mode: str) -> None:
    out = tmp_path / "reports"
    # A folder for the dataset's file, or the database to hold it.
    store = store_location if "://" in store_location else str(tmp_path / "store")
    result = CliRunner().invoke(
        main,
        [
            "eval",
            str(FIXTURES / "beir-standard"),
            "--mode",
            mode,
            "--store",
            store,
            "--out",
            str(out),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert [r["mode"] for r in data["results"]] == ["keyword"]
    assert "| keyword |" in (out / "eval-beir-standard.md").read_text()


def test_eval_help_names_the_keyword_mode_only() -> None:
    shown = CliRunner().invoke(main, ["eval", "--help"]).output
    assert "keyword" in shown
    assert "fts" not in shown
