"""Every hit of a search carries a relevance comparable across queries, shown going down the
list; ``min_relevance`` drops what is below it and ``nothing_relevant`` says when nothing
reaches the floor, on every door."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import stratamem
from stratamem.cli import main
from stratamem.errors import InvalidArgument
from stratamem.ops.context import MemoryContext as Context
from stratamem.ops.table import call
from stratamem.testing import HashingEmbedder

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "workspace"
MATCHING = "why did we drop Redis for the job queue?"
UNRELATED = "zebra giraffe savanna migration photographs"
MODES = ("hybrid", "keyword", "vector", "graph")


@pytest.fixture(scope="module")
def memory(module_location: str) -> Iterator[stratamem.Memory]:
    with stratamem.open(module_location, embedder=HashingEmbedder()) as opened:
        for part in ("slack-export", "mail/team.mbox", "notes"):
            opened.ingest(EXAMPLES / part)
        opened.indexes.embed()
        opened.facts.remember(
            "topic:job queue", "runs_on", "SQLite, after Redis was dropped", evidence=[]
        )
        yield opened


def _relevance(hits: Any) -> list[float]:
    values = [h.relevance for h in hits]
    assert all(v is not None for v in values)
    return values


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("query", [MATCHING, UNRELATED, "release date of Phoenix"])
def test_every_hit_has_a_relevance_within_0_and_1_going_down_the_list(
    memory: stratamem.Memory, mode: str, query: str
) -> None:
    found = memory.search(query, mode=mode, limit=10)
    values = _relevance(found.hits)
    assert all(0.0 <= v <= 1.0 for v in values)
    assert values == sorted(values, reverse=True)


def test_cards_carry_the_relevance_of_their_hits(memory: stratamem.Memory) -> None:
    found = memory.search(MATCHING, budget=600)
    assert found.cards
    by_id = {h.node_id: h.relevance for h in found.hits}
    for card in found.cards:
        assert card.hit.relevance == by_id[card.hit.node_id]
        assert card.to_dict()["hit"]["relevance"] is not None


def test_a_matching_query_finds_something_relevant_and_an_unrelated_one_nothing(
    memory: stratamem.Memory,
) -> None:
    matching = memory.search(MATCHING)
    unrelated = memory.search(UNRELATED)
    assert not matching.nothing_relevant
    assert unrelated.nothing_relevant
    assert unrelated.hits, "the floor is not applied unless asked: the closest are still shown"
    assert matching.hits[0].relevance > unrelated.hits[0].relevance  # type: ignore[operator]
    assert matching.to_dict()["nothing_relevant"] is False
    assert unrelated.to_dict()["nothing_relevant"] is True


@pytest.mark.parametrize("mode", MODES)
def test_min_relevance_drops_the_hits_below_it(memory: stratamem.Memory, mode: str) -> None:
    every = memory.search(MATCHING, mode=mode, limit=20)
    values = _relevance(every.hits)
    floor = values[len(values) // 2] if values else 0.5
    kept = memory.search(MATCHING, mode=mode, limit=20, min_relevance=floor)
    assert [h.node_id for h in kept.hits] == [
        h.node_id for h, v in zip(every.hits, values, strict=True) if v >= floor
    ]
    above = memory.search(MATCHING, mode=mode, min_relevance=1.0)
    assert above.hits == ()
    assert above.nothing_relevant


def test_the_fact_search_gives_relevance_and_takes_a_floor(memory: stratamem.Memory) -> None:
    found = memory.facts.query("what does the job queue run on", limit=5)
    assert found.hits
    values = _relevance(found.hits)
    assert all(0.0 <= v <= 1.0 for v in values)
    assert found.nothing_relevant is not None
    searched = memory.facts.search("what does the job queue run on")
    assert [h.relevance for h in searched][: len(values)] == values
    assert searched[0].signals().keys() >= {"keyword", "fused"}
    assert searched[0].bm25 > 0
    assert searched[0].ceiling >= searched[0].bm25 / 3
    none = memory.facts.query("what does the job queue run on", min_relevance=1.0)
    assert none.hits == ()
    assert none.nothing_relevant is True
    assert none.to_dict()["nothing_relevant"] is True


@pytest.mark.parametrize("bad", [-0.1, 1.01, math.nan])
def test_a_bad_min_relevance_is_refused_by_python(memory: stratamem.Memory, bad: float) -> None:
    with pytest.raises(ValueError, match="min_relevance must be a number from 0 to 1"):
        memory.search(MATCHING, min_relevance=bad)
    with pytest.raises(ValueError, match="min_relevance must be a number from 0 to 1"):
        memory.facts.query(MATCHING, min_relevance=bad)


# -- the doors: the operation (HTTP and MCP run it) and the CLI ---------------------------


@pytest.mark.parametrize("name", ["search", "query_facts"])
@pytest.mark.parametrize("bad", [-0.1, 1.01, math.nan, "high"])
def test_a_bad_min_relevance_is_refused_in_one_line_by_the_operation(
    memory: stratamem.Memory, name: str, bad: object
) -> None:
    with pytest.raises(InvalidArgument) as raised:
        call(Context(memory), name, {"query": MATCHING, "min_relevance": bad})
    message = str(raised.value)
    assert "min_relevance" in message
    assert "\n" not in message


def test_the_operation_answers_relevance_and_nothing_relevant(memory: stratamem.Memory) -> None:
    ctx = Context(memory)
    found = call(ctx, "search", {"query": MATCHING})
    assert found["nothing_relevant"] is False
    values = [h["relevance"] for h in found["hits"]]
    assert values == sorted(values, reverse=True)
    floor = values[0] - 0.001  # the wire rounds to 3 places
    kept = call(ctx, "search", {"query": MATCHING, "min_relevance": floor})
    assert [h["relevance"] for h in kept["hits"]] == [v for v in values if v >= floor]
    cards = call(ctx, "search", {"query": MATCHING, "budget": 500, "min_relevance": floor})
    assert all(c["relevance"] >= floor for c in cards["cards"])
    assert call(ctx, "search", {"query": UNRELATED})["nothing_relevant"] is True
    facts = call(ctx, "query_facts", {"query": "job queue", "min_relevance": 1.0})
    assert facts["facts"] == []
    assert facts["nothing_relevant"] is True


def _cli(memory: stratamem.Memory, *args: str) -> Any:
    location = str(getattr(memory.store, "location", memory.path))
    return CliRunner().invoke(
        main,
        ["--db", location, *args],
        env={"STRATAMEM_EMBED_MODEL": "hashing"},
        catch_exceptions=False,
    )


def test_the_cli_shows_relevance_and_says_plainly_when_nothing_is_relevant(
    memory: stratamem.Memory,
) -> None:
    shown = _cli(memory, "search", UNRELATED)
    assert shown.exit_code == 0, shown.output
    assert "nothing relevant" in shown.output
    assert "relevance 0." in shown.output
    matching = _cli(memory, "search", MATCHING)
    assert "nothing relevant" not in matching.output
    as_json = json.loads(_cli(memory, "search", MATCHING, "--json", "--min-relevance", "1").output)
    assert as_json["hits"] == []
    assert as_json["nothing_relevant"] is True
    floored = _cli(memory, "search", MATCHING, "--min-relevance", "1")
    assert "none of" in floored.output
    assert "reached the relevance floor" in floored.output
    assert "no matches" in _cli(memory, "search", "zzqx", "--mode", "keyword").output
    facts = json.loads(_cli(memory, "fact", "search", "job queue", "--json").output)
    assert "nothing_relevant" in facts
    refused = _cli(memory, "search", MATCHING, "--min-relevance", "1.5")
    assert refused.exit_code != 0
    assert "min-relevance" in refused.output
