"""Facts that match a query: BM25 over what they say, fused with their vectors, gated like
every read."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from memory_kit import rows

import stratamem
from sql_kit import statements
from stratamem.memory.search import fact_index, rank, search_facts
from stratamem.retrieval.query import query_terms
from stratamem.testing import HashingEmbedder
from stratamem.types import NodeKind

ROOT = Path(__file__).resolve().parents[2]
WORKSPACE = ROOT / "examples" / "workspace"
NOW = datetime(2024, 4, 1, tzinfo=UTC)
SAID = [
    ("person:carol diaz", "leads", "the on-call rotation for phoenix"),
    ("person:bob martins", "owns", "the job queue migration"),
    ("person:alice chen", "approved", "replacing redis with sqlite"),
    ("topic:phoenix", "release_date", "april fifth"),
]


def count(path: str, table: str) -> int:
    return int(rows(path, f"SELECT count(*) FROM {table}")[0][0])


def facts_of(path: str, scope: str) -> int:
    """How many fact rows the source of ``scope`` holds."""
    sql = "SELECT count(*) FROM facts f JOIN sources s ON s.id = f.source_id WHERE s.scope = ?"
    return int(rows(path, sql, scope)[0][0])


@pytest.fixture
def memory(store_location: str) -> Iterator[stratamem.Memory]:
    memory = stratamem.open(store_location, embedder=HashingEmbedder())
    memory.ingest(WORKSPACE / "slack-export", parallel=False, trees=False)
    memory.ingest(WORKSPACE / "notes", parallel=False, trees=False)
    # The notes' front matter states facts at ingest (see test_structure.py): these tests
    # rank the facts stated below alone.
    for fact in memory.facts.recall():
        memory.facts.retract(fact.id)
    memory.indexes.embed()
    eng = memory.search("deploy", sources=["slack:#eng"], mode="keyword").hits[0].node_id
    note = memory.search("redis", sources=["notes:*"], mode="keyword").hits[0].node_id
    for i, (subject, predicate, obj) in enumerate(SAID):
        evidence = [note] if "redis" in obj else [eng]
        memory.facts.remember(subject, predicate, obj, evidence=evidence, now=NOW.replace(minute=i))
    with memory:
        yield memory


def test_facts_are_embedded_when_written_where_the_store_has_vectors(
    memory: stratamem.Memory,
    store_location: str,
) -> None:
    # Those stated at ingest, before the store had a model, were embedded as it took one
    # (embed); those stated after it, as they were written.
    stated = {r[0] for r in rows(store_location, "SELECT id FROM facts")}
    assert len(stated) > len(SAID)
    assert {r[0] for r in rows(store_location, "SELECT fact_id FROM fact_vectors")} == stated
    memory.facts.remember("topic:heron", "state", "nesting", now=NOW)
    assert count(store_location, "fact_vectors") == len(stated) + 1


def test_a_store_without_vectors_writes_facts_without_them(store_location: str) -> None:
    with stratamem.open(store_location, embedder=HashingEmbedder()) as plain:
        plain.facts.remember("topic:x", "state", "open", now=NOW)
        assert count(store_location, "fact_vectors") == 0
        assert [h.fact.object for h in plain.facts.search("open state")] == ["open"]


def test_the_best_match_comes_first(memory: stratamem.Memory) -> None:
    hits = memory.facts.search("who leads the on-call rotation")
    assert hits[0].fact.subject == "person:carol diaz"
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_sources_narrow_the_facts_ranked(memory: stratamem.Memory) -> None:
    found = memory.facts.search("redis sqlite queue migration", sources=["notes:notes"])
    assert {h.fact.object for h in found} == {"replacing redis with sqlite"}
    everywhere = memory.facts.search("redis sqlite queue migration", limit=10)
    assert {h.fact.object for h in everywhere} >= {
        "replacing redis with sqlite",
        "the job queue migration",
    }


def test_bm25_alone_ranks_by_the_words(memory: stratamem.Memory) -> None:
    facts = memory.facts.recall()
    ranked = rank(facts, query_terms("queue migration"), limit=10)
    assert [h.fact.object for h in ranked] == ["the job queue migration"]


def test_a_principal_searches_only_the_facts_it_may_read(
    memory: stratamem.Memory, store_location: str
) -> None:
    memory.principals.add("bot", "team")
    with stratamem.open(store_location, principal="bot", embedder=HashingEmbedder()) as bot:
        seen = {h.fact.object for h in bot.facts.search("redis sqlite", limit=50)}
        assert "replacing redis with sqlite" not in seen
        with pytest.raises(stratamem.errors.NotFoundError):
            bot.facts.search("redis", sources=["notes:notes"])


def test_locking_seals_the_vectors_and_unlocking_restores_them(
    memory: stratamem.Memory,
    store_location: str,
) -> None:
    path = store_location
    before = count(path, "fact_vectors")
    notes = facts_of(path, "notes:notes")
    assert notes >= 1
    memory.locks.lock("notes:notes", passphrase="correct horse")
    assert count(path, "fact_vectors") == before - notes
    assert "replacing redis with sqlite" not in {
        h.fact.object for h in memory.facts.search("redis sqlite", limit=50)
    }
    memory.locks.unlock("notes:notes", passphrase="correct horse")
    assert count(path, "fact_vectors") == before
    assert memory.facts.search("redis sqlite")[0].fact.object == "replacing redis with sqlite"


def test_forgetting_a_source_removes_its_fact_vectors(
    memory: stratamem.Memory, store_location: str
) -> None:
    others = count(store_location, "facts") - facts_of(store_location, "notes:notes")
    memory.sources.forget("notes:notes")
    assert count(store_location, "fact_vectors") == others


# -- the reader's index ------------------------------------------------------------------------


def reads_facts(sql: list[str]) -> bool:
    return any("FROM facts" in q for q in sql)


def test_repeated_queries_use_the_index_and_a_write_renews_it(memory: stratamem.Memory) -> None:
    memory.facts.search("on-call rotation")
    with statements(memory) as sql:
        again = memory.facts.search("queue migration")
    assert not reads_facts(sql)
    assert again[0].fact.object == "the job queue migration"
    memory.facts.remember("person:dan", "owns", "the queue dashboards", now=NOW.replace(minute=30))
    with statements(memory) as sql:
        found = memory.facts.search("queue dashboards")
    assert reads_facts(sql)
    assert found[0].fact.object == "the queue dashboards"
    memory.facts.retract(found[0].fact.id, now=NOW.replace(minute=31))
    assert "the queue dashboards" not in {
        h.fact.object for h in memory.facts.search("queue dashboards", limit=50)
    }


def test_another_connection_s_write_is_seen_on_the_next_query(
    memory: stratamem.Memory,
    store_location: str,
) -> None:
    before = memory.facts.search("zebra crossing", limit=50)
    assert "a zebra crossing" not in {h.fact.object for h in before}
    with stratamem.open(store_location, embedder=HashingEmbedder()) as other:
        other.facts.remember("topic:roads", "has", "a zebra crossing", now=NOW.replace(minute=40))
    assert memory.facts.search("zebra crossing")[0].fact.object == "a zebra crossing"


def test_the_index_ranks_as_scoring_the_rows_afresh(memory: stratamem.Memory) -> None:
    memory.facts.remember(
        "person:carol diaz", "leads", "the queue review", now=NOW.replace(minute=50)
    )
    asks: list[dict[str, Any]] = [
        {"query": "queue rotation redis phoenix on-call"},
        {"query": "leads", "subject": "person:Carol Diaz"},
        {"query": "leads queue", "as_of": NOW},
        {"query": "leads rotation", "known_at": NOW.replace(minute=45)},
        {"query": "redis queue", "sources": ["slack:#eng"]},
    ]
    embedder = memory._query_embedder("queue")
    assert embedder is not None
    for ask in asks:
        text = ask.pop("query")
        for with_vectors in (embedder, None):
            options = {"valid_at": ask.get("as_of"), "known_at": ask.get("known_at")}
            options |= {"subject": ask.get("subject"), "sources": ask.get("sources", ())}
            cached = search_facts(memory.store, text, embedder=with_vectors, limit=50, **options)
            fresh = search_facts(
                memory.store, text, embedder=with_vectors, limit=50, cached=False, **options
            )
            assert cached, (text, ask)
            assert cached == fresh, (text, ask)
    # BM25 alone over the rows true now: exactly ``rank`` over what recall returns.
    alone = search_facts(memory.store, "queue rotation", limit=50)
    # (``rank`` is the plain scorer: its hits carry no raw signals or relevance.)
    plain = rank(memory.facts.recall(), query_terms("queue rotation"), limit=50)
    assert [(h.fact, h.score) for h in alone] == [(h.fact, h.score) for h in plain]
    assert [h.bm25 for h in alone] == [h.score for h in plain]


def test_a_principal_s_index_holds_none_of_the_facts_it_cannot_see(
    memory: stratamem.Memory,
    store_location: str,
) -> None:
    memory.principals.add("bot", "team")
    memory.facts.search("redis sqlite")  # the owner's index holds every fact
    with stratamem.open(store_location, principal="bot", embedder=HashingEmbedder()) as bot:
        assert bot.facts.search("phoenix")
        with bot.store.read_snapshot():
            index = fact_index(bot.store)
        assert {f.source_id for f in index.facts} <= {s.id for s in bot.sources.list()}
        assert "replacing redis with sqlite" not in {f.object for f in index.facts}
        # Access given: the next query reads the rows again, with the note's facts.
        memory.sources.set_access("notes:notes", add="team")
        found = bot.facts.search("redis sqlite")
        assert found[0].fact.object == "replacing redis with sqlite"


# -- facts as hits -------------------------------------------------------------------------------


def test_query_facts_answers_fact_hits_in_the_order_of_search_facts(
    memory: stratamem.Memory,
) -> None:
    found = memory.facts.query("who leads the on-call rotation", limit=2)
    ranked = memory.facts.search("who leads the on-call rotation", limit=2)
    assert [h.node_id for h in found.hits] == [h.fact.id for h in ranked]
    assert [h.score for h in found.hits] == [h.score for h in ranked]
    assert found.total == len(memory.facts.search("who leads the on-call rotation", limit=100))
    assert found.truncated == (found.total > 2)
    hit, fact = found.hits[0], ranked[0].fact
    assert hit.node_kind is NodeKind.FACT
    assert hit.content == "carol diaz leads the on-call rotation for phoenix"
    assert (hit.time_start, hit.time_end) == (fact.valid_from, fact.valid_to)
    assert hit.source_id == fact.source_id
    assert hit.tree_scope == memory.sources.get(fact.source_id).scope == "slack:#eng"
    assert (hit.tree_id, hit.level, hit.entities) == ("", 0, ("person:carol diaz",))
    evidence = memory.get(fact.evidence[0])
    assert hit.source_ref == evidence.source_ref
    assert hit.explain == {
        "reason": "fact",
        "subject": "person:carol diaz",
        "predicate": "leads",
        "object": "the on-call rotation for phoenix",
        "object_is_entity": False,
        "single": True,
        "origin": "asserted",
        "confidence": 1.0,
        "recorded_at": "2024-04-01T00:00:00Z",
        "expired_at": None,
        "evidence": list(fact.evidence),
        "cites": {fact.evidence[0]: evidence.source_ref},
        "evidence_items": {},
    }
    wire = hit.to_dict()
    assert (wire["node_kind"], wire["time_end"]) == ("fact", None)


def test_query_facts_takes_the_search_facts_filters(memory: stratamem.Memory) -> None:
    assert memory.facts.query("", limit=5).hits == ()
    only = memory.facts.query("redis sqlite queue", sources=["notes:notes"])
    assert [h.explain["object"] for h in only.hits] == ["replacing redis with sqlite"]
    bob = memory.facts.query("leads", subject="person:Bob Martins").hits
    assert [h.explain["subject"] for h in bob] == ["person:bob martins"]
    earlier = memory.facts.query("leads rotation", known_at=NOW.replace(second=1) - timedelta(1))
    assert earlier.total == 0
    with pytest.raises(ValueError, match="entity id"):
        memory.facts.query("leads", subject="carol")
    with pytest.raises(stratamem.errors.NotFoundError):
        memory.facts.query("leads", sources=["nope:nope"])


def test_a_corrected_fact_shows_when_it_stopped_being_believed(memory: stratamem.Memory) -> None:
    fact = memory.facts.search("job queue migration")[0].fact
    memory.facts.retract(fact.id, now=NOW.replace(hour=1))
    assert fact.id not in {h.node_id for h in memory.facts.query("job queue migration").hits}
    then = memory.facts.query("job queue migration", known_at=NOW.replace(minute=30)).hits
    assert then[0].node_id == fact.id
    assert then[0].explain["expired_at"] == "2024-04-01T01:00:00Z"
