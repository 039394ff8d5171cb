"""``mem.recall``: documents, chat turns, items and facts in one ranked, typed, cited list,
with search's filters, the facts true at ``as_of``, and the reader's scopes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

import stratamem
from stratamem.embed.tokens import count_tokens
from stratamem.errors import InvalidArgument, NotFoundError
from stratamem.memory import recall as recalling
from stratamem.ops import MemoryContext, call
from stratamem.ops.wire import dumps
from stratamem.testing import HashingEmbedder
from stratamem.types import Filters, NodeKind, SearchResponse

QUESTION = "when is the atlas deadline"
T = datetime(2024, 4, 1, tzinfo=UTC)


@dataclass(frozen=True)
class World:
    memory: stratamem.Memory
    turn: str  # the chat turn the current deadline rests on
    deadline: str  # the fact true now
    closed: str  # a fact that held until 2024-05-01
    retracted: str  # a fact corrected as never true


@pytest.fixture(scope="module")
def world(module_location: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    folder = tmp_path_factory.mktemp("notes")
    (folder / "postmortem.md").write_text(
        "# Redis postmortem\n\nThe cache outage was caused by Redis eviction under load.\n"
    )
    (folder / "atlas.md").write_text(
        "# Atlas plan\n\nAtlas is the new billing service; its deadline is set by finance.\n"
    )
    with stratamem.open(module_location, embedder=HashingEmbedder()) as mem:
        mem.ingest(folder)
        said = mem.items.add_messages(
            [{"role": "user", "content": "the atlas deadline moved to June 3", "time": T}],
            user="maya",
            session="s1",
        )
        (turn,) = said.chunks_added
        mem.items.add("atlas deadline review with finance on Friday", user="maya", time=T)
        closed = mem.facts.remember(
            "topic:atlas",
            "deadline_was",
            "March 30 for atlas",
            valid_from="2024-03-01",
            valid_to="2024-05-01",
        )
        wrong = mem.facts.remember("topic:atlas", "deadline_guess", "atlas never ships")
        mem.facts.retract(wrong.recorded[0].id)
        deadline = mem.facts.remember(
            "topic:atlas", "deadline", "2024-06-03", evidence=[turn], valid_from="2024-04-01"
        )
        mem.indexes.embed()
        yield World(mem, turn, deadline.recorded[0].id, closed.recorded[0].id, wrong.recorded[0].id)


def _types(found: SearchResponse) -> list[str]:
    return [h.explain["type"] for h in found.hits]


def test_recall_returns_documents_turns_items_and_facts_ranked_and_typed(world: World) -> None:
    found = world.memory.recall(QUESTION, limit=20)
    assert {"document", "turn", "item", "fact"} <= set(_types(found))
    assert [h.score for h in found.hits] == sorted((h.score for h in found.hits), reverse=True)
    fact = next(h for h in found.hits if h.node_id == world.deadline)
    turn = next(h for h in found.hits if h.node_id == world.turn)
    # A fact cites its evidence, and keeps its raw signals; a chunk keeps its breakdown.
    assert fact.node_kind is NodeKind.FACT
    assert fact.source_ref == turn.source_ref
    assert fact.explain["bm25"] > 0
    assert fact.explain["cosine"] is not None
    assert fact.explain["recall"]["leg"] == "facts"
    assert "breakdown" in turn.explain
    assert turn.explain["recall"]["leg"] == "chunks"
    assert found.legs["facts"] == "ok"
    assert found.total >= len(found.hits)


def test_a_closed_or_retracted_fact_is_absent_unless_as_of_says_so(world: World) -> None:
    now = {h.node_id for h in world.memory.recall(QUESTION, limit=50, types=["fact"]).hits}
    assert world.deadline in now
    assert world.closed not in now
    assert world.retracted not in now
    then = world.memory.recall(QUESTION, limit=50, types=["fact"], as_of="2024-03-15").hits
    assert world.closed in {h.node_id for h in then}
    assert world.deadline not in {h.node_id for h in then}  # not true yet
    assert world.retracted not in {h.node_id for h in then}


def test_types_keep_only_those_asked(world: World) -> None:
    assert set(_types(world.memory.recall(QUESTION, types=["fact"]))) == {"fact"}
    assert set(_types(world.memory.recall(QUESTION, types=["turn", "item"]))) == {"turn", "item"}
    with pytest.raises(ValueError, match="unknown recall type 'memo'; use turn, message"):
        world.memory.recall(QUESTION, types=["memo"])
    with pytest.raises(InvalidArgument, match="recall: 'types' must hold only turn"):
        call(MemoryContext(world.memory), "recall", {"query": QUESTION, "types": ["memo"]})


def test_filters_and_identity_apply_to_both_legs(world: World) -> None:
    mem = world.memory
    docs = mem.recall(QUESTION, sources=["notes:*"], limit=50)
    assert docs.hits
    assert set(_types(docs)) == {"document"}
    assert set(_types(mem.recall(QUESTION, kinds=["document"], limit=50))) == {"document"}
    maya = mem.recall(QUESTION, user="maya", limit=50)
    # A fact lies in its evidence's source: maya's chat; those without evidence in no one's.
    assert set(_types(maya)) == {"turn", "item", "fact"}
    assert [h.node_id for h in maya.hits if h.explain["type"] == "fact"] == [world.deadline]
    assert all(h.user == "maya" for h in maya.hits)
    assert mem.recall(QUESTION, user="bob", limit=50).hits == ()
    # A fact's time is when it became true: the window keeps the deadline, not the old one.
    window = mem.recall(QUESTION, types=["fact"], since="2024-03-20", until="2024-04-02")
    assert [h.node_id for h in window.hits] == [world.deadline]
    assert mem.recall(QUESTION, types=["fact"], since="2024-05-01").hits == ()
    with pytest.raises(NotFoundError):
        mem.recall(QUESTION, sources=["no-such-source"])


def test_a_budget_packs_the_one_list_into_cards(world: World) -> None:
    found = world.memory.recall(QUESTION, limit=20, budget=120)
    assert found.cards
    assert found.budget == 120
    assert sum(c.tokens for c in found.cards) <= 120
    answer = call(MemoryContext(world.memory), "recall", {"query": QUESTION, "budget": 400})
    assert answer["used"] <= 400
    assert count_tokens(dumps(answer)) <= 400
    assert {c["type"] for c in answer["cards"]} >= {"fact"}
    whole = call(MemoryContext(world.memory), "recall", {"query": QUESTION, "explain": True})
    fact = next(h for h in whole["hits"] if h["node_id"] == world.deadline)
    assert fact["type"] == "fact"
    assert set(fact["breakdown"]) == {"bm25", "cosine"}


def test_a_principal_sees_no_hidden_fact_or_chunk_through_recall(
    world: World, tmp_path: Path
) -> None:
    mem = world.memory
    notes = next(s for s in mem.sources.list() if s.scope.startswith("notes:"))
    mem.sources.set_access(notes.scope, scopes="docs")
    mem.principals.add("reader", "docs")
    try:
        with mem.as_principal("reader") as reader:
            found = reader.recall(QUESTION, limit=100)
            assert found.hits
            assert set(_types(found)) == {"document"}
            assert reader.recall(QUESTION, types=["fact"]).hits == ()
            with pytest.raises(NotFoundError):
                reader.recall(QUESTION, sources=["facts:asserted"])
    finally:
        mem.principals.remove("reader")
        mem.sources.set_access(notes.scope, scopes=list(notes.access))


@pytest.mark.parametrize(
    "fusion",
    [
        recalling.DEFAULT_FUSION,
        recalling.Fusion("rrf", 60, 1.0),
        recalling.Fusion("parity", 10, 0.5),
        recalling.Fusion("lend", 10, 0.5, head=3, head_facts=1),
    ],
)
@pytest.mark.parametrize("types", [(), ("fact",), ("turn", "fact"), ("document",)])
def test_recall_makes_hits_of_only_the_facts_it_keeps_yet_gives_the_full_merge(
    world: World, fusion: recalling.Fusion, types: tuple[str, ...]
) -> None:
    """The facts are placed by their evidence alone and made hits only where they stand in
    the first ``limit``: the same hits as merging every fact hit, typing and cutting."""
    store = world.memory.store
    wanted = set(types) or set(recalling.TYPES)
    sources = store.sources(counts=False)
    chunks = world.memory.search(QUESTION, limit=50).hits
    facts, _, _ = recalling.fact_matches(
        store, QUESTION, filters=Filters(), as_of=None, limit=50, embedder=None
    )
    assert facts
    merged = recalling.typed(
        store, recalling.merge(chunks, recalling.fact_leg_hits(store, facts), fusion=fusion)
    )
    every = [h for h in merged if h.explain["type"] in wanted]
    for limit in (1, 3, 100):
        found, count = recalling.recalled(
            store, chunks, facts, wanted=wanted, limit=limit, fusion=fusion, sources=sources
        )
        assert found == every[:limit]
        assert count == len(every)
