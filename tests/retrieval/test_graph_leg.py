"""The graph leg's ``bm25`` scoring: the query's entities and their co-mention neighbourhood."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import stratamem
from stratamem.retrieval.legs import GraphLeg
from stratamem.retrieval.legs.graph import graph_leg, neighbourhood
from stratamem.types import Filters

# Filler chunks naming no entity: they make the tagged ones rare (no entity is a hub).
FILLER = [f"plain note number {i} about nothing in particular" for i in range(40)]


def write(path: str, sources: dict[str, Sequence[tuple[str, str]]]) -> dict[str, str]:
    """A store at ``path`` with each source's (id, text) items; each source readable by
    the scope of its own name. Returns item id → node id."""
    nodes: dict[str, str] = {}
    with stratamem.open(path, embedder=None) as mem:
        for source, items in sources.items():
            for item_id, text in items:
                nodes[item_id] = mem.items.add(text, source=source, id=item_id).chunks_added[0]
            mem.sources.set_access(source, scopes=[source])
        mem.principals.add("reader", ["public"])
    return nodes


def leg(path: str, query: str, *, principal: str | None = None) -> dict[str, float]:
    with stratamem.open(path, embedder=None, principal=principal) as mem:
        found, _ = graph_leg(mem.store, query, Filters(), 20, graph_mode="bm25")
    return found


@pytest.fixture
def store(store_location: str) -> tuple[str, dict[str, str]]:
    sources = {
        "public": [
            ("direct", "release plan #alpha #beta"),
            ("neighbour", "a note on #beta alone"),
            ("unrelated", "something about #omega"),
            *[(f"filler{i}", text) for i, text in enumerate(FILLER)],
        ]
    }
    return store_location, write(store_location, sources)


def test_a_chunk_naming_only_a_neighbour_is_found_below_a_direct_match(
    store: tuple[str, dict[str, str]],
) -> None:
    path, nodes = store
    found = leg(path, "what about #alpha")
    assert list(found)[:2] == [nodes["direct"], nodes["neighbour"]]
    assert found[nodes["direct"]] > found[nodes["neighbour"]] > 0
    assert nodes["unrelated"] not in found
    # The default scoring reads direct matches only.
    with stratamem.open(path, embedder=None) as mem:
        plain, matched = graph_leg(mem.store, "what about #alpha", Filters(), 20)
    assert list(plain) == [nodes["direct"]]
    assert list(matched) == ["tag:alpha"]


def test_the_ranking_is_deterministic(store: tuple[str, dict[str, str]]) -> None:
    path, _ = store
    first = leg(path, "#alpha and #beta")
    assert first
    for _ in range(3):
        again = leg(path, "#alpha and #beta")
        assert list(again.items()) == list(first.items())


def test_an_unknown_entity_finds_nothing(store: tuple[str, dict[str, str]]) -> None:
    path, _ = store
    assert leg(path, "#nowhere") == {}


def test_an_unknown_graph_mode_is_refused(store: tuple[str, dict[str, str]]) -> None:
    path, _ = store
    with stratamem.open(path, embedder=None) as mem:
        with pytest.raises(ValueError, match="graph_mode 'pagerank'"):
            graph_leg(mem.store, "#alpha", Filters(), 5, graph_mode="pagerank")
        with pytest.raises(ValueError, match="graph_mode 'pagerank'"):
            GraphLeg(mem.store, hub_fraction=0.05, graph_mode="pagerank")


def test_the_leg_reports_only_the_entities_the_query_names(
    store: tuple[str, dict[str, str]],
) -> None:
    path, nodes = store
    with stratamem.open(path, embedder=None) as mem:
        result = GraphLeg(mem.store, hub_fraction=0.05, graph_mode="bm25").start(
            "#alpha", Filters(), 10
        )()
    assert result.status == "ok: 2 nodes via tag:alpha"
    assert result.scores is not None
    assert set(result.scores) == {
        nodes["direct"],
        nodes["neighbour"],
    }


PUBLIC = [
    ("direct", "release plan #alpha"),
    ("gamma", "a note on #gamma alone"),
    *[(f"filler{i}", text) for i, text in enumerate(FILLER)],
]
# The only place #alpha and #gamma meet, and the only other mention of #delta.
SECRET = [("secret", "the secret merger #alpha #gamma #delta")]


def test_a_neighbour_seen_only_through_a_hidden_source_is_not_used(
    store_location: str, locations: Any, tmp_path: Path
) -> None:
    full = store_location
    nodes = write(full, {"public": PUBLIC, "secret": SECRET})
    owner = leg(full, "#alpha")
    assert nodes["gamma"] in owner
    assert nodes["secret"] in owner
    with stratamem.open(full, embedder=None, principal="reader") as mem:
        assert neighbourhood(mem.store, ["tag:alpha"]) == {"tag:alpha": 1.0}
    seen = leg(full, "#alpha", principal="reader")
    assert set(seen) == {nodes["direct"]}
    # A hidden entity answers like an unknown one.
    assert leg(full, "#delta", principal="reader") == {}
    # And the principal's answer is the one a store of the visible sources alone gives.
    alone = locations.new(store_location, tmp_path, "alone")
    alone_nodes = write(alone, {"public": PUBLIC})
    items = {node: item for item, node in nodes.items()}
    alone_items = {node: item for item, node in alone_nodes.items()}
    for query in ("#alpha", "#gamma", "#alpha #gamma", "#delta"):
        # Node ids differ between the two stores, and so may the order of tied scores.
        got = sorted((items[n], s) for n, s in leg(full, query, principal="reader").items())
        assert got == sorted((alone_items[n], s) for n, s in leg(alone, query).items())
