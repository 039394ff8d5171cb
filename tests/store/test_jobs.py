from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stratamem.plugins import open_store
from stratamem.store.sqlite.migrations import MIGRATIONS
from stratamem.store.sqlite.store import SQLiteStore
from stratamem.store.tables.jobs import (
    HOST,
    boot_id,
    holder_alive,
    holder_token,
    process_exists,
    process_start,
)


@pytest.fixture
def store(store_location: str) -> Iterator[Any]:
    with open_store(store_location) as opened:
        yield opened


def row(store: Any, key: str = "seal:t") -> Any:
    return store.conn.execute(
        f"SELECT * FROM jobs WHERE dedupe_key = {store.dialect.p}", (key,)
    ).fetchone()


def gone_pid() -> int:
    """The id of a process of this host that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def hold_as(
    store: Any, *, host: str, pid: int, leased_ms_ago: int, token: str | None = None
) -> None:
    """Make the job running, held the way another process would have left it (by default
    with a token of the older form, which names no start)."""
    p = store.dialect.p
    store.conn.execute(
        f"""UPDATE jobs SET status = 'running', attempts = 1, holder = {p}, holder_host = {p},
             holder_pid = {p}, leased_at = {p}""",
        (token or f"{host}/{pid}/0", host, pid, int(time.time() * 1000) - leased_ms_ago),
    )


LINUX = Path("/proc/self/stat").exists() and bool(boot_id())


def test_enqueue_dedupes_and_merges_a_pending_job(store: Any) -> None:
    store.jobs.enqueue("seal", "seal:t", {"tree_id": "t"})
    store.jobs.enqueue("seal", "seal:t", {"tree_id": "t", "force": True})
    store.jobs.enqueue("seal", "seal:t", {"tree_id": "t"})
    assert store.jobs.counts() == {"pending": 1}
    job = store.jobs.claim()
    assert job is not None
    assert job.payload == {"tree_id": "t", "force": True}
    assert store.jobs.claim() is None


def test_enqueue_on_a_running_job_keeps_its_lease_and_runs_it_again(store: Any) -> None:
    store.jobs.enqueue("seal", "seal:t", {"tree_id": "t"})
    job = store.jobs.claim()
    assert job is not None
    leased = row(store)["leased_at"]
    store.conn.execute("UPDATE jobs SET leased_at = leased_at - 5000")
    for _ in range(3):
        store.jobs.enqueue("seal", "seal:t", {"tree_id": "t", "force": True})
    assert row(store)["leased_at"] == leased - 5000
    assert row(store)["again"] == 1
    assert store.jobs.done(job)
    assert store.jobs.counts() == {"pending": 1}
    again = store.jobs.claim()
    assert again is not None
    assert again.payload == {"tree_id": "t", "force": True}
    assert store.jobs.done(again)
    assert store.jobs.counts() == {"done": 1}


def test_a_finished_job_starts_over_from_the_new_payload(store: Any) -> None:
    store.jobs.enqueue("seal", "seal:t", {"tree_id": "t", "force": True})
    job = store.jobs.claim()
    assert job is not None
    assert store.jobs.done(job)
    store.jobs.enqueue("seal", "seal:t", {"tree_id": "t"})
    next_job = store.jobs.claim()
    assert next_job is not None
    assert next_job.payload == {"tree_id": "t"}


def test_a_live_holder_keeps_its_job_until_its_lease_ends(store: Any) -> None:
    store.jobs.enqueue("seal", "seal:t", {"tree_id": "t"})
    first = store.jobs.claim()
    assert first is not None
    assert store.jobs.claim() is None  # this process holds it and is alive
    store.conn.execute("UPDATE jobs SET leased_at = leased_at - 601000")
    taken = store.jobs.claim()
    assert taken is not None
    assert taken.holder != first.holder


def test_a_stale_holder_cannot_renew_or_finish_a_reclaimed_job(store: Any) -> None:
    store.jobs.enqueue("seal", "seal:t", {"tree_id": "t"})
    stale = store.jobs.claim()
    assert stale is not None
    fresh = store.jobs.claim(lease_s=0)
    assert fresh is not None
    assert fresh.holder != stale.holder
    leased = row(store)["leased_at"]
    assert not store.jobs.touch(stale)
    assert not store.jobs.done(stale)
    assert not store.jobs.fail(stale, "late")
    assert row(store)["status"] == "running"
    assert row(store)["holder"] == fresh.holder
    assert row(store)["leased_at"] == leased
    assert store.jobs.touch(fresh)
    assert store.jobs.done(fresh)
    assert store.jobs.counts() == {"done": 1}


def test_a_job_whose_holder_died_on_this_host_is_taken_at_once(store: Any) -> None:
    store.jobs.enqueue("seal", "seal:t", {"tree_id": "t"})
    hold_as(store, host=HOST, pid=gone_pid(), leased_ms_ago=0)
    job = store.jobs.claim()
    assert job is not None
    assert row(store)["holder_pid"] == os.getpid()
    assert job.attempts == 2


def test_a_holder_on_another_host_is_waited_for_until_its_lease_ends(
    store: Any,
) -> None:
    store.jobs.enqueue("seal", "seal:t", {"tree_id": "t"})
    hold_as(store, host=f"not-{HOST}", pid=gone_pid(), leased_ms_ago=0)
    assert store.jobs.claim() is None
    hold_as(store, host=f"not-{HOST}", pid=gone_pid(), leased_ms_ago=601_000)
    assert store.jobs.claim() is not None


def test_a_failure_backs_off_then_gives_up(store: Any) -> None:
    store.jobs.enqueue("seal", "seal:t", {"tree_id": "t"})
    job = store.jobs.claim()
    assert job is not None
    assert store.jobs.fail(job, "boom", max_attempts=2)
    assert store.jobs.counts() == {"pending": 1}
    assert store.jobs.claim() is None  # backing off
    store.conn.execute("UPDATE jobs SET not_before = 0")
    job = store.jobs.claim()
    assert job is not None
    assert job.attempts == 2
    assert store.jobs.fail(job, "boom again", max_attempts=2)
    assert store.jobs.failed() == [("seal:t", "boom again")]


def test_a_job_left_running_before_leases_is_taken_again(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with SQLiteStore(path) as store:
        store.jobs.enqueue("seal", "seal:t", {"tree_id": "t"})
    # Put the file back as the schema before leases left it: the job running, `again` in
    # its payload, its lease clock in updated_at (renewed just now).
    version = next(i for i, m in enumerate(MIGRATIONS) if "holder_host" in m)
    conn = sqlite3.connect(path, isolation_level=None)
    for column in ("holder", "holder_host", "holder_pid", "leased_at", "again"):
        conn.execute(f"ALTER TABLE jobs DROP COLUMN {column}")
    # and as it was before records, which came later
    conn.execute("DROP INDEX chunks_record")
    conn.execute("DROP INDEX chunks_derived_time")
    conn.execute("ALTER TABLE chunks DROP COLUMN record_key")
    conn.execute("DROP TABLE records")
    conn.execute(
        """UPDATE jobs SET status = 'running', payload = '{"again": 1, "tree_id": "t"}',
             updated_at = ?""",
        (int(time.time() * 1000),),
    )
    conn.execute(f"PRAGMA user_version = {version}")
    conn.close()
    with SQLiteStore(path) as store:
        assert row(store)["again"] == 1
        job = store.jobs.claim()
        assert job is not None
        assert job.payload == {"tree_id": "t"}


@pytest.mark.skipif(not LINUX, reason="needs /proc and a boot id")
def test_a_holder_with_this_pid_but_another_start_is_taken_at_once(store: Any) -> None:
    """A container restarted in a fresh PID namespace: its new process has the dead one's
    pid (1), on the same host; only the start tells them apart."""
    store.jobs.enqueue("seal", "seal:t", {"tree_id": "t"})
    ours = process_start(os.getpid())
    boot, ticks = ours.rsplit(".", 1)
    for other in (f"{boot}.{int(ticks) - 1}", f"not-{boot}.{ticks}"):
        token = f"{HOST}/{os.getpid()}/{other}/0"
        hold_as(store, host=HOST, pid=os.getpid(), leased_ms_ago=0, token=token)
        job = store.jobs.claim()
        assert job is not None, other
        assert job.attempts == 2
        assert job.holder.split("/")[2] == ours


@pytest.mark.skipif(not LINUX, reason="needs /proc and a boot id")
def test_a_holder_with_this_pid_and_start_is_alive(store: Any) -> None:
    store.jobs.enqueue("seal", "seal:t", {"tree_id": "t"})
    token = holder_token(os.getpid(), process_start(os.getpid()))
    hold_as(store, host=HOST, pid=os.getpid(), leased_ms_ago=0, token=token)
    assert store.jobs.claim() is None
    assert store.jobs.held() == [("seal:t", token)]


def test_the_start_decides_only_where_both_are_known() -> None:
    pid = os.getpid()
    assert holder_alive(pid, f"{HOST}/{pid}/0")  # an older token: the pid alone
    assert holder_alive(pid, f"{HOST}/{pid}//0")  # no start recorded
    assert holder_alive(pid, holder_token(pid, process_start(pid)))
    assert not holder_alive(gone_pid(), holder_token(pid, process_start(pid)))
    if LINUX:
        assert not holder_alive(pid, f"{HOST}/{pid}/{boot_id()}.1/0")
        assert process_start(gone_pid()) == ""


CLAIM = """
import os, sys
from stratamem.plugins import open_store
with open_store(sys.argv[1]) as store:
    job = store.jobs.claim()
    print(os.getpid(), job.holder if job is not None else "none", flush=True)
