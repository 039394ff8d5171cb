"""Settings from their layers — defaults, the user's file, the store's tuned weights, the
store's file, the environment, the command's options — and each stage they reach: search
weights and fusion, the reranker, chunking, and ``tune --save``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import stratamem
from stratamem.cli import main
from stratamem.config import KEYS, TUNED_KEY, env_name, load, store_file, user_file
from stratamem.errors import AccessDenied, ConfigError
from stratamem.store.urls import shown_location
from stratamem.testing import FakeModelServer

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "workspace"
FIXTURES = ROOT / "tests" / "fixtures" / "eval"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# -- layers ---------------------------------------------------------------------------------------


def test_each_layer_overrides_the_one_below_and_says_so(tmp_path: Path) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    db = tmp_path / "a.db"
    assert load(env, store=db)["search.profile"] == "balanced"
    user = write(user_file(env), '[search]\nprofile = "lexical"\nfusion = "rrf"\npool = 50\n')
    tuned = json.dumps(
        {
            "weights": {"keyword": 0.9, "vector": 0.1},
            "dataset": "d",
            "metric": "ndcg_cut_10",
            "tune_score": 0.5,
        }
    )
    beside = store_file(db)
    assert beside == tmp_path / "a.db.toml"
    write(beside, "[search]\npool = 70\n[tree]\ninput_token_budget = 500\n")
    chosen = load({**env, "STRATAMEM_SEARCH_POOL": "90"}, store=db, tuned=tuned)
    assert chosen["search.profile"] == "lexical"
    assert chosen.origin("search.profile") == str(user)
    assert chosen["search.weights"] == {"keyword": 0.9, "vector": 0.1}
    assert chosen.origin("search.weights").startswith("store (tune: d, ndcg_cut_10 0.5000")
    assert chosen["search.pool"] == 90
    assert chosen.origin("search.pool") == "env STRATAMEM_SEARCH_POOL"
    assert chosen["tree.input_token_budget"] == 500
    assert chosen.origin("tree.input_token_budget") == str(beside)
    config = chosen.search_config()
    assert (config.profile, config.fusion, config.pool) == ("lexical", "rrf", 90)
    assert config.leg_weights()["keyword"] == 0.9
    assert chosen.tree_config().input_token_budget == 500
    # The store's own file beats the weights tune saved in it.
    write(beside, "[search]\nweights = { graph = 1.0 }\n")
    assert load(env, store=db, tuned=tuned)["search.weights"] == {"graph": 1.0}


def test_every_setting_has_a_variable_and_the_summarizer_keeps_its_older_ones() -> None:
    assert env_name("search.mmr_lambda") == "STRATAMEM_SEARCH_MMR_LAMBDA"
    for key, spec in KEYS.items():
        name = env_name(key)
        default = "x" if spec.default in (None, "") else spec.default
        value = "keyword=1" if key == "search.weights" else str(default)
        assert load({name: value}).origin(key) == f"env {name}"
    assert load({"STRATAMEM_SUMMARIZER": "llm"})["summarizer.name"] == "llm"
    assert load({"STRATAMEM_LLM_MODEL": "m"}).origin("summarizer.model") == (
        "env STRATAMEM_LLM_MODEL"
    )


@pytest.mark.parametrize(
    ("layer", "message"),
    [
        ({"STRATAMEM_SEARCH_WEIGHTS": "keyword=x"}, "weight of keyword is not a number"),
        ({"STRATAMEM_SEARCH_WEIGHTS": "kw=1"}, "unknown leg 'kw'"),
        ({"STRATAMEM_SEARCH_WEIGHTS": "keyword"}, "expected leg=weight pairs"),
        ({"STRATAMEM_SEARCH_PROFILE": "fast"}, "expected one of"),
        ({"STRATAMEM_SEARCH_POOL": "0"}, "expected a positive number"),
        ({"STRATAMEM_SEARCH_MMR_LAMBDA": "2"}, "from 0 to 1"),
        ({"STRATAMEM_SEARCH_FUSION": "sum"}, "minmax, rrf"),
    ],
)
def test_a_bad_variable_is_named_with_its_setting(layer: dict[str, str], message: str) -> None:
    (name,) = layer
    with pytest.raises(ConfigError, match=message) as caught:
        load(layer)
    assert str(caught.value).startswith(f"env {name}: ")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[search]\npol = 3\n", "unknown setting 'search.pol' (did you mean search.pool?)"),
        ("[search\n", "cannot read the config file"),
        ("profile = 'lexical'\n", "must be a [section]"),
        ("[tree]\ninput_token_budget = true\n", "tree.input_token_budget: expected a number"),
    ],
)
def test_a_bad_file_is_named_with_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path / "x.db.toml", text)
    with pytest.raises(ConfigError, match=re.escape(message)) as e:
        load({"XDG_CONFIG_HOME": str(tmp_path / "none")}, store=tmp_path / "x.db")
    assert str(e.value).startswith(str(path))


def test_a_store_that_is_not_a_file_has_no_file_beside_it(tmp_path: Path) -> None:
    assert store_file(":memory:") is None
    assert store_file("postgresql://db/x") is None
    assert store_file(f"sqlite:///{tmp_path}/s.db") == Path(f"{tmp_path}/s.db.toml")


# -- from the command line ------------------------------------------------------------------------


def runner(db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, object]:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    for key in KEYS:
        monkeypatch.delenv(env_name(key), raising=False)

    def run(*args: str, env: dict[str, str] | None = None) -> object:
        return CliRunner().invoke(main, ["--db", db, *args], env=env)

    return db, run


@pytest.fixture
def cli(store_location: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, object]:
    return runner(store_location, tmp_path, monkeypatch)


@pytest.fixture
def file_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, object]:
    """On a SQLite file: for the store file only a file has beside it, and for what the
    store does not change (the reranker)."""
    return runner(str(tmp_path / "c.db"), tmp_path, monkeypatch)


def breakdowns(result: object) -> list[dict[str, float]]:
    data = json.loads(result.output)  # type: ignore[attr-defined]
    return [h["explain"]["breakdown"] for h in data["hits"]]


@pytest.mark.slow
def test_the_store_file_reaches_search_and_an_option_reaches_past_it(file_cli) -> None:  # type: ignore[no-untyped-def]
    db, run = file_cli
    assert run("ingest", str(EXAMPLES / "notes"), "--embed").exit_code == 0
    mixed = breakdowns(run("search", "queue decision", "--json"))
    assert any(b["vector"] > 0 for b in mixed)
    write(store_file(db), "[search]\nweights = { keyword = 1.0, vector = 0.0, graph = 0.0 }\n")
    keyword_only = breakdowns(run("search", "queue decision", "--json"))
    assert keyword_only
    assert all(b["vector"] == 0 and b["graph"] == 0 for b in keyword_only)
    shown = json.loads(run("config", "show", "--json").output)
    assert shown["settings"]["search.weights"]["origin"] == str(store_file(db))
    assert shown["files"]["store"] == str(store_file(db))
    again = breakdowns(run("search", "queue decision", "--weights", "vector=1", "--json"))
    assert any(b["vector"] > 0 for b in again)
    bad = run("search", "queue", "--weights", "kw=1")
    assert bad.exit_code == 2
    assert "--weights" in bad.output
    assert "unknown leg 'kw'" in bad.output
    write(store_file(db), "[search]\npol = 3\n")
    broken = run("search", "queue")
    assert broken.exit_code == 1
    assert "unknown setting 'search.pol'" in broken.output


@pytest.mark.slow
def test_chunk_sizes_reach_ingest(file_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _db, run = file_cli
    assert run("ingest", str(EXAMPLES / "notes")).exit_code == 0
    plain = json.loads(run("stats", "--json").output)["chunks"]
    small = tmp_path / "small.db"
    write(store_file(small), "[chunking]\ndoc_target = 60\ndoc_max = 90\ndoc_overlap = 10\n")
    refused = CliRunner().invoke(main, ["--db", str(small), "ingest", str(EXAMPLES / "notes")])
    assert refused.exit_code == 1
    assert "doc_min <= doc_target" in refused.output
    sizes = "doc_min = 30\ndoc_target = 60\ndoc_max = 90\ndoc_overlap = 10\n"
    write(store_file(small), f"[chunking]\n{sizes}")
    runner = CliRunner()
    assert (
        runner.invoke(main, ["--db", str(small), "ingest", str(EXAMPLES / "notes")]).exit_code == 0
    )
    finer = json.loads(runner.invoke(main, ["--db", str(small), "stats", "--json"]).output)
    assert finer["chunks"] > plain


def test_a_configured_reranker_reorders_search_and_runs_in_eval(file_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _db, run = file_cli
    assert run("ingest", str(EXAMPLES / "notes")).exit_code == 0
    with FakeModelServer(scores=lambda q, docs: [1.0 / (1 + len(d)) for d in docs]) as server:
        env = {"STRATAMEM_RERANK_MODEL": "http", "STRATAMEM_RERANK_BASE_URL": server.url}
        found = json.loads(run("search", "queue", "--json", env=env).output)
        assert any("reranked the top" in note for note in found["notes"])
        assert all(h["explain"]["breakdown"]["rerank"] is not None for h in found["hits"])
        assert json.loads(run("stats", "--json", env=env).output)["rerank"].startswith("http:")
        report = run(
            "eval",
            str(FIXTURES / "beir-standard"),
            "--mode",
            "hybrid+rerank",
            "--store",
            str(tmp_path / "evalstore"),
            "--out",
            str(tmp_path / "r"),
            "--json",
            env=env,
        )
        assert report.exit_code == 0, report.output
        modes = [r["mode"] for r in json.loads(report.output)["results"]]
        assert modes == ["hybrid+rerank"]
    missing = run("search", "queue", env={"STRATAMEM_RERANK_MODEL": "http"})
    assert missing.exit_code == 1
    assert "rerank.base_url is not set" in missing.output


def test_eval_scores_the_configured_pipeline_and_says_so(file_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _db, run = file_cli
    dataset = str(FIXTURES / "locomo-flat")
    common = ("--mode", "hybrid", "--store", str(tmp_path / "e"), "--out", str(tmp_path / "r"))
    env = {"STRATAMEM_SEARCH_POOL": "7", "STRATAMEM_SEARCH_CONTEXT_SHARE": "0.25"}
    report = run("eval", dataset, *common, "--json", env=env)
    assert report.exit_code == 0, report.output
    search = json.loads(report.output)["search"]
    assert (search["pool"], search["context_share"]) == (7, 0.25)
    named = run("eval", dataset, *common, "--profile", "lexical", "--json", env=env)
    search = json.loads(named.output)["search"]
    assert (search["profile"], search["weights"], search["pool"]) == ("lexical", {}, 7)
    assert json.loads(run("eval", dataset, *common, "--json").output)["search"]["pool"] == 150


def test_tune_save_keeps_the_weights_that_searches_then_use(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    db, run = cli
    assert run("ingest", str(EXAMPLES / "notes")).exit_code == 0
    tuned = run(
        "tune",
        str(FIXTURES / "beir-graded"),
        "--save",
        "--store",
        str(tmp_path / "t"),
        "--out",
        str(tmp_path / "r"),
        "--json",
    )
    assert tuned.exit_code == 0, tuned.output
    summary = json.loads(tuned.output)
    assert summary["saved_to"] == shown_location(db)
    assert summary["split"] == "tune"
    report = json.loads((tmp_path / "r" / "tune-beir-graded.json").read_text())
    assert report["tuned"]["weights"] == summary["weights"]
    assert "Tuned weights:" in (tmp_path / "r" / "tune-beir-graded.md").read_text()
    shown = json.loads(run("config", "show", "--json").output)["settings"]["search.weights"]
    assert shown["value"] == summary["weights"]
    assert shown["origin"].startswith("store (tune: beir-graded")
    with stratamem.open(db, embedder=None) as memory:
        assert memory.config.weights == summary["weights"]
        assert memory.store.get_setting(TUNED_KEY) is not None
        named = memory.search("queue", profile="lexical", mode="hybrid", limit=3)
        assert named.hits  # a named profile drops the tuned weights for that call


def test_saving_weights_is_the_owners_and_checks_them(store_location: str) -> None:
    db = store_location
    with stratamem.open(db, embedder=None) as memory:
        with pytest.raises(ValueError, match="weights"):
            memory.indexes.save_tuned_weights({"weights": {"nope": 1}})
        memory.indexes.save_tuned_weights({"weights": {"keyword": 0.8, "vector": 0.2}})
        memory.principals.add("r", scopes=["team"])
        with memory.as_principal("r") as reader, pytest.raises(AccessDenied):
            reader.indexes.save_tuned_weights({"weights": {"keyword": 1}})
    with stratamem.open(db, embedder=None) as memory:
        assert memory.config.leg_weights()["keyword"] == 0.8
    with stratamem.open(db, embedder=None, config=stratamem.SearchConfig()) as memory:
        assert memory.config.weights == {}  # an explicit config is taken as it is


def test_the_graph_mode_setting_reaches_the_graph_leg(store_location: str) -> None:
    chosen = load({"STRATAMEM_SEARCH_GRAPH_MODE": "bm25"})
    config = chosen.search_config()
    assert config.graph_mode == "bm25"
    with stratamem.open(store_location, embedder=None, config=config) as memory:
        memory.ingest(EXAMPLES / "notes", parallel=False)
        from stratamem.retrieval.legs import LEGS

        leg = LEGS["graph"](memory.store, None, config)
        assert leg.graph_mode == "bm25"  # type: ignore[attr-defined]
        found = memory.search("Bob Martins queue", mode="graph", limit=3)
        assert found.hits
        assert found.legs["graph"].startswith("ok")
