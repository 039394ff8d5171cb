"""The fact commands: ``stratamem fact add``, ``list``, ``history`` and ``retract``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import stratamem
from stratamem.cli import main

Run = Callable[..., click.testing.Result]
EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "workspace"
UNSET = {"STRATAMEM_PASSPHRASE": None, "STRATAMEM_AS": None, "STRATAMEM_DB": None}
CAROL = "person:carol diaz"


@pytest.fixture(scope="module")
def template(module_location: str) -> str:
    """Slack (team) and notes (private), a principal ``team-bot`` that reads team, no facts."""
    path = module_location
    with stratamem.open(path, embedder=None) as memory:
        memory.ingest(EXAMPLES / "slack-export", parallel=False)
        memory.ingest(EXAMPLES / "notes", parallel=False)
        memory.principals.add("team-bot", "team")
    # The notes' front matter states facts at ingest (see tests/memory/test_structure.py):
    # these tests start from a store that holds none.
    with stratamem.open(path, embedder=None) as memory, memory.store.transaction():
        memory.store.conn.execute("DELETE FROM facts")
    return path


@pytest.fixture
def db(template: str, tmp_path: Path, locations: Any) -> str:
    """A copy of the template, on its backend."""
    return str(locations.copy(template, tmp_path, "cli"))


@pytest.fixture
def run(db: str) -> Run:
    def invoke(*args: str) -> click.testing.Result:
        return CliRunner().invoke(main, ["--db", str(db), *args], env=UNSET, catch_exceptions=False)

    return invoke


def as_json(result: click.testing.Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def words(result: click.testing.Result) -> str:
    """The output with its lines and runs of spaces as one space: tables and long lines wrap
    to the width of the terminal."""
    assert result.exit_code == 0, result.output
    return " ".join(result.stdout.split())


def failed_with(result: click.testing.Result, message: str, *, code: int) -> str:
    """The command exited with ``code`` and one line on stderr saying ``message``."""
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    assert result.stdout == ""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error:")
    assert message in lines[0], lines[0]
    return lines[0]


def node_in(db: str, scope: str) -> str:
    with stratamem.open(db, embedder=None) as memory:
        return memory.search("release", sources=[scope], mode="keyword", limit=1).hits[0].node_id


def source_id(db: str, scope: str) -> str:
    with stratamem.open(db, embedder=None) as memory:
        return memory.sources.get(scope).id


def test_add_reports_what_it_recorded(run: Run) -> None:
    added = run(
        "fact", "add", "person:Carol  Diaz", "Leads", "on-call", "--valid-from", "2024-03-01"
    )
    text = words(added)
    assert text.startswith(f"recorded {CAROL} leads on-call from 2024-03-01 to … (fact_")
    assert "no longer believed" not in text
    again = run("fact", "add", CAROL, "leads", "on-call", "--valid-from", "2024-03-01")
    assert words(again) == "nothing changed: the store already says so"

    (fact,) = as_json(run("fact", "list", "--json"))["facts"]
    assert f"({fact['id']})" in text
    changed = run("fact", "add", CAROL, "leads", "release", "--valid-from", "2024-03-10T09:30Z")
    text = words(changed)
    assert f"recorded {CAROL} leads on-call from 2024-03-01 to 2024-03-10 09:30 (fact_" in text
    assert f"recorded {CAROL} leads release from 2024-03-10 09:30 to … (fact_" in text
    assert text.endswith(f"no longer believed: {fact['id']}")


def test_add_json(run: Run, db: str) -> None:
    evidence = node_in(db, "slack:#eng")
    data = as_json(
        run(
            "fact",
            "add",
            "topic:Phoenix",
            "owner",
            "person:Dan  Ng",
            "--valid-from",
            "2024-03-01",
            "--valid-to",
            "2024-04-01T12:00:00+02:00",
            "--evidence",
            evidence,
            "--evidence",
            evidence,
            "--confidence",
            "0.5",
            "--json",
        )
    )
    assert data["expired"] == []
    (fact,) = data["recorded"]
    assert fact["id"].startswith("fact_")
    assert {k: v for k, v in fact.items() if k not in {"id", "recorded_at"}} == {
        "subject": "topic:phoenix",
        "predicate": "owner",
        "object": "person:dan ng",
        "object_is_entity": True,
        "valid_from": "2024-03-01T00:00:00+00:00",
        "valid_to": "2024-04-01T10:00:00+00:00",
        "expired_at": None,
        "evidence": [evidence],
        "confidence": 0.5,
        "origin": "asserted",
        "source_id": source_id(db, "slack:#eng"),
        "single": True,
        "reason": "",
    }
    same = ("--valid-from", "2024-03-01", "--valid-to", "2024-04-01T10:00Z", "--evidence", evidence)
    again = run("fact", "add", "topic:phoenix", "owner", "person:dan ng", *same, "--json")
    assert as_json(again) == {"expired": [], "recorded": []}


def test_add_to_a_named_source(run: Run, db: str) -> None:
    (fact,) = as_json(run("fact", "add", CAROL, "leads", "x", "--source", "notes:notes", "--json"))[
        "recorded"
    ]
    assert fact["source_id"] == source_id(db, "notes:notes")
    failed_with(
        run("fact", "add", CAROL, "leads", "x", "--source", "jsonl:nowhere"),
        "jsonl:nowhere",
        code=1,
    )


def test_list_now_as_of_and_known_at(run: Run) -> None:
    assert words(run("fact", "list")) == "no facts"
    assert as_json(run("fact", "list", "--json")) == {"facts": []}
    run("fact", "add", CAROL, "leads", "on-call", "--valid-from", "2024-03-01")
    run("fact", "add", CAROL, "team", "platform")
    run("fact", "add", "person:dan ng", "leads", "release", "--valid-from", "2024-03-01")
    run("fact", "add", CAROL, "leads", "release", "--valid-from", "2024-03-10")

    now = as_json(run("fact", "list", "--json"))["facts"]
    assert [(f["subject"], f["predicate"], f["object"]) for f in now] == [
        (CAROL, "leads", "release"),
        (CAROL, "team", "platform"),
        ("person:dan ng", "leads", "release"),
    ]
    table = words(run("fact", "list"))
    assert table.startswith("subject predicate object from to id")
    assert all(f["id"] in table for f in now)

    mine = as_json(run("fact", "list", "person:Carol Diaz", "--predicate", "Leads", "--json"))
    assert [f["object"] for f in mine["facts"]] == ["release"]
    then = as_json(run("fact", "list", CAROL, "--as-of", "2024-03-05", "--json"))["facts"]
    assert sorted(f["object"] for f in then) == ["on-call", "platform"]
    before = as_json(run("fact", "list", "--known-at", "2000-01-01", "--json"))["facts"]
    assert before == []
    one = as_json(run("fact", "list", "--limit", "1", "--json"))["facts"]
    assert len(one) == 1


def test_history_shows_what_was_replaced_and_until_when(run: Run) -> None:
    assert words(run("fact", "history", CAROL, "leads")) == "no facts"
    first = as_json(
        run("fact", "add", CAROL, "leads", "on-call", "--valid-from", "2024-03-01", "--json")
    )
    run("fact", "add", CAROL, "leads", "release", "--valid-from", "2024-03-10")
    found = as_json(run("fact", "history", "person:CAROL diaz", "leads", "--json"))["facts"]
    assert [(f["object"], f["valid_from"][:10], (f["valid_to"] or "")[:10]) for f in found] == [
        ("on-call", "2024-03-01", ""),
        ("on-call", "2024-03-01", "2024-03-10"),
        ("release", "2024-03-10", ""),
    ]
    assert found[0]["id"] == first["recorded"][0]["id"]
    assert found[0]["expired_at"] is not None
    assert [f["expired_at"] for f in found[1:]] == [None, None]

    text = words(run("fact", "history", CAROL, "leads"))
    assert text.startswith(f"{CAROL} leads: object from to believed until id")
    assert text.count(" now ") == 2
    assert all(f["id"] in text for f in found)

    known = as_json(run("fact", "history", CAROL, "leads", "--known-at", "2000-01-01", "--json"))
    assert known == {"facts": []}


def test_retract(run: Run) -> None:
    (fact,) = as_json(run("fact", "add", CAROL, "leads", "on-call", "--json"))["recorded"]
    assert words(run("fact", "retract", fact["id"])) == f"no longer believed: {fact['id']}"
    assert as_json(run("fact", "list", "--json")) == {"facts": []}
    assert as_json(run("fact", "retract", fact["id"], "--json")) == {"expired": [], "recorded": []}
    assert words(run("fact", "retract", fact["id"])) == "nothing changed: the store already says so"
    (kept,) = as_json(run("fact", "history", CAROL, "leads", "--json"))["facts"]
    assert (kept["id"], kept["expired_at"] is not None) == (fact["id"], True)

    (other,) = as_json(run("fact", "add", CAROL, "team", "x", "--json"))["recorded"]
    assert as_json(run("fact", "retract", other["id"], "--json")) == {
        "expired": [other["id"]],
        "recorded": [],
    }
    failed_with(run("fact", "retract", "fact_nope"), "no fact with id 'fact_nope'", code=1)


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("add", CAROL, "leads", "x", "--valid-from", "last tuesday"), "--valid-from"),
        (("add", CAROL, "leads", "x", "--valid-to", "2024-13-01"), "--valid-to"),
        (("list", "--as-of", "soon"), "--as-of"),
        (("list", "--known-at", "yesterday"), "--known-at"),
        (("history", CAROL, "leads", "--known-at", "2024-02-30"), "--known-at"),
        (("add", CAROL, "leads", "x", "--confidence", "1.5"), "--confidence"),
        (("list", "--limit", "0"), "--limit"),
        (("search", "x", "--as-of", "soon"), "--as-of"),
        (("search", "x", "--known-at", "7 days"), "--known-at"),
        (("search", "x", "--known-at", "2024-02-30"), "--known-at"),
        (("search", "x", "--limit", "0"), "--limit"),
        (("history", CAROL, "leads", "--known-at", "last week"), "--known-at"),
    ],
)
def test_bad_options_are_usage_errors_naming_the_option(
    run: Run, args: tuple[str, ...], option: str
) -> None:
    failed_with(run("fact", *args), option, code=2)
    assert as_json(run("fact", "list", "--json")) == {"facts": []}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("add", "carol", "leads", "x"), "subject 'carol' is not an entity id"),
        (("add", "robot:x", "leads", "x"), "the kind one of agent, channel, email, handle"),
        (("add", CAROL, " ", "x"), "a fact needs a predicate"),
        (
            ("add", CAROL, "leads", "x", "--valid-from", "2024-03-05", "--valid-to", "2024-03-01"),
            "must come after",
        ),
        (
            ("add", CAROL, "leads", "x", "--evidence", "no-such-node"),
            "no node with id 'no-such-node'",
        ),
        (("list", "carol"), "not an entity id"),
        (("history", CAROL, " "), "a fact needs a predicate"),
        (("search", "x", "--subject", "carol"), "not an entity id"),
        (("search", "x", "--source", "notes:nope"), "no source with id or scope 'notes:nope'"),
    ],
)
def test_bad_statements_fail_with_one_line(run: Run, args: tuple[str, ...], message: str) -> None:
    failed_with(run("fact", *args), message, code=1)
    assert as_json(run("fact", "list", "--json")) == {"facts": []}


def test_evidence_in_two_sources_is_refused(run: Run, db: str) -> None:
    eng, notes = node_in(db, "slack:#eng"), node_in(db, "notes:notes")
    result = run("fact", "add", CAROL, "leads", "x", "--evidence", eng, "--evidence", notes)
    failed_with(result, "several sources", code=1)


def test_a_principal_may_list_and_read_history_but_not_write(run: Run, db: str) -> None:
    eng = node_in(db, "slack:#eng")
    shared = as_json(run("fact", "add", CAROL, "leads", "on-call", "--evidence", eng, "--json"))
    (shared_fact,) = shared["recorded"]
    private = as_json(run("fact", "add", CAROL, "team", "platform", "--json"))["recorded"][0]

    seen = as_json(run("--as", "team-bot", "fact", "list", "--json"))["facts"]
    assert [f["id"] for f in seen] == [shared_fact["id"]]
    assert private["id"] not in words(run("--as", "team-bot", "fact", "list"))
    history = as_json(run("--as", "team-bot", "fact", "history", CAROL, "leads", "--json"))
    assert [f["id"] for f in history["facts"]] == [shared_fact["id"]]
    hidden = as_json(run("--as", "team-bot", "fact", "history", CAROL, "team", "--json"))
    assert hidden == {"facts": []}

    refused = run("--as", "team-bot", "fact", "add", CAROL, "leads", "x", "--evidence", eng)
    failed_with(refused, "principal 'team-bot' may not remember facts", code=1)
    refused = run("--as", "team-bot", "fact", "retract", shared_fact["id"])
    failed_with(refused, "principal 'team-bot' may not retract facts", code=1)
    assert len(as_json(run("fact", "list", "--json"))["facts"]) == 2


def test_a_users_facts_go_to_the_users_source_and_are_read_by_user(run: Run, db: str) -> None:
    added = as_json(run("fact", "add", "user:maya", "prefers", "tea", "--user", "maya", "--json"))
    (fact,) = added["recorded"]
    assert fact["source_id"] == source_id(db, "facts/user:maya")
    run("fact", "add", "user:maya", "prefers", "coffee", "--user", "dan", "--many")
    run("fact", "add", CAROL, "prefers", "tea")
    for command in (("list",), ("history", "user:maya", "prefers"), ("search", "prefers tea")):
        key = "hits" if command[0] == "search" else "facts"
        mine = as_json(run("fact", *command, "--user", "maya", "--json"))[key]
        assert [f.get("id", f.get("node_id")) for f in mine] == [fact["id"]], command
    everyone = as_json(run("fact", "list", "--json"))["facts"]
    assert len(everyone) == 3


def test_many_adds_a_value_beside_the_others(run: Run) -> None:
    run("fact", "add", CAROL, "likes", "tea", "--many")
    added = as_json(run("fact", "add", CAROL, "likes", "coffee", "--many", "--json"))
    assert added["expired"] == []
    assert [f["single"] for f in added["recorded"]] == [False]
    found = as_json(run("fact", "list", CAROL, "--json"))["facts"]
    assert sorted(f["object"] for f in found) == ["coffee", "tea"]


def test_every_fact_command_has_help() -> None:
    top = CliRunner().invoke(main, ["fact", "--help"])
    assert top.exit_code == 0
    assert "Examples:" in top.output
    listed = {line.split()[0] for line in top.output.split("Commands:")[1].splitlines() if line}
    assert listed == {"add", "list", "search", "history", "retract"}
    for name in sorted(listed):
        result = CliRunner().invoke(main, ["fact", name, "--help"])
        assert result.exit_code == 0, result.output
        assert "--json" in result.output


def test_search_prints_cards_with_validity_and_evidence(run: Run, db: str) -> None:
    assert words(run("fact", "search", "on-call")) == "no facts match"
    eng = node_in(db, "slack:#eng")
    stated = ("--valid-from", "2024-03-01", "--evidence", eng, "--json")
    first = as_json(run("fact", "add", CAROL, "leads", "on-call", *stated))["recorded"][0]
    run("fact", "add", CAROL, "leads", "release", "--valid-from", "2024-03-10", "--evidence", eng)
    run("fact", "add", "person:dan ng", "owns", "the release checklist")

    found = as_json(run("fact", "search", "who leads release", "--json"))
    with stratamem.open(db, embedder=None) as memory:
        assert found == json.loads(json.dumps(memory.facts.query("who leads release").to_dict()))
        cite = memory.get(eng).source_ref
    top = found["hits"][0]
    assert (top["node_kind"], top["content"]) == ("fact", "carol diaz leads release")
    assert (top["time_start"], top["time_end"]) == ("2024-03-10T00:00:00Z", None)
    assert top["explain"]["evidence"] == [eng]

    text = words(run("fact", "search", "who leads release"))
    assert text.startswith("1. slack:#eng · valid 2024-03-10 → now · asserted")
    assert f"{CAROL} leads release {top['node_id']} · {cite} · relevance 0." in text
    assert " · score " in text
    assert f"evidence: {eng} ({cite})" in text
    assert "2. facts:asserted · valid … → now · asserted person:dan ng owns the release" in text

    then = as_json(run("fact", "search", "leads", "--as-of", "2024-03-05", "--json"))["hits"]
    assert [h["explain"]["object"] for h in then] == ["on-call"]
    assert then[0]["time_end"] == "2024-03-10T00:00:00Z"
    # Known before the change: the first row, open-ended, as it was believed then.
    known = first["recorded_at"]
    old = as_json(run("fact", "search", "leads", "--known-at", known, "--as-of", "1d", "--json"))
    assert [h["node_id"] for h in old["hits"]] == [first["id"]]
    assert old["hits"][0]["explain"]["expired_at"] is not None
    assert as_json(run("fact", "search", "leads", "--known-at", "3650d", "--json"))["hits"] == []
    mine = as_json(run("fact", "search", "release", "--subject", "person:Dan Ng", "--json"))
    assert [h["explain"]["subject"] for h in mine["hits"]] == ["person:dan ng"]
    only = as_json(run("fact", "search", "release", "--source", "slack:#eng", "--json"))["hits"]
    assert {h["tree_scope"] for h in only} == {"slack:#eng"}
    one = as_json(run("fact", "search", "release", "--limit", "1", "--json"))
    assert (len(one["hits"]), one["total"], one["truncated"]) == (1, 2, True)
    assert "1 of 2; raise --limit for more" in words(
        run("fact", "search", "release", "--limit", "1")
    )


def test_a_principal_searches_only_the_facts_it_may_read(run: Run, db: str) -> None:
    eng = node_in(db, "slack:#eng")
    shared = as_json(run("fact", "add", CAROL, "leads", "on-call", "--evidence", eng, "--json"))
    private = as_json(run("fact", "add", CAROL, "codename", "quokka lantern", "--json"))
    seen = as_json(run("--as", "team-bot", "fact", "search", "leads quokka lantern", "--json"))
    assert [h["node_id"] for h in seen["hits"]] == [shared["recorded"][0]["id"]]
    assert "quokka" not in words(run("--as", "team-bot", "fact", "search", "quokka lantern"))
    assert private["recorded"][0]["id"] in words(run("fact", "search", "quokka lantern"))
    hidden = run("--as", "team-bot", "fact", "search", "x", "--source", "facts:asserted")
    missing = run("--as", "team-bot", "fact", "search", "x", "--source", "facts:nope")
    assert failed_with(hidden, "no source", code=1).replace("asserted", "nope") == failed_with(
        missing, "no source", code=1
    )
