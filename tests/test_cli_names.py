"""Options named as the operations name their parameters (``--sources``, ``--kinds``,
``--max-depth``, …): each older spelling still works, read as the new one, and ``--help``
shows only the new."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from stratamem.cli import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "workspace"
WINDOW = ("--since", "2024-03-01", "--until", "2024-04-30")

Run = Callable[..., click.testing.Result]

# A command's arguments, then the option's new name, its older one and a value that narrows
# what the command finds.
READS = [
    (("search", "queue"), "--sources", "--source", "slack:#eng"),
    (("search", "release"), "--kinds", "--kind", "email"),
    (("brief", *WINDOW), "--sources", "--source", "slack:#eng"),
    (("brief", *WINDOW), "--kinds", "--kind", "email"),
    (("summaries",), "--source-kind", "--kind", "email"),
    (("summaries",), "--source-kind", "--platform", "slack"),
    (("summaries",), "--time-window-days", "--days", "1"),
    (("entities", "a"), "--kinds", "--entity-kind", "person"),
    (("entities", "a"), "--kinds", "--kind", "person"),
    (("fact", "search", "release"), "--sources", "--source", "slack:#eng"),
]
# Every option renamed so: the command, the new name, the older one.
RENAMED = [
    *{(args[0] if args[0] != "fact" else "fact search", new, old) for args, new, old, _ in READS},
    ("drill", "--max-depth", "--depth"),
    ("fact add", "--valid-from", "--from"),
    ("fact add", "--valid-to", "--to"),
    ("add", "--tags", "--tag"),
    ("edit", "--tags", "--tag"),
    ("ingest", "--format", "--kind"),
]


@pytest.fixture(scope="module")
def workspace(module_location: str) -> Run:
    def invoke(*args: str) -> click.testing.Result:
        return CliRunner().invoke(main, ["--db", module_location, *args], catch_exceptions=False)

    for part in ("slack-export", "mail/team.mbox", "notes"):
        assert invoke("ingest", "--quiet", str(EXAMPLES / part)).exit_code == 0
    assert invoke("flush").exit_code == 0
    return invoke


@pytest.fixture
def run(store_location: str) -> Run:
    def invoke(*args: str) -> click.testing.Result:
        return CliRunner().invoke(main, ["--db", store_location, *args], catch_exceptions=False)

    return invoke


def as_json(result: click.testing.Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize(
    ("args", "new", "old", "value"), READS, ids=lambda v: v if isinstance(v, str) else None
)
def test_an_older_name_reads_as_the_new_one(
    workspace: Run, args: tuple[str, ...], new: str, old: str, value: str
) -> None:
    found = as_json(workspace(*args, new, value, "--json"))
    assert as_json(workspace(*args, old, value, "--json")) == found
    assert as_json(workspace(*args, "--json")) != found  # the option narrows what is found


def test_older_names_of_item_and_fact_options_write_as_the_new_ones(run: Run) -> None:
    for key, option in (("a", "--tags"), ("b", "--tag")):
        assert run("add", "standup moved", "--id", key, option, "team").exit_code == 0
        assert run("edit", key, option, "ops", option, "team").exit_code == 0
        (*_, last) = as_json(run("history", key, "--json"))["versions"]
        assert last["tags"] == ["ops", "team"]
    stated = {}
    for subject, since, until in (
        ("person:carol diaz", "--valid-from", "--valid-to"),
        ("person:dan ng", "--from", "--to"),
    ):
        dates = (since, "2024-03-01", until, "2024-04-01")
        write = run("fact", "add", subject, "leads", "x", *dates, "--json")
        (fact,) = as_json(write)["recorded"]
        stated[since] = (fact["valid_from"], fact["valid_to"])
    assert stated["--from"] == stated["--valid-from"]
    assert stated["--from"] == ("2024-03-01T00:00:00+00:00", "2024-04-01T00:00:00+00:00")


def test_an_older_name_beside_the_new_one_with_another_value_is_a_usage_error(
    run: Run,
) -> None:
    both = ("--from", "2024-03-01", "--valid-from", "2024-03-02")
    result = run("fact", "add", "person:carol diaz", "leads", "x", *both)
    assert result.exit_code == 2
    assert "--from is the older name of --valid-from; give one of them" in result.stderr
    many = run("add", "x", "--tag", "a", "--tags", "b", "--json")
    assert as_json(many)["action"] == "added"  # a repeated option takes both


def test_an_error_names_the_spelling_given(run: Run) -> None:
    for option in ("--from", "--valid-from"):
        result = run("fact", "add", "person:carol diaz", "leads", "x", option, "soon")
        assert result.exit_code == 2
        assert f"Invalid value for {option}: cannot read 'soon'" in result.stderr
    result = run("drill", "x", "--depth", "99")
    assert result.exit_code == 2
    assert "'--depth'" in result.stderr


@pytest.mark.parametrize(("command", "new", "old"), sorted(RENAMED))
def test_help_shows_the_new_name_only(command: str, new: str, old: str) -> None:
    shown = CliRunner().invoke(main, [*command.split(), "--help"]).output
    assert re.search(rf"(?<![\w-]){re.escape(new)}(?![\w-])", shown)
    assert not re.search(rf"(?<![\w-]){re.escape(old)}(?![\w-])", shown)
