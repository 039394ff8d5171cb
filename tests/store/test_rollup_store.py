"""The rollups role of the store, on each backend: fact scores and rollups, written, read
through the gate (a reader must read every source of a rollup), replaced, dropped, and removed
with a source that is locked or forgotten. Over the example Slack export (``team``) and notes
(``private``)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import stratamem
from stratamem.errors import StoreError
from stratamem.plugins import open_store
from stratamem.store.rollups import FactScore, Rollup

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workspace"
ENG, GENERAL, NOTES = "slack:#eng", "slack:#general", "notes:notes"
NOW = datetime(2024, 4, 1, 12, tzinfo=UTC)
PASSPHRASE = "correct horse battery staple"


@pytest.fixture(scope="module")
def templates() -> dict[bool, str]:
    """Per backend (on PostgreSQL or not), the example store, made on first use."""
    return {}


@pytest.fixture
def location(
    templates: dict[bool, str],
    store_location: str,
    locations: Any,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> str:
    """A copy of the example store, on the backend under test (the example store outlives
    the test that made it, so not in that test's folder, which goes when it passes)."""
    postgres = locations.is_postgres(store_location)
    if postgres not in templates:
        template = locations.new(store_location, tmp_path_factory.mktemp("template"), "template")
        with stratamem.open(template, embedder=None) as memory:
            memory.ingest(EXAMPLES / "slack-export", parallel=False)
            memory.ingest(EXAMPLES / "notes", parallel=False)
            memory.principals.add("teamer", "team")
            memory.principals.add("owl", "private,team")
        templates[postgres] = template
    return str(locations.copy(templates[postgres], tmp_path, "store"))


@pytest.fixture
def memory(location: str) -> Iterator[stratamem.Memory]:
    with stratamem.open(location, embedder=None) as opened:
        yield opened


def table(location: str, sql: str, *args: Any) -> list[Any]:
    """Rows as another connection to the store reads them."""
    with open_store(location) as other:
        rows = other.conn.execute(sql, args).fetchall()  # type: ignore[attr-defined]
        return [tuple(row) for row in rows]


def fact_in(memory: stratamem.Memory, scope: str, subject: str = "person:alice chen") -> str:
    """A fact of source ``scope`` (stated on one of its nodes), returning its id."""
    node = memory.search("queue", sources=[scope], mode="keyword", limit=1).hits[0].node_id
    written = memory.facts.remember(
        subject, "works_on", f"queue in {scope}", evidence=[node], now=NOW
    )
    return written.recorded[0].id


def rollup(rid: str, subject: str, sources: tuple[str, ...], score: float = 0.5) -> Rollup:
    return Rollup(
        id=rid,
        subject=subject,
        scope="team",
        fact_set_hash=f"hash-{rid}",
        built_at=NOW,
        score=score,
        body={"facts": [{"id": rid}], "open_questions": []},
        sources=sources,
    )


def write(memory: stratamem.Memory, *rollups: Rollup) -> None:
    with memory.store.transaction():
        for one in rollups:
            memory.store.write_rollup(one)


def ids(memory: stratamem.Memory, **kwargs: Any) -> list[str]:
    return [r.id for r in memory.store.rollups(**kwargs)]


def test_a_rollup_round_trips_best_score_first(memory: stratamem.Memory) -> None:
    eng, general = memory.sources.get(ENG).id, memory.sources.get(GENERAL).id
    low = rollup("r-low", "person:alice chen", (general, eng, eng), score=0.25)
    high = rollup("r-high", "person:bob martins", (eng,), score=0.75)
    write(memory, low, high)
    assert ids(memory) == ["r-high", "r-low"]
    (found,) = memory.store.rollups(subject="person:alice chen")
    assert found.sources == tuple(sorted({eng, general}))
    assert (found.body, found.built_at, found.score) == (low.body, NOW, 0.25)
    assert found.to_dict()["facts"] == [{"id": "r-low"}]
    assert ids(memory, limit=1) == ["r-high"]
    assert memory.store.rollup_hashes() == {
        ("person:alice chen", "team"): ("r-low", "hash-r-low"),
        ("person:bob martins", "team"): ("r-high", "hash-r-high"),
    }


def test_a_principal_reads_a_rollup_only_when_it_reads_every_source(
    memory: stratamem.Memory,
) -> None:
    eng, notes = memory.sources.get(ENG).id, memory.sources.get(NOTES).id
    write(
        memory,
        rollup("r-team", "person:alice chen", (eng,)),
        rollup("r-mixed", "person:bob martins", (eng, notes)),
    )
    with memory.as_principal("teamer") as teamer:
        assert ids(teamer) == ["r-team"]
        assert teamer.facts.rollups("person:bob martins") == []
        # The pass's own read is ungated; a reader's is not.
        assert len(teamer.store.rollup_hashes()) == 2
    with memory.as_principal("owl") as owl:
        assert sorted(ids(owl)) == ["r-mixed", "r-team"]
    assert sorted(ids(memory)) == ["r-mixed", "r-team"]


def test_writing_the_same_id_replaces_the_rollup_and_its_sources(
    memory: stratamem.Memory, location: str
) -> None:
    eng, general = memory.sources.get(ENG).id, memory.sources.get(GENERAL).id
    write(memory, rollup("r1", "person:alice chen", (eng, general)))
    newer = Rollup(
        id="r1",
        subject="person:alice chen",
        scope="team",
        fact_set_hash="other",
        built_at=NOW,
        score=0.9,
        body={"facts": []},
        sources=(general,),
    )
    write(memory, newer)
    assert memory.store.rollups() == [newer]
    assert table(location, "SELECT source_id FROM rollup_sources") == [(general,)]


def test_a_rollup_naming_a_missing_or_locked_source_is_refused_and_nothing_written(
    memory: stratamem.Memory, location: str
) -> None:
    eng, general = memory.sources.get(ENG).id, memory.sources.get(GENERAL).id
    with pytest.raises(StoreError, match="src_nowhere"):
        write(memory, rollup("r1", "person:alice chen", (eng, "src_nowhere")))
    with pytest.raises(StoreError, match="names no source"):
        write(memory, rollup("r1", "person:alice chen", ()))
    memory.locks.lock(GENERAL, passphrase=PASSPHRASE)
    with pytest.raises(StoreError, match=f"missing or locked: {general}"):
        write(memory, rollup("r2", "person:alice chen", (eng, general)))
    assert table(location, "SELECT count(*) FROM rollups") == [(0,)]
    assert table(location, "SELECT count(*) FROM rollup_sources") == [(0,)]


def test_drop_rollups_counts_what_was_there(memory: stratamem.Memory, location: str) -> None:
    eng = memory.sources.get(ENG).id
    write(memory, rollup("r1", "person:a", (eng,)), rollup("r2", "person:b", (eng,)))
    with memory.store.transaction():
        assert memory.store.drop_rollups(["r1", "r-none"]) == 1
    assert ids(memory) == ["r2"]
    assert table(location, "SELECT rollup_id FROM rollup_sources") == [("r2",)]


def _scores(memory: stratamem.Memory, *facts: str) -> None:
    with memory.store.transaction():
        memory.store.write_fact_scores(
            [FactScore(f, 0.5, 0.25, 0.125, 0.4) for f in (*facts, "fact_none")], NOW
        )


def test_scores_replace_skip_unknown_facts_and_are_gated(
    memory: stratamem.Memory, location: str
) -> None:
    eng_fact, notes_fact = fact_in(memory, ENG), fact_in(memory, NOTES, "person:bob martins")
    _scores(memory, eng_fact, notes_fact)
    assert sorted(memory.store.fact_scores()) == sorted([eng_fact, notes_fact])
    with memory.store.transaction():
        memory.store.write_fact_scores([FactScore(eng_fact, 1.0, 1.0, 1.0, 1.0)], NOW)
    assert memory.store.fact_scores([eng_fact]) == {
        eng_fact: FactScore(eng_fact, 1.0, 1.0, 1.0, 1.0)
    }
    assert table(location, "SELECT count(*) FROM fact_scores") == [(2,)]
    with memory.as_principal("teamer") as teamer:
        assert list(teamer.store.fact_scores()) == [eng_fact]
        assert teamer.store.fact_scores([notes_fact]) == {}


def test_locking_a_source_purges_its_rollups_and_scores_and_unlocking_restores_neither(
    memory: stratamem.Memory, location: str
) -> None:
    eng, general, notes = (memory.sources.get(s).id for s in (ENG, GENERAL, NOTES))
    eng_fact, notes_fact = fact_in(memory, ENG), fact_in(memory, NOTES, "person:bob martins")
    _scores(memory, eng_fact, notes_fact)
    write(
        memory,
        rollup("r-eng", "person:alice chen", (eng,)),
        rollup("r-both", "person:carol diaz", (general, eng)),
        rollup("r-notes", "person:bob martins", (notes,)),
    )
    memory.locks.lock(ENG, passphrase=PASSPHRASE)
    assert ids(memory) == ["r-notes"]
    assert table(location, "SELECT rollup_id, source_id FROM rollup_sources") == [
        ("r-notes", notes)
    ]
    assert list(memory.store.fact_scores()) == [notes_fact]
    assert table(location, "SELECT fact_id FROM fact_scores") == [(notes_fact,)]
    memory.locks.unlock(ENG, passphrase=PASSPHRASE)
    assert [f.id for f in memory.facts.recall("person:alice chen")] == [eng_fact]
    assert ids(memory) == ["r-notes"]
    assert list(memory.store.fact_scores()) == [notes_fact]


def test_forgetting_a_source_removes_its_rollups_and_its_facts_scores(
    memory: stratamem.Memory, location: str
) -> None:
    eng, notes = memory.sources.get(ENG).id, memory.sources.get(NOTES).id
    eng_fact, notes_fact = fact_in(memory, ENG), fact_in(memory, NOTES, "person:bob martins")
    _scores(memory, eng_fact, notes_fact)
    write(
        memory,
        rollup("r-eng", "person:alice chen", (eng, notes)),
        rollup("r-notes", "person:bob martins", (notes,)),
    )
    memory.sources.forget(ENG)
    assert ids(memory) == ["r-notes"]
    assert list(memory.store.fact_scores()) == [notes_fact]
    assert table(location, "SELECT count(*) FROM rollup_sources") == [(1,)]
    memory.sources.forget(NOTES)
    assert ids(memory) == []
    assert table(location, "SELECT count(*) FROM fact_scores") == [(0,)]
    assert table(location, "SELECT count(*) FROM rollups") == [(0,)]
