"""The single-item commands: ``stratamem add``, ``edit`` and ``rm``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from stratamem.cli import main

Run = Callable[..., click.testing.Result]


@pytest.fixture
def run(store_location: str) -> Run:
    db = store_location

    def invoke(*args: str, input: str | None = None) -> click.testing.Result:
        return CliRunner().invoke(
            main, ["--db", str(db), *args], input=input, catch_exceptions=False
        )

    return invoke


def as_json(result: click.testing.Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def keyword_hits(run: Run, query: str) -> list[str]:
    data = as_json(run("search", query, "--mode", "keyword", "--json"))
    return [hit["content"] for hit in data["hits"]]


def failed_with(result: click.testing.Result, message: str) -> None:
    """The command failed with one line on stderr saying ``message``, and no traceback."""
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error:")
    assert message in lines[0], lines[0]


def test_add_edit_rm_round_trip(run: Run) -> None:
    added = as_json(
        run("add", "Carol leads on-call until Friday", "--author", "a", "--id", "x", "--json")
    )
    assert added["id"] == "x"
    assert added["scope"] == "memory"
    assert added["source_id"].startswith("src_")
    assert added["action"] == "added"
    assert len(added["chunks_added"]) == 1
    assert added["chunks_removed"] == 0
    assert added["embedded"] == 1  # the store's first write takes the configured model
    assert added["text"] == "Carol leads on-call until Friday"
    assert added["author"] == "a"
    assert added["time"].endswith("+00:00")
    assert keyword_hits(run, "on-call Friday") == ["Carol leads on-call until Friday"]

    edited = as_json(run("edit", "x", "--text", "Dan leads on-call until Monday", "--json"))
    assert (edited["id"], edited["action"]) == ("x", "updated")
    assert edited["text"] == "Dan leads on-call until Monday"
    assert edited["author"] == "a"  # not given, so kept
    assert edited["time"] == added["time"]
    assert edited["chunks_removed"] == 1
    assert keyword_hits(run, "Friday") == []
    assert keyword_hits(run, "Monday") == ["Dan leads on-call until Monday"]

    removed = run("rm", "x")
    assert removed.exit_code == 0, removed.output
    assert "deleted x in memory" in removed.stdout
    assert keyword_hits(run, "on-call") == []

    failed_with(run("rm", "x"), "no item with id 'x'")
    failed_with(run("edit", "x", "--text", "again"), "no item with id 'x'")


def test_edit_with_nothing_to_change_is_an_error(run: Run) -> None:
    run("add", "some text", "--id", "x")
    failed_with(run("edit", "x"), "nothing to change")
    failed_with(run("edit", "x", "--json"), "nothing to change")


def test_edit_changes_only_the_fields_given(run: Run) -> None:
    run("add", "a fact", "--id", "x", "--author", "a", "--title", "T")
    edited = as_json(run("edit", "x", "--time", "2024-03-12T09:30", "--tags", "t1", "--json"))
    assert edited["action"] == "updated"
    assert edited["time"] == "2024-03-12T09:30:00+00:00"
    assert (edited["text"], edited["author"]) == ("a fact", "a")
    again = as_json(run("edit", "x", "--author", "a", "--json"))
    assert again["action"] == "unchanged"
    assert again["chunks_added"] == []


def test_add_dash_reads_standard_input(run: Run) -> None:
    added = as_json(run("add", "-", "--id", "piped", "--json", input="text from a pipe\n"))
    assert added["text"].strip() == "text from a pipe"
    assert keyword_hits(run, "pipe")[0].strip() == "text from a pipe"

    edited = as_json(run("edit", "piped", "--text", "-", "--json", input="new piped text\n"))
    assert edited["text"].strip() == "new piped text"


def test_add_takes_a_time(run: Run) -> None:
    added = as_json(run("add", "standup moved", "--time", "2024-03-12T09:30", "--json"))
    assert added["time"] == "2024-03-12T09:30:00+00:00"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("add", "   "), "needs some text"),
        (("add", "-"), "needs some text"),  # empty standard input
        (("add", "x", "--time", "not a time"), "not a time"),
    ],
)
def test_a_bad_add_is_one_line_on_stderr(run: Run, args: tuple[str, ...], message: str) -> None:
    failed_with(run(*args, input=""), message)


def test_a_document_source_refuses_add(run: Run, fixtures_dir: Path) -> None:
    ingested = run("ingest", "--quiet", str(fixtures_dir / "markdown" / "vault"))
    assert ingested.exit_code == 0, ingested.output
    failed_with(run("add", "a note", "--source", "notes:vault"), "holds documents")


def test_rm_needs_the_source_when_two_hold_the_id(run: Run) -> None:
    run("add", "in memory", "--id", "dup")
    run("add", "in notes", "--id", "dup", "--source", "notes")
    failed_with(run("rm", "dup"), "name the source")
    removed = as_json(run("rm", "dup", "--source", "notes", "--json"))
    assert (removed["action"], removed["scope"]) == ("deleted", "notes")
    assert keyword_hits(run, "memory")[0] == "in memory"


def test_history_lists_every_version_and_show_reads_the_item_id(run: Run) -> None:
    added = as_json(run("add", "Carol leads on-call", "--id", "oncall", "--json"))
    assert added["version"] == 1
    assert as_json(run("edit", "oncall", "--text", "Dan leads on-call", "--json"))["version"] == 2
    shown = as_json(run("show", "oncall", "--json"))
    assert (shown["node_id"], shown["content"]) == ("oncall", "Dan leads on-call")
    old = as_json(run("show", added["chunks_added"][0], "--json"))
    assert (old["content"], old["explain"]["item"]["version"]) == ("Carol leads on-call", 1)
    assert as_json(run("rm", "oncall", "--json"))["version"] == 3

    versions = as_json(run("history", "oncall", "--json"))["versions"]
    assert [(v["version"], v["action"], v["text"]) for v in versions] == [
        (1, "added", "Carol leads on-call"),
        (2, "edited", "Dan leads on-call"),
        (3, "removed", "Dan leads on-call"),
    ]
    assert versions[0]["closed_at"] == versions[1]["recorded_at"]
    assert versions[2]["closed_at"] is None
    text = run("history", "oncall").output
    assert text.startswith("oncall:")
    assert "version  action   recorded" in text
    assert text.count("Dan leads on-call") == 2
    failed_with(run("history", "nope"), "no item with id 'nope'")
    failed_with(run("show", "oncall"), "no node with id 'oncall'")


def test_an_item_added_for_a_user_is_found_by_a_search_for_that_user(run: Run) -> None:
    added = as_json(run("add", "prefers morning meetings", "--user", "maya", "--json"))
    assert added["scope"] == "memory/user:maya"
    run("add", "the team prefers morning standups")
    for_maya = as_json(run("search", "morning", "--mode", "keyword", "--user", "maya", "--json"))
    assert [h["content"] for h in for_maya["hits"]] == ["prefers morning meetings"]
    assert len(keyword_hits(run, "morning")) == 2
    for_dan = as_json(run("search", "morning", "--mode", "keyword", "--user", "dan", "--json"))
    assert for_dan["hits"] == []


def test_edit_rm_and_history_find_a_users_item_by_user(run: Run) -> None:
    run("add", "prefers tea", "--id", "drink", "--user", "maya")
    run("add", "prefers coffee", "--id", "drink", "--user", "dan")
    failed_with(run("edit", "drink", "--text", "x"), "name the source")
    edited = as_json(
        run("edit", "drink", "--user", "maya", "--text", "prefers green tea", "--json")
    )
    assert (edited["scope"], edited["text"]) == ("memory/user:maya", "prefers green tea")
    versions = as_json(run("history", "drink", "--user", "maya", "--json"))["versions"]
    assert [v["text"] for v in versions] == ["prefers tea", "prefers green tea"]
    removed = as_json(run("rm", "drink", "--user", "dan", "--json"))
    assert (removed["action"], removed["scope"]) == ("deleted", "memory/user:dan")
    assert keyword_hits(run, "prefers") == ["prefers green tea"]


def test_meta_is_kept_with_the_item_and_replaced_by_edit(run: Run, tmp_path: Path) -> None:
    run("add", "build failed", "--id", "b", "--meta", '{"build": 4812, "branch": "main"}')
    (first,) = as_json(run("history", "b", "--json"))["versions"]
    assert first["meta"] == {"build": 4812, "branch": "main"}
    given = tmp_path / "meta.json"
    given.write_text('{"build": 4813}')
    assert run("edit", "b", "--meta", f"@{given}").exit_code == 0
    (*_, last) = as_json(run("history", "b", "--json"))["versions"]
    assert last["meta"] == {"build": 4813}


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ("[1, 2]", "must be a JSON object ({...}), got list"),
        ("{build: 1}", "not JSON"),
        ("@/nowhere/meta.json", "/nowhere/meta.json"),
    ],
)
def test_a_bad_meta_is_a_usage_error_naming_the_option(run: Run, meta: str, message: str) -> None:
    result = run("add", "x", "--meta", meta)
    failed_with(result, message)
    assert result.exit_code == 2
    assert "--meta" in result.stderr
    assert keyword_hits(run, "x") == []
