"""The summary-tree commands on the example workspace: tree, brief, summaries, topic, drill,
flush, and show on summaries and several ids."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import stratamem
from stratamem.cli import main
from stratamem.store.tables.jobs import HOST, holder_token, process_start

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "workspace"


@pytest.fixture(scope="module")
def run(module_location: str):  # type: ignore[no-untyped-def]
    db = module_location

    def invoke(*args: str) -> click.testing.Result:
        return CliRunner().invoke(main, ["--db", str(db), *args], catch_exceptions=False)

    for part in ("slack-export", "mail/team.mbox", "notes"):
        result = invoke("ingest", "--quiet", str(EXAMPLES / part))
        assert result.exit_code == 0, result.output
    return invoke


def test_ingest_reports_what_it_sealed(store_location: str) -> None:
    db = store_location
    result = CliRunner().invoke(main, ["--db", str(db), "ingest", str(EXAMPLES / "notes")])
    assert result.exit_code == 0
    assert "sealed" in result.output
    data = json.loads(
        CliRunner()
        .invoke(main, ["--db", str(db), "ingest", "--json", str(EXAMPLES / "notes")])
        .output
    )
    assert data["trees"] is None or data["trees"]["summaries"] == 0  # nothing changed


def test_flush_then_tree(run) -> None:  # type: ignore[no-untyped-def]
    flushed = json.loads(run("flush", "--json").output)
    assert flushed["failed"] == []
    data = json.loads(run("tree", "slack:#eng", "--json").output)
    assert data["scope"] == "slack:#eng"
    assert data["unsealed_leaves"] == 0  # flushed
    assert data["top"]
    first = data["top"][0]
    assert first["node_kind"] == "summary"
    assert first["children"]
    drawn = run("tree", "slack:#eng").output
    assert "slack:#eng" in drawn
    assert "L1" in drawn
    missing = run("tree", "slack:#nope")
    assert missing.exit_code == 1


def test_brief_covers_a_window_in_time_order(run) -> None:  # type: ignore[no-untyped-def]
    run("flush")
    data = json.loads(
        run("brief", "--since", "2024-03-01", "--until", "2024-04-30", "--json").output
    )
    assert data["hits"]
    assert {"hits", "total", "truncated"} <= set(data)
    kinds = {h["node_kind"] for h in data["hits"]}
    assert "summary" in kinds
    keys = [(h["tree_scope"], h["time_start"]) for h in data["hits"]]
    assert keys == sorted(keys)
    text = run("brief", "--since", "2024-03-01", "--until", "2024-04-30").output
    assert "summary L" in text
    empty = run("brief", "--since", "2001-01-01", "--until", "2001-01-02").output
    assert "nothing in this window" in empty
    backwards = run("brief", "--since", "2024-03-02", "--until", "2024-03-01")
    assert backwards.exit_code == 1
    assert "before since" in backwards.output


def test_summaries_by_source_kind_and_window(run) -> None:  # type: ignore[no-untyped-def]
    run("flush")
    one = json.loads(run("summaries", "--source", "slack:#eng", "--json").output)
    assert {h["tree_scope"] for h in one["hits"]} == {"slack:#eng"}
    mail = json.loads(run("summaries", "--source-kind", "email", "--json").output)
    assert {h["tree_scope"] for h in mail["hits"]} == {"mbox:team"}
    slack = json.loads(run("summaries", "--source-kind", "slack", "--json").output)
    assert slack["hits"]
    assert all(h["tree_scope"].startswith("slack:") for h in slack["hits"])
    # The older names: --kind (a kind, or as older scripts wrote it a platform) and
    # --platform; a kind beside a platform narrows it.
    assert json.loads(run("summaries", "--kind", "slack", "--json").output) == slack
    assert json.loads(run("summaries", "--platform", "slack", "--json").output) == slack
    both = json.loads(run("summaries", "--kind", "chat", "--platform", "slack", "--json").output)
    assert both == slack
    narrowed = run("summaries", "--source-kind", "slack", "--kind", "chat", "--json")
    assert json.loads(narrowed.output) == slack
    none = json.loads(run("summaries", "--kind", "email", "--platform", "slack", "--json").output)
    assert none["hits"] == []
    by_kinds = run("summaries", "--source-kind", "slack", "--kinds", "email", "--json")
    assert json.loads(by_kinds.output)["hits"] == []
    clash = run("summaries", "--source-kind", "slack", "--platform", "mbox")
    assert clash.exit_code == 2
    assert "older names of --source-kind" in clash.output
    window = json.loads(
        run("summaries", "--since", "2024-03-10", "--until", "2024-03-13", "--json").output
    )
    assert window["hits"]
    for hit in window["hits"]:
        assert hit["time_start"] <= "2024-03-13T00:00:00Z"
        assert hit["time_end"] >= "2024-03-10T00:00:00Z"


def test_summaries_in_a_time_window_of_days(run) -> None:  # type: ignore[no-untyped-def]
    """The examples are of March 2024: a window of the last day holds none of them, one of a
    thousand years all."""
    run("flush")
    every = json.loads(run("summaries", "--limit", "100", "--json").output)["hits"]
    assert every
    wide = run("summaries", "--limit", "100", "--time-window-days", "365000", "--json")
    assert json.loads(wide.output)["hits"] == every
    last_day = run("summaries", "--time-window-days", "1", "--json")
    assert json.loads(last_day.output)["hits"] == []
    assert run("summaries", "--time-window-days", "0.5", "--source", "slack:#eng").exit_code == 0
    assert run("summaries", "--time-window-days", "-1").exit_code == 2


def test_topic_resolves_a_name_and_lists_nodes(run) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(run("topic", "alice", "--json").output)
    assert data["entity_id"] == "person:alice chen"
    assert data["hits"]
    # A hit mentions the person by one of the ids the sources say are hers.
    (alice, *_) = json.loads(run("entities", "alice", "--json").output)
    assert alice["canonical_id"] == "person:alice chen"
    ids = {alice["canonical_id"], *alice["aliases"]}
    assert all(ids & set(h["entities"]) for h in data["hits"])
    assert any("person:alice chen" not in h["entities"] for h in data["hits"])
    assert "nothing indexed" in run("topic", "topic:no-such-thing").output
    mail = json.loads(run("topic", "alice", "--kinds", "email", "--json").output)
    assert mail["hits"]
    assert {h["tree_scope"] for h in mail["hits"]} == {"mbox:team"}
    eng = json.loads(run("topic", "alice", "--sources", "slack:#eng", "--json").output)
    assert {h["tree_scope"] for h in eng["hits"]} == {"slack:#eng"}


def test_drill_and_show_a_summary(run) -> None:  # type: ignore[no-untyped-def]
    run("flush")
    top = json.loads(run("summaries", "--source", "slack:#eng", "--json").output)["hits"][0]
    children = json.loads(run("drill", top["node_id"], "--json").output)
    assert [c["node_id"] for c in children] == top["child_ids"]
    assert run("drill", top["node_id"], "--max-depth", "0", "--json").output.strip() == "[]"
    shown = json.loads(run("show", top["node_id"], "--json").output)
    assert shown["node_kind"] == "summary"
    assert shown["content"] == top["content"]
    several = json.loads(run("show", *top["child_ids"][:2], "--json").output)
    assert [h["node_id"] for h in several] == top["child_ids"][:2]
    assert "not a summary" in run("drill", "nope").output


def test_drill_descends_max_depth_levels(
    store_location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small buffers and a fan-out of two make the example channels' trees three levels
    high."""
    monkeypatch.setenv("STRATAMEM_TREE_SUMMARY_FANOUT", "2")
    monkeypatch.setenv("STRATAMEM_TREE_INPUT_TOKEN_BUDGET", "200")

    def run(*args: str) -> click.testing.Result:
        result = CliRunner().invoke(main, ["--db", store_location, *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result

    run("ingest", "--quiet", str(EXAMPLES / "slack-export"))
    run("flush")
    found = json.loads(run("summaries", "--source", "slack:#eng", "--json").output)["hits"]
    top = next(h for h in found if h["level"] == 2)

    def levels(*options: str) -> list[int]:
        below = json.loads(run("drill", top["node_id"], *options, "--json").output)
        return sorted({h["level"] for h in below})

    assert levels() == [1]
    assert levels("--max-depth", "1") == [1]
    assert levels("--max-depth", "2") == [0, 1]
    assert levels("--depth", "2") == [0, 1]  # the older name
    assert levels("--max-depth", "2", "--sources", "slack:#general") == []


def test_flush_says_so_and_fails_when_another_process_holds_a_seal_job(
    store_location: str,
) -> None:
    """A live holder (here: this very process, under a claim of its own) keeps its job;
    flush seals the rest, names the tree it left and exits 1, not 0 with leaves unsealed."""
    db = store_location
    with stratamem.open(db, embedder=None) as mem:
        mem.ingest(EXAMPLES / "slack-export", trees=False)
        (key,) = mem.store.conn.execute("SELECT min(dedupe_key) FROM jobs").fetchone()
        token = holder_token(os.getpid(), process_start(os.getpid()))
        p = mem.store.dialect.p
        with mem.store.transaction():
            mem.store.conn.execute(
                f"""UPDATE jobs SET status = 'running', attempts = 1, holder = {p},
                     holder_host = {p}, holder_pid = {p}, leased_at = {p}
                   WHERE dedupe_key = {p}""",
                (token, HOST, os.getpid(), int(time.time() * 1000), key),
            )
        held = mem.store.trees.get(key.removeprefix("seal:"))
        assert held is not None
    result = CliRunner().invoke(main, ["--db", str(db), "flush", "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert report["held"] == [f"{held.scope} (held by {HOST}/{os.getpid()})"]
    assert report["trees"] >= 1  # the other trees were sealed
    (line,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert "not sealed: another process holds their seal job" in line
    assert held.scope in line
