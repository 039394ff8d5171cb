"""Every hit of a recall carries a relevance comparable across queries (a chunk's as search
gives it, a fact's from its own signals), shown going down the merged list;
``min_relevance`` drops what is below it and ``nothing_relevant`` says when nothing reaches
the floor, on every door."""

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
from stratamem.retrieval.relevance import Calibration
from stratamem.testing import HashingEmbedder

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "workspace"
MATCHING = "why did we drop Redis for the job queue?"
UNRELATED = "zebra giraffe savanna migration photographs"


@pytest.fixture(scope="module")
def memory(module_location: str) -> Iterator[stratamem.Memory]:
    with stratamem.open(module_location, embedder=HashingEmbedder()) as opened:
        for part in ("slack-export", "mail/team.mbox", "notes"):
            opened.ingest(EXAMPLES / part)
        opened.indexes.embed()
        opened.facts.remember(
            "topic:job queue", "runs_on", "SQLite, after Redis was dropped", evidence=[]
        )
        opened.facts.remember("topic:job queue", "owned_by", "the platform team", evidence=[])
        yield opened


def _own(memory: stratamem.Memory, query: str) -> dict[str, float]:
    """Each hit's own relevance, before the merged list shows it: a chunk's from search
    (whose top hit shows its own), a fact's from its raw signals."""
    calibration = Calibration.load(memory.config.calibration)
    own = {h.node_id: h.relevance for h in memory.search(query, limit=50).hits}
    facts = memory.facts.search(query, limit=50)
    own.update({h.fact.id: calibration.fact(h.signals()) for h in facts})
    return {k: v for k, v in own.items() if v is not None}


@pytest.mark.parametrize("query", [MATCHING, UNRELATED, "who owns the job queue"])
def test_every_hit_has_a_relevance_going_down_the_merged_list(
    memory: stratamem.Memory, query: str
) -> None:
    found = memory.recall(query, limit=20)
    assert found.hits
    values = [h.relevance for h in found.hits]
    assert all(v is not None and 0.0 <= v <= 1.0 for v in values)
    assert values == sorted(values, reverse=True)  # type: ignore[type-var]
    own = _own(memory, query)
    for hit in found.hits:
        # The shown figure is the hit's own, or lower where a hit above it claims less.
        assert hit.relevance is not None
        assert hit.relevance <= own[hit.node_id] + 1e-12
    top = found.hits[0]
    assert top.relevance == pytest.approx(own[top.node_id])


def test_a_fact_carries_the_relevance_of_its_own_signals(memory: stratamem.Memory) -> None:
    facts = memory.recall("who owns the job queue", types=["fact"], limit=5)
    assert facts.hits
    assert {h.explain["type"] for h in facts.hits} == {"fact"}
    listed = memory.facts.query("who owns the job queue", limit=5)
    assert [h.relevance for h in facts.hits] == pytest.approx(
        [h.relevance for h in listed.hits][: len(facts.hits)]
    )


def test_a_matching_query_finds_something_relevant_and_an_unrelated_one_nothing(
    memory: stratamem.Memory,
) -> None:
    matching = memory.recall(MATCHING)
    unrelated = memory.recall(UNRELATED)
    assert matching.nothing_relevant is False
    assert unrelated.nothing_relevant is True
    assert unrelated.hits, "the floor is not applied unless asked: the closest are still shown"
    assert matching.to_dict()["nothing_relevant"] is False
    assert unrelated.to_dict()["nothing_relevant"] is True


def test_min_relevance_drops_the_hits_below_it(memory: stratamem.Memory) -> None:
    every = memory.recall(MATCHING, limit=20)
    values = [h.relevance or 0.0 for h in every.hits]
    floor = values[len(values) // 2]
    kept = memory.recall(MATCHING, limit=20, min_relevance=floor)
    assert [h.node_id for h in kept.hits] == [
        h.node_id for h, v in zip(every.hits, values, strict=True) if v >= floor
    ]
    assert kept.nothing_relevant is False
    above = memory.recall(MATCHING, min_relevance=1.0)
    assert above.hits == ()
    assert above.nothing_relevant is True
    packed = memory.recall(MATCHING, limit=20, budget=400, min_relevance=floor)
    assert all((c.hit.relevance or 0.0) >= floor for c in packed.cards)


@pytest.mark.parametrize("bad", [-0.1, 1.01, math.nan])
def test_a_bad_min_relevance_is_refused_by_python(memory: stratamem.Memory, bad: float) -> None:
    with pytest.raises(ValueError, match="min_relevance must be a number from 0 to 1"):
        memory.recall(MATCHING, min_relevance=bad)


# -- the doors: the operation (HTTP and MCP run it) and the CLI ---------------------------


@pytest.mark.parametrize("bad", [-0.1, 1.01, math.nan, "high"])
def test_a_bad_min_relevance_is_refused_in_one_line_by_the_operation(
    memory: stratamem.Memory, bad: object
) -> None:
    with pytest.raises(InvalidArgument) as raised:
        call(Context(memory), "recall", {"query": MATCHING, "min_relevance": bad})
    message = str(raised.value)
    assert "min_relevance" in message
    assert "\n" not in message


def test_the_operation_answers_relevance_and_nothing_relevant(memory: stratamem.Memory) -> None:
    ctx = Context(memory)
    found = call(ctx, "recall", {"query": MATCHING})
    assert found["nothing_relevant"] is False
    values = [h["relevance"] for h in found["hits"]]
    assert values == sorted(values, reverse=True)
    assert {h["type"] for h in found["hits"]} >= {"fact"}
    floor = values[0] - 0.001  # the wire rounds to 3 places
    kept = call(ctx, "recall", {"query": MATCHING, "min_relevance": floor})
    assert [h["relevance"] for h in kept["hits"]] == [v for v in values if v >= floor]
    cards = call(ctx, "recall", {"query": MATCHING, "budget": 500, "min_relevance": floor})
    assert cards["nothing_relevant"] is False
    assert all(c["relevance"] >= floor for c in cards["cards"])
    assert call(ctx, "recall", {"query": UNRELATED})["nothing_relevant"] is True
    none = call(ctx, "recall", {"query": MATCHING, "min_relevance": 1.0})
    assert none["hits"] == []
    assert none["nothing_relevant"] is True


def _cli(memory: stratamem.Memory, *args: str) -> Any:
    location = str(getattr(memory.store, "location", memory.path))
    return CliRunner().invoke(
        main,
        ["--db", location, *args],
        env={"STRATAMEM_EMBED_MODEL": "hashing"},
        catch_exceptions=False,
    )


def test_the_cli_takes_min_relevance_and_answers_nothing_relevant(
    memory: stratamem.Memory,
) -> None:
    shown = _cli(memory, "recall", MATCHING, "--json")
    assert shown.exit_code == 0, shown.output
    as_json = json.loads(shown.output)
    assert as_json["nothing_relevant"] is False
    assert all("relevance" in h for h in as_json["hits"])
    floored = json.loads(_cli(memory, "recall", MATCHING, "--json", "--min-relevance", "1").output)
    assert floored["hits"] == []
    assert floored["nothing_relevant"] is True
    refused = _cli(memory, "recall", MATCHING, "--min-relevance", "1.5")
    assert refused.exit_code != 0
    assert "min_relevance" in refused.output
