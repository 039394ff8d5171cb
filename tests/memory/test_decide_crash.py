"""Reconciling extraction killed with SIGKILL inside a batch's write, after some of its
decisions were applied and before the commit: every batch is whole or absent, and a rerun
ends where an uninterrupted run ends."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import stratamem
from stratamem.memory import decide
from stratamem.memory.extract import PROGRESS_PREFIX
from stratamem.testing import FakeModelServer, held_facts, record_ids
from suite import PATIENCE_S

NOTES = "notes:team"
T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
RECORDS = 4

# The extractor, killed once ``remember`` (the new value of a decision, written inside the
# batch's transaction after the fact it replaces was closed) has run ``argv[3]`` times.
CHILD = """
import os, signal, sys
import stratamem
from stratamem.memory import decide

real, calls = decide.remember, [0]

def dying(*args, **kwargs):
    out = real(*args, **kwargs)
    calls[0] += 1
    if calls[0] == int(sys.argv[3]):
        os.kill(os.getpid(), signal.SIGKILL)
    return out

decide.remember = dying
with stratamem.open(sys.argv[1], embedder=None) as memory:
    memory.facts.extract(["notes:team"], endpoint=sys.argv[2], model="m", batch_size=1)
"""


def leads(prompt: str) -> str:
    """Carol leads what the record says: an update of the value shown, else an add."""
    records = prompt.split("Records:", 1)[1]
    (node,) = record_ids(prompt)
    value = records.rsplit("leads ", 1)[1].split()[0]
    base = dict.fromkeys(decide.DECISION_KEYS) | {"evidence": [node], "reason": "said so"}
    shown = [k for k, v in held_facts(prompt).items() if v[:2] == ["handle:carol", "leads"]]
    if shown:
        out = base | {"action": "update", "fact": shown[0], "object": value}
    else:
        out = base | {"action": "add", "subject": "handle:carol", "predicate": "leads"}
        out["object"] = value
    return json.dumps({"decisions": [out]})


def said(location: str) -> set[tuple[Any, ...]]:
    """What every row of the store's facts says, believed or not, whenever it was recorded."""
    with stratamem.open(location, embedder=None) as memory:
        rows = memory.store.facts(believed_only=False, limit=1_000_000)
    return {
        (f.subject, f.predicate, f.object, f.valid_from, f.valid_to, f.believed, f.reason)
        for f in rows
    }


def progress(location: str) -> list[str]:
    with stratamem.open(location, embedder=None) as memory:
        source = memory.sources.get(NOTES)
        raw = memory.store.get_setting(PROGRESS_PREFIX + source.id) or "{}"
        order = [c.id for c in memory.store.iter_chunks(source.id)]
    done = set(json.loads(raw).get("chunks", []))
    return [c for c in order if c in done]


@pytest.fixture
def template(store_location: str) -> str:
    with stratamem.open(store_location, embedder=None) as memory:
        for n in range(RECORDS):
            when = T0 + timedelta(days=n)
            memory.items.add(f"@carol leads v{n}", source=NOTES, id=f"n{n}", time=when)
    return store_location


@pytest.mark.crash
@pytest.mark.parametrize("kill_at", [1, 2, 3])
def test_a_run_killed_inside_a_batch_leaves_whole_batches_and_resumes(
    template: str, locations: Any, tmp_path: Path, kill_at: int
) -> None:
    whole = str(locations.copy(template, tmp_path, "whole"))
    killed = str(locations.copy(template, tmp_path, "killed"))
    with FakeModelServer(reply=leads) as server:
        with stratamem.open(whole, embedder=None) as memory:
            report = memory.facts.extract(
                [NOTES], endpoint=server.base_url, model="m", batch_size=1
            )
        assert (report.added, report.updated, report.batches) == (1, RECORDS - 1, RECORDS)
        expected = said(whole)

        child = subprocess.run(
            [sys.executable, "-c", CHILD, killed, server.base_url, str(kill_at)],
            capture_output=True,
            timeout=PATIENCE_S,
            check=False,
        )
        assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]

        done = progress(killed)
        assert len(done) == kill_at - 1  # the batch being written is gone, whole
        rows = said(killed)
        believed = sorted(r[2] for r in rows if r[5] and r[4] is None)
        assert believed == ([f"v{kill_at - 2}"] if kill_at > 1 else [])
        # Nothing of the killed batch: no row holds its value, none was closed by it.
        assert not any(r[2] == f"v{kill_at - 1}" for r in rows)
        assert sum(1 for r in rows if r[4] is not None) == max(0, kill_at - 2)

        with stratamem.open(killed, embedder=None) as memory:
            again = memory.facts.extract([NOTES], endpoint=server.base_url, model="m", batch_size=1)
        assert again.batches == RECORDS - (kill_at - 1)
    assert said(killed) == expected
    assert len(progress(killed)) == RECORDS
