"""Consolidation (``Memory.facts.consolidate``, ``stratamem consolidate``): fact scores as
``docs/memory.md`` defines them, rollups kept, rewritten and dropped by their fact-set hash,
refused to principals and to an unlocked memory, the same on the same store, the job after
ingest, and a pass killed mid-way, over the example Slack export (``team``) and notes
(``private``)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from memory_kit import connect, execute, is_postgres, rows

import stratamem
from stratamem.errors import AccessDenied, LockError
from stratamem.memory.consolidate import JOB_KIND, fact_set_hash, rollup_id_for
from stratamem.store.rollups import Rollup
from stratamem.types import Filters
from suite import PATIENCE_S

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workspace"
ENG, NOTES, ASSERTED = "slack:#eng", "notes:notes", "facts:asserted"
T = datetime(2024, 3, 20, 12, tzinfo=UTC)
NOW = datetime(2024, 4, 1, 12, tzinfo=UTC)
LATER = NOW + timedelta(days=3)
PASSPHRASE = "correct horse battery staple"


@pytest.fixture(scope="module")
def template(module_location: str) -> str:
    """The example Slack export and notes, without the notes' front-matter facts."""
    path = module_location
    with stratamem.open(path, embedder=None) as memory:
        memory.ingest(EXAMPLES / "slack-export", parallel=False)
        memory.ingest(EXAMPLES / "notes", parallel=False)
        memory.principals.add("teamer", "team")
    execute(path, "DELETE FROM facts")
    return path


@pytest.fixture
def db(template: str, locations: Any, tmp_path: Path) -> str:
    return str(locations.copy(template, tmp_path, "store"))


@pytest.fixture
def memory(db: str) -> Iterator[stratamem.Memory]:
    with stratamem.open(db, embedder=None) as opened:
        yield opened


def node_in(memory: stratamem.Memory, scope: str, query: str = "queue") -> str:
    hits = memory.search(query, sources=[scope], mode="keyword", limit=1).hits
    assert hits
    assert hits[0].source_id == memory.sources.get(scope).id
    return hits[0].node_id


def say(memory: stratamem.Memory, subject: str, predicate: str, obj: str, **kw: Any) -> str:
    kw.setdefault("now", NOW - timedelta(days=1))
    return memory.facts.remember(subject, predicate, obj, **kw).recorded[-1].id


# -- the scores -----------------------------------------------------------------------------------


