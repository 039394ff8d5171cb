"""The access commands: ``principal``, ``access``, ``lock``, ``unlock``, ``ingest --access``,
and the global ``--as`` and ``--unlock``."""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import stratamem
from stratamem.cli import main
from stratamem.errors import AccessDenied

Run = Callable[..., click.testing.Result]
TOKEN = re.compile(r"stm_[0-9a-f]{12}_[A-Za-z0-9_-]{43}")
NOTES = "jsonl:notes"  # a document source: `private` by default
UNSET = {"STRATAMEM_PASSPHRASE": None, "STRATAMEM_AS": None}


def _locking_implemented() -> bool:
    """Whether ``Memory.locks.lock`` works yet: the tests that lock turn on by themselves once it
    does (any other failure turns them on too, so that they show it)."""
    with (
        tempfile.TemporaryDirectory() as folder,
        stratamem.open(Path(folder) / "probe.db", embedder=None) as memory,
    ):
        memory.items.add("probe", source="probe")
        try:
            memory.locks.lock("probe", passphrase="probe")
        except NotImplementedError:
            return False
        except Exception:
            return True
    return True


needs_locking = pytest.mark.skipif(
    not _locking_implemented(),
    reason="locking is not implemented yet: Memory.locks.lock raises NotImplementedError",
)


def runner_for(db: str | Path) -> Run:
    def invoke(
        *args: str, input: str | None = None, env: dict[str, str] | None = None
    ) -> click.testing.Result:
        return CliRunner().invoke(
            main,
            ["--db", str(db), *args],
            input=input,
            env={**UNSET, **(env or {})},
            catch_exceptions=False,
        )

    return invoke


def ingest_fixtures(db: str | Path, fixtures: Path) -> None:
    with stratamem.open(db, embedder=None) as memory:
        memory.ingest(fixtures / "slack")
        memory.ingest(fixtures / "jsonl" / "export.jsonl")


@pytest.fixture(scope="module")
def shared(module_location: str) -> Run:
    """A store read, never written: Slack (team), JSONL chat (team) and notes (private), with
    a principal ``team-bot`` that reads team."""
    db = module_location
    ingest_fixtures(db, Path(__file__).resolve().parent / "fixtures")
    with stratamem.open(db, embedder=None) as memory:
        memory.principals.add("team-bot", "team")
    return runner_for(db)


@pytest.fixture
def db(store_location: str, fixtures_dir: Path) -> str:
    path = store_location
    ingest_fixtures(path, fixtures_dir)
    return path


@pytest.fixture
def run(db: str) -> Run:
    return runner_for(db)


@pytest.fixture
def owner(db: str) -> Iterator[stratamem.Memory]:
    with stratamem.open(db, embedder=None) as memory:
        yield memory


