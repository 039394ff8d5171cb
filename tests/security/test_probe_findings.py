"""Holes found by an adversarial pass over the write path and the server edge. Each test
FAILS on the code as it stands: it describes the behaviour a fix must give.

1. A write principal that names only a ``session`` (no user, no agent) skips every write
   check: it writes into the owner's ``memory/session:<id>`` and ``facts/session:<id>``
   (scopes ``private``, no ``created_by``), overwrites an owner's item there by id, and a
   fact it states closes the owner's hidden one and echoes its value back.
2. A principal may name a source with dot segments (``../memory`` -> ``bob/../memory``);
   the owner's ``DELETE /v1/sources/bob/../memory`` through curl or httpx is sent as
   ``/v1/sources/memory`` and forgets the owner's own source.
3. Ingesting the store's own database (refused) still opens and closes it in the server
   process, which drops SQLite's POSIX locks: the next process to close the store deletes
   the WAL under the live server, and the server's acknowledged writes are lost.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")
J = {"Content-Type": "application/json"}


def _env(db: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC
    env["STRATAMEM_DB"] = str(db)
    return env


def _cli(db: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "stratamem", *args],
        env=_env(db),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Server:
    def __init__(self, db: Path, *args: str) -> None:
        self.port = _port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stratamem", "serve", "--port", str(self.port), *args],
            env=_env(db),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.3)
        self.close()
        raise RuntimeError("the server did not start")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture
def store(tmp_path: Path):
    db = tmp_path / "data" / "st.db"
    _cli(db, "add", "owner seed")
    token = _cli(db, "principal", "add", "bob", "--scopes", "bob", "--write")
    server = _Server(db, "--allow-writes", "--ingest-root", str(tmp_path))
    try:
        yield db, server, {"Authorization": f"Bearer {token}", **J}
    finally:
        server.close()


@pytest.mark.slow
def test_session_only_write_stays_out_of_the_owners_memory(store) -> None:
    db, server, bob = store
    _cli(db, "add", "owner secret zqlaunch", "--session", "s1", "--id", "pref-1")
    _cli(db, "fact", "add", "person:maya", "title", "zqsecrettitle", "--session", "s2")
    with httpx.Client(base_url=server.url, timeout=60) as c:
        item = c.post("/v1/add", headers=bob, json={"text": "x", "session": "s1", "id": "pref-1"})
        fact = c.post(
            "/v1/facts",
            headers=bob,
            json={"subject": "person:maya", "predicate": "title", "object": "y", "session": "s2"},
        )
    assert "zqsecrettitle" not in fact.text  # the owner's hidden fact, echoed back
    assert '"updated"' not in item.text  # the owner's hidden item, overwritten
    history = _cli(db, "history", "pref-1")
    assert "edited" not in history


@pytest.mark.slow
def test_a_name_with_dot_segments_cannot_be_made(store) -> None:
    _db, server, bob = store
    with httpx.Client(base_url=server.url, timeout=60) as c:
        made = c.post("/v1/add", headers=bob, json={"text": "decoy", "source": "../memory"})
    assert made.status_code == 422, made.text


@pytest.mark.slow
def test_a_refused_ingest_of_the_store_keeps_the_servers_locks(store) -> None:
    db, server, bob = store
    with httpx.Client(base_url=server.url, timeout=60) as c:
        assert c.post("/v1/add", headers=bob, json={"text": "zqbefore"}).status_code == 200
        c.post("/v1/ingest", headers=bob, json={"path": str(db), "format": "markdown"})
        _cli(db, "stats")  # another process opens and closes the store
        assert Path(f"{db}-wal").exists(), "the WAL was deleted under the live server"
        assert c.post("/v1/add", headers=bob, json={"text": "zqafter"}).status_code == 200
    assert "zqafter" in _cli(db, "search", "zqafter", "--json")