def test_scores_follow_the_documented_definitions(memory: stratamem.Memory, db: str) -> None:
    a1 = say(memory, "topic:alpha", "status", "open", valid_from=T)
    a2 = say(memory, "topic:alpha", "owner", "dan", valid_from=T - timedelta(hours=24),
             confidence=0.4)  # fmt: skip
    say(memory, "topic:beta", "phase", "one", valid_from=T - timedelta(hours=48))
    b2 = say(memory, "topic:beta", "phase", "two", valid_from=T)
    e1 = say(memory, "person:alice chen", "pairs_with", "person:carol diaz",
             evidence=[node_in(memory, ENG)], valid_from=T)  # fmt: skip
    report = memory.facts.consolidate(now=NOW, min_facts=10, min_score=1.0)
    assert (report.facts_scored, report.subjects, report.rollups_written) == (4, 3, 0)
    scores = memory.store.fact_scores()
    assert sorted(scores) == sorted([a1, a2, b2, e1])

    # topic:alpha, two facts in facts:asserted (nothing mentions it): support 2/6.
    assert scores[a1].recency == 1.0  # the newest fact time of its source
    assert scores[a1].importance == pytest.approx(0.4 + 0.15 + 0.15 * 2 / 6, abs=1e-6)
    assert scores[a1].relevance == 0.0
    assert scores[a1].score == pytest.approx(0.4 + 0.4 * (0.55 + 0.05), abs=1e-6)
    assert scores[a2].recency == pytest.approx(0.995**24, abs=1e-6)
    assert scores[a2].importance == pytest.approx(0.4 * 0.4 + 0.15 + 0.05, abs=1e-6)
    assert scores[a2].score == pytest.approx(0.4 * 0.995**24 + 0.4 * 0.36, abs=1e-6)
    # topic:beta's phase changed once: history 1/3, support 1/5.
    assert scores[b2].importance == pytest.approx(0.55 + 0.15 / 5 + 0.15 / 3, abs=1e-6)

    # A fact of #eng on one node, about two entities the team's channels mention: relevance
    # from the better mentioned one, counted in the 30 days up to the team's newest chunk.
    team = tuple(s.id for s in memory.sources.list() if s.access == ("team",))
    newest = max(
        datetime.fromtimestamp(ms / 1000, tz=UTC)
        for (ms,) in rows(
            db,
            "SELECT max(coalesce(ts_end, ts_start)) FROM chunks WHERE source_id IN "
            f"({','.join('?' * len(team))})",
            *team,
        )
    )
    window = Filters(sources=team)
    mentions = {
        e: memory.query_topic(
            e, since=newest - timedelta(days=30), until=newest, filters=window
        ).total
        for e in ("person:alice chen", "person:carol diaz")
    }
    assert min(mentions.values()) > 0
    best = max(mentions.values())
    assert scores[e1].relevance == pytest.approx(best / (best + 5), abs=1e-6)
    assert scores[e1].importance == pytest.approx(0.55 + 0.05 + 0.03, abs=1e-6)
    assert scores[e1].score == pytest.approx(0.4 + 0.4 * 0.63 + 0.2 * best / (best + 5), abs=1e-6)
    for s in scores.values():
        assert min(s.recency, s.importance, s.relevance, s.score) >= 0
        assert max(s.recency, s.importance, s.relevance, s.score) <= 1


def test_a_fact_alone_in_its_source_scores_as_the_worked_example(
    memory: stratamem.Memory,
) -> None:
    fact = say(memory, "topic:lonely", "status", "open")
    memory.facts.consolidate(now=NOW)
    assert memory.store.fact_scores([fact])[fact].score == pytest.approx(0.632, abs=1e-9)


def test_scores_do_not_depend_on_the_clock_once_the_facts_are_there(
    memory: stratamem.Memory,
) -> None:
    say(memory, "topic:alpha", "status", "open", valid_from=T)
    say(memory, "topic:alpha", "owner", "dan", valid_from=T - timedelta(days=3))
    memory.facts.consolidate(now=NOW)
    first = memory.store.fact_scores()
    memory.facts.consolidate(now=NOW + timedelta(days=365))
    assert memory.store.fact_scores() == first


# -- rollups ---------------------------------------------------------------------------------------


def _alpha_and_beta(memory: stratamem.Memory) -> dict[str, str]:
    return {
        "a1": say(memory, "topic:alpha", "status", "open", valid_from=T),
        "a2": say(memory, "topic:alpha", "owner", "dan", valid_from=T),
        "a3": say(memory, "topic:alpha", "tracker", "ALPHA-1", valid_from=T, confidence=0.3),
        "b1": say(memory, "topic:beta", "phase", "one", valid_from=T),
        "e1": say(
            memory,
            "person:alice chen",
            "owns",
            "the queue",
            evidence=[node_in(memory, ENG)],
            valid_from=T,
        ),
        "e2": say(
            memory,
            "person:alice chen",
            "reviews",
            "the migration",
            evidence=[node_in(memory, ENG, "migration")],
            valid_from=T,
        ),
    }


def rollup_consistent(db: str | Path, rollup: Rollup) -> None:
    """A rollup is true to its hash, its id and its sources, and names facts the store holds
    (believed or not: one changed since the last pass is replaced by the next)."""
    rollups_consistent(db, [rollup])


