"""Claiming every job of a long queue costs work in proportion to its length.

Work is counted, not timed: SQLite calls a progress handler every few virtual machine
instructions, so the count follows the rows each claim reads. A claim that sorted every pending
job would read the whole queue each time, and claiming a queue of twice the length would cost
four times as much.
"""

from __future__ import annotations

from pathlib import Path

from stratamem.store.sqlite.store import SQLiteStore

_STEP = 100


def work_to_claim_all(path: Path, jobs: int) -> int:
    """SQLite instructions (in steps of ``_STEP``) to claim and finish a queue of ``jobs``."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    with SQLiteStore(path) as store:
        with store.transaction():
            for n in range(jobs):
                store.jobs.enqueue("seal", f"seal:{n}", {"tree_id": str(n)})
        store.jobs.enqueue("other", "other:0")  # a job of another kind waits at the end
        store.conn.set_progress_handler(count, _STEP)
        claimed = 0
        while (job := store.jobs.claim(kind="seal")) is not None:
            assert store.jobs.done(job)
            claimed += 1
        store.conn.set_progress_handler(None, 0)
        assert claimed == jobs
        assert store.jobs.counts() == {"done": jobs, "pending": 1}
    return steps


def test_claiming_a_queue_twice_as_long_costs_about_twice_the_work(tmp_path: Path) -> None:
    short = work_to_claim_all(tmp_path / "short.db", 200)
    long = work_to_claim_all(tmp_path / "long.db", 400)
    assert long <= 2.3 * short, (short, long)


def claimed_key(store: SQLiteStore, *, lease_s: float = 600.0) -> str | None:
    job = store.jobs.claim(kind="seal", lease_s=lease_s)
    return None if job is None else job.dedupe_key


def test_claims_take_the_oldest_ready_job_first(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "order.db") as store:
        for key in ("a", "b", "c"):
            store.jobs.enqueue("seal", f"seal:{key}")
        first = store.jobs.claim(kind="seal")
        assert first is not None
        assert first.dedupe_key == "seal:a"
        # A failed job is put off; the next claim takes the next one due.
        assert store.jobs.fail(first, "boom", backoff_s=3600)
        assert claimed_key(store) == "seal:b"
        # A running job whose lease has run out comes before a younger pending one.
        again = store.jobs.claim(kind="seal", lease_s=0)
        assert again is not None
        assert again.dedupe_key == "seal:b"
        assert store.jobs.done(again)
        assert claimed_key(store) == "seal:c"
        assert claimed_key(store) is None
