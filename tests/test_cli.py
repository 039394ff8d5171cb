from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from stratamem.cli import main
from stratamem.cli.common import db_path_from_environment
from stratamem.store.urls import shown_location

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "workspace"


def runner(db: str):  # type: ignore[no-untyped-def]
    def invoke(*args: str) -> click.testing.Result:
        return CliRunner().invoke(main, ["--db", db, *args], catch_exceptions=False)

    return invoke


def ingested(run):  # type: ignore[no-untyped-def]
    for part in ("slack-export", "mail/team.mbox", "notes"):
        result = run("ingest", "--quiet", str(EXAMPLES / part))
        assert result.exit_code == 0, result.output
    return run


@pytest.fixture
def run(store_location: str):  # type: ignore[no-untyped-def]
    return runner(store_location)


@pytest.fixture
def workspace(run):  # type: ignore[no-untyped-def]
    return ingested(run)


@pytest.fixture
def file_run(tmp_path: Path):  # type: ignore[no-untyped-def]
    """On a SQLite file, for what the store does not change: which legs a search runs and
    what ingest embeds by default (with the bundled model, the slowest tests here)."""
    return runner(str(tmp_path / "cli.db"))


@pytest.fixture
def file_workspace(file_run):  # type: ignore[no-untyped-def]
    return ingested(file_run)


def test_ingest_json_reports_sources_and_counts(run) -> None:  # type: ignore[no-untyped-def]
    result = run("ingest", "--json", str(EXAMPLES / "slack-export"))
    assert result.exit_code == 0
    report = json.loads(result.output)
    assert report["connector"] == "slack"
    scopes = {s["scope"]: s for s in report["sources"]}
    assert set(scopes) == {"slack:#eng", "slack:#general", "slack:#incidents"}
    assert all(s["error"] is None and s["chunks"] > 0 for s in scopes.values())
    again = json.loads(run("ingest", "--json", str(EXAMPLES / "slack-export")).output)
    assert again["added"] == 0
    assert again["chunks"] == report["chunks"]


@pytest.mark.parametrize("option", ["--format", "--kind"])
def test_ingest_format_is_named_by_format_or_its_older_name(run, option: str) -> None:  # type: ignore[no-untyped-def]
    result = run("ingest", "--json", option, "mbox", str(EXAMPLES / "mail" / "team.mbox"))
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["connector"] == "mbox"


def test_ingest_no_trees_leaves_the_sealing_queued(run) -> None:  # type: ignore[no-untyped-def]
    result = run("ingest", "--json", "--no-trees", str(EXAMPLES / "slack-export"))
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["trees"] is None
    assert json.loads(run("summaries", "--json").output)["hits"] == []
    flushed = json.loads(run("flush", "--json").output)
    assert flushed["summaries"] > 0
    sealed = json.loads(
        run("ingest", "--json", "--trees", str(EXAMPLES / "mail" / "team.mbox")).output
    )
    assert sealed["trees"]["summaries"] > 0


def test_ingest_table_for_people(run) -> None:  # type: ignore[no-untyped-def]
    result = run("ingest", "--quiet", str(EXAMPLES / "mail" / "team.mbox"), "--scope", "mail:team")
    assert result.exit_code == 0
    assert "mail:team" in result.output
    assert re.search(r"12 items → 12 chunks \(12 new\)", result.output)


def test_search_json_has_the_unified_hit_shape(workspace) -> None:  # type: ignore[no-untyped-def]
    result = workspace("search", "why did we drop Redis?", "--json", "--limit", "3")
    data = json.loads(result.output)
    assert set(data) >= {"hits", "total", "truncated", "legs", "notes"}
    assert data["total"] > 3
    assert data["truncated"] is True
    first = data["hits"][0]
    assert first["node_kind"] == "leaf"
    assert first["level"] == 0
    assert "redis" in first["content"].lower()
    assert first["time_start"].endswith("Z")
    assert first["source_ref"]
    scores = [h["score"] for h in data["hits"]]
    assert scores == sorted(scores, reverse=True)


def test_search_filters(workspace) -> None:  # type: ignore[no-untyped-def]
    chat = json.loads(workspace("search", "release", "--kinds", "chat", "--json").output)
    assert chat["hits"]
    assert all(h["tree_scope"].startswith("slack:") for h in chat["hits"])
    only_eng = json.loads(workspace("search", "queue", "--sources", "slack:#eng", "--json").output)
    assert {h["tree_scope"] for h in only_eng["hits"]} == {"slack:#eng"}
    window = json.loads(
        workspace(
            "search", "queue", "--since", "2024-03-18", "--until", "2024-03-18T23:59", "--json"
        ).output
    )
    assert window["hits"]
    for hit in window["hits"]:
        assert hit["time_end"] >= "2024-03-18"
        assert hit["time_start"] <= "2024-03-18T23:59"