def rollups_consistent(db: str | Path, rollups: list[Rollup]) -> None:
    """Each of ``rollups`` as :func:`rollup_consistent` says, the store read once."""
    held = dict(rows(db, "SELECT id, source_id FROM facts"))
    access = {
        sid: ",".join(sorted(json.loads(a)))
        for sid, a in rows(db, "SELECT id, access FROM sources")
    }
    for rollup in rollups:
        body = rollup.body
        facts = [f["id"] for f in body["facts"]]
        ended = [q["fact_id"] for q in body["open_questions"] if q["kind"] == "ended"]
        summaries = [s["id"] for s in body["summaries"]]
        assert rollup.fact_set_hash == fact_set_hash([*facts, *ended, *summaries])
        assert rollup.id == rollup_id_for(rollup.subject, rollup.scope)
        assert set(facts + ended) <= set(held)
        want = {held[f] for f in facts + ended} | {s["source_id"] for s in body["summaries"]}
        assert set(rollup.sources) == want
        assert {access[s] for s in rollup.sources} == {rollup.scope}


def test_rollups_of_populous_or_important_subjects_with_facts_evidence_and_questions(
    memory: stratamem.Memory,
    db: str,
) -> None:
    ids = _alpha_and_beta(memory)
    report = memory.facts.consolidate(now=NOW, min_facts=2, min_score=0.99)
    assert report.rollups_written == 2
    assert report.subjects == 3
    found = {r.subject: r for r in memory.facts.rollups()}
    assert set(found) == {"topic:alpha", "person:alice chen"}
    alpha, alice = found["topic:alpha"], found["person:alice chen"]
    assert alpha.scope == "private"
    assert alice.scope == "team"
    assert {f["id"] for f in alpha.body["facts"]} == {ids["a1"], ids["a2"], ids["a3"]}
    assert [f["score"] for f in alpha.body["facts"]] == sorted(
        (f["score"] for f in alpha.body["facts"]), reverse=True
    )
    assert alpha.score == max(f["score"] for f in alpha.body["facts"])
    assert alpha.body["open_questions"] == [
        {"kind": "low_confidence", "predicate": "tracker", "object": "ALPHA-1",
         "fact_id": ids["a3"], "confidence": 0.3}
    ]  # fmt: skip
    cited = {f["id"]: f["cite"] for f in alice.body["facts"]}
    chunk = memory.get(node_in(memory, ENG))
    assert cited[ids["e1"]]["node_id"] == chunk.node_id
    assert cited[ids["e1"]]["snippet"][:40] == " ".join(chunk.content.split())[:40]
    for one in found.values():
        rollup_consistent(db, one)
    # Important alone: one fact that scores above the bar.
    memory.facts.consolidate(now=NOW, min_facts=50, min_score=0.6)
    assert "topic:beta" in {r.subject for r in memory.facts.rollups()}


def test_open_questions_say_where_sources_disagree_and_what_ended(
    memory: stratamem.Memory,
    db: str,
) -> None:
    eng_node, general_node = node_in(memory, ENG), node_in(memory, "slack:#general", "release")
    one = say(memory, "topic:release", "date", "March 22", evidence=[eng_node], valid_from=T)
    two = say(memory, "topic:release", "date", "April 5", evidence=[general_node], valid_from=T)
    say(memory, "topic:release", "owner", "bob", evidence=[eng_node],
        valid_from=T - timedelta(days=5), valid_to=T - timedelta(days=1))  # fmt: skip
    memory.facts.consolidate(now=NOW, min_facts=2)
    (rollup,) = memory.facts.rollups("topic:release")
    conflict, ended = rollup.body["open_questions"]
    assert conflict["kind"] == "conflict"
    assert conflict["predicate"] == "date"
    assert {(v["object"], v["fact_id"]) for v in conflict["values"]} == {
        ("March 22", one),
        ("April 5", two),
    }
    assert ended["kind"] == "ended"
    assert ended["object"] == "bob"
    rollup_consistent(db, rollup)


