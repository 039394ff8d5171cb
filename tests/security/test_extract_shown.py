"""What a model extracting from a source is shown: only facts of sources that every
principal reading that source may also read, whoever runs it. Otherwise an update (or an
add copying what it was shown) would move a hidden value into a source more principals read.

The store: ``notes:hr`` (scope ``hr``) holds @carol's salary; ``notes:team`` (scope ``team``)
says she got a raise; ``notes:all`` (scopes ``hr`` and ``team``) holds her desk. The model is
the worst a text could make of it: it updates every fact it is shown and copies each into a
new fact resting on the batch.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from security_kit import read_rows

import stratamem
from stratamem.memory import decide
from stratamem.ops.extract import run_extraction
from stratamem.server.service import Service, ServiceContext
from stratamem.testing import FakeModelServer, held_facts, record_ids

SECRET = "CANARY-salary-77e1"
DESK = "desk-4b"


class Model:
    def __init__(self) -> None:
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        ids = record_ids(prompt)

        def one(action: str, **given: str) -> dict[str, object]:
            return dict.fromkeys(decide.DECISION_KEYS) | {"action": action, "evidence": ids} | given

        out = []
        for label, shown in held_facts(prompt).items():
            out.append(one("update", fact=label, object=shown[2] + "-raised", reason="a raise"))
            out.append(one("add", subject="handle:carol", predicate="copied", object=shown[2]))
        return json.dumps({"decisions": out})


def _store(location: str, base_url: str) -> None:
    with stratamem.open(location, embedder=None) as owner:
        owner.items.add("@carol pay review", source="notes:hr", id="h1")
        owner.sources.set_access("notes:hr", scopes="hr")
        owner.facts.remember("handle:carol", "salary", SECRET, source="notes:hr")
        owner.items.add("@carol desk plan", source="notes:all", id="a1")
        owner.sources.set_access("notes:all", scopes="hr,team")
        owner.facts.remember("handle:carol", "desk", DESK, source="notes:all")
        owner.items.add("@carol got a raise", source="notes:team", id="t1")
        owner.sources.set_access("notes:team", scopes="team")
        owner.facts.set_extraction(base_url, "m")
        owner.principals.add("bot", "team")
        owner.principals.add("payroll", "hr")


@pytest.mark.parametrize("who", ["owner", "principal"])
def test_a_batch_is_shown_only_facts_its_readers_all_read(tmp_path: Path, who: str) -> None:
    location = str(tmp_path / "store.db")
    model = Model()
    with FakeModelServer(reply=model) as fake:
        _store(location, fake.base_url)
        if who == "owner":
            with stratamem.open(location, embedder=None) as owner:
                owner.facts.extract(["notes:team"])
        else:
            with stratamem.open(location, embedder=None) as owner:
                owner.principals.add("writer", "hr,team", write=True)
            with Service(location, embedder=None, allow_writes=True) as service:
                run_extraction(ServiceContext(service, "writer"), ["notes:team"])
    assert model.prompts
    assert all(SECRET not in p for p in model.prompts)
    assert any(DESK in p for p in model.prompts), "a fact every reader of the batch reads is shown"
    with stratamem.open(location, embedder=None, principal="bot") as bot:
        seen = [f.object for f in bot.facts.recall("handle:carol")]
    assert not any(SECRET in text for text in seen), seen
    assert DESK + "-raised" in seen
    with stratamem.open(location, embedder=None) as owner:
        (salary,) = owner.facts.recall("handle:carol", predicate="salary")
        assert salary.object == SECRET


def _failed_by_writer(location: str, fake: FakeModelServer) -> None:
    """``writer`` (team, may write) starts extracting ``notes:team``; the model fails, so
    the job stays queued; its backoff is then let pass."""
    with stratamem.open(location, embedder=None) as owner:
        owner.principals.add("writer", "team", write=True)
    for _ in range(3):
        fake.queue(500, {"error": "busy"})
    with Service(location, embedder=None, allow_writes=True) as service:
        report = run_extraction(ServiceContext(service, "writer"), ["notes:team"])
    assert report["failed"], report
    (payload,) = read_rows(location, "SELECT payload FROM jobs WHERE kind = 'extract'")
    assert json.loads(payload[0])["principal"] == "writer"
    with closing(sqlite3.connect(location)) as conn, conn:
        conn.execute("UPDATE jobs SET not_before = 0 WHERE kind = 'extract'")


@pytest.mark.parametrize("change", ["removed", "no_longer_reads", "kept"])
def test_a_queued_job_runs_as_the_principal_that_started_it(tmp_path: Path, change: str) -> None:
    location = str(tmp_path / "store.db")
    model = Model()
    with FakeModelServer(reply=model) as fake:
        _store(location, fake.base_url)
        _failed_by_writer(location, fake)
        asked = len(model.prompts)
        with stratamem.open(location, embedder=None) as owner:
            if change == "removed":
                owner.principals.remove("writer")
            elif change == "no_longer_reads":
                owner.sources.set_access("notes:team", scopes="hr")
            report = owner.facts.extract(pending=True)
    ran = len(model.prompts) > asked
    assert ran == (change == "kept"), report.to_dict()
    assert all(SECRET not in p for p in model.prompts)
    if not ran:
        assert any("principal" in s.reason for s in report.skipped)