@pytest.mark.slow
def test_search_says_when_a_leg_is_off(file_workspace) -> None:  # type: ignore[no-untyped-def]
    before = file_workspace("search", "postmortem", "--limit", "1").output
    assert "vector leg off: no vectors yet: run `stratamem embed`" in before
    assert file_workspace("embed").exit_code == 0
    assert "leg off" not in file_workspace("search", "postmortem", "--limit", "1").output


def test_search_text_output_explains_hits(workspace) -> None:  # type: ignore[no-untyped-def]
    result = workspace("search", "postmortem", "--limit", "2")
    assert result.exit_code == 0
    assert "score" in result.output
    assert "keyword" in result.output


def test_search_budget_zero_gives_every_hit_whole(workspace) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(
        workspace("search", "SQLite queue decision", "--budget", "0", "--json").output
    )
    assert data["cards"]
    assert len(data["cards"]) == len(data["hits"])
    assert {c["form"] for c in data["cards"]} == {"full"}
    assert any(c["tier0"] for c in data["cards"])
    text = workspace("search", "SQLite queue decision", "--budget", "0").output
    assert "(no limit)" in text
    assert "tier-0" in text
    assert workspace("search", "queue", "--budget", "-1").exit_code == 2


def test_show_and_entities(workspace) -> None:  # type: ignore[no-untyped-def]
    hit = json.loads(workspace("search", "Redis", "--json", "--limit", "1").output)["hits"][0]
    shown = json.loads(workspace("show", hit["node_id"], "--json").output)
    assert shown["content"] == hit["content"]
    assert shown["entities"]
    text = workspace("show", hit["node_id"]).output
    assert hit["node_id"] in text
    found = json.loads(workspace("entities", "alice", "--json").output)
    ids = [e["canonical_id"] for e in found]
    assert "person:alice chen" in ids
    assert any(e["related"] for e in found)
    for option in ("--kinds", "--entity-kind", "--kind"):  # the older names still work
        people = json.loads(workspace("entities", "alice", option, "person", "--json").output)
        assert people
        assert {e["kind"] for e in people} == {"person"}


def test_an_older_mode_name_is_not_shown_in_help() -> None:
    """Older option names: tests/test_cli_names.py."""
    shown = CliRunner().invoke(main, ["eval", "--help"]).output
    assert "keyword" in shown
    assert "fts" not in shown


def test_kind_is_a_source_kind_wherever_it_is_taken() -> None:
    assert isinstance(main, click.Group)
    for name, command in main.commands.items():
        for param in command.params:
            if isinstance(param, click.Option) and "--kind" in param.opts and not param.hidden:
                shown = CliRunner().invoke(main, [name, "--help"]).output
                assert "chat|email|document|record" in shown, name


def test_stats_tell_the_owner_the_state_of_the_store(workspace) -> None:  # type: ignore[no-untyped-def]
    before = json.loads(workspace("stats", "--json").output)
    assert before["vectors"]["count"] == 0
    assert before["vectors"]["pending"] == before["chunks"]
    assert before["vectors"]["status"].startswith("no vectors yet")
    assert before["vectors"]["index"] == "exact"
    assert before["trees"]["trees"] == before["sources"]
    assert before["rerank"] is None
    assert before["keyword"] == {"tokenizer": "stemmed"}
    assert before["facts"] > 0  # the notes' front matter
    assert before["rollups"] == 0
    assert workspace("embed").exit_code == 0
    after = json.loads(workspace("stats", "--json").output)
    assert after["vectors"]["count"] == after["chunks"]
    assert after["vectors"]["pending"] == 0
    assert after["vectors"]["status"] == "ok"
    assert after["vectors"]["model"] == after["vectors"]["configured"]
    assert "vectors" in workspace("stats").output
    assert workspace("principal", "add", "reader", "--scopes", "team").exit_code == 0
    seen = json.loads(workspace("--as", "reader", "stats", "--json").output)
    assert not {"vectors", "keyword", "trees", "facts", "rollups", "rerank", "locked"} & set(seen)