def test_unchanged_rollups_are_kept_changed_rebuilt_and_unqualified_dropped(
    memory: stratamem.Memory,
    db: str,
) -> None:
    ids = _alpha_and_beta(memory)
    memory.facts.consolidate(now=NOW, min_facts=2, min_score=0.99)
    before = {r.subject: r for r in memory.facts.rollups()}

    again = memory.facts.consolidate(now=LATER)  # the thresholds were kept
    assert (again.rollups_written, again.rollups_kept, again.rollups_dropped) == (0, 2, 0)
    assert {r.subject: r for r in memory.facts.rollups()} == before

    # A changed value: that subject's rollup alone is rebuilt, built at the new time.
    say(memory, "topic:alpha", "status", "closed", valid_from=T + timedelta(days=1), now=LATER)
    changed = memory.facts.consolidate(now=LATER)
    assert (changed.rollups_written, changed.rollups_kept) == (1, 1)
    after = {r.subject: r for r in memory.facts.rollups()}
    assert after["person:alice chen"] == before["person:alice chen"]
    alpha = after["topic:alpha"]
    assert alpha.id == before["topic:alpha"].id
    assert alpha.built_at == LATER
    assert alpha.fact_set_hash != before["topic:alpha"].fact_set_hash
    assert ids["a1"] not in {f["id"] for f in alpha.body["facts"]}
    rollup_consistent(db, alpha)

    # No longer populous: dropped.
    memory.facts.retract(ids["a2"], now=LATER)
    memory.facts.retract(ids["a3"], now=LATER)
    dropped = memory.facts.consolidate(now=LATER)
    assert dropped.rollups_dropped == 1
    assert [r.subject for r in memory.facts.rollups()] == ["person:alice chen"]

    # A forgotten source takes its rollups with it, and the next pass does not bring them back.
    memory.sources.forget(ENG)
    assert memory.facts.rollups() == []
    assert memory.facts.consolidate(now=LATER).rollups_written == 0
    assert memory.facts.rollups() == []
    assert rows(db, "SELECT count(*) FROM rollups") == [(0,)]


def test_the_same_store_consolidates_to_the_same_rollups(
    template: str, locations: Any, tmp_path: Path
) -> None:
    found = []
    for name in ("one", "two"):
        with stratamem.open(locations.copy(template, tmp_path, name), embedder=None) as memory:
            _alpha_and_beta(memory)
            memory.facts.consolidate(now=NOW, min_facts=1)
            found.append((memory.facts.rollups(), memory.store.fact_scores()))
    assert found[0] == found[1]
    assert len(found[0][0]) == 3


# -- who may consolidate ------------------------------------------------------------------------


def test_principals_may_not_consolidate(memory: stratamem.Memory, db: str, tmp_path: Path) -> None:
    _alpha_and_beta(memory)
    with memory.as_principal("teamer") as teamer:
        with pytest.raises(AccessDenied, match="may not consolidate"):
            teamer.facts.consolidate()
        with pytest.raises(AccessDenied):
            teamer.facts.consolidate_after_ingest(True)
    result = cli(db, "--as", "teamer", "consolidate")
    assert result.returncode == 1
    assert "principal 'teamer' may not consolidate" in result.stderr
    assert rows(db, "SELECT count(*) FROM fact_scores") == [(0,)]


def test_a_memory_opened_with_sources_unlocked_is_refused(
    memory: stratamem.Memory, db: str
) -> None:
    _alpha_and_beta(memory)
    memory.locks.lock(ENG, passphrase=PASSPHRASE)
    path = db
    with stratamem.open(path, embedder=None, unlock={ENG: PASSPHRASE}) as unlocked:
        assert unlocked.facts.recall("person:alice chen")  # readable in this process
        with pytest.raises(LockError, match="open the store without unlocking"):
            unlocked.facts.consolidate()
    env = {**os.environ, "STRATAMEM_PASSPHRASE": PASSPHRASE}
    result = cli(path, "--unlock", ENG, "consolidate", env=env)
    assert result.returncode == 1
    assert "open the store without unlocking" in result.stderr
    assert rows(path, "SELECT count(*) FROM fact_scores") == [(0,)]
    # Without unlocking, the locked source's facts are not read.
    memory.facts.consolidate(now=NOW, min_facts=1)
    assert "person:alice chen" not in {r.subject for r in memory.facts.rollups()}


