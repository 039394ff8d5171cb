"""The core works without the extras: with every optional package made unimportable, ingest,
search, summary trees and facts run, and each command that needs an extra fails with one line
naming it and the command that installs it.

The commands run in process, through the CLI's ``main``, in one child interpreter that blocks
the packages (``sys.modules[name] = None`` makes ``import name`` fail as if it were not
installed) before anything imports stratamem, so the blocking never reaches this process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTES = ROOT / "examples" / "workspace" / "notes"
DECISIONS = NOTES / "decisions"  # one note, on dropping Redis
DATASET = ROOT / "tests" / "fixtures" / "eval" / "beir-standard"

# What the extras bring (and what those pull in that the core must not need either).
BLOCKED = (
    "fastapi",
    "uvicorn",
    "starlette",
    "mcp",
    "mcp_types",
    "httpx",
    "pytrec_eval",
    "psycopg",
    "psycopg_pool",
    "pydantic",
    "sentence_transformers",
    "torch",
    "keyring",
    "jinja2",
)

CHILD = """
import json, sys

blocked, calls = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for name in blocked:
    sys.modules[name] = None

from click.testing import CliRunner

from stratamem.cli import main

results = {}
for name, args, env in calls:
    result = CliRunner().invoke(main, args, env=env)
    unexpected = result.exception if not isinstance(result.exception, SystemExit) else None
    results[name] = {
        "code": result.exit_code,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "exception": repr(unexpected) if unexpected else None,
    }
loaded = [name for name in blocked if sys.modules.get(name) is not None]
print(json.dumps({"results": results, "loaded": loaded}))
"""


def calls(folder: Path) -> list[tuple[str, list[str], dict[str, str | None]]]:
    """(name, arguments, environment) of each command, run in this order."""
    plain = str(folder / "plain.db")
    embedded = str(folder / "embedded.db")
    off = {"STRATAMEM_INGEST_EMBED": "off"}
    bundled: dict[str, str | None] = {"STRATAMEM_INGEST_EMBED": None}
    return [
        ("ingest", ["--db", plain, "ingest", "--quiet", str(NOTES)], off),
        ("keyword", ["--db", plain, "search", "Redis", "--mode", "keyword", "--json"], off),
        ("hybrid without vectors", ["--db", plain, "search", "Redis", "--json"], off),
        ("tree", ["--db", plain, "tree", "notes:notes", "--json"], off),
        ("fact add", ["--db", plain, "fact", "add", "topic:redis", "status", "dropped"], off),
        ("fact list", ["--db", plain, "fact", "list", "topic:redis", "--json"], off),
        # One note: the bundled model's load is the point, not the embedding of many chunks.
        ("ingest embedded", ["--db", embedded, "ingest", "--quiet", str(DECISIONS)], bundled),
        ("hybrid", ["--db", embedded, "search", "Redis", "--json"], bundled),
        ("serve", ["--db", plain, "serve"], off),
        ("inspect", ["--db", plain, "inspect", "--no-browser"], off),
        ("mcp", ["--db", plain, "mcp"], off),
        ("eval", ["eval", str(DATASET), "--store", str(folder), "--out", str(folder)], off),
        ("tune", ["tune", str(DATASET), "--store", str(folder), "--out", str(folder)], off),
        ("postgres", ["--db", "postgresql://nobody@127.0.0.1:1/none", "sources"], off),
        (
            "extract",
            ["--db", plain, "extract", "--endpoint", "http://127.0.0.1:1", "--model", "m"],
            off,
        ),
    ]


@pytest.fixture(scope="module")
def blocked_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("optional")
    child = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(BLOCKED), json.dumps(calls(folder))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    run: dict[str, Any] = json.loads(child.stdout)
    return run


def succeeded(blocked_run: dict[str, Any], name: str) -> dict[str, Any]:
    result: dict[str, Any] = blocked_run["results"][name]
    assert (result["code"], result["exception"]) == (0, None), result
    return result


def test_no_blocked_package_was_imported(blocked_run: dict[str, Any]) -> None:
    assert blocked_run["loaded"] == []


@pytest.mark.parametrize("name", ["ingest", "ingest embedded", "fact add"])
def test_writes_work(blocked_run: dict[str, Any], name: str) -> None:
    succeeded(blocked_run, name)


@pytest.mark.parametrize("name", ["keyword", "hybrid without vectors", "hybrid"])
def test_searches_find_the_notes(blocked_run: dict[str, Any], name: str) -> None:
    hits = json.loads(succeeded(blocked_run, name)["stdout"])["hits"]
    assert hits
    assert all(hit["tree_scope"].startswith("notes:") for hit in hits)
    assert any("Redis" in hit["content"] for hit in hits)


def test_the_hybrid_search_runs_its_vector_leg(blocked_run: dict[str, Any]) -> None:
    answer = json.loads(succeeded(blocked_run, "hybrid")["stdout"])
    assert any(hit["explain"]["breakdown"]["vector"] for hit in answer["hits"]), answer["legs"]


def test_trees_and_facts_work(blocked_run: dict[str, Any]) -> None:
    assert json.loads(succeeded(blocked_run, "tree")["stdout"])
    facts = json.loads(succeeded(blocked_run, "fact list")["stdout"])
    assert "dropped" in json.dumps(facts)


@pytest.mark.parametrize(
    ("name", "what", "extra"),
    [
        ("serve", "stratamem serve", "server"),
        ("inspect", "stratamem inspect", "server"),
        ("mcp", "stratamem mcp", "mcp"),
        ("eval", "stratamem eval", "eval"),
        ("tune", "stratamem tune", "eval"),
        ("postgres", "a postgresql:// store", "postgres"),
        ("extract", "fact extraction", "llm"),
    ],
)
def test_a_missing_extra_is_one_line_naming_it(
    blocked_run: dict[str, Any], name: str, what: str, extra: str
) -> None:
    result = blocked_run["results"][name]
    assert (result["code"], result["exception"]) == (1, None), result
    lines = [line for line in result["stderr"].splitlines() if line.strip()]
    assert lines == [
        f"error: {what} needs the '{extra}' extra: pip install 'stratamem[{extra}]'"
    ], result


def test_the_command_line_imports_no_extra_until_a_command_needs_it() -> None:
    probe = "import json, sys, stratamem.cli; print(json.dumps(sorted(sys.modules)))"
    child = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    loaded = {name.split(".")[0] for name in json.loads(child.stdout)}
    assert loaded.isdisjoint(BLOCKED), sorted(loaded & set(BLOCKED))
