"""``mem.trees``: build, flush, list, get, stats, tops, unsealed, tree_builder."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import stratamem
from stratamem.errors import NotFoundError
from stratamem.testing import HashingEmbedder
from stratamem.tree.builder import TreeBuilder

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ENG = "slack:#eng"


@pytest.fixture
def unflushed(store_location: str) -> Iterator[stratamem.Memory]:
    """The Slack fixture ingested without sealing its trees."""
    with stratamem.open(store_location, embedder=HashingEmbedder()) as memory:
        memory.ingest(FIXTURES / "slack", trees=False)
        yield memory


def test_trees_are_built_flushed_and_read(unflushed: stratamem.Memory) -> None:
    assert isinstance(unflushed.trees.tree_builder, TreeBuilder)
    built = unflushed.trees.build()
    assert not built.failed
    tree = unflushed.trees.get(ENG)
    assert tree.id in [t.id for t in unflushed.trees.list()]
    waiting = unflushed.trees.unsealed(tree.id)
    assert waiting > 0  # young buffers wait for their fan-out or their age

    flushed = unflushed.trees.flush([ENG])
    assert not flushed.failed
    assert unflushed.trees.unsealed(tree.id) == 0
    stats = unflushed.trees.stats(tree.id)
    assert stats[1][0] >= 1  # level 1: at least one summary
    tops = unflushed.trees.tops(tree.id)
    assert tops
    assert all(hit.tree_id == tree.id and hit.level >= 1 for hit in tops)


def test_an_unknown_tree_or_source_is_an_error(shared: stratamem.Memory) -> None:
    with pytest.raises(NotFoundError, match="no tree with id 'nope'"):
        shared.trees.unsealed("nope")
    with pytest.raises(NotFoundError, match="no source with id or scope 'slack:#nope'"):
        shared.trees.get("slack:#nope")


def test_the_summaries_above_a_node_are_its_ancestors_top_first(
    shared: stratamem.Memory,
) -> None:
    tree = shared.trees.get(ENG)
    top = shared.trees.tops(tree.id)[0]
    assert shared.trees.ancestors(top.node_id) == []
    node = top
    below = shared.drill_down(node.node_id)
    path = [top.node_id]
    while below:
        node = below[0]
        above = shared.trees.ancestors(node.node_id)
        assert [a.node_id for a in above] == path
        assert node.node_id in above[-1].child_ids
        path.append(node.node_id)
        below = shared.drill_down(node.node_id) if node.level > 0 else []
    assert node.level == 0  # down to a leaf
    assert shared.trees.ancestors("no-such-node") == []
