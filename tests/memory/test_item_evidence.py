"""A fact's evidence follows the item it names: after an edit it cites the chunk the item is
derived into now, after a removal the version the removal closed, and the fact stays
believed. Evidence may be given as an item's id."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

import stratamem
from stratamem.errors import NotFoundError
from stratamem.types import RetrievalHit

CAROL = "person:carol diaz"
SAID = datetime(2024, 3, 20, 9, 30, tzinfo=UTC)
NOW = datetime(2024, 4, 1, tzinfo=UTC)


@pytest.fixture
def mem(store_location: str) -> Iterator[stratamem.Memory]:
    with stratamem.open(store_location, embedder=None) as memory:
        yield memory


def fact_hit(mem: stratamem.Memory) -> RetrievalHit:
    (hit,) = mem.facts.query("carol leads on-call").hits
    return hit


def test_a_fact_on_an_edited_item_cites_the_item_as_it_is_now(mem: stratamem.Memory) -> None:
    added = mem.items.add("Carol leads on-call", id="oncall", time=SAID)
    (chunk,) = added.chunks_added
    mem.facts.remember(CAROL, "leads", "on-call", evidence=[chunk], now=NOW)
    assert fact_hit(mem).explain["cites"] == {chunk: "memory#oncall"}
    assert fact_hit(mem).explain["evidence_items"] == {}

    edited = mem.items.edit("oncall", text="Carol leads on-call this week")
    (now_chunk,) = edited.chunks_added
    hit = fact_hit(mem)
    assert hit.explain["evidence"] == [chunk]
    assert hit.explain["cites"] == {chunk: mem.get(now_chunk).source_ref}
    assert hit.explain["evidence_items"] == {
        chunk: {"id": "oncall", "version": 2, "nodes": [now_chunk], "removed_at": None}
    }
    assert hit.source_ref == "memory#oncall"


def test_a_fact_on_a_removed_item_cites_the_closed_version_and_stays_believed(
    mem: stratamem.Memory,
) -> None:
    added = mem.items.add("Carol leads on-call", id="oncall", time=SAID)
    (chunk,) = added.chunks_added
    (fact,) = mem.facts.remember(CAROL, "leads", "on-call", evidence=[chunk], now=NOW).recorded
    mem.items.edit("oncall", text="Carol leads on-call, again")
    mem.items.rm("oncall")
    removal = mem.items.history("oncall")[-1]

    hit = fact_hit(mem)
    assert hit.explain["cites"] == {chunk: "memory#oncall"}
    assert hit.explain["evidence_items"] == {
        chunk: {
            "id": "oncall",
            "version": 2,
            "nodes": [],
            "removed_at": removal.to_dict()["recorded_at"],
        }
    }
    assert [f.id for f in mem.facts.recall(CAROL)] == [fact.id]
    (row,) = mem.facts.history(CAROL, "leads")
    assert row.believed


def test_evidence_given_as_an_item_id_follows_the_item(mem: stratamem.Memory) -> None:
    added = mem.items.add("Carol leads on-call", id="oncall", source="notes:team", time=SAID)
    (fact,) = mem.facts.remember(CAROL, "leads", "on-call", evidence=["oncall"], now=NOW).recorded
    assert fact.evidence == ("oncall",)
    assert fact.source_id == added.source_id
    (chunk,) = added.chunks_added
    assert fact_hit(mem).explain["evidence_items"] == {
        "oncall": {"id": "oncall", "version": 1, "nodes": [chunk], "removed_at": None}
    }
    (now_chunk,) = mem.items.edit("oncall", text="Carol leads on-call, confirmed").chunks_added
    hit = fact_hit(mem)
    assert hit.explain["cites"] == {"oncall": "notes:team#oncall"}
    assert hit.explain["evidence_items"]["oncall"]["nodes"] == [now_chunk]

    mem.items.rm("oncall")
    assert fact_hit(mem).explain["evidence_items"]["oncall"]["removed_at"] is not None
    with pytest.raises(NotFoundError, match="no node with id 'oncall' \\(evidence\\)"):
        mem.facts.remember(CAROL, "team", "platform", evidence=["oncall"])


def test_a_principal_reads_the_evidence_of_the_facts_it_reads_only(
    mem: stratamem.Memory,
) -> None:
    added = mem.items.add("Carol leads on-call", id="oncall", source="notes:mine", time=SAID)
    (chunk,) = added.chunks_added
    mem.facts.remember(CAROL, "leads", "on-call", evidence=[chunk], now=NOW)
    mem.items.edit("oncall", text="Carol leads on-call, said twice")
    mem.principals.add("bot", scopes=["team"])
    with mem.as_principal("bot") as bot:
        assert bot.facts.query("carol leads on-call").hits == ()
        assert bot.nodes([chunk, "oncall"]) == []
