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
from stratamem.store.sqlite.jobs import HOST, holder_token, process_start

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
    mail = json.loads(run("summaries", "--kind", "email", "--json").output)
    assert {h["tree_scope"] for h in mail["hits"]} == {"mbox:team"}
    slack = json.loads(run("summaries", "--platform", "slack", "--json").output)
    assert slack["hits"]
    assert all(h["tree_scope"].startswith("slack:") for h in slack["hits"])
    # A platform given to --kind, as older scripts did, is still read as --platform.
    assert json.loads(run("summaries", "--kind", "slack", "--json").output) == slack
    both = json.loads(run("summaries", "--kind", "chat", "--platform", "slack", "--json").output)
    assert both == slack
    none = json.loads(run("summaries", "--kind", "email", "--platform", "slack", "--json").output)
    assert none["hits"] == []
    window = json.loads(
        run("summaries", "--since", "2024-03-10", "--until", "2024-03-13", "--json").output
    )
    assert window["hits"]
    for hit in window["hits"]:
        assert hit["time_start"] <= "2024-03-13T00:00:00Z"
        assert hit["time_end"] >= "2024-03-10T00:00:00Z"


def test_topic_resolves_a_name_and_lists_nodes(run) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(run("topic", "alice", "--json").output)
    assert data["entity_id"] == "person:alice chen"
    assert data["hits"]
    assert all("person:alice chen" in h["entities"] for h in data["hits"])
    assert "nothing indexed" in run("topic", "topic:no-such-thing").output


def test_drill_and_show_a_summary(run) -> None:  # type: ignore[no-untyped-def]
    run("flush")
    top = json.loads(run("summaries", "--source", "slack:#eng", "--json").output)["hits"][0]
    children = json.loads(run("drill", top["node_id"], "--json").output)
    assert [c["node_id"] for c in children] == top["child_ids"]
    assert run("drill", top["node_id"], "--depth", "0", "--json").output.strip() == "[]"
    shown = json.loads(run("show", top["node_id"], "--json").output)
    assert shown["node_kind"] == "summary"
    assert shown["content"] == top["content"]
    several = json.loads(run("show", *top["child_ids"][:2], "--json").output)
    assert [h["node_id"] for h in several] == top["child_ids"][:2]
    assert "not a summary" in run("drill", "nope").output


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
        with mem.store.transaction():
            mem.store.conn.execute(
                """UPDATE jobs SET status = 'running', attempts = 1, holder = ?,
                     holder_host = ?, holder_pid = ?, leased_at = ? WHERE dedupe_key = ?""",
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