# -- the job after ingest -------------------------------------------------------------------------


def notes_folder(root: Path, status: str) -> Path:
    folder = root / f"plans-{status}"
    folder.mkdir()
    (folder / "Orion.md").write_text(
        f"---\ntitle: Orion\nstatus: {status}\nowner: Dan Okafor\npriority: 2\n---\n"
        "# Orion\n\nThe Orion plan moves the queue.\n"
    )
    return folder


def test_ingest_consolidates_after_it_when_asked(
    memory: stratamem.Memory, db: str, tmp_path: Path
) -> None:
    assert memory.facts.consolidate_after_ingest() is False
    memory.ingest(notes_folder(tmp_path, "draft"), scope="notes:plans", parallel=False)
    assert memory.facts.rollups() == []
    assert memory.facts.consolidate_after_ingest(True) is True
    memory.ingest(notes_folder(tmp_path, "accepted"), scope="notes:plans", parallel=False)
    (orion,) = memory.facts.rollups("topic:orion")
    assert {f["object"] for f in orion.body["facts"]} == {"accepted", "Dan Okafor", "2"}
    assert rows(db, "SELECT status FROM jobs WHERE kind = ?", JOB_KIND) == [("done",)]
    result = cli(db, "consolidate", "--after-ingest", "off", "--json")
    assert json.loads(result.stdout) == {"after_ingest": False}
    assert memory.facts.consolidate_after_ingest() is False