"""


def in_fresh_pid_namespace(location: str) -> tuple[int, str]:
    """Claim a job in a process that is PID 1 of a new PID namespace, and exit without
    finishing it: (its pid, its token or "none")."""
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", CLAIM, location],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    pid, token = done.stdout.split()
    return int(pid), token


@pytest.mark.skipif(not LINUX or os.geteuid() != 0, reason="needs root and Linux namespaces")
def test_a_container_restarted_as_pid_1_takes_its_dead_predecessors_job(
    store_location: str,
) -> None:
    with open_store(store_location) as store:
        store.jobs.enqueue("seal", "seal:t", {"tree_id": "t"})
    try:
        first_pid, first = in_fresh_pid_namespace(store_location)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot start a process in a new PID namespace: {exc}")
    assert first_pid == 1
    assert first != "none"
    second_pid, second = in_fresh_pid_namespace(store_location)
    assert second_pid == 1
    assert second not in ("none", first)  # taken at once, not after the 600 s lease
    with open_store(store_location) as store:
        assert store.jobs.held() == [("seal:t", second)]


def test_process_exists_tells_live_from_gone() -> None:
    assert process_exists(os.getpid())
    assert not process_exists(gone_pid())
    assert not process_exists(0)


@pytest.mark.skipif(not hasattr(os, "waitid"), reason="needs waitid")
def test_an_unreaped_dead_process_counts_as_gone() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
    try:
        assert not process_exists(proc.pid)
    finally:
        proc.wait()


def test_a_claim_by_key_takes_that_job_only(store: Any) -> None:
    store.jobs.enqueue("seal", "seal:a", {"tree_id": "a"})
    store.jobs.enqueue("seal", "seal:b", {"tree_id": "b"})
    assert store.jobs.claim(kind="seal", key="seal:nothing") is None
    job = store.jobs.claim(kind="seal", key="seal:b")
    assert job is not None
    assert job.dedupe_key == "seal:b"
    assert store.jobs.claim(kind="seal", key="seal:b") is None  # held by this claim now
    assert store.jobs.held(kind="seal", keys=["seal:a"]) == []
    assert [k for k, _ in store.jobs.held(kind="seal", keys=["seal:a", "seal:b"])] == ["seal:b"]
    assert store.jobs.done(job)
    left = store.jobs.claim(kind="seal")
    assert left is not None
    assert left.dedupe_key == "seal:a"
