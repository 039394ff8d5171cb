"""``stratamem extract``: against a real chat-completions server on 127.0.0.1, in process and
as a subprocess killed mid-run."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import stratamem
from stratamem.cli import main
from stratamem.memory.extract import PROGRESS_PREFIX
from stratamem.testing import FakeModelServer
from suite import PATIENCE_S, PastTheStore

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "workspace"
ENG = "slack:#eng"
KEY = "sk-canary-5d1e07c3b2"
_LABEL = re.compile(r"^\[([0-9a-f]{32})((?: \| [^\n]*)?)\]$", re.MULTILINE)


def answer(prompt: str) -> str:
    """One fact per record of the prompt: its author wrote its first words."""
    found = list(_LABEL.finditer(prompt))
    facts = []
    for here, after in zip(found, [*found[1:], None], strict=True):
        text = prompt[here.end() : after.start() if after else len(prompt)]
        parts = [p for p in here.group(2).split(" | ") if p]
        facts.append(
            {
                "subject": f"person:{parts[1] if len(parts) > 1 else 'nobody'}",
                "predicate": "wrote",
                "object": " ".join(text.split()[:6]) or "nothing",
                "valid_from": None,
                "many": True,
                "confidence": 0.8,
                "evidence": [here.group(1)],
            }
        )
    return json.dumps({"facts": facts})


def asked(server: FakeModelServer) -> list[str]:
    return [
        m.group(1)
        for r in server.requests
        for m in _LABEL.finditer(str(r.payload["messages"][-1]["content"]))
    ]


@pytest.fixture(scope="module")
def template(module_location: str) -> str:
    path = module_location
    with stratamem.open(path, embedder=None) as memory:
        memory.ingest(EXAMPLES / "slack-export", parallel=False)
        memory.principals.add("reader", "team")
    return path


@pytest.fixture
def copy_of(template: str, tmp_path: Path, locations: Any) -> Callable[[str], str]:
    """A copy of the template named ``name``, on the template's backend."""
    return lambda name: str(locations.copy(template, tmp_path, name))


@pytest.fixture
def db(copy_of: Callable[[str], str]) -> str:
    return copy_of("cli")


def rows_of(db: str, sql: str) -> list[tuple[Any, ...]]:
    """What ``sql`` reads from ``db``, on a connection of its own: ``sqlite3`` on a file, the
    PostgreSQL store's connection (which takes the same SQL) on a URL."""
    if "://" in db:
        from stratamem.store.postgres.connection import connect

        pg = PastTheStore(connect(db, application="stratamem-test"))
        try:
            return [tuple(row) for row in pg.execute(sql).fetchall()]
        finally:
            pg.close()
    with closing(sqlite3.connect(db)) as conn:
        return [tuple(row) for row in conn.execute(sql).fetchall()]


def check_integrity(db: str) -> None:
    """SQLite's own check of the file; PostgreSQL keeps its tables whole itself."""
    if "://" not in db:
        assert rows_of(db, "PRAGMA integrity_check") == [("ok",)]


def stored(db: str) -> bytes:
    """Everything ``db`` holds: the file's bytes, or the text of every row of every table."""
    if "://" not in db:
        return b"".join(
            Path(f"{db}{suffix}").read_bytes()
            for suffix in ("", "-wal")
            if Path(f"{db}{suffix}").exists()
        )
    tables = rows_of(
        db, "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
    )
    return "".join(
        str(row[0])
        for (table,) in tables
        for row in rows_of(db, f'SELECT t::text FROM "{table}" t')
    ).encode()


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer(reply=answer) as running:
        yield running


ENV = {
    "STRATAMEM_PASSPHRASE": None,
    "STRATAMEM_AS": None,
    "STRATAMEM_DB": None,
    "OPENAI_API_KEY": None,
    "STRATAMEM_EXTRACT_API_KEY": KEY,
}


def run(db: str, *args: str) -> click.testing.Result:
    return CliRunner().invoke(main, ["--db", str(db), *args], env=ENV, catch_exceptions=False)


def extract(db: str, server: FakeModelServer, *args: str) -> click.testing.Result:
    return run(db, "extract", "--endpoint", server.base_url, "--model", "m", *args)


def model_facts(db: str) -> set[tuple[Any, ...]]:
    """What the model's facts say, whenever and under whatever ids they were recorded."""
    with stratamem.open(db, embedder=None) as memory:
        rows = memory.store.facts(believed_only=False, limit=1_000_000)
        return {
            (f.subject, f.predicate, f.object, f.valid_from, f.valid_to, f.evidence, f.source_id)
            for f in rows
            if f.origin == "model" and f.believed
        }


