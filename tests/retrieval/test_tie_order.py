"""Hits of equal score rank by what they hold, not by their ids: the same files ingested from
two folders of different names (so under other source ids, and other chunk ids) rank alike."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import stratamem
from conftest import Locations
from stratamem.retrieval import fusion
from stratamem.retrieval.ties import TieOrder
from stratamem.testing import HashingEmbedder

WORDS = ("amber", "birch", "cedar", "delta", "ember", "fjord", "grove", "heron", "indigo")
PAIRS = ("orion", "lyra", "vega", "draco")  # a tag each pair of notes names: the graph leg's
QUERIES = ("release plan", "release", "plan mentions", "amber release", "#lyra", "#vega")


def notes(folder: Path) -> Path:
    """Notes of the same length, each naming the release plan once (BM25 ties them), and
    each pair of them a tag (the graph leg ties them)."""
    folder.mkdir(parents=True)
    for i in range(len(WORDS) - 1):
        tag = PAIRS[i // 2]
        text = f"# Note\n\nThe #{tag} release plan mentions {WORDS[i]} and {WORDS[i + 1]}.\n"
        (folder / f"note-{i}.md").write_text(text)
    return folder


@pytest.fixture(scope="module")
def stores(
    module_location: str, locations: Locations, tmp_path_factory: pytest.TempPathFactory
) -> list[str]:
    """Two stores of the module's backend, one per folder."""
    root = tmp_path_factory.mktemp("ties")
    made = []
    for name in ("alpha", "beta"):
        db = locations.new(module_location, root, name)
        with stratamem.open(db, embedder=HashingEmbedder()) as mem:
            mem.ingest(notes(root / name / name))
            mem.indexes.embed()
        made.append(db)
    return made


def ranked(db: str, query: str, mode: str) -> list[tuple[str, float, str]]:
    with stratamem.open(db, embedder=HashingEmbedder()) as mem:
        hits = mem.search(query, mode=mode, limit=20).hits
    return [(h.content, round(h.score, 9), h.node_id) for h in hits]


@pytest.mark.parametrize("mode", ["keyword", "hybrid", "graph"])
@pytest.mark.parametrize("query", QUERIES)
def test_the_same_content_from_another_folder_ranks_alike(
    stores: list[str], query: str, mode: str
) -> None:
    first, second = (ranked(db, query, mode) for db in stores)
    assert [(c, s) for c, s, _ in first] == [(c, s) for c, s, _ in second]
    assert {n for _, _, n in first}.isdisjoint(n for _, _, n in second)  # other ids


def test_the_ranking_has_ties_the_ids_would_order_otherwise(stores: list[str]) -> None:
    """The check above can fail: scores tie, and the ids put them in other orders."""
    first, second = (ranked(db, "release plan", "keyword") for db in stores)
    assert len({s for _, s, _ in first}) < len(first)
    by_id = [
        [c for c, _, _ in sorted(hits, key=lambda h: (-h[1], h[2]))] for hits in (first, second)
    ]
    assert by_id[0] != by_id[1]


def test_fusion_breaks_ties_by_the_key_given() -> None:
    totals = {"b": 1.0, "a": 1.0, "c": 2.0}
    assert fusion.ranking(totals) == ["c", "a", "b"]
    flipped = {"a": "2", "b": "1", "c": "0"}
    assert fusion.ranking(totals, tie=flipped.__getitem__) == ["c", "b", "a"]
    assert fusion.top(totals, 2, tie=flipped.__getitem__) == ["c", "b"]
    legs = {"keyword": {"a": 1.0, "b": 1.0}}
    parts = fusion.rrf(legs, tie=flipped.__getitem__)
    assert parts["b"]["keyword"] > parts["a"]["keyword"]


class KeyStore:
    """Only what :class:`TieOrder` reads: content keys, each as its id reversed."""

    def __init__(self) -> None:
        self.read: list[str] = []

    def content_keys(self, nodes: list[str]) -> dict[str, tuple[str, int]]:
        self.read += nodes
        return {node: (node[::-1], 0) for node in nodes if not node.startswith("x")}


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 8, 13, 40, 200])
@pytest.mark.parametrize("seed", range(6))
def test_covering_only_the_top_orders_the_top_alike(n: int, seed: int) -> None:
    """Keys read only for the nodes that can reach the first ``n`` give the same first ``n``
    as keys read for every tied node, and fewer keys are read."""
    rng = random.Random(seed)
    scores = {
        f"{'x' if rng.random() < 0.1 else 'n'}{i:03d}": float(rng.randint(0, 12))
        for i in range(120)
    }
    whole, few = KeyStore(), KeyStore()
    every, top = TieOrder(whole), TieOrder(few)  # type: ignore[arg-type]
    every.cover(scores)
    top.cover(scores, top=n)
    assert fusion.top(scores, n, tie=top.key) == fusion.top(scores, n, tie=every.key)
    assert set(few.read) <= set(whole.read)
    if n < 40:
        assert len(few.read) < len(whole.read)
