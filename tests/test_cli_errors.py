"""Every bad option, argument and input is one line on stderr and a non-zero exit code: never
a traceback, never a message wrapped over several lines, never only in the stdout table."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from stratamem.cli import main
from stratamem.errors import StoreBusyError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "workspace"
LONG_ENTITY = "person:alice " * 5000
Run = Callable[..., Result]


@pytest.fixture(scope="module")
def db(module_location: str) -> str:
    """One store for the whole module: nothing below changes it."""
    path = module_location
    for part in ("slack-export", "mail/team.mbox"):
        result = CliRunner().invoke(
            main, ["--db", str(path), "ingest", "--quiet", str(EXAMPLES / part)]
        )
        assert result.exit_code == 0, result.output
    return path


@pytest.fixture
def run(db: str) -> Run:
    def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
        return CliRunner().invoke(main, ["--db", str(db), *args], env=env)

    return invoke


def assert_one_line_error(result: Result) -> str:
    """The result failed with exactly one non-empty line on stderr, and no traceback."""
    assert result.exit_code != 0, result.output
    assert result.exit_code in (1, 2), (result.exit_code, result.exception)
    assert "Traceback" not in result.output
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]


TIMES = [
    "99999999999d",
    "99999999999w",
    "1" * 5000 + "d",
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59-01:00",
    "2024-13-01",
    "yesterday-ish",
    "24x",
    "-5d",
]

BAD_CALLS: list[tuple[str, ...]] = [
    # The reproductions.
    ("search", "x", "--since", "99999999999d"),
    ("search", "x", "--since", "0001-01-01T00:00:00+01:00"),
    ("summaries", "--days", "1e12"),
    ("entities", LONG_ENTITY),
    # Times, wherever a command takes one.
    *[("search", "x", "--since", t) for t in TIMES],
    *[("search", "x", "--until", t) for t in TIMES],
    *[("brief", "--since", t) for t in TIMES],
    *[("brief", "--until", t) for t in TIMES[:5]],
    *[("summaries", "--since", t) for t in TIMES[:5]],
    *[("summaries", "--since", "2024-01-01", "--until", t) for t in TIMES[:5]],
    *[("topic", "topic:phoenix", "--since", t) for t in TIMES[:5]],
    *[("topic", "topic:phoenix", "--until", t) for t in TIMES[:5]],
    ("search", "x", "--since", "2024-03-02", "--until", "2024-03-01"),
    ("brief", "--since", "2024-03-02", "--until", "2024-03-01"),
    ("summaries", "--since", "9999-12-31", "--until", "0001-01-01"),
    ("topic", "topic:phoenix", "--since", "2024-03-02", "--until", "2024-03-01"),
    # Numbers out of range, huge, or not numbers.
    *[
        (*command, option, value)
        for command, option, values in [
            (("search", "x"), "--limit", ["0", "-5", "1001", "99999999999999999999", "ten", "1.5"]),
            (("search", "x"), "--budget", ["-1", "99999999999999999999", "lots"]),
            (("entities", "alice"), "--limit", ["0", "-1", "101", "99999999999999999999"]),
            (("tree", "slack:#eng"), "--depth", ["-1", "33", "99999999999999999999", "deep"]),
            (("tree", "slack:#eng"), "--children", ["0", "-1", "99999999999999999999"]),
            (("brief",), "--limit", ["0", "-1", "99999999999999999999"]),
            (("summaries",), "--days", ["-1", "nan", "inf", "-inf", "1e12", "week"]),
            (("summaries",), "--limit", ["0", "-1", "99999999999999999999"]),
            (("topic", "topic:phoenix"), "--limit", ["0", "99999999999999999999"]),
            (("drill", "sum_x"), "--depth", ["-1", "33", "99999999999999999999"]),
            (("drill", "sum_x"), "--limit", ["0", "-1", "99999999999999999999"]),
            (
                ("ingest", str(EXAMPLES / "notes")),
                "--max-item-size",
                ["abc", "-1", "0", "12Q", "1e30G"],
            ),
            (("ingest", str(EXAMPLES / "notes")), "--scope", ["", "   "]),
        ]
        for value in values
    ],
    # Names that are not among the choices.
    ("search", "x", "--kind", "nope"),
    ("search", "x", "--mode", "nope"),
    ("search", "x", "--profile", "nope"),
    ("brief", "--kind", "nope"),
    ("ingest", str(EXAMPLES / "notes"), "--format", "nope"),
    ("ingest", str(EXAMPLES / "notes"), "--kind", "nope"),
    ("eval", str(EXAMPLES), "--mode", "nope"),
    # An option and its older name that disagree.
    ("ingest", str(EXAMPLES / "notes"), "--format", "markdown", "--kind", "jsonl"),
    ("summaries", "--kind", "slack", "--platform", "mbox"),
    # Overlong queries and references.
    ("topic", "alice " * 5000),
    ("entities", LONG_ENTITY, "--json"),
    # --json changes nothing: the error is still one line on stderr.
    ("search", "x", "--json", "--since", "99999999999d"),
    ("summaries", "--json", "--days", "1e12"),
    ("show", "nope", "--json"),
    # Things that do not exist.
    ("show", "nope"),
    ("tree", "slack:#nowhere"),
    ("forget", "slack:#nowhere", "--yes"),
    ("flush", "--source", "slack:#nowhere"),
    ("ingest", "/nonexistent/path"),
    ("eval", "/nonexistent/dataset"),
    ("tune", "/nonexistent/dataset"),
    # Missing arguments, unknown options and commands.
    ("search",),
    ("show",),
    ("drill",),
    ("topic",),
    ("search", "x", "--nope"),
    ("embed", "--nope"),
    ("frobnicate",),
    ("search", "x", "--limit"),
]


@pytest.mark.parametrize("args", BAD_CALLS, ids=lambda args: " ".join(args)[:60])
def test_a_bad_call_is_one_line_on_stderr(run: Run, args: tuple[str, ...]) -> None:
    line = assert_one_line_error(run(*args))
    assert "failed unexpectedly" not in line, line
    assert len(line) <= 1100


# docs/cli.md: exit code 2 for an option or argument out of range or unreadable, 1 for
# everything else, a time before the year 1 among it. Each with what its one line says.
DOCUMENTED_CODES: list[tuple[tuple[str, ...], int, str]] = [
    (("search", "x", "--since", "5y"), 2, "Invalid value for --since: cannot read '5y'"),
    (("search", "x", "--until", "2024-13-01"), 2, "Invalid value for --until: cannot read"),
    (("search", "x", "--since", ""), 2, "Invalid value for --since: cannot read ''"),
    (("search", "x", "--since", "99999999w"), 1, "'99999999w' reaches back before the year 1"),
    (("search", "x", "--since", "0001-01-01T00:00:00+01:00"), 1, "outside years 1–9999"),
    (("brief", "--since", "nope"), 2, "Invalid value for --since: cannot read 'nope'"),
    (("brief", "--since", "99999999999w"), 1, "reaches back before the year 1"),
    (("summaries", "--since", "x"), 2, "Invalid value for --since: cannot read 'x'"),
    (("topic", "topic:phoenix", "--until", "y"), 2, "Invalid value for --until: cannot read"),
    (("topic", "topic:phoenix", "--since", "99999999w"), 1, "reaches back before the year 1"),
    (("fact", "search", "x", "--as-of", "soon"), 2, "Invalid value for --as-of: cannot read"),
    (("fact", "search", "x", "--as-of", "99999999w"), 1, "reaches back before the year 1"),
    (("fact", "list", "--known-at", "1e9"), 2, "Invalid value for --known-at: cannot read"),
    (("fact", "list", "--known-at", "99999999w"), 1, "reaches back before the year 1"),
    (
        ("fact", "add", "s", "p", "o", "--valid-from", "2024-13-01"),
        2,
        "Invalid value for --valid-from",
    ),
    (("fact", "add", "s", "p", "o", "--confidence", "nan"), 2, "'nan' is not a number"),
    (("consolidate", "--min-score", "nan"), 2, "Invalid value for '--min-score': 'nan'"),
    (("consolidate", "--min-score", "2"), 2, "Invalid value for '--min-score'"),
    (("add", "hello", "--time", "never"), 2, "Invalid value for --time: cannot read 'never'"),
    (("add", "hello", "--time", "99999999w"), 1, "reaches back before the year 1"),
    (("extract", "--timeout", "nan"), 2, "Invalid value for '--timeout': 'nan'"),
    (("summaries", "--days", "nan"), 2, "Invalid value for '--days'"),
]


@pytest.mark.parametrize(
    ("args", "code", "said"),
    DOCUMENTED_CODES,
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else str(v),
)
def test_a_bad_value_exits_with_the_documented_code(
    run: Run, args: tuple[str, ...], code: int, said: str
) -> None:
    result = run(*args)
    line = assert_one_line_error(result)
    assert result.exit_code == code, line
    assert said in line
    assert "failed unexpectedly" not in line


def test_a_long_message_stays_on_one_line_in_a_narrow_terminal(db: Path) -> None:
    """A real process with a 20-column terminal: rich would wrap there; the error does not."""
    result = subprocess.run(
        [sys.executable, "-m", "stratamem", "--db", str(db), "search", "x", "--since", "2" * 400],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "20", "STRATAMEM_DEBUG": ""},
        check=False,
    )
    assert result.returncode == 2  # a time that cannot be read: a usage error
    assert "Traceback" not in result.stderr + result.stdout
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1


def test_an_unreadable_store_is_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken.db"
    broken.write_bytes(b"not sqlite at all" * 64)
    for db in (broken, tmp_path):
        result = CliRunner().invoke(main, ["--db", str(db), "stats"])
        assert str(db) in assert_one_line_error(result)


def test_an_input_nothing_can_read_is_one_line(run: Run, tmp_path: Path) -> None:
    odd = tmp_path / "blob.bin"
    odd.write_bytes(bytes(range(256)))
    assert "no connector recognises" in assert_one_line_error(run("ingest", str(odd)))


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_a_failed_ingest_says_so_on_stderr(
    run: Run, monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    """When every source fails, the reason is on stderr as well as in the report on stdout."""
    from stratamem.ingest.pipeline import IngestReport, SourceResult

    def failing(self: object, path: object, **kwargs: object) -> IngestReport:
        error = "line 3: not JSON\nand a second line"
        return IngestReport(str(path), "jsonl", sources=[SourceResult("chat:x", error=error)])

    monkeypatch.setattr("stratamem.api.Memory.ingest", failing)
    args = ("ingest", "--quiet", *(["--json"] if as_json else []), str(EXAMPLES / "notes"))
    line = assert_one_line_error(run(*args))
    assert "chat:x: line 3: not JSON and a second line" in line


def _explode(*args: object, **kwargs: object) -> None:
    raise RuntimeError("a bug\nwith a second line")


def test_an_unexpected_error_names_the_command(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("stratamem.api.Memory.stats", _explode)
    monkeypatch.delenv("STRATAMEM_DEBUG", raising=False)
    line = assert_one_line_error(run("stats"))
    assert "stratamem stats failed unexpectedly: RuntimeError: a bug with a second line" in line
    assert "--debug" in line


def test_a_store_locked_too_long_is_one_line(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    def locked(*args: object, **kwargs: object) -> None:
        raise StoreBusyError("the store is busy: another process kept it locked for over 1800 s")

    monkeypatch.setattr("stratamem.api.Memory.stats", locked)
    line = assert_one_line_error(run("stats"))
    assert "the store is busy" in line
    assert "failed unexpectedly" not in line


@pytest.mark.parametrize(
    ("flag", "env"), [(("--debug",), {}), ((), {"STRATAMEM_DEBUG": "1"})], ids=["flag", "env"]
)
def test_debug_shows_the_traceback(
    db: str, monkeypatch: pytest.MonkeyPatch, flag: tuple[str, ...], env: dict[str, str]
) -> None:
    monkeypatch.setattr("stratamem.api.Memory.stats", _explode)
    result = CliRunner().invoke(main, [*flag, "--db", str(db), "stats"], env=env)
    assert result.exit_code == 1
    assert isinstance(result.exception, RuntimeError)


def test_debug_traceback_of_a_domain_error_then_the_line(run: Run) -> None:
    result = run("forget", "slack:#nowhere", "--yes", env={"STRATAMEM_DEBUG": "1"})
    assert result.exit_code == 1
    assert "Traceback" in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last == "error: no source with id or scope 'slack:#nowhere'"


def test_good_values_at_the_edges_still_work(run: Run) -> None:
    for args in [
        ("search", "redis", "--limit", "1000", "--budget", "1000000"),
        ("search", "redis", "--since", "0001-01-01", "--until", "9999-12-31T23:59:59"),
        ("search", "redis", "--since", "0d"),
        ("summaries", "--days", "0"),
        ("summaries", "--days", "365000"),
        ("entities", "a" * 1000),
        ("search", "x", "--source", "a" * 60_000 + "*"),
        ("drill", "a" * 70_000),
        ("topic", "topic:" + "a" * 70_000),
        ("brief", "--source", "%_\\" * 20_000 + "*"),
        ("entities", "alice", "--limit", "100"),
        ("drill", "sum_x", "--depth", "0"),
        ("tree", "slack:#eng", "--depth", "32", "--children", "10000"),
        ("brief", "--since", "700000d", "--limit", "10000"),
    ]:
        result = run(*args)
        assert result.exit_code == 0, (args, result.output)
        assert not result.stderr.strip(), (args, result.stderr)


def test_help_and_version_still_exit_zero(run: Run) -> None:
    for args in (("--help",), ("search", "--help"), ("--version",)):
        result = run(*args)
        assert result.exit_code == 0, result.output
        assert result.stdout.strip()


def test_python_api_rejects_bad_values_with_value_errors(store_location: str) -> None:
    import stratamem

    with stratamem.open(store_location, embedder=None) as memory:
        for call in (
            lambda: memory.query_source(time_window_days=1e12),
            lambda: memory.query_source(time_window_days=float("nan")),
            lambda: memory.query_source(time_window_days=-1),
            lambda: memory.search_entities(LONG_ENTITY),
        ):
            with pytest.raises(ValueError, match=r"^[^\n]+$"):
                call()