def as_json(result: click.testing.Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def failed_with(result: click.testing.Result, message: str, *, code: int = 1) -> str:
    """The command failed with ``code`` and one line on stderr saying ``message``; returns
    that line."""
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error:")
    assert message in lines[0], lines[0]
    return lines[0]


def token_of(result: click.testing.Result) -> str:
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    assert TOKEN.fullmatch(lines[0]), result.stdout
    return lines[0]


# -- principal -------------------------------------------------------------------------------


def test_principal_add_prints_the_token_once_and_it_authenticates(
    run: Run, db: str, owner: stratamem.Memory
) -> None:
    added = run("principal", "add", "ci-bot", "--scopes", "eng,team")
    token = token_of(added)  # stdout holds the token alone, so TOKEN=$(…) takes it
    assert "cannot be shown again" in added.stderr
    assert "stratamem principal rotate ci-bot" in added.stderr
    assert owner.principals.authenticate(token).name == "ci-bot"

    rotated = run("principal", "rotate", "ci-bot")
    new = token_of(rotated)
    assert "cannot be shown again" in rotated.stderr
    assert new != token
    assert owner.principals.authenticate(new).name == "ci-bot"
    with pytest.raises(AccessDenied, match="the token matches no principal"):
        owner.principals.authenticate(token)
    listed = run("principal", "list", "--json")
    assert token not in listed.stdout
    assert new not in listed.stdout


def test_principal_add_and_rotate_json(run: Run, owner: stratamem.Memory) -> None:
    added = as_json(
        run(
            "principal",
            "add",
            "oncall",
            "--scopes",
            "Eng, ops",
            "--sources",
            "slack:#eng*",
            "--sources",
            "jsonl:*",
            "--write",
            "--json",
        )
    )
    assert set(added) == {"name", "scopes", "sources", "write", "created", "rotated", "token"}
    assert added["name"] == "oncall"
    assert added["scopes"] == ["eng", "ops"]
    assert added["sources"] == ["slack:#eng*", "jsonl:*"]
    assert added["write"] is True
    assert added["created"] == added["rotated"]
    assert added["created"].endswith("Z")
    assert TOKEN.fullmatch(added["token"])
    assert owner.principals.authenticate(added["token"]).scopes == ("eng", "ops")

    rotated = as_json(run("principal", "rotate", "oncall", "--json"))
    assert set(rotated) == set(added)
    assert rotated["token"] != added["token"]
    assert rotated["created"] == added["created"]
    assert rotated["rotated"] >= added["rotated"]


def test_principal_list(run: Run) -> None:
    assert as_json(run("principal", "list", "--json")) == []
    empty = run("principal", "list")
    assert empty.exit_code == 0
    assert "no principals" in empty.stdout
    token_of(run("principal", "add", "zed", "--scopes", "*", "--sources", "slack:*"))
    token_of(run("principal", "add", "amy", "--scopes", "team"))
    listed = as_json(run("principal", "list", "--json"))
    assert [p["name"] for p in listed] == ["amy", "zed"]
    assert all(
        set(p) == {"name", "scopes", "sources", "write", "created", "rotated"} for p in listed
    )
    assert (listed[1]["scopes"], listed[1]["sources"], listed[1]["write"]) == (
        ["*"],
        ["slack:*"],
        False,
    )
    table = run("principal", "list")
    assert table.exit_code == 0
    for text in ("name", "scopes", "sources", "write", "created", "rotated", "amy", "zed"):
        assert text in table.stdout
    assert "scrypt" not in table.stdout + json.dumps(listed)


def test_principal_remove(run: Run, owner: stratamem.Memory) -> None:
    token = token_of(run("principal", "add", "bot", "--scopes", "team"))
    removed = run("principal", "remove", "bot")
    assert removed.exit_code == 0, removed.output
    assert "removed principal bot" in removed.stdout
    assert as_json(run("principal", "list", "--json")) == []
    with pytest.raises(AccessDenied):
        owner.principals.authenticate(token)
    failed_with(run("principal", "remove", "bot"), "no principal named 'bot'")
    failed_with(run("--as", "bot", "sources"), "no principal named 'bot'")


@pytest.mark.parametrize(
    ("args", "message", "code"),
    [
        (("add", "bot", "--scopes", "Bad Label!"), "bad access scope 'Bad Label!'", 2),
        (("add", "bot", "--scopes", "team,_x"), "bad access scope '_x'", 2),
        (("add", "bot", "--scopes", ""), "needs at least one scope", 1),
        (("add", "bad name", "--scopes", "team"), "bad principal name", 1),
        (("add", "bot"), "Missing option '--scopes'", 2),
        (("remove", "ghost"), "no principal named 'ghost'", 1),
        (("rotate", "ghost"), "no principal named 'ghost'", 1),
    ],
)
def test_principal_errors_are_one_line(
    run: Run, args: tuple[str, ...], message: str, code: int
) -> None:
    failed_with(run("principal", *args), message, code=code)


def test_a_duplicate_principal_is_one_line(run: Run) -> None:
    token_of(run("principal", "add", "bot", "--scopes", "team"))
    failed_with(run("principal", "add", "bot", "--scopes", "eng"), "a principal named 'bot'")
    failed_with(
        run("principal", "add", "bot", "--scopes", "eng", "--json"), "a principal named 'bot'"
    )


# -- access ----------------------------------------------------------------------------------


def test_access_shows_and_changes_a_sources_scopes(run: Run) -> None:
    shown = run("access", NOTES)
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.strip() == f"{NOTES}: private"
    data = as_json(run("access", NOTES, "--json"))
    assert set(data) == {"id", "scope", "kind", "access", "locked"}
    assert (data["scope"], data["kind"], data["access"], data["locked"]) == (
        NOTES,
        "document",
        ["private"],
        False,
    )

    changed = run("access", NOTES, "--add", "eng", "--add", "ops,team", "--remove", "private")
    assert changed.exit_code == 0, changed.output
    assert changed.stdout.strip() == f"{NOTES}: eng, ops, team (was private)"
    assert as_json(run("access", data["id"], "--set", "Team,hr", "--json"))["access"] == [
        "hr",
        "team",
    ]
    assert as_json(run("access", NOTES, "--set", "eng", "--add", "ops", "--json"))["access"] == [
        "eng",
        "ops",
    ]
    cleared = run("access", NOTES, "--set", "")
    assert cleared.stdout.strip() == f"{NOTES}: owner only (was eng, ops)"
    assert as_json(run("access", NOTES, "--json"))["access"] == []


@pytest.mark.parametrize(
    ("args", "message", "code"),
    [
        ((NOTES, "--set", "no spaces"), "bad access scope 'no spaces'", 2),
        ((NOTES, "--add", "*"), "bad access scope '*'", 2),
        ((NOTES, "--remove", "UPPER!"), "bad access scope 'UPPER!'", 2),
        (("slack:#nowhere",), "no source with id or scope 'slack:#nowhere'", 1),
        (("slack:#nowhere", "--set", "team"), "no source with id or scope", 1),
    ],
)
def test_access_errors_are_one_line(
    run: Run, args: tuple[str, ...], message: str, code: int
) -> None:
    failed_with(run("access", *args), message, code=code)


# -- ingest --access and sources -------------------------------------------------------------


def test_ingest_access_sets_every_source_read(store_location: str, fixtures_dir: Path) -> None:
    run = runner_for(store_location)
    ingested = run(
        "ingest", "--quiet", "--access", "Eng,ops", str(fixtures_dir / "jsonl" / "export.jsonl")
    )
    assert ingested.exit_code == 0, ingested.output
    assert run("ingest", "--quiet", str(fixtures_dir / "slack")).exit_code == 0
    found = {s["scope"]: s["access"] for s in as_json(run("sources", "--json"))}
    assert found == {
        NOTES: ["eng", "ops"],
        "jsonl:slack:#eng": ["eng", "ops"],
        "slack:#eng": ["team"],  # a chat source's default
        "slack:#general": ["team"],
    }
    failed_with(
        run("ingest", "--access", "not ok", str(fixtures_dir / "slack")),
        "bad access scope 'not ok'",
        code=2,
    )


def test_sources_shows_access_and_locked(shared: Run) -> None:
    found = as_json(shared("sources", "--json"))
    assert {s["scope"]: (s["access"], s["locked"]) for s in found} == {
        NOTES: (["private"], False),
        "jsonl:slack:#eng": (["team"], False),
        "slack:#eng": (["team"], False),
        "slack:#general": (["team"], False),
    }
    table = shared("sources", env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "access" in table.stdout
    assert "private" in table.stdout
    assert "locked" not in table.stdout


# -- --as ------------------------------------------------------------------------------------


def test_as_restricts_sources_stats_and_search(shared: Run) -> None:
    owner_sources = [s["scope"] for s in as_json(shared("sources", "--json"))]
    seen = [s["scope"] for s in as_json(shared("--as", "team-bot", "sources", "--json"))]
    assert NOTES in owner_sources
    assert NOTES not in seen
    assert seen == [s for s in owner_sources if s != NOTES]
    table = shared("--as", "team-bot", "sources")
    assert NOTES not in table.stdout
    assert "slack:#eng" in table.stdout

    owner_stats = as_json(shared("stats", "--json"))
    stats = as_json(shared("--as", "team-bot", "stats", "--json"))
    assert (owner_stats["sources"], stats["sources"]) == (4, 3)
    assert stats["chunks"] < owner_stats["chunks"]

    query = ("search", "Numeric", "--mode", "keyword", "--json")
    assert {h["tree_scope"] for h in as_json(shared(*query))["hits"]} == {NOTES}
    hidden = as_json(shared("--as", "team-bot", *query))
    assert (hidden["hits"], hidden["total"]) == ([], 0)
    nothing = shared("--as", "team-bot", "search", "Numeric", "--mode", "keyword")
    assert nothing.exit_code == 0
    assert "no matches" in nothing.stdout

    redis = as_json(shared("--as", "team-bot", "search", "Redis", "--mode", "keyword", "--json"))
    assert redis["hits"]
    assert all(h["tree_scope"] != NOTES for h in redis["hits"])


def test_as_reads_the_environment_too(shared: Run) -> None:
    seen = as_json(shared("sources", "--json", env={"STRATAMEM_AS": "team-bot"}))
    assert NOTES not in [s["scope"] for s in seen]
    failed_with(shared("sources", env={"STRATAMEM_AS": "ghost"}), "no principal named 'ghost'")


def test_a_hidden_node_reads_like_one_that_does_not_exist(shared: Run) -> None:
    hits = as_json(shared("search", "Numeric", "--mode", "keyword", "--json"))["hits"]
    hidden = hits[0]["node_id"]
    absent = "0" * len(hidden)
    assert as_json(shared("show", hidden, "--json"))["node_id"] == hidden  # the owner sees it
    for extra in ((), ("--json",)):
        unseen = shared("--as", "team-bot", "show", hidden, *extra)
        missing = shared("--as", "team-bot", "show", absent, *extra)
        assert unseen.exit_code == missing.exit_code == 1
        assert unseen.stdout == missing.stdout == ""
        assert unseen.stderr.replace(hidden, "ID") == missing.stderr.replace(absent, "ID")
        failed_with(unseen, f"no node with id '{hidden}'")


@pytest.mark.parametrize(
    "command", [("sources",), ("stats",), ("search", "Redis", "--mode", "keyword"), ("show", "x")]
)
def test_an_unknown_principal_is_one_line(shared: Run, command: tuple[str, ...]) -> None:
    failed_with(shared("--as", "ghost", *command), "no principal named 'ghost'")


@pytest.mark.parametrize(
    ("command", "action"),
    [
        (("principal", "add", "x", "--scopes", "team"), "manage principals"),
        (("principal", "add", "x", "--scopes", "team", "--json"), "manage principals"),
        (("principal", "list"), "list principals"),
        (("principal", "list", "--json"), "list principals"),
        (("principal", "remove", "team-bot"), "manage principals"),
        (("principal", "rotate", "team-bot"), "manage principals"),
        (("access", "slack:#eng"), "manage access"),
        (("access", "slack:#eng", "--add", "eng", "--json"), "manage access"),
        (("access", NOTES, "--add", "team"), "manage access"),  # hidden: the same answer
        (("lock", "slack:#eng"), "lock sources"),
        (("unlock", "slack:#eng", "--json"), "unlock sources"),
        (("ingest", "--quiet", "SLACK"), "ingest"),
        (("ingest", "--access", "team", "--json", "SLACK"), "ingest"),
        (("forget", "slack:#eng", "--yes"), "forget sources"),
        (("add", "a note"), "write items"),
    ],
)
def test_a_principal_may_not_run_the_owners_commands(
    shared: Run, fixtures_dir: Path, command: tuple[str, ...], action: str
) -> None:
    args = [str(fixtures_dir / "slack") if a == "SLACK" else a for a in command]
    failed_with(
        shared("--as", "team-bot", *args, env={"STRATAMEM_PASSPHRASE": "p"}),
        f"principal 'team-bot' may not {action}",
    )


# -- lock, unlock and --unlock: what can be checked before anything is encrypted -----------


@pytest.mark.parametrize("command", ["lock", "unlock"])
def test_no_passphrase_is_one_line_saying_how_to_give_one(run: Run, command: str) -> None:
    line = failed_with(run(command, "slack:#eng"), "no passphrase for slack:#eng")
    assert "--passphrase-file FILE" in line
    assert "STRATAMEM_PASSPHRASE" in line
    assert "terminal" in line


def test_lock_asks_twice_on_a_terminal_and_refuses_a_mismatch(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("stratamem.cli.common.interactive", lambda: True)
    result = run("lock", "slack:#eng", input="one\ntwo\n")
    assert result.exit_code == 1
    assert result.stdout == ""
    assert [line.strip() for line in result.stderr.splitlines()] == [
        "passphrase for slack:#eng:",
        "the same passphrase again:",
        "error: the two passphrases differ; nothing was done",
    ]  # neither passphrase echoed
    assert [s["locked"] for s in as_json(run("sources", "--json"))] == [False] * 4


@pytest.mark.parametrize("command", ["lock", "unlock"])
def test_an_empty_passphrase_file_is_one_line(run: Run, tmp_path: Path, command: str) -> None:
    empty = tmp_path / "empty.pass"
    empty.write_text("\nsecond line\n")
    failed_with(run(command, "slack:#eng", "--passphrase-file", str(empty)), "first line is empty")
    failed_with(
        run(command, "slack:#eng", "--passphrase-file", str(tmp_path / "absent")),
        "does not exist",
        code=2,
    )


@pytest.mark.parametrize("command", ["lock", "unlock"])
def test_lock_of_an_unknown_source_is_one_line(run: Run, command: str) -> None:
    failed_with(
        run(command, "slack:#nowhere", env={"STRATAMEM_PASSPHRASE": "p"}),
        "no source with id or scope 'slack:#nowhere'",
    )


# -- lock, unlock and --unlock at work -------------------------------------------------------


def locked_scopes(run: Run) -> list[str]:
    return [s["scope"] for s in as_json(run("sources", "--json")) if s["locked"]]


def keyword_scopes(run: Run, query: str, *extra: str, env: dict[str, str] | None = None) -> set:
    result = run(*extra, "search", query, "--mode", "keyword", "--json", env=env)
    return {h["tree_scope"] for h in as_json(result)["hits"]}


@needs_locking
def test_lock_and_unlock_round_trip(run: Run) -> None:
    secret = {"STRATAMEM_PASSPHRASE": "correct horse"}
    assert "slack:#eng" in keyword_scopes(run, "Redis")
    locked = as_json(run("lock", "slack:#eng", "--json", env=secret))
    assert set(locked) == {
        "action",
        "source_id",
        "scope",
        "chunks",
        "summaries",
        "records",
        "seconds",
    }
    assert (locked["action"], locked["scope"]) == ("locked", "slack:#eng")
    assert locked["chunks"] > 0
    assert locked["seconds"] >= 0
    assert locked_scopes(run) == ["slack:#eng"]
    table = run("sources", env={"COLUMNS": "200"})
    assert "locked" in table.stdout
    assert "slack:#eng" not in keyword_scopes(run, "Redis")
    failed_with(run("lock", "slack:#eng", env=secret), "slack:#eng")  # already locked

    failed_with(run("unlock", "slack:#eng", env={"STRATAMEM_PASSPHRASE": "wrong"}), "passphrase")
    assert locked_scopes(run) == ["slack:#eng"]
    unlocked = run("unlock", "slack:#eng", env=secret)
    assert unlocked.exit_code == 0, unlocked.output
    assert unlocked.stdout.startswith("unlocked slack:#eng:")
    assert f"{locked['chunks']:,} chunks" in unlocked.stdout
    assert locked_scopes(run) == []
    assert "slack:#eng" in keyword_scopes(run, "Redis")


@needs_locking
def test_lock_takes_a_passphrase_file_or_a_terminal(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "eng.pass"
    secret.write_text("from a file\n")
    locked = run("lock", "slack:#eng", "--passphrase-file", str(secret))
    assert locked.exit_code == 0, locked.output
    assert locked.stdout.startswith("locked slack:#eng:")
    monkeypatch.setattr("stratamem.cli.common.interactive", lambda: True)
    typed = run("unlock", "slack:#eng", input="from a file\n")
    assert typed.exit_code == 0, typed.output
    assert "from a file" not in typed.output
    asked = run("lock", "slack:#general", input="typed\ntyped\n")
    assert asked.exit_code == 0, asked.output
    assert locked_scopes(run) == ["slack:#general"]


@needs_locking
def test_global_unlock_reads_a_locked_source_for_one_command(run: Run) -> None:
    secret = {"STRATAMEM_PASSPHRASE": "pass"}
    assert run("lock", "slack:#eng", env=secret).exit_code == 0
    assert "slack:#eng" in keyword_scopes(run, "Redis", "--unlock", "slack:#eng", env=secret)
    assert "slack:#eng" not in keyword_scopes(run, "Redis")  # this process only
    assert locked_scopes(run) == ["slack:#eng"]
    failed_with(
        run("--unlock", "slack:#eng", "sources", env={"STRATAMEM_PASSPHRASE": "wrong"}),
        "wrong passphrase for 'slack:#eng'",
    )
    line = failed_with(run("--unlock", "slack:#eng", "sources"), "no passphrase for")
    assert "STRATAMEM_PASSPHRASE" in line
    # A source that is not locked is read as it is, with no passphrase asked.
    read = as_json(run("--unlock", "slack:#general", "sources", "--json"))
    assert [s["scope"] for s in read if s["locked"]] == ["slack:#eng"]


@needs_locking
def test_global_unlock_asks_on_a_terminal(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    assert run("lock", "slack:#eng", env={"STRATAMEM_PASSPHRASE": "typed"}).exit_code == 0
    monkeypatch.setattr("stratamem.cli.common.interactive", lambda: True)
    typed = run(
        "--unlock", "slack:#eng", "search", "Redis", "--mode", "keyword", "--json", input="typed\n"
    )
    assert typed.exit_code == 0, typed.output
    assert "slack:#eng" in {h["tree_scope"] for h in json.loads(typed.stdout)["hits"]}
    assert "typed" not in typed.output
    wrong = run("--unlock", "slack:#eng", "sources", input="wrong\n")
    assert wrong.exit_code == 1
    assert wrong.stderr.splitlines()[-1] == "error: wrong passphrase for 'slack:#eng'"


# -- help ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ("principal",),
        ("principal", "add"),
        ("principal", "list"),
        ("principal", "remove"),
        ("principal", "rotate"),
        ("access",),
        ("lock",),
        ("unlock",),
    ],
)
def test_every_access_command_has_help_with_examples(command: tuple[str, ...]) -> None:
    result = CliRunner().invoke(main, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Examples:" in result.output


def test_the_global_options_are_in_the_help() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert "--as NAME" in result.output
    assert "--unlock SOURCE" in result.output