def test_a_pending_job_left_by_a_crash_is_run_by_consolidate(
    memory: stratamem.Memory, db: str
) -> None:
    _alpha_and_beta(memory)
    memory.facts.consolidate_after_ingest(True)
    with memory.store.transaction():
        memory.store.jobs.enqueue(JOB_KIND, JOB_KIND, {})
    assert memory.store.jobs.counts().get("pending") == 1
    result = cli(db, "consolidate", "--min-facts", "2", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["rollups_written"] == 2
    assert report["min_facts"] == 2
    assert rows(db, "SELECT status FROM jobs WHERE kind = ?", JOB_KIND) == [("done",)]


# -- the command line ------------------------------------------------------------------------------


def cli(
    db: str | Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stratamem", "--db", str(db), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=PATIENCE_S,
    )


def test_the_commands_report_and_show_rollups(memory: stratamem.Memory, db: str) -> None:
    _alpha_and_beta(memory)
    first = cli(db, "consolidate", "--min-facts", "2")
    assert first.returncode == 0, first.stderr
    assert "scored 6 facts of 3 subjects; rollups: 2 written, 0 kept, 0 dropped" in first.stdout
    shown = cli(db, "rollup", "topic:alpha")
    assert "topic:alpha" in shown.stdout
    assert "ALPHA-1" in shown.stdout
    assert "confidence 0.3" in shown.stdout
    listed = json.loads(cli(db, "rollup", "--json").stdout)["rollups"]
    assert {r["subject"] for r in listed} == {"topic:alpha", "person:alice chen"}
    as_team = json.loads(cli(db, "--as", "teamer", "rollup", "--json").stdout)
    assert [r["subject"] for r in as_team["rollups"]] == ["person:alice chen"]
    bad = cli(db, "rollup", "alpha")
    assert bad.returncode == 1
    assert "is not an entity id" in bad.stderr


# -- a pass killed mid-way -------------------------------------------------------------------------

SUBJECTS = 600


@pytest.fixture(scope="module")
def big(template: str, locations: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The example store with 600 subjects of two facts each (rollups of 2 or more facts),
    and one rollup already there that the pass must drop."""
    path = locations.copy(template, tmp_path_factory.mktemp("big"), "big")
    with stratamem.open(path, embedder=None) as memory:
        # The fixture's commits need not wait for the disk.
        unsafe = "SET synchronous_commit = off" if is_postgres(path) else "PRAGMA synchronous = OFF"
        memory.store.conn.execute(unsafe)  # type: ignore[attr-defined]
        for n in range(SUBJECTS):
            for p in range(2):
                memory.facts.remember(
                    f"topic:subject {n:04d}",
                    f"p{p}",
                    f"value {n} {p}",
                    valid_from=T - timedelta(hours=n),
                    now=NOW + timedelta(seconds=2 * n + p),
                )
        memory.facts.consolidate(min_facts=2)
        doomed = memory.facts.recall("topic:subject 0000")
        for fact in doomed:
            memory.facts.retract(fact.id)
    return path


def snapshot(db: str) -> tuple[list[Any], list[Any]]:
    """The rollups (without when each was built) with their sources, and the scores, as the
    database holds them."""
    sources: dict[str, list[str]] = {}
    for rollup_id, source_id in rows(
        db, "SELECT rollup_id, source_id FROM rollup_sources ORDER BY source_id"
    ):
        sources.setdefault(rollup_id, []).append(source_id)
    rollups = [
        (*r, sources.get(r[0], []))
        for r in rows(
            db,
            """SELECT r.id, r.subject, r.scope, r.fact_set_hash, r.score, r.body
               FROM rollups r ORDER BY r.id""",
        )
    ]
    scores = rows(db, "SELECT fact_id, recency, importance, relevance, score FROM fact_scores "
                  "ORDER BY fact_id")  # fmt: skip
    return rollups, scores


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.crash
def test_a_killed_pass_leaves_the_store_consistent_and_a_rerun_completes_it(
    big: str, locations: Any, tmp_path: Path, seed: int
) -> None:
    killed, whole = locations.copy(big, tmp_path, "killed"), locations.copy(big, tmp_path, "whole")
    # Half the facts change value, so that the pass rewrites half the rollups.
    for db in (killed, whole):
        with stratamem.open(db, embedder=None) as memory:
            for n in range(1, SUBJECTS, 2):
                memory.facts.remember(f"topic:subject {n:04d}", "p0", f"changed {n}",
                                valid_from=T, now=NOW + timedelta(days=1, seconds=n))  # fmt: skip
    stop_at = random.Random(seed).randrange(1, SUBJECTS // 2 - 10)
    already = rows(killed, "SELECT count(*) FROM rollups")[0][0]
    baseline = dict(rows(killed, "SELECT id, built_at FROM rollups"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "stratamem", "--db", killed, "consolidate", "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    watch = connect(killed)
    try:
        while proc.poll() is None:
            fresh = sum(
                1
                for rid, built in watch.execute("SELECT id, built_at FROM rollups")
                if baseline.get(rid) != built
            )
            if fresh >= stop_at:
                proc.send_signal(signal.SIGKILL)
                break
    finally:
        watch.close()
    proc.wait(timeout=PATIENCE_S)
    assert proc.returncode == -signal.SIGKILL, "the pass ended before it could be killed"
    assert already > 0

    if not is_postgres(killed):  # the server rolled back what the killed client had begun
        assert rows(killed, "PRAGMA integrity_check") == [("ok",)]
    with stratamem.open(killed, embedder=None) as memory:
        rollups_consistent(killed, memory.facts.rollups(limit=10_000))
        report = memory.facts.consolidate()
        assert report.rollups_written > 0
        assert report.rollups_kept > 0
    with stratamem.open(whole, embedder=None) as memory:
        memory.facts.consolidate()
    assert snapshot(killed) == snapshot(whole)
    assert len(snapshot(whole)[0]) == SUBJECTS - 1
