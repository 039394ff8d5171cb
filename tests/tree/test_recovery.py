"""Seal jobs orphaned by a killed process are taken again and finish the same tree."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

import stratamem
from stratamem.config import TreeConfig
from stratamem.plugins import open_store
from stratamem.store.tables.jobs import HOST
from stratamem.tree import builder as builder_module
from stratamem.tree.builder import TreeBuilder
from stratamem.tree.extractive import ExtractiveSummarizer
from stratamem.tree.summarizer import SummaryItem

CONFIG = TreeConfig(input_token_budget=30, summary_fanout=3, flush_age_days=1.0)
MINUTES = [i * 3 for i in range(240)]
Chat = Callable[..., str]

# Claims the first seal job, says so, then waits to be killed.
CLAIMER = """
import sys
from stratamem.plugins import open_store
job = open_store(sys.argv[1]).jobs.claim(kind="seal")
print(job.id if job else "none", flush=True)
sys.stdin.read()
"""

# Flushes, printing a line after each committed summary.
FLUSHER = """
import sys
import stratamem
from stratamem.config import TreeConfig
config = TreeConfig(input_token_budget=30, summary_fanout=3, flush_age_days=1.0)
with stratamem.open(sys.argv[1], embedder=None, tree_config=config) as memory:
    memory.trees.flush(progress=lambda p: print(p.summaries, flush=True))
"""


def digest(path: str) -> dict[str, Any]:
    """What a rebuild must reproduce: every summary (id, level, parent, children, text), which
    summary each chunk sits under, and each tree's root; sealing times are left out."""
    with open_store(path) as store:
        conn = store.conn
        return {
            "summaries": sorted(
                tuple(r)
                for r in conn.execute(
                    """SELECT id, level, parent_id, child_ids, content_sha256, deleted
                       FROM summaries"""
                )
            ),
            "chunks": sorted(
                tuple(r)
                for r in conn.execute(
                    """SELECT c.id, s.id FROM chunks c
                       LEFT JOIN summaries s ON s.rowid = c.parent_summary"""
                )
            ),
            "trees": sorted(
                tuple(r) for r in conn.execute("SELECT id, root_id, max_level FROM trees")
            ),
            "jobs": store.jobs.counts(),
        }


def flush(path: str) -> None:
    with stratamem.open(path, embedder=None, tree_config=CONFIG) as memory:
        memory.trees.flush()


@pytest.fixture
def queued(store_location: str, chat: Chat) -> str:
    """A store with two chats ingested and their seal jobs queued, nothing sealed yet."""
    path = store_location
    with open_store(path) as store:
        chat(store, "chat:a", MINUTES)
        chat(store, "chat:b", MINUTES[:100])
    return path


@pytest.fixture
def expected(queued: str, locations: Any, tmp_path: Path) -> dict[str, Any]:
    whole = locations.copy(queued, tmp_path, "whole")
    flush(whole)
    result = digest(whole)
    assert result["jobs"] == {"done": 2}
    assert len(result["summaries"]) > 50
    return result


def claim_and_die(path: str) -> None:
    """Claim a seal job in another process, then SIGKILL that process."""
    with subprocess.Popen(
        [sys.executable, "-c", CLAIMER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip().isdigit()
        proc.kill()
        proc.wait()


@pytest.mark.crash
def test_flush_takes_a_job_whose_holder_was_killed(queued: str, expected: dict[str, Any]) -> None:
    claim_and_die(queued)
    with open_store(queued) as store:
        assert store.jobs.counts() == {"pending": 1, "running": 1}
    flush(queued)
    assert digest(queued) == expected


@pytest.mark.crash
def test_ingest_takes_a_job_whose_holder_was_killed(
    store_location: str, locations: Any, tmp_path: Path
) -> None:
    mbox = Path(__file__).parents[2] / "examples" / "workspace" / "mail" / "team.mbox"
    whole, killed = locations.new(store_location, tmp_path, "whole"), store_location
    with stratamem.open(whole, embedder=None, tree_config=CONFIG) as memory:
        memory.ingest(mbox, parallel=False)
    with stratamem.open(killed, embedder=None, tree_config=CONFIG) as memory:
        memory.ingest(mbox, parallel=False, trees=False)
    claim_and_die(killed)
    with stratamem.open(killed, embedder=None, tree_config=CONFIG) as memory:
        again = memory.ingest(mbox, parallel=False)  # nothing new: only the orphan to finish
        assert again.added == 0
    assert digest(killed) == digest(whole)
    assert digest(whole)["summaries"]


def test_flushes_do_not_renew_a_silent_holders_lease(queued: str, expected: dict[str, Any]) -> None:
    # A holder on another host: its pid cannot be checked, only its lease.
    now = int(time.time() * 1000)
    with open_store(queued) as store:
        store.conn.execute(
            f"""UPDATE jobs SET status = 'running', holder = 'elsewhere/1/0',
                 holder_host = {store.dialect.p}, holder_pid = 1, leased_at = {store.dialect.p}
                 WHERE id = 1""",
            (f"not-{HOST}", now - 500_000),
        )
    for _ in range(3):
        flush(queued)
    with open_store(queued) as store:
        job = store.conn.execute("SELECT * FROM jobs WHERE id = 1").fetchone()
        assert (job["status"], job["leased_at"], job["again"]) == ("running", now - 500_000, 1)
        store.conn.execute("UPDATE jobs SET leased_at = leased_at - 100000")  # its lease ends
    flush(queued)
    assert digest(queued) == expected


def test_a_builder_whose_job_was_taken_stops_and_finishes_nothing(
    queued: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(builder_module, "LEASE_RENEWAL_S", -1.0)  # check after every summary

    class TakenAway(ExtractiveSummarizer):
        calls = 0

        def summarize(self, items: Sequence[SummaryItem], *, budget: int) -> str:
            TakenAway.calls += 1
            if TakenAway.calls == 3:
                store.conn.execute("UPDATE jobs SET holder = 'another' WHERE status = 'running'")
            return super().summarize(items, budget=budget)

    with open_store(queued) as store:
        report = TreeBuilder(store, config=CONFIG, summarizer=TakenAway()).run_pending()
        holders = [
            tuple(r) for r in store.conn.execute("SELECT status, holder FROM jobs ORDER BY id")
        ]
    assert holders[0] == ("running", "another")
    assert report.trees == 1  # only the second tree, which nobody took


@pytest.mark.crash
def test_a_flush_killed_midway_converges_on_the_next(queued: str, expected: dict[str, Any]) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", FLUSHER, queued], stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if int(line) >= 20:
                break
        proc.send_signal(signal.SIGKILL)
        assert proc.wait() == -signal.SIGKILL
    partial = digest(queued)
    assert partial["jobs"].get("running") == 1
    assert 20 <= len(partial["summaries"]) < len(expected["summaries"])
    flush(queued)
    assert digest(queued) == expected
    assert json.dumps(digest(queued)["jobs"]) == json.dumps({"done": 2})
