"""Facts that match a query: BM25 over what they say, fused with their vectors, gated like
every read."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

import stratamem
from stratamem.memory.search import rank
from stratamem.retrieval.query import query_terms
from stratamem.testing import HashingEmbedder

ROOT = Path(__file__).resolve().parents[2]
WORKSPACE = ROOT / "examples" / "workspace"
NOW = datetime(2024, 4, 1, tzinfo=UTC)
SAID = [
    ("person:carol diaz", "leads", "the on-call rotation for phoenix"),
    ("person:bob martins", "owns", "the job queue migration"),
    ("person:alice chen", "approved", "replacing redis with sqlite"),
    ("topic:phoenix", "release_date", "april fifth"),
]


def count(path: Path, table: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


@pytest.fixture
def memory(tmp_path: Path) -> stratamem.Memory:
    path = tmp_path / "facts.db"
    memory = stratamem.open(path, embedder=HashingEmbedder())
    memory.ingest(WORKSPACE / "slack-export", parallel=False, trees=False)
    memory.ingest(WORKSPACE / "notes", parallel=False, trees=False)
    # The notes' front matter states facts at ingest (see test_structure.py): these tests
    # rank the facts stated below alone.
    for fact in memory.recall():
        memory.retract(fact.id)
    memory.embed()
    eng = memory.search("deploy", sources=["slack:#eng"], mode="keyword").hits[0].node_id
    note = memory.search("redis", sources=["notes:*"], mode="keyword").hits[0].node_id
    for i, (subject, predicate, obj) in enumerate(SAID):
        evidence = [note] if "redis" in obj else [eng]
        memory.remember(subject, predicate, obj, evidence=evidence, now=NOW.replace(minute=i))
    return memory


def test_facts_are_embedded_when_written_where_the_store_has_vectors(
    memory: stratamem.Memory,
) -> None:
    assert count(Path(memory.path), "fact_vectors") == len(SAID)


def test_a_store_without_vectors_writes_facts_without_them(tmp_path: Path) -> None:
    with stratamem.open(tmp_path / "plain.db", embedder=HashingEmbedder()) as plain:
        plain.remember("topic:x", "state", "open", now=NOW)
        assert count(tmp_path / "plain.db", "fact_vectors") == 0
        assert [h.fact.object for h in plain.search_facts("open state")] == ["open"]


def test_the_best_match_comes_first(memory: stratamem.Memory) -> None:
    hits = memory.search_facts("who leads the on-call rotation")
    assert hits[0].fact.subject == "person:carol diaz"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_sources_narrow_the_facts_ranked(memory: stratamem.Memory) -> None:
    found = memory.search_facts("redis sqlite queue migration", sources=["notes:notes"])
    assert {h.fact.object for h in found} == {"replacing redis with sqlite"}
    everywhere = memory.search_facts("redis sqlite queue migration", limit=10)
    assert {h.fact.object for h in everywhere} >= {
        "replacing redis with sqlite",
        "the job queue migration",
    }


def test_bm25_alone_ranks_by_the_words(memory: stratamem.Memory) -> None:
    facts = memory.recall()
    ranked = rank(facts, query_terms("queue migration"), limit=10)
    assert [h.fact.object for h in ranked] == ["the job queue migration"]


def test_a_principal_searches_only_the_facts_it_may_read(memory: stratamem.Memory) -> None:
    memory.add_principal("bot", "team")
    with stratamem.open(memory.path, principal="bot", embedder=HashingEmbedder()) as bot:
        seen = {h.fact.object for h in bot.search_facts("redis sqlite", limit=50)}
        assert "replacing redis with sqlite" not in seen
        with pytest.raises(stratamem.errors.NotFoundError):
            bot.search_facts("redis", sources=["notes:notes"])


def test_locking_seals_the_vectors_and_unlocking_restores_them(
    memory: stratamem.Memory,
) -> None:
    path = Path(memory.path)
    before = count(path, "fact_vectors")
    memory.lock("notes:notes", passphrase="correct horse")
    assert count(path, "fact_vectors") == before - 1
    assert "replacing redis with sqlite" not in {
        h.fact.object for h in memory.search_facts("redis sqlite", limit=50)
    }
    memory.unlock("notes:notes", passphrase="correct horse")
    assert count(path, "fact_vectors") == before
    assert memory.search_facts("redis sqlite")[0].fact.object == "replacing redis with sqlite"


def test_forgetting_a_source_removes_its_fact_vectors(memory: stratamem.Memory) -> None:
    memory.forget("notes:notes")
    assert count(Path(memory.path), "fact_vectors") == len(SAID) - 1