def test_sources_stats_and_forget(workspace) -> None:  # type: ignore[no-untyped-def]
    sources = json.loads(workspace("sources", "--json").output)
    assert {s["scope"] for s in sources} >= {"mbox:team", "slack:#eng"}
    stats = json.loads(workspace("stats", "--json").output)
    assert stats["chunks"] == sum(s["chunks"] for s in sources)
    result = workspace("forget", "mbox:team", "--yes")
    assert result.exit_code == 0
    assert "forgot mbox:team" in result.output
    after = json.loads(workspace("stats", "--json").output)
    mail = next(s for s in sources if s["scope"] == "mbox:team")
    assert after["chunks"] == stats["chunks"] - mail["chunks"]


def test_fetch_leaves_reads_messages_whole_and_names_the_missing(workspace) -> None:  # type: ignore[no-untyped-def]
    hits = json.loads(workspace("search", "release", "--json", "--limit", "20").output)["hits"]
    first = hits[0]
    other = next(h for h in hits if h["tree_scope"] != first["tree_scope"])
    ids = [first["node_id"], other["node_id"]]
    found = json.loads(workspace("fetch-leaves", *ids, "nope", "--json").output)
    assert [n["node_id"] for n in found["nodes"]] == ids
    assert [n["text"] for n in found["nodes"]] == [first["content"], other["content"]]
    assert found["missing"] == ["nope"]
    narrowed = workspace("fetch-leaves", *ids, "--sources", first["tree_scope"], "--json")
    assert json.loads(narrowed.output)["missing"] == [other["node_id"]]


@pytest.mark.parametrize(
    ("args", "message", "code"),
    [
        (("show", "nope"), "no node with id 'nope'", 1),
        (("forget", "slack:#nowhere", "--yes"), "no source with id or scope", 1),
        (("search", "x", "--sources", "slack:#nowhere"), "no source with id or scope", 1),
        # An option that cannot be read is a usage error (docs/cli.md).
        (("search", "x", "--since", "yesterday-ish"), "cannot read 'yesterday-ish' as a time", 2),
        (("search", "x", "--since", "2024-03-02", "--until", "2024-03-01"), "is before since", 1),
    ],
)
def test_errors_are_messages_not_tracebacks(run, args, message, code) -> None:  # type: ignore[no-untyped-def]
    result = run(*args)
    assert result.exit_code == code
    assert message in result.output
    assert "Traceback" not in result.output


def test_a_search_of_an_unknown_source_names_the_close_ones(workspace) -> None:  # type: ignore[no-untyped-def]
    result = workspace("search", "redis", "--sources", "slack:#egn")
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        "error: no source with id or scope 'slack:#egn'; "
        "did you mean 'slack:#eng', 'slack:#general', 'slack:#incidents'?"
    ]
    assert workspace("search", "redis", "--sources", "slack:*").exit_code == 0


def test_unrecognised_input_is_an_error(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    odd = tmp_path / "blob.bin"
    odd.write_bytes(bytes(range(256)))
    result = run("ingest", str(odd))
    assert result.exit_code == 1
    assert "no connector recognises" in " ".join(result.output.split())


def test_a_broken_database_file_is_an_error(tmp_path: Path) -> None:
    db = tmp_path / "broken.db"
    db.write_bytes(b"not sqlite at all" * 64)
    result = CliRunner().invoke(main, ["--db", str(db), "stats"])
    assert result.exit_code == 1
    assert "broken.db" in result.output


def test_db_from_environment(store_location: str) -> None:
    db = store_location
    result = CliRunner().invoke(main, ["stats", "--json"], env={"STRATAMEM_DB": db})
    assert result.exit_code == 0
    assert json.loads(result.output)["path"] == shown_location(db)


def test_default_db_path_reads_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STRATAMEM_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert db_path_from_environment() == tmp_path / "stratamem" / "stratamem.db"
    monkeypatch.setenv("STRATAMEM_DB", "~/elsewhere.db")
    assert db_path_from_environment() == Path.home() / "elsewhere.db"


def test_every_command_has_help_with_examples_and_is_documented() -> None:
    docs = (ROOT / "docs" / "cli.md").read_text()
    assert isinstance(main, click.Group)
    for name in main.commands:
        result = CliRunner().invoke(main, [name, "--help"])
        assert result.exit_code == 0
        assert "Examples:" in result.output, name
        assert f"## `stratamem {name}" in docs, f"{name} is not in docs/cli.md"


def test_python_dash_m() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "stratamem", "--help"], capture_output=True, text=True, check=True
    )
    assert "ingest" in result.stdout