def test_extract_writes_facts_and_reports_as_json(db: str, server: FakeModelServer) -> None:
    result = extract(db, server, ENG, "--batch-size", "4", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["sources"] == 1
    assert report["failed"] == []
    assert report["skipped"] == []
    assert report["facts"] == report["chunks"] == len(model_facts(db)) > 0
    assert report["batches"] == len(server.requests)
    assert report["endpoint"] == f"{server.base_url}/chat/completions"
    assert {r.headers["authorization"] for r in server.requests} == {f"Bearer {KEY}"}
    assert KEY not in result.output
    listed = json.loads(run(db, "fact", "list", "--json").stdout)
    assert "model" in {f["origin"] for f in listed["facts"]}
    # Again: nothing new to ask.
    again = json.loads(extract(db, server, ENG, "--json").stdout)
    assert again["batches"] == 0
    assert again["facts"] == 0


def test_extract_shows_what_it_skipped(db: str, server: FakeModelServer) -> None:
    server.reply = lambda prompt: json.dumps(
        {"facts": [{"subject": "planet:mars", "predicate": "is", "object": "red"}]}
    )
    result = extract(db, server, "slack:#incidents")
    assert result.exit_code == 0, result.output
    shown = " ".join(result.stdout.split())
    assert "0 facts" in shown
    assert "1 skipped" in shown
    assert "slack:#incidents batch 1 item 0: missing" in shown


def test_enable_and_disable_extraction_after_ingest(
    db: str, server: FakeModelServer, tmp_path: Path
) -> None:
    on = run(db, "extract", "--enable", "--endpoint", server.base_url, "--model", "m", "--json")
    assert json.loads(on.stdout) == {"enabled": True, "endpoint": server.base_url, "model": "m"}
    notes = tmp_path / "journal"
    notes.mkdir()
    (notes / "day.md").write_text("# Day\n\nErin leads the release.\n")
    assert run(db, "ingest", str(notes), "--scope", "notes:journal").exit_code == 0
    assert len(server.requests) == 1
    assert any("Erin leads the release" in f[2] for f in model_facts(db))
    off = run(db, "extract", "--disable")
    assert off.exit_code == 0
    assert "off" in off.stdout
    assert KEY.encode() not in stored(db)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--enable", "--endpoint", "http://127.0.0.1:1/v1"], "--enable needs"),
        (["--endpoint", "http://127.0.0.1:1/v1"], "--endpoint and --model together"),
        (["--enable", "--disable"], "not both"),
        (["--pending", ENG], "--pending runs the queued jobs"),
    ],
)
def test_extract_usage_errors(db: str, args: list[str], message: str) -> None:
    result = run(db, "extract", *args)
    assert result.exit_code == 2
    assert message in result.stderr


def test_extract_without_an_endpoint_says_how_to_set_one(db: str) -> None:
    result = run(db, "extract")
    assert result.exit_code == 1
    assert "no extraction endpoint" in result.stderr
    assert "--enable" in result.stderr


def test_a_principal_cannot_extract(db: str, server: FakeModelServer) -> None:
    result = run(db, "--as", "reader", "extract", "--endpoint", server.base_url, "--model", "m")
    assert result.exit_code == 1
    assert "principal 'reader' may not extract facts" in result.stderr
    assert server.requests == []


def test_an_unauthorised_endpoint_fails_naming_it(db: str, server: FakeModelServer) -> None:
    server.queue(401, {"error": {"message": "Incorrect API key provided"}})
    result = extract(db, server, ENG, "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout)["failed"]
    (line,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith("error:")
    assert f"{server.base_url}/chat/completions (HTTP 401)" in line
    assert "API key" in line
    assert KEY not in result.output


@pytest.mark.crash
def test_a_killed_run_resumes_to_what_an_uninterrupted_one_writes(
    copy_of: Callable[[str], str],
) -> None:
    whole = copy_of("whole")
    with FakeModelServer(reply=answer) as server:
        assert extract(whole, server, ENG, "--batch-size", "4").exit_code == 0
        batches = len(server.requests)
    assert batches >= 3
    expected = model_facts(whole)

    killed = copy_of("killed")
    held = threading.Event()

    def slow_after_first(prompt: str) -> str:
        if server.requests[0].payload["messages"][-1]["content"] != prompt:
            held.wait(PATIENCE_S)  # the second batch is never answered in time
        return answer(prompt)

    env = {k: v for k, v in os.environ.items() if k not in ENV}
    env["STRATAMEM_EXTRACT_API_KEY"] = KEY
    with FakeModelServer(reply=slow_after_first) as server:
        try:
            child = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "stratamem",
                    "--db",
                    str(killed),
                    "extract",
                    ENG,
                    "--endpoint",
                    server.base_url,
                    "--model",
                    "m",
                    "--batch-size",
                    "4",
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                assert server.wait_for_requests(2, timeout=PATIENCE_S)
            finally:
                child.send_signal(signal.SIGKILL)
                child.wait()
        finally:
            held.set()
        first_batch = _nodes(server.requests[0])

    check_integrity(killed)
    ((status,),) = rows_of(killed, "SELECT status FROM jobs WHERE kind = 'extract'")
    assert status == "running"  # its holder is gone; the next run takes it over
    # Exactly the first batch is written, whole: its facts and its progress.
    partial = model_facts(killed)
    assert {e for f in partial for e in f[5]} == set(first_batch)
    assert len(partial) == len(first_batch)
    with stratamem.open(killed, embedder=None) as memory:
        eng = memory.sources.get(ENG)
        progress = json.loads(memory.store.get_setting(PROGRESS_PREFIX + eng.id) or "{}")
    assert sorted(progress["chunks"]) == sorted(first_batch)

    with FakeModelServer(reply=answer) as server:
        result = extract(killed, server, "--pending", "--batch-size", "4", "--json")
        assert result.exit_code == 0, result.output
        resumed = asked(server)
    assert not set(resumed) & set(first_batch)  # what was done is not asked again
    assert json.loads(result.stdout)["batches"] == batches - 1
    assert model_facts(killed) == expected
    check_integrity(killed)
    assert rows_of(killed, "SELECT status FROM jobs WHERE kind = 'extract'") == [("done",)]
    assert KEY.encode() not in stored(killed)


def _nodes(request: Any) -> list[str]:
    return [m.group(1) for m in _LABEL.finditer(str(request.payload["messages"][-1]["content"]))]
