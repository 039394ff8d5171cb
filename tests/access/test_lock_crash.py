"""A lock or an unlock killed with SIGKILL at any moment leaves the source wholly locked (and
it unlocks to what it was, with no byte of it left in any file once the store is opened
again) or wholly unlocked (as it was), in a file that passes SQLite's integrity check (on
PostgreSQL, in a database whose live rows hold none of it).

Each round copies a store, starts a process that opens it and, once it says so, locks (or
unlocks) the secret source; the process is killed after a random delay spread over the time a
lock (or unlock) takes, so kills land before, inside and after its transaction and during the
scrub. The killed process runs in its own session and the whole group is killed.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest
from locked_store import (
    FAST_KDF,
    FIXTURES,
    PASSPHRASE,
    SECRET,
    SECRET_ID,
    Db,
    Dump,
    build_store,
    copy_db,
    residue,
    source_dump,
    store_dump,
)

import stratamem
from stratamem.access import crypto
from stratamem.store.postgres.server import PostgresServer
from suite import PATIENCE_S

# Processes killed mid-write: the full tier's (make test-all).
pytestmark = pytest.mark.crash

ROUNDS = 10  # of each of lock and unlock
DEADLINE_S = PATIENCE_S

SCRIPT = f"""
import sys
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
import stratamem
from stratamem.access import crypto
from locked_store import FAST_KDF, PASSPHRASE, SECRET
crypto.DEFAULT_KDF = FAST_KDF
with stratamem.open(sys.argv[2], embedder=None) as mem:
    print("ready", flush=True)
    getattr(mem.locks, sys.argv[1])(SECRET, passphrase=PASSPHRASE)
    print("done", flush=True)
"""


@dataclass(frozen=True, slots=True)
class Stores:
    """The store unlocked and locked, what the first holds, and how long a lock and an unlock
    of it take here."""

    unlocked: str
    locked: str
    source: Dump
    store: Dump
    seconds: dict[str, float]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory, server: PostgresServer | None) -> Stores:
    root = tmp_path_factory.mktemp("crash")
    (root / "unlocked").mkdir()
    unlocked = str(root / "unlocked" / "mem.db") if server is None else server.new_database()
    seconds = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(crypto, "DEFAULT_KDF", FAST_KDF)
        build_store(unlocked, FIXTURES, folder=root / "unlocked", secret_count=600)
        locked = copy_db(unlocked, root / "locked" / "mem.db", server)
        with stratamem.open(locked, embedder=None) as mem:
            for action in ("lock", "unlock", "lock"):
                started = time.perf_counter()
                getattr(mem.locks, action)(SECRET, passphrase=PASSPHRASE)
                seconds[action] = time.perf_counter() - started
    with closing(Db(unlocked)) as conn:
        return Stores(unlocked, locked, source_dump(conn), store_dump(conn), seconds)


def run_and_kill(db: str, action: str, delay: float) -> bool:
    """Start ``action`` on ``db``, kill it ``delay`` seconds after it is ready; whether it had
    finished by then."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, action, db],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(stratamem.__file__).parents[1])},
        start_new_session=True,
    )
    assert proc.stdout is not None
    try:
        assert proc.stdout.readline() == "ready\n"
        time.sleep(delay)  # the random moment of the kill, not a wait for anything
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=DEADLINE_S)
    finished = "done" in proc.stdout.read()
    proc.stdout.close()
    return finished


def check(db: str, stores: Stores) -> str:
    """The state the kill left, checked whole: "locked" or "unlocked"."""
    with stratamem.open(db, embedder=None) as mem:  # an open finishes an interrupted scrub
        conn = mem.store.conn
        if mem.store.name == "sqlite":
            assert conn.execute("PRAGMA integrity_check").fetchall()[0][0] == "ok"
            conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
        state = "locked" if mem.sources.get(SECRET).locked else "unlocked"
        if state == "locked":
            during = source_dump(conn)
            assert during.pop("sources")[0][7] == 1
            assert {name: rows for name, rows in during.items() if rows} == {}
            p = mem.store.dialect.p
            parts, recorded = conn.execute(
                f"SELECT count(*), (SELECT parts FROM locks WHERE source_id = {p}) FROM sealed "
                f"WHERE source_id = {p}",
                (SECRET_ID, SECRET_ID),
            ).fetchone()
            assert parts == recorded >= 1
            assert residue(db) == {}
            mem.locks.unlock(SECRET, passphrase=PASSPHRASE)
        else:
            assert conn.execute("SELECT count(*) FROM sealed").fetchone()[0] == 0
            assert conn.execute("SELECT count(*) FROM locks").fetchone()[0] == 0
        assert source_dump(conn) == stores.source
        assert store_dump(conn) == stores.store
    return state


@pytest.mark.slow
def test_a_killed_lock_or_unlock_leaves_the_source_wholly_locked_or_unlocked(
    tmp_path: Path, stores: Stores, server: PostgresServer | None
) -> None:
    chance = random.Random(20240312)
    seen: dict[str, set[str]] = {"lock": set(), "unlock": set()}
    killed_midway = 0
    for n in range(2 * ROUNDS):
        action = ("lock", "unlock")[n % 2]
        source = stores.unlocked if action == "lock" else stores.locked
        db = copy_db(source, tmp_path / f"round{n}" / "mem.db", server)
        finished = run_and_kill(db, action, chance.uniform(0, 1.25 * stores.seconds[action]))
        killed_midway += not finished
        state = check(db, stores)
        if finished:
            assert state == ("locked" if action == "lock" else "unlocked")
        seen[action].add(state)
    assert killed_midway  # some kills landed while the work was under way
    assert seen["lock"] | seen["unlock"] == {"locked", "unlocked"}
