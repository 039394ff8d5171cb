"""The seven primitives: semantics, limits, defaults and edge cases."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

import stratamem
from stratamem.config import TreeConfig
from stratamem.embed.base import ModelSpec, Vectors
from stratamem.embed.hashing import HashingEmbedder
from stratamem.errors import NotFoundError
from stratamem.retrieval import primitives as p
from stratamem.types import Filters, Mention, NodeKind, SourceKind

FIXTURES = Path(__file__).parents[1] / "fixtures"
SMALL = TreeConfig(input_token_budget=40, summary_fanout=2, flush_age_days=1.0)
DAY = timedelta(days=1)
EPOCH = datetime(2024, 3, 1, tzinfo=UTC)


def _jsonl(path: Path, channel: str, days: Sequence[float], texts: Sequence[str]) -> None:
    lines = [
        json.dumps(
            {
                "text": text,
                "author": "alice" if i % 2 else "bob",
                "ts": (EPOCH + timedelta(days=day)).isoformat(),
                "channel": channel,
            }
        )
        for i, (day, text) in enumerate(zip(days, texts, strict=True))
    ]
    path.write_text("\n".join(lines) + "\n")


TEXTS = [
    "bob: the phoenix release is blocked on the redis queue migration",
    "alice: decision we drop redis and move jobs to sqlite",
    "bob: staging ran the sqlite queue for four hours without errors",
    "alice: the budget review for q2 moves to thursday",
    "bob: carol owns the on-call rota for the outage follow-up",
    "alice: phoenix 2.0 ships on april 5 after a week of soak",
]


@pytest.fixture(scope="module")
def memory(
    module_location: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[stratamem.Memory]:
    """Two chat sources, trees sealed and embedded; shared by the module, so tests that change
    it put it back."""
    tmp_path = tmp_path_factory.mktemp("primitives")
    with stratamem.open(module_location, embedder="hashing", tree_config=SMALL) as mem:
        for name, offset in (("eng", 0.0), ("ops", 0.25)):
            path = tmp_path / f"{name}.jsonl"
            days = [offset + i * 0.5 for i in range(len(TEXTS) * 4)]
            _jsonl(path, name, days, [f"{t} ({n})" for n in range(4) for t in TEXTS])
            mem.ingest(path, format="jsonl", scope=f"chat:{name}")
        mem.indexes.embed()
        mem.trees.flush()
        yield mem


def _levels(mem: stratamem.Memory) -> dict[int, int]:
    rows = mem.store.conn.execute(
        "SELECT level, count(*) FROM summaries WHERE deleted = 0 GROUP BY level"
    )
    return {int(a): int(b) for a, b in rows}


def test_the_fixture_has_a_tree_of_several_levels(memory: stratamem.Memory) -> None:
    levels = _levels(memory)
    assert levels.get(1, 0) >= 4
    assert levels.get(2, 0) >= 2


# -- query_source ---------------------------------------------------------------------------


def test_query_source_one_source_newest_first(memory: stratamem.Memory) -> None:
    response = memory.query_source("chat:eng", limit=50)
    assert response.hits
    assert {h.tree_scope for h in response.hits} == {"chat:eng"}
    assert all(h.node_kind is NodeKind.SUMMARY and h.level >= 1 for h in response.hits)
    ends = [h.time_end for h in response.hits]
    assert ends == sorted(ends, reverse=True)  # type: ignore[type-var]
    assert response.total == len(response.hits)


def test_query_source_limit_zero_means_ten_and_total_counts_all(
    memory: stratamem.Memory,
) -> None:
    everything = memory.query_source(limit=1000)
    response = memory.query_source(limit=0)
    assert len(response.hits) == min(10, everything.total)
    assert response.total == everything.total
    assert response.truncated == (everything.total > 10)


def test_query_source_unknown_source_is_empty(memory: stratamem.Memory) -> None:
    response = p.query_source(memory.store, source="chat:nope")
    assert response.hits == ()
    assert response.total == 0
    assert response.truncated is False
    # Through the API, a source named that the reader cannot see is an error instead.
    with pytest.raises(NotFoundError, match="no source with id or scope 'chat:nope'"):
        memory.query_source("chat:nope")


def test_query_source_by_kind_and_platform(memory: stratamem.Memory) -> None:
    kind = memory.sources.list()[0].kind.value
    assert memory.query_source(source_kind=kind, limit=100).total == (
        memory.query_source(limit=100).total
    )
    other = "email" if kind != "email" else "chat"
    assert memory.query_source(source_kind=other).total == 0
    assert memory.query_source(source_kind="jsonl", limit=100).total > 0  # a platform


def test_query_source_time_window_keeps_overlapping_summaries(memory: stratamem.Memory) -> None:
    now = EPOCH + timedelta(days=3)
    response = memory.query_source("chat:eng", time_window_days=1, now=now, limit=100)
    assert response.hits
    for hit in response.hits:
        assert hit.time_end is not None
        assert hit.time_start is not None
        assert hit.time_end >= now - DAY
        assert hit.time_start <= now


def test_query_source_with_a_query_ranks_by_similarity(memory: stratamem.Memory) -> None:
    plain = memory.query_source(limit=100)
    ranked = memory.query_source(query="redis sqlite queue migration", limit=100)
    assert ranked.total == plain.total
    scores = [h.score for h in ranked.hits]
    assert scores == sorted(scores, reverse=True)
    assert {h.node_id for h in ranked.hits} == {h.node_id for h in plain.hits}
    top = ranked.hits[0].content.lower()
    assert "redis" in top or "sqlite" in top


class _Failing(HashingEmbedder):
    def embed_batch(self, texts: Sequence[str], *, role: str = "passage") -> Vectors:  # type: ignore[override]
        if role == "query":
            raise RuntimeError("model gone")
        return super().embed_batch(texts, role="passage")


def test_a_query_that_cannot_be_embedded_keeps_the_newest_first_order(
    memory: stratamem.Memory,
) -> None:
    plain = p.query_source(memory.store, limit=100)
    failing = _Failing()
    ranked = p.query_source(memory.store, query="redis", embedder=failing, limit=100)
    assert [h.node_id for h in ranked.hits] == [h.node_id for h in plain.hits]


def test_summaries_without_vectors_sort_last(memory: stratamem.Memory) -> None:
    other = HashingEmbedder(spec=ModelSpec(name="hashing-other", dim=64))
    ranked = p.query_source(memory.store, query="redis", embedder=other, limit=100)
    plain = p.query_source(memory.store, limit=100)
    # No summary has a vector of that model: all keep their incoming order.
    assert [h.node_id for h in ranked.hits] == [h.node_id for h in plain.hits]


# -- query_global ---------------------------------------------------------------------------


def test_query_global_rejects_a_reversed_window(memory: stratamem.Memory) -> None:
    with pytest.raises(ValueError, match="before since"):
        memory.query_global(since=EPOCH + DAY, until=EPOCH)


def test_query_global_spans_sources_within_the_window(memory: stratamem.Memory) -> None:
    since, until = EPOCH + DAY, EPOCH + 2 * DAY
    response = memory.query_global(since=since, until=until, limit=100)
    assert {h.tree_scope for h in response.hits} == {"chat:eng", "chat:ops"}
    for hit in response.hits:
        assert hit.time_start is not None
        assert hit.time_end is not None
        assert hit.time_start <= until
        assert hit.time_end >= since
    outside = memory.query_global(since=EPOCH - 10 * DAY, until=EPOCH - 9 * DAY)
    assert outside.total == 0


# -- query_topic ----------------------------------------------------------------------------


def _tag(mem: stratamem.Memory, entity: str, node_ids: Sequence[str]) -> None:
    mention = Mention(entity_id=entity, kind="topic", surface=entity)
    with mem.store.transaction():
        mem.store.insert_mentions((chunk, [mention]) for chunk in mem.store.chunks(node_ids))


def test_query_topic_blank_is_empty(memory: stratamem.Memory) -> None:
    assert memory.query_topic("   ").total == 0


def test_query_topic_finds_summaries_and_leaves(memory: stratamem.Memory) -> None:
    response = memory.query_topic("person:alice", limit=100)
    kinds = {h.node_kind for h in response.hits}
    assert NodeKind.LEAF in kinds
    assert NodeKind.SUMMARY in kinds
    for hit in response.hits:
        assert "person:alice" in hit.entities


def test_query_topic_applies_the_window_before_the_lookup_cap(
    store_location: str, tmp_path: Path
) -> None:
    """Far more than 200 old mentions and a few new ones: the window must find the new ones
    (capping first and filtering after would return nothing)."""
    with stratamem.open(store_location, embedder=None) as mem:
        path = tmp_path / "big.jsonl"
        days = [i / 100 for i in range(300)] + [50.0, 50.1, 50.2]
        _jsonl(path, "big", days, [f"phoenix note {i}" for i in range(303)])
        mem.ingest(path, format="jsonl", scope="chat:big", trees=False)
        ids = [r[0] for r in mem.store.conn.execute("SELECT id FROM chunks ORDER BY seq")]
        _tag(mem, "topic:phoenix", ids)
        since = EPOCH + timedelta(days=49)
        response = mem.query_topic("topic:phoenix", since=since, limit=0)
        assert response.total == 3
        assert [h.content for h in response.hits] == [
            "phoenix note 302",
            "phoenix note 301",
            "phoenix note 300",
        ]
        assert mem.query_topic("topic:phoenix").total == 303
        with pytest.raises(ValueError, match="before since"):
            mem.query_topic("topic:phoenix", since=since, until=since - DAY)


# -- cover_window ---------------------------------------------------------------------------


def test_cover_window_rejects_a_reversed_window(memory: stratamem.Memory) -> None:
    with pytest.raises(ValueError, match="before since"):
        memory.cover_window(since=EPOCH + DAY, until=EPOCH)


def test_cover_window_all_time_is_the_top_of_each_tree(memory: stratamem.Memory) -> None:
    response = memory.cover_window(since=EPOCH - DAY, until=EPOCH + 100 * DAY)
    top = {i for tree in memory.trees.list() for i in memory.store.trees.top_ids(tree.id)}
    summaries = {h.node_id for h in response.hits if h.node_kind is NodeKind.SUMMARY}
    assert summaries == top
    chunks = memory.stats()["chunks"]
    assert len(response.hits) < chunks / 4


def test_cover_window_groups_by_source_then_time(memory: stratamem.Memory) -> None:
    response = memory.cover_window(since=EPOCH + DAY, until=EPOCH + 5 * DAY)
    keys = [(h.tree_scope, h.time_start) for h in response.hits]
    assert keys == sorted(keys)  # type: ignore[type-var]
    assert response.total == len(response.hits)


def test_cover_window_limit(memory: stratamem.Memory) -> None:
    full = memory.cover_window(since=EPOCH + DAY, until=EPOCH + 5 * DAY, limit=0)
    assert len(full.hits) == min(full.total, p.COVER_DEFAULT_LIMIT)
    capped = memory.cover_window(since=EPOCH + DAY, until=EPOCH + 5 * DAY, limit=2)
    assert [h.node_id for h in capped.hits] == [h.node_id for h in full.hits[:2]]
    assert capped.truncated


def test_cover_window_filters_sources(memory: stratamem.Memory) -> None:
    only = memory.cover_window(
        since=EPOCH, until=EPOCH + 100 * DAY, filters=Filters(sources=("chat:ops",))
    )
    assert {h.tree_scope for h in only.hits} == {"chat:ops"}


# -- search_entities ------------------------------------------------------------------------


def test_search_entities_edge_cases(memory: stratamem.Memory) -> None:
    assert memory.search_entities("  ") == []
    assert len(memory.search_entities("a", limit=0)) <= 5
    assert memory.search_entities("%") == []  # a wildcard is a literal character
    assert memory.search_entities("_") == []
    found = memory.search_entities("ALICE")
    assert found
    assert found[0].canonical_id == "person:alice"


# -- drill_down -----------------------------------------------------------------------------


def _a_level2(mem: stratamem.Memory) -> str:
    row = mem.store.conn.execute(
        "SELECT id FROM summaries WHERE level = 2 AND deleted = 0 ORDER BY rowid LIMIT 1"
    ).fetchone()
    return str(row[0])


def test_drill_down_edge_cases(memory: stratamem.Memory) -> None:
    node = _a_level2(memory)
    assert memory.drill_down(node, max_depth=0) == []
    assert memory.drill_down("sum_unknown") == []
    leaf = memory.store.conn.execute("SELECT id FROM chunks LIMIT 1").fetchone()[0]
    assert memory.drill_down(leaf) == []


def test_drill_down_is_breadth_first_and_in_child_order(memory: stratamem.Memory) -> None:
    node = memory.get(_a_level2(memory))
    one = memory.drill_down(node.node_id)
    assert [h.node_id for h in one] == list(node.child_ids)
    assert all(h.level == 1 for h in one)
    two = memory.drill_down(node.node_id, max_depth=2)
    assert [h.node_id for h in two[: len(one)]] == list(node.child_ids)
    leaves = list(two[len(one) :])
    assert leaves
    assert all(h.node_kind is NodeKind.LEAF for h in leaves)
    expected = [c for h in one for c in h.child_ids]
    assert [h.node_id for h in leaves] == expected
    assert len(memory.drill_down(node.node_id, max_depth=2, limit=3)) == 3


def test_drill_down_with_a_query_ranks_what_it_found(memory: stratamem.Memory) -> None:
    node = _a_level2(memory)
    ranked = memory.drill_down(node, max_depth=2, query="budget review thursday")
    scores = [h.score for h in ranked]
    assert scores == sorted(scores, reverse=True)
    assert "budget" in ranked[0].content


def test_drill_down_respects_access_filters(memory: stratamem.Memory) -> None:
    node = memory.get(_a_level2(memory))
    other = "chat:ops" if node.tree_scope == "chat:eng" else "chat:eng"
    assert memory.drill_down(node.node_id, filters=Filters(sources=(other,))) == []


# -- fetch_leaves ---------------------------------------------------------------------------


def test_fetch_leaves_caps_keeps_order_and_skips_missing(memory: stratamem.Memory) -> None:
    ids = [r[0] for r in memory.store.conn.execute("SELECT id FROM chunks ORDER BY rowid DESC")]
    asked = [ids[5], "missing", ids[1], ids[3]]
    hits = memory.fetch_leaves(asked)
    assert [h.node_id for h in hits] == [ids[5], ids[1], ids[3]]
    assert all(h.node_kind is NodeKind.LEAF and h.level == 0 for h in hits)
    assert len(memory.fetch_leaves(ids[:30])) == p.MAX_BATCH
    assert memory.fetch_leaves([]) == []


def test_leaves_carry_their_tree_once_sealed(memory: stratamem.Memory) -> None:
    sealed = memory.store.conn.execute(
        "SELECT id FROM chunks WHERE parent_summary IS NOT NULL LIMIT 1"
    ).fetchone()[0]
    hit = memory.fetch_leaves([sealed])[0]
    assert hit.tree_id.startswith("tree_")
    assert hit.source_ref is not None
    assert 0.0 < hit.score <= 1.0


# -- access and latest-wins -----------------------------------------------------------------


def test_a_locked_source_is_invisible_to_every_primitive(memory: stratamem.Memory) -> None:
    node = memory.get(_a_level2(memory))
    leaf = memory.store.conn.execute(
        f"SELECT id FROM chunks WHERE source_id = {memory.store.dialect.p} LIMIT 1",
        (node.source_id,),
    ).fetchone()[0]
    memory.store.conn.execute(
        f"UPDATE sources SET locked = 1 WHERE id = {memory.store.dialect.p}", (node.source_id,)
    )
    try:
        _check_invisible(memory, node.tree_scope, node.node_id, leaf)
    finally:
        memory.store.conn.execute("UPDATE sources SET locked = 0")


def _check_invisible(memory: stratamem.Memory, scope: str, node_id: str, leaf: str) -> None:
    assert memory.query_source(scope).total == 0
    assert all(h.tree_scope != scope for h in memory.query_source(limit=100).hits)
    window = memory.cover_window(since=EPOCH - DAY, until=EPOCH + 100 * DAY)
    assert all(h.tree_scope != scope for h in window.hits)
    assert all(
        h.tree_scope != scope
        for h in memory.query_global(since=EPOCH, until=EPOCH + 100 * DAY, limit=100).hits
    )
    assert all(h.tree_scope != scope for h in memory.query_topic("person:alice", limit=100).hits)
    assert memory.drill_down(node_id) == []
    assert memory.fetch_leaves([leaf]) == []


def test_a_superseded_document_version_never_resurfaces(
    store_location: str, tmp_path: Path
) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "plan.md").write_text("# Plan\n\nWe ship phoenix on March 22.\n")
    (notes / "other.md").write_text("# Other\n\nUnrelated note about budgets.\n")
    with stratamem.open(store_location, embedder=None) as mem:
        mem.ingest(notes)
        (notes / "plan.md").write_text("# Plan\n\nWe ship phoenix on April 5 instead.\n")
        mem.ingest(notes)
        texts = [h.content for h in mem.query_source(source_kind="document", limit=100).hits]
        window = mem.cover_window(since=datetime(1970, 1, 2, tzinfo=UTC), until=datetime.now(UTC))
        texts += [h.content for h in window.hits]
        for tree in mem.trees.list():
            for top in mem.store.trees.top_ids(tree.id):
                texts += [h.content for h in mem.drill_down(top, max_depth=5)]
        joined = "\n".join(texts)
        assert "April 5" in joined
        assert "March 22" not in joined
        versions = mem.store.conn.execute(
            "SELECT version, deleted FROM summaries"
            f" WHERE doc_id LIKE {mem.store.dialect.p} ORDER BY version",
            ("%plan%",),
        ).fetchall()
        assert [tuple(v) for v in versions] == [(1, 1), (2, 0)]


# -- the wire shape -------------------------------------------------------------------------


def test_wire_shape(memory: stratamem.Memory) -> None:
    data = memory.query_source(limit=1).to_dict()
    assert set(data) == {"hits", "total", "truncated"}
    hit = data["hits"][0]
    assert hit["node_kind"] == "summary"
    assert hit["tree_kind"] == "source"
    assert hit["time_start"].endswith("Z")
    assert hit["source_ref"] is None
    assert hit["child_ids"]
    leaf = memory.fetch_leaves([hit["child_ids"][0]])
    if leaf:
        assert leaf[0].to_dict()["node_kind"] == "leaf"
    json.dumps(data)


def test_numpy_is_not_leaked_into_scores(memory: stratamem.Memory) -> None:
    ranked = memory.query_source(query="redis", limit=3)
    assert all(type(h.score) is float for h in ranked.hits)
    assert not any(isinstance(h.score, np.floating) for h in ranked.hits)


def test_kinds_filter_and_source_kind_must_agree(memory: stratamem.Memory) -> None:
    response = memory.query_source(source_kind="email", filters=Filters(kinds=(SourceKind.CHAT,)))
    assert response.total == 0


# -- ranking with search evidence -----------------------------------------------------------


def test_leaf_evidence_spreads_the_best_leaf_score_up_the_tree(memory: stratamem.Memory) -> None:
    from stratamem.retrieval.tree_hits import leaf_evidence

    node = memory.get(_a_level2(memory))
    first, second = memory.drill_down(node.node_id)[:2]
    a, b = first.child_ids[0], second.child_ids[0]
    evidence = leaf_evidence(memory.store, {a: 2.0, b: 1.0, "unsealed-or-unknown": 0.5})
    assert evidence[a] == 1.0
    assert evidence[b] == 0.5
    assert evidence["unsealed-or-unknown"] == 0.25
    assert evidence[first.node_id] == 1.0
    assert evidence[second.node_id] == 0.5
    assert evidence[node.node_id] == 1.0  # the best of everything under it
    assert leaf_evidence(memory.store, {}) == {}


def test_evidence_lifts_a_summary_whose_own_text_does_not_match(
    memory: stratamem.Memory,
) -> None:
    from stratamem.retrieval.tree_hits import rerank

    hits = list(memory.query_source(limit=100).hits)
    target = hits[-1]
    plain = rerank(memory.store, hits, "redis", memory.embedder)
    lifted = rerank(memory.store, hits, "redis", memory.embedder, evidence={target.node_id: 1.0})
    assert lifted[0].node_id == target.node_id
    assert lifted[0].score == pytest.approx(
        0.5 * next(h.score for h in plain if h.node_id == target.node_id) + 0.5
    )
    # Without an embedder the evidence alone ranks, and hits with none keep their order after.
    alone = rerank(memory.store, hits, "redis", None, evidence={target.node_id: 0.8})
    assert alone[0].node_id == target.node_id
    assert [h.node_id for h in alone[1:]] == [h.node_id for h in hits[:-1]]


def test_a_query_ranks_with_the_search_evidence(memory: stratamem.Memory) -> None:
    """The API passes the hybrid search's best leaves: the top summary holds a message that
    scores as high as the search's best."""
    query = "budget review thursday"
    found = memory.search(query, limit=100, rerank=False, diversify=False).hits
    # The messages of the same words tie, up to the last bits of their vector similarities
    # (numpy and pgvector sum a dot product in different orders).
    best = {h.node_id for h in found if h.score >= found[0].score - 1e-6}
    top = memory.query_source(query=query, limit=1).hits[0]
    under = {h.node_id for h in memory.drill_down(top.node_id, max_depth=32)}
    assert best & under