def test_ingest_can_embed_right_away(run) -> None:  # type: ignore[no-untyped-def]
    result = run("ingest", "--json", "--embed", str(EXAMPLES / "mail" / "team.mbox"))
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["embedding"]["embedded"] + data["embedding"]["reused"] == data["chunks"]
    explained = json.loads(run("search", "Redis", "--json").output)
    assert explained["legs"]["vector"].startswith("ok")


@pytest.mark.slow
def test_ingest_embeds_by_default_so_the_first_search_is_hybrid(  # type: ignore[no-untyped-def]
    file_run, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = file_run
    monkeypatch.delenv("STRATAMEM_INGEST_EMBED")
    result = run("ingest", "--json", str(EXAMPLES / "mail" / "team.mbox"))
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["embedding"]["model"].startswith("all-MiniLM-L6-v2")
    assert data["embedding"]["embedded"] == data["chunks"] > 0
    found = json.loads(run("search", "Redis", "--json").output)
    assert found["legs"]["vector"].startswith("ok")
    people = run("ingest", str(EXAMPLES / "notes"))
    assert people.exit_code == 0, people.output
    assert re.search(r"embedded [\d,]+ chunks", people.output)


def test_no_embed_or_the_setting_off_leaves_the_chunks_for_later(  # type: ignore[no-untyped-def]
    run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STRATAMEM_INGEST_EMBED")
    skipped = json.loads(run("ingest", "--json", "--no-embed", str(EXAMPLES / "notes")).output)
    assert "embedding" not in skipped
    monkeypatch.setenv("STRATAMEM_INGEST_EMBED", "off")
    off = json.loads(run("ingest", "--json", str(EXAMPLES / "mail" / "team.mbox")).output)
    assert "embedding" not in off
    stats = json.loads(run("stats", "--json").output)
    assert stats["vectors"]["count"] == 0
    assert stats["vectors"]["pending"] == stats["chunks"] > 0
    monkeypatch.setenv("STRATAMEM_INGEST_EMBED", "maybe")
    bad = run("ingest", "--json", str(EXAMPLES / "notes"))
    assert bad.exit_code != 0
    assert "STRATAMEM_INGEST_EMBED" in bad.output
    assert "on or off" in bad.output


def test_db_takes_a_url_and_keeps_it_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "url.db"
    result = CliRunner().invoke(main, ["--db", f"sqlite:///{db}", "stats", "--json"])
    assert result.exit_code == 0, result.output
    assert db.exists()
    from_env = CliRunner().invoke(
        main, ["stats", "--json"], env={"STRATAMEM_DB": f"sqlite:///{db}"}
    )
    assert from_env.exit_code == 0, from_env.output
    assert not any(
        p.name.startswith("sqlite") for p in tmp_path.rglob("*")
    )  # no file named after the URL


def test_db_with_an_unknown_scheme_is_an_error_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["--db", "mongodb://db.example/memory", "stats"])
    assert result.exit_code == 1
    assert "unknown store scheme 'mongodb'" in result.output
    assert list(tmp_path.iterdir()) == []


def test_db_on_a_server_that_cannot_be_reached_is_one_line_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    url = f"postgresql://someone:hunter2@/memory?host={tmp_path / 'no-server'}"
    result = CliRunner().invoke(main, ["--db", url, "stats"])
    assert result.exit_code == 1
    assert result.output.startswith("error: postgresql://someone:***@/memory")
    assert "cannot connect" in result.output
    assert "hunter2" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_stats_and_sources_of_a_database_on_a_server_name_it_without_its_password(
    postgres_url: str,
) -> None:
    """A store on a server has no file: ``stats`` names it by its URL, the password left
    out, and its size is the database's."""
    secret = postgres_url.replace("postgres:@", "postgres:hunter2@", 1)
    assert secret != postgres_url
    run = CliRunner()
    ingested = run.invoke(main, ["--db", secret, "ingest", "--quiet", str(EXAMPLES / "notes")])
    assert ingested.exit_code == 0, ingested.output
    stats = json.loads(run.invoke(main, ["--db", secret, "stats", "--json"]).output)
    assert stats["path"] == shown_location(secret)
    assert "hunter2" not in stats["path"]
    assert stats["bytes"] > 0
    text = run.invoke(main, ["--db", secret, "stats"]).output
    assert "hunter2" not in text
    assert f"{stats['bytes']:,}" in text
    listed = run.invoke(main, ["--db", secret, "sources"])
    assert listed.exit_code == 0, listed.output
    assert "notes:notes" in listed.output
    assert "hunter2" not in listed.output
