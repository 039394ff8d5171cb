"""Two processes on one store at once: opening a new store, ingesting, sealing and embedding,
on each backend.

Each test drives two worker processes that are started once, load stratamem once, and then
run one list of steps per round. A round starts both at the same moment: each worker says it
is ready, and only when both have does either get the word to go. Nothing here sleeps.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from stratamem.plugins import open_store
from stratamem.store.postgres import connection as postgres
from stratamem.store.sqlite import connection as sqlite
from suite import PATIENCE_S, scratch_database

pytestmark = pytest.mark.slow

WORKER = r"""
import json, sys
import stratamem
from stratamem.config import TreeConfig
from stratamem.plugins import open_store

TREE = TreeConfig(input_token_budget=300, summary_fanout=3)


def step(action, db, arg):
    if action == "open":
        open_store(db).close()
        return None
    with stratamem.open(db, embedder="hashing", tree_config=TREE) as memory:
        if action == "ingest":
            report = memory.ingest(arg, format="jsonl", parallel=False)
            return [s.error for s in report.sources if s.error] + report.trees.failed
        if action == "build":
            return memory.trees.build().failed
        if action == "flush":
            return memory.trees.flush().failed
        if action == "embed":
            memory.indexes.embed()
            return []
    raise ValueError(action)


for line in sys.stdin:
    steps = json.loads(line)
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        result = {"ok": [step(*s) for s in steps]}
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(result), flush=True)
"""

Steps = list[tuple[str, str, str]]


class Pair:
    """Two worker processes that run one round of steps each, released together."""

    def __init__(self) -> None:
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-c", WORKER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                bufsize=1,
            )
            for _ in range(2)
        ]

    def round(self, first: Steps, second: Steps) -> list[dict[str, Any]]:
        for proc, steps in zip(self.procs, (first, second), strict=True):
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(steps) + "\n")
        for proc in self.procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
        results = []
        for proc in self.procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line, f"a worker exited (code {proc.poll()})"
            results.append(json.loads(line))
        return results

    def close(self) -> None:
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.close()
        for proc in self.procs:
            proc.wait(timeout=PATIENCE_S)
            assert proc.stdout is not None
            proc.stdout.close()


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    workers = Pair()
    yield workers
    workers.close()


def _ok(result: dict[str, Any]) -> None:
    assert "error" not in result, result["error"]
    for failures in result["ok"]:
        assert not failures, failures


def _write_source(path: Path, scope: str, messages: int) -> Path:
    """A chat of ``messages`` messages, a few minutes apart, varied enough to summarise."""
    start = datetime(2024, 3, 1, tzinfo=UTC)
    people = ["Alice Chen", "Bob Martins", "Chen Wei", "Dana Ortiz"]
    topics = ["the queue", "the release", "Redis", "the billing export", "on-call", "the cache"]
    with path.open("w") as out:
        for i in range(messages):
            text = (
                f"Message {i} in {scope}: {people[i % 4]} on {topics[i % 6]}, "
                f"step {i // 7} of the plan; ticket PROJ-{1000 + i % 37}."
            )
            row = {
                "id": f"{scope}-{i}",
                "source": scope,
                "kind": "chat",
                "timestamp": (start + timedelta(minutes=5 * i)).isoformat(),
                "author": people[i % 4],
                "text": text,
            }
            out.write(json.dumps(row) + "\n")
    return path


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    folder = tmp_path_factory.mktemp("sources")
    return [
        str(_write_source(folder / f"{name}.jsonl", f"chat:{name}", 240))
        for name in ("eng", "ops", "sales", "support")
    ]


def snapshot(db: str) -> dict[str, Any]:
    """What a run leaves behind, minus times: sources, chunks, live summaries, vectors, jobs."""
    with open_store(db) as store:
        one = store.conn.execute  # type: ignore[attr-defined]
        return {
            "sources": sorted((s.scope, s.chunk_count) for s in store.sources()),
            "chunks": sorted(row[0] for row in one("SELECT id FROM chunks")),
            "summaries": sorted(
                tuple(row)
                for row in one(
                    """SELECT t.scope, s.id, s.level, s.parent_id, s.child_ids, s.content
                       FROM summaries s JOIN trees t ON t.id = s.tree_id WHERE s.deleted = 0"""
                )
            ),
            "roots": sorted(tuple(row) for row in one("SELECT scope, root_id FROM trees")),
            "unembedded": one(
                """SELECT count(*) FROM chunks c
                   WHERE NOT EXISTS (SELECT 1 FROM embeddings e WHERE e.node_id = c.id)"""
            ).fetchone()[0],
            "jobs": {k: v for k, v in store.jobs.counts().items() if k != "done"},
        }


@pytest.fixture(scope="module")
def sequentials() -> dict[bool, dict[str, Any]]:
    """Per backend (on PostgreSQL or not), what ``sequential`` found, made on first use."""
    return {}


@pytest.fixture
def sequential(
    pair: Pair,
    sources: list[str],
    sequentials: dict[bool, dict[str, Any]],
    store_location: str,
    locations: Any,
    tmp_path: Path,
) -> dict[str, Any]:
    """The store one process makes: every source ingested in turn, then flushed and embedded
    (on the backend of the test's store)."""
    postgres = locations.is_postgres(store_location)
    if postgres in sequentials:
        return sequentials[postgres]
    db = locations.new(store_location, tmp_path, "one")
    steps: Steps = [("ingest", db, path) for path in sources]
    steps += [("flush", db, ""), ("embed", db, "")]
    result, idle = pair.round(steps, [])
    _ok(result)
    _ok(idle)
    expected = snapshot(db)
    assert expected["jobs"] == {}
    assert expected["unembedded"] == 0
    assert max(row[2] for row in expected["summaries"]) >= 3, "the trees should be deep"
    sequentials[postgres] = expected
    return expected


def test_two_processes_create_the_same_new_store(
    pair: Pair,
    store_location: str,
    locations: Any,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    postgres = locations.is_postgres(store_location)
    trials = 60
    for trial in range(trials):
        # A database with no schema yet, or no file: both processes create it.
        db = scratch_database(request) if postgres else str(tmp_path / f"new-{trial}.db")
        results = pair.round([("open", db, "")], [("open", db, "")])
        for result in results:
            _ok(result)
    conn = _connect(db)
    try:
        if postgres:  # migrated once: one version, the current one
            from stratamem.store.postgres.migrations import SCHEMA_VERSION

            rows = conn.execute("SELECT version FROM stratamem_schema").fetchall()
            assert [tuple(row) for row in rows] == [(SCHEMA_VERSION,)]
        else:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


def test_ingesting_different_sources_at_once_loses_nothing(
    pair: Pair, sources: list[str], sequential: dict[str, Any], store_location: str
) -> None:
    db = store_location
    first: Steps = [("ingest", db, sources[0]), ("ingest", db, sources[2])]
    second: Steps = [("ingest", db, sources[1]), ("ingest", db, sources[3])]
    for result in pair.round(first, second):
        _ok(result)
    for result in pair.round([("flush", db, ""), ("embed", db, "")], [("flush", db, "")]):
        _ok(result)
    assert snapshot(db) == sequential


def test_ingest_while_another_process_seals_and_embeds(
    pair: Pair, sources: list[str], sequential: dict[str, Any], store_location: str
) -> None:
    db = store_location
    first: Steps = [("ingest", db, path) for path in sources]
    second: Steps = [("embed", db, ""), ("build", db, "")] * 4 + [("flush", db, "")]
    for result in pair.round(first, second):
        _ok(result)
    for result in pair.round([("flush", db, ""), ("embed", db, "")], [("embed", db, "")]):
        _ok(result)
    assert snapshot(db) == sequential


def test_the_same_source_ingested_twice_at_once(
    pair: Pair, sources: list[str], sequential: dict[str, Any], store_location: str
) -> None:
    db = store_location
    for result in pair.round(
        [("ingest", db, path) for path in sources],
        [("ingest", db, path) for path in reversed(sources)],
    ):
        _ok(result)
    for result in pair.round([("flush", db, "")], [("flush", db, ""), ("embed", db, "")]):
        _ok(result)
    assert snapshot(db) == sequential


def _connect(location: str, *, timeout: float = 60.0) -> Any:
    """A connection of the backend's own (SQLite's with this busy timeout)."""
    if location.startswith("postgresql:"):
        return postgres.connect(location)
    return sqlite.connect(location, timeout=timeout)


def _atomic(conn: Any, **options: Any) -> Any:
    """A write transaction on ``conn``: it takes the store's write lock."""
    if isinstance(conn, postgres.PgConnection):
        return postgres.atomic(conn, **options)
    return sqlite.atomic(conn, **options)


def test_a_write_waits_past_the_busy_timeout_for_a_long_write(store_location: str) -> None:
    """An ingest holds the write lock for a whole source; a second writer waits for it rather
    than failing once the busy timeout (here 0.1 s) has run out."""
    first = _connect(store_location)
    first.execute("CREATE TABLE t (x INTEGER)")
    second = _connect(store_location, timeout=0.1)
    failures: list[BaseException] = []

    def write() -> None:
        try:
            with _atomic(second):
                second.execute("INSERT INTO t VALUES (2)")
        except BaseException as exc:
            failures.append(exc)

    held = _atomic(first)
    held.__enter__()
    first.execute("INSERT INTO t VALUES (1)")
    writer = threading.Thread(target=write)
    writer.start()
    writer.join(timeout=0.5)  # five busy timeouts: the writer is still waiting, not failed
    assert writer.is_alive()
    assert not failures
    held.__exit__(None, None, None)
    writer.join()
    assert not failures
    assert sorted(r[0] for r in first.execute("SELECT x FROM t")) == [1, 2]
    first.close()
    second.close()


def test_a_write_that_waits_too_long_is_a_store_busy_error(store_location: str) -> None:
    from stratamem.errors import StoreBusyError

    holder = _connect(store_location, timeout=0.05)
    waiter = _connect(store_location, timeout=0.05)
    try:
        held = _atomic(holder)
        held.__enter__()
        with (
            pytest.raises(StoreBusyError, match="the store is busy"),
            _atomic(waiter, wait_s=0.2),
        ):
            pass
        assert not waiter.in_transaction  # nothing of it is left open
        held.__exit__(None, None, None)
        with _atomic(waiter, wait_s=0.2):  # once the lock is free, the same write goes through
            pass
    finally:
        holder.close()
        waiter.close()
