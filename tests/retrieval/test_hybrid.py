from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import threading
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import stratamem
from stratamem.config import SearchConfig
from stratamem.embed.base import ModelSpec
from stratamem.retrieval.rerank import HTTPReranker
from stratamem.store.base import Store
from stratamem.store.postgres.connection import atomic, connect
from stratamem.store.tables.filters import filter_sql
from stratamem.testing import FakeModelServer, HashingEmbedder
from stratamem.types import Filters, SourceKind
from suite import PATIENCE_S

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "workspace"


def location(memory: stratamem.Memory) -> str:
    """Where ``memory``'s store is, to open it again (``path`` hides a URL's password)."""
    return str(getattr(memory.store, "location", memory.path))


@pytest.fixture(scope="module")
def ingested(module_location: str) -> str:
    """The example workspace ingested and embedded into a new store, once per backend, and
    closed: the tests get copies of it."""
    with stratamem.open(module_location, embedder=HashingEmbedder()) as memory:
        for part in ("slack-export", "mail/team.mbox", "notes"):
            memory.ingest(EXAMPLES / part)
        memory.indexes.embed()
    return module_location


@pytest.fixture(scope="module")
def shared(
    ingested: str, locations: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[stratamem.Memory]:
    """One ingested store for the tests that only read it."""
    copy = locations.copy(ingested, tmp_path_factory.mktemp("shared"), "h")
    with stratamem.open(copy, embedder=HashingEmbedder()) as memory:
        yield memory


@pytest.fixture
def mem(ingested: str, locations: Any, tmp_path: Path) -> Iterator[stratamem.Memory]:
    """An ingested store of the test's own, for the tests that change it."""
    copy = locations.copy(ingested, tmp_path, "h")
    with stratamem.open(copy, embedder=HashingEmbedder()) as memory:
        yield memory


def test_all_three_legs_run_and_every_hit_explains_itself(shared: stratamem.Memory) -> None:
    response = shared.search("why did we drop Redis for the SQLite queue?", limit=5)
    assert set(response.legs) == {"keyword", "vector", "graph"}
    assert all(state.startswith("ok") for state in response.legs.values()), response.legs
    assert len(response.hits) == 5
    for hit in response.hits:
        breakdown = hit.explain["breakdown"]
        assert set(breakdown) >= {"keyword", "vector", "graph", "freshness", "final"}
        assert breakdown["final"] == pytest.approx(hit.score, abs=1e-6)
        assert hit.explain["reason"]
    assert "redis" in response.hits[0].content.lower()


def test_vector_leg_off_without_vectors_and_says_why(store_location: str) -> None:
    with stratamem.open(store_location, embedder=HashingEmbedder()) as memory:
        memory.ingest(EXAMPLES / "mail" / "team.mbox")
        response = memory.search("redis")
        assert response.legs["vector"].startswith("off: no vectors yet")
        assert response.hits
        assert all(h.explain["breakdown"]["vector"] == 0 for h in response.hits)


def test_a_changed_model_turns_the_vector_leg_off(mem: stratamem.Memory, tmp_path: Path) -> None:
    other = HashingEmbedder(spec=ModelSpec(name="hashing-v1", dim=384, query_prefix="q: "))
    with stratamem.open(location(mem), embedder=other) as changed:
        response = changed.search("redis")
        assert "reindex" in response.legs["vector"]
        with pytest.raises(stratamem.StratamemError, match="reindex"):
            changed.indexes.embed()
        report = changed.indexes.reindex()
        assert report.embedded + report.cached > 0
        assert changed.search("redis").legs["vector"].startswith("ok")


@pytest.mark.parametrize(
    "change",
    [{"dim": 256}, {"name": "hashing-v2"}, {"query_prefix": "query: "}],
    ids=["same model name, another dimension", "another model", "another prefix"],
)
def test_vectors_are_never_compared_across_models_or_dimensions(
    shared: stratamem.Memory, change: dict[str, object]
) -> None:
    from dataclasses import replace

    assert shared.embedder is not None
    other = HashingEmbedder(spec=replace(shared.embedder.spec, **change))  # type: ignore[arg-type]
    with stratamem.open(location(shared), embedder=other) as changed:
        response = changed.search("why did we drop Redis for the SQLite queue?")
        assert response.legs["vector"].startswith("off: ")
        assert "reindex" in response.legs["vector"]
        assert response.hits  # the keyword and graph legs still answer
        assert all(h.explain["breakdown"]["vector"] == 0.0 for h in response.hits)
        assert changed.search("redis", mode="vector").hits == ()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_searches_with_its_own_embedding_thread(shared: stratamem.Memory) -> None:
    assert shared.search("redis").legs["vector"].startswith("ok")  # the parent's thread runs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork of a threaded process
        pid = os.fork()
    if pid == 0:
        ok = False
        try:
            response = shared.search("why did we drop Redis for the SQLite queue?")
            ok = response.legs["vector"].startswith("ok") and bool(response.hits)
        finally:
            os._exit(0 if ok else 1)
    statuses: list[int] = []
    waiter = threading.Thread(target=lambda: statuses.append(os.waitpid(pid, 0)[1]))
    waiter.start()
    waiter.join(timeout=PATIENCE_S)
    if waiter.is_alive():
        os.kill(pid, signal.SIGKILL)
        waiter.join()
        pytest.fail("the child's search never finished: its embedding thread did not run")
    assert os.waitstatus_to_exitcode(statuses[0]) == 0


class FailingEmbedder(HashingEmbedder):
    def embed_batch(self, texts: Sequence[str], *, role: str = "passage"):  # type: ignore[override]
        if role == "query":
            raise stratamem.StratamemError("model server unreachable")
        return super().embed_batch(texts, role=role)  # type: ignore[arg-type]


def test_an_embedding_failure_degrades_to_the_other_legs(shared: stratamem.Memory) -> None:
    with stratamem.open(location(shared), embedder=FailingEmbedder()) as memory:
        memory.indexes.embed()  # the store's vectors are this model's: nothing to embed
        response = memory.search("redis")
        assert "model server unreachable" in response.legs["vector"]
        assert response.hits


@pytest.mark.parametrize(
    "query", ["", "   ", "?!?", '"AND" OR NEAR(', "x" * 10_000, "the of and a"]
)
def test_odd_queries_never_crash(shared: stratamem.Memory, query: str) -> None:
    response = shared.search(query)
    assert response.total >= len(response.hits)


def test_filters_apply_before_the_limit_in_every_leg(shared: stratamem.Memory) -> None:
    # #incidents holds few chunks; the best global matches are elsewhere.
    response = shared.search("Redis queue release", sources=["slack:#incidents"], limit=5)
    assert response.hits
    assert {h.tree_scope for h in response.hits} == {"slack:#incidents"}
    for mode in ("keyword", "vector", "graph"):
        one = shared.search("Redis queue incident", sources=["slack:#incidents"], mode=mode)
        assert {h.tree_scope for h in one.hits} <= {"slack:#incidents"}


def test_same_query_same_ranking(shared: stratamem.Memory) -> None:
    first = [h.node_id for h in shared.search("release slipped to April").hits]
    assert first == [h.node_id for h in shared.search("release slipped to April").hits]


def test_partial_ranking_ranks_as_the_full_sort(
    shared: stratamem.Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The search takes its head and seeds with ``fusion.top``; ranking every candidate and
    cutting, as it once did, gives the same hits, scores and explanations."""
    from stratamem.retrieval import fusion

    queries = ["release slipped to April", "why did we drop Redis?", "queue incident", "Q3 plan"]

    def hits(query: str) -> list[tuple[str, float, str]]:
        response = shared.search(query, limit=15)
        return [(h.node_id, h.score, str(h.explain["reason"])) for h in response.hits]

    fast = [hits(q) for q in queries]
    monkeypatch.setattr(
        fusion, "top", lambda totals, n, *, tie: fusion.ranking(totals, tie=tie)[:n]
    )
    assert [hits(q) for q in queries] == fast
    assert all(fast)


def test_budget_packs_cards_without_dropping_hits(shared: stratamem.Memory) -> None:
    response = shared.search("queue incident postmortem", limit=8, budget=300)
    assert len(response.cards) == len(response.hits) == 8
    assert sum(c.tokens for c in response.cards) <= 300
    forms = [c.form for c in response.cards]
    assert set(forms) <= {"full", "compact", "line"}
    assert "line" in forms or "compact" in forms
    roomy = shared.search("queue incident postmortem", limit=8, budget=20_000)
    assert [c.form for c in roomy.cards] == ["full"] * 8
    assert [c.hit.node_id for c in roomy.cards] == [c.hit.node_id for c in response.cards]
    tiny = shared.search("queue incident postmortem", limit=8, budget=30)
    assert 0 < len(tiny.cards) < 8
    assert any("did not fit" in note for note in tiny.notes)


def test_tier0_items_are_boosted(shared: stratamem.Memory) -> None:
    plain = shared.search("Redis SQLite queue decision", limit=20)
    boosted = [h for h in plain.hits if h.explain["breakdown"]["boost"] > 1]
    tagged = [h for h in plain.hits if {"decision", "pinned"} & set(h.topics)]
    assert [h.node_id for h in boosted] == [h.node_id for h in tagged]


def shortest_first(query: str, documents: Sequence[str]) -> list[float]:
    """Scores that prefer the shortest document: an order unlike the fused one."""
    return [1.0 / (1 + len(text)) for text in documents]


@pytest.fixture(scope="module")
def rerank_server() -> Iterator[FakeModelServer]:
    with FakeModelServer(scores=shortest_first) as server:
        yield server


def test_rerank_reorders_the_top_and_failures_keep_the_fused_order(
    shared: stratamem.Memory, rerank_server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    fused = shared.search("queue", limit=5, rerank=False)
    monkeypatch.setattr(shared, "reranker", HTTPReranker(rerank_server.url, timeout=PATIENCE_S))
    monkeypatch.setattr(shared, "config", SearchConfig(rerank_timeout_s=0.5))
    reranked = shared.search("queue", limit=5, diversify=False)
    lengths = [len(h.content) for h in reranked.hits]
    assert lengths == sorted(lengths)
    assert any("reranked the top" in n for n in reranked.notes)
    assert all(h.explain["breakdown"]["rerank"] is not None for h in reranked.hits)
    rerank_server.queue(500)  # the next rerank fails
    rerank_server.queue(200, {"results": []}, delay=30.0)  # the one after never comes in time
    try:
        for words in ("failed", "timed out"):
            kept = shared.search("queue", limit=5)
            assert any(words in n and "fused order kept" in n for n in kept.notes), kept.notes
            assert [h.node_id for h in kept.hits] == [
                h.node_id for h in shared.search("queue", limit=5, rerank=False).hits
            ]
    finally:
        rerank_server.reset()  # sends the held answer to the client that gave up on it
    assert fused.hits


def test_the_vector_index_follows_the_store_in_place(mem: stratamem.Memory) -> None:
    leg = mem.vectors
    assert leg is not None
    first = leg.index()
    before = len(first)
    mem.sources.forget("mbox:team")
    after = leg.index()
    assert after is first  # synced in place, not rebuilt
    assert len(after) == before - 12
    mem.ingest(EXAMPLES / "mail" / "team.mbox")
    mem.indexes.embed()
    assert len(leg.index()) == before
    assert leg.index() is first
    hits = mem.search("Redis", mode="vector", sources=["mbox:team"]).hits
    assert hits


def test_a_search_writes_nothing_so_caches_of_the_store_stay_valid(
    shared: stratamem.Memory,
) -> None:
    store = shared.store
    shared.search("why did we drop Redis for the SQLite queue?")
    before = store.write_state()
    shared.search("who owns the phoenix release and the billing migration?")
    assert store.write_state() == before


def test_the_vectors_mmr_weighs_are_the_stored_ones(shared: stratamem.Memory) -> None:
    import numpy as np

    # A new opening of the store, so that its vector leg has built no index yet.
    with stratamem.open(location(shared), embedder=HashingEmbedder()) as memory:
        leg = memory.vectors
        assert leg is not None
        store = memory.store
        ids = [row[0] for row in store.conn.execute("SELECT id FROM chunks ORDER BY id LIMIT 30")]
        from_store = leg.vectors(ids)  # no index built yet: read from the store
        leg.index()
        from_index = leg.vectors([*ids, "no-such-chunk"])
    assert list(from_index) == list(from_store) == ids
    for node in ids:
        np.testing.assert_allclose(from_index[node], from_store[node], atol=1e-6)


def _nodes_by_entities_in_sql(
    store: Store,
    weights: dict[str, float],
    filters: Filters,
    limit: int,
    exclude: list[str],
) -> list[tuple[str, float]]:
    where, params = filter_sql(store.dialect, filters, store.visible_ids())
    p = store.dialect.p
    values = ",".join(f"({p}, {p})" for _ in weights)
    skip = f"AND e.node_id NOT IN ({','.join([p] * len(exclude))})" if exclude else ""
    return [
        (row[0], row[1])
        for row in store.conn.execute(
            f"""WITH q(entity_id, weight) AS (VALUES {values})
                SELECT e.node_id, sum(q.weight) AS score
                FROM q JOIN entity_index e ON e.entity_id = q.entity_id
                JOIN chunks c ON c.id = e.node_id JOIN sources s ON s.id = c.source_id
                WHERE {where} {skip}
                GROUP BY e.node_id ORDER BY score DESC, e.node_id LIMIT {p}""",
            (*[x for pair in weights.items() for x in pair], *params, *exclude, limit),
        )
    ]


@pytest.mark.parametrize("locked", [False, True])
def test_the_in_memory_entity_postings_rank_as_the_sql_query_does(
    request: pytest.FixtureRequest, ingested: str, locked: bool
) -> None:
    # Locking a source is a write, so that case gets a store of its own.
    memory: stratamem.Memory = request.getfixturevalue("mem" if locked else "shared")
    store = memory.store
    if locked:
        store.conn.execute("UPDATE sources SET locked = 1 WHERE scope = 'mbox:team'")
    entities = [
        row[0]
        for row in store.conn.execute(
            "SELECT entity_id FROM entity_index GROUP BY entity_id ORDER BY count(*) DESC, 1"
        )
    ][:40]
    # Binary fractions sum exactly in any order, so ties are ties on both sides.
    weights = {entity: 0.25 * (1 + i % 7) for i, entity in enumerate(entities)}
    exclude = [row[0] for row in store.conn.execute("SELECT id FROM chunks LIMIT 3")]
    scopes = sorted(s.scope for s in store.sources())
    for filters in (
        Filters(),
        Filters(sources=(scopes[0],)),
        Filters(sources=(scopes[-1].split(":")[0] + ":*",)),
        Filters(kinds=(SourceKind.CHAT,)),
        Filters(kinds=(SourceKind.EMAIL, SourceKind.DOCUMENT)),
    ):
        for limit in (1, 3, 100):
            found = store.nodes_by_entities(weights, filters, limit, exclude=exclude)
            expected = _nodes_by_entities_in_sql(store, weights, filters, limit, exclude)
            assert list(found.items()) == expected
            assert found or filters.sources
    frequencies = dict(
        store.conn.execute(
            "SELECT entity_id, count(*) FROM entity_index GROUP BY entity_id"
        ).fetchall()
    )
    assert store.entity_frequencies([*entities, "topic:nowhere"]) == {
        e: frequencies[e] for e in entities
    }


def test_the_entity_postings_follow_every_change_to_the_store(
    mem: stratamem.Memory, tmp_path: Path
) -> None:
    store = mem.store
    entity = store.conn.execute(
        "SELECT entity_id FROM entity_index GROUP BY entity_id ORDER BY count(*) DESC, 1"
    ).fetchone()[0]
    before = store.entity_frequencies([entity])[entity]
    ranked = store.nodes_by_entities({entity: 1.0}, Filters(), 1000)
    assert len(ranked) == before
    node = next(iter(ranked))
    # A write on this connection.
    store.conn.execute(
        f"DELETE FROM entity_index"
        f" WHERE entity_id = {store.dialect.p} AND node_id = {store.dialect.p}",
        (entity, node),
    )
    assert store.entity_frequencies([entity])[entity] == before - 1
    assert node not in store.nodes_by_entities({entity: 1.0}, Filters(), 1000)
    # A commit by another connection to the same database.
    other = connect(location(mem)) if store.name == "postgresql" else sqlite3.connect(store.path)
    p = store.dialect.p
    with contextlib.closing(other), atomic(other) if store.name == "postgresql" else other:
        other.execute(
            f"""INSERT INTO entity_index (entity_id, node_id, kind, surface, source_id)
               SELECT {p}, id, 'topic', 'x', source_id FROM chunks WHERE id = {p}""",
            (entity, node),
        )
    assert store.entity_frequencies([entity])[entity] == before
    assert node in store.nodes_by_entities({entity: 1.0}, Filters(), 1000)

    def agrees() -> None:
        counts = dict(
            store.conn.execute(
                "SELECT entity_id, count(*) FROM entity_index GROUP BY entity_id"
            ).fetchall()
        )
        assert store.entity_frequencies([*counts, "topic:nowhere"]) == counts
        top = sorted(counts, key=lambda e: (-counts[e], e))[:25]
        weights = {e: 0.5 * (1 + i % 3) for i, e in enumerate(top)}
        found = store.nodes_by_entities(weights, Filters(), 50)
        assert list(found.items()) == _nodes_by_entities_in_sql(store, weights, Filters(), 50, [])

    # Read inside a transaction that is then rolled back.
    with contextlib.suppress(RuntimeError), store.transaction():
        store.conn.execute(
            f"DELETE FROM entity_index WHERE entity_id = {store.dialect.p}", (entity,)
        )
        assert store.entity_frequencies([entity]) == {}
        raise RuntimeError("roll back")
    assert store.entity_frequencies([entity])[entity] == before
    agrees()
    chunks = store.chunk_count()
    with contextlib.suppress(RuntimeError), store.transaction():
        store.conn.execute(f"DELETE FROM chunks WHERE id = {store.dialect.p}", (node,))
        assert store.chunk_count() == chunks - 1
        raise RuntimeError("roll back")
    assert store.chunk_count() == chunks

    # New chunks (appended to what is held), then removed ones (read again).
    source = tmp_path / "more.md"
    source.write_text("# Kickoff\n\nAlice Chen and @bob met about #phoenix and Redis.\n")
    mem.ingest(source)
    agrees()
    mem.sources.forget("mbox:team")
    agrees()


def test_the_keyword_leg_of_a_hybrid_search_says_which_index_answered(
    shared: stratamem.Memory,
) -> None:
    assert shared.search("redis queue").legs["keyword"].startswith("ok: ")
    assert "FTS5" not in shared.search("redis queue").legs["keyword"]
    assert "FTS5" in shared.search("redis job_queue").legs["keyword"]


def test_tier0_cards_are_marked_and_budget_zero_returns_every_hit_whole(
    shared: stratamem.Memory,
) -> None:
    response = shared.search("Redis SQLite queue decision", limit=12, budget=0)
    assert len(response.cards) == len(response.hits) == 12
    assert all(c.form == "full" for c in response.cards)
    assert all(c.hit.content in c.text for c in response.cards)
    marked = [c.hit.node_id for c in response.cards if c.tier0]
    tagged = [h.node_id for h in response.hits if {"decision", "pinned"} & set(h.topics)]
    assert marked == tagged
    assert marked
    assert all(c.to_dict()["tier0"] == c.tier0 for c in response.cards)
    tight = shared.search("Redis SQLite queue decision", limit=12, budget=120)
    assert sum(c.tokens for c in tight.cards) <= 120
    assert [c.hit.node_id for c in tight.cards if c.tier0][:1] == marked[:1]


def _mmr_case(memory: stratamem.Memory, mmr: str) -> list[stratamem.RetrievalHit]:
    config = SearchConfig(mmr=mmr, mmr_threshold=0.5)
    return list(memory.search("queue database decision", limit=200, config=config).hits)


def test_mmr_off_keeps_the_relevance_order(shared: stratamem.Memory) -> None:
    hits = _mmr_case(shared, "off")
    assert len(hits) > 10
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    undiversified = shared.search(
        "queue database decision", limit=200, config=SearchConfig(mmr="on"), diversify=False
    )
    assert [h.node_id for h in undiversified.hits] == [h.node_id for h in hits]


def test_mmr_on_is_classic_mmr_over_the_fused_order(shared: stratamem.Memory) -> None:
    from stratamem.retrieval.mmr import mmr

    fused = _mmr_case(shared, "off")
    ids = [h.node_id for h in fused]
    assert shared.vectors is not None
    expected = mmr(ids, {h.node_id: h.score for h in fused}, shared.vectors.vectors(ids))
    on = [h.node_id for h in _mmr_case(shared, "on")]
    assert on == expected
    assert on != ids  # the case is one that classic MMR reorders


def test_mmr_duplicates_moves_only_near_duplicates(shared: stratamem.Memory) -> None:
    import numpy as np

    hits = _mmr_case(shared, "duplicates")
    assert shared.vectors is not None
    vectors = shared.vectors.vectors([h.node_id for h in hits])
    moved = 0
    for place, hit in enumerate(hits):
        above = hits[:place]
        if any(h.score < hit.score for h in above):
            # Placed below a less relevant hit: only a near-duplicate above it may do that.
            moved += 1
            sims = [float(np.dot(vectors[hit.node_id], vectors[h.node_id])) for h in above]
            assert max(sims) >= 0.5, (hit.node_id, max(sims))
    assert moved  # the case is one where the rule does reorder
    assert [h.node_id for h in hits] != [h.node_id for h in _mmr_case(shared, "on")]


def test_mmr_auto_diversifies_chat_turns_and_leaves_documents_to_the_duplicate_rule(
    shared: stratamem.Memory,
) -> None:
    from stratamem.retrieval.mmr import mmr

    chat = {s.id for s in shared.sources.list() if s.kind is SourceKind.CHAT}
    auto, duplicates = _mmr_case(shared, "auto"), _mmr_case(shared, "duplicates")
    is_chat = [h.source_id in chat for h in duplicates]
    assert any(is_chat)  # a mixed case
    assert not all(is_chat)
    # Every kind keeps its places; the documents and mail keep their order there.
    assert [h.source_id in chat for h in auto] == is_chat
    others = [h.node_id for h in auto if h.source_id not in chat]
    assert others == [h.node_id for h in duplicates if h.source_id not in chat]
    # The chat turns come in classic MMR order among themselves.
    turns = [h for h in duplicates if h.source_id in chat]
    assert shared.vectors is not None
    vectors = shared.vectors.vectors([h.node_id for h in turns])
    relevance = {h.node_id: h.score for h in turns}
    expected = mmr([h.node_id for h in turns], relevance, vectors)
    assert [h.node_id for h in auto if h.source_id in chat] == expected
    assert expected != [h.node_id for h in turns]  # and MMR does move some of them


def test_the_mmr_setting_is_checked() -> None:
    with pytest.raises(ValueError, match="mmr must be one of"):
        SearchConfig(mmr="sometimes")
    with pytest.raises(ValueError, match="mmr_threshold"):
        SearchConfig(mmr_threshold=2.0)


def test_the_mmr_settings_reach_the_search_config(tmp_path: Path) -> None:
    from stratamem.config import load
    from stratamem.errors import ConfigError

    home = {"XDG_CONFIG_HOME": str(tmp_path)}
    assert load(home).search_config().mmr == "auto"
    settings = load(
        {**home, "STRATAMEM_SEARCH_MMR": "off", "STRATAMEM_SEARCH_MMR_THRESHOLD": "0.8"}
    )
    config = settings.search_config()
    assert (config.mmr, config.mmr_threshold) == ("off", 0.8)
    assert settings.origin("search.mmr") == "env STRATAMEM_SEARCH_MMR"
    with pytest.raises(ConfigError, match=r"search\.mmr"):
        load({**home, "STRATAMEM_SEARCH_MMR": "sometimes"})


# -- chat turns read in context ---------------------------------------------------------------

FILLER = (
    "the printer on the third floor jams again",
    "lunch is at noon on friday",
    "my cat knocked the plant over",
    "the train was late this morning",
    "who has the projector remote",
    "happy birthday to the design team",
)


class _Turns:
    """One chat source per ``(scope, texts)`` pair, one chunk per turn, a minute apart."""

    name = "turns"

    def __init__(self, chats: Sequence[tuple[str, Sequence[str]]]) -> None:
        self.chats = chats

    def read(self, path: Path, ctx: Any) -> Iterator[Any]:
        from datetime import UTC, datetime, timedelta

        from stratamem.ingest.model import Record, SourceStream

        start = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
        for scope, texts in self.chats:
            yield SourceStream(
                scope=scope,
                kind=SourceKind.CHAT,
                platform="test",
                location=str(path),
                records=[
                    Record(text=text, ref=f"{scope}/{n}", time=start + timedelta(minutes=n))
                    for n, text in enumerate(texts)
                ],
                title=scope,
            )


def _conversation(question: str, answer: str, repeats: int = 3) -> list[str]:
    """Filler, the question, its answer (which shares no word with it), filler."""
    return [*FILLER * repeats, question, answer, *FILLER[::-1] * repeats]


@pytest.fixture
def chat_memory(store_location: str) -> Iterator[stratamem.Memory]:
    from stratamem.eval.runner import WHOLE_DOCS

    with stratamem.open(store_location, embedder=HashingEmbedder()) as memory:
        memory.ingest(
            Path("turns"),
            connector=_Turns(
                [
                    (
                        "chat:ops",
                        _conversation(
                            "which database runs the job queue now", "Postgres, since March"
                        ),
                    ),
                    ("chat:misc", _conversation("what colour is the new logo", "A dark teal")),
                ]
            ),
            chunking=WHOLE_DOCS,
        )
        memory.indexes.embed()
        yield memory


def _places(memory: stratamem.Memory, config: SearchConfig, **options: Any) -> list[str]:
    hits = memory.search("job queue database", limit=40, config=config, **options).hits
    return [h.content for h in hits]


def test_a_chat_turn_is_found_through_the_turn_before_it(chat_memory: stratamem.Memory) -> None:
    # Expansion off, so that only the context can lift the answer.
    on = SearchConfig(expand_seeds=0, mmr="off")
    off = replace(on, context_share=0.0)
    with_context, without = _places(chat_memory, on), _places(chat_memory, off)
    answer = "Postgres, since March"
    assert with_context[0] == without[0] == "which database runs the job queue now"
    # The question and the two turns either side of it lead; without the context the answer
    # is one more unrelated turn.
    assert answer in with_context[:5]
    assert answer not in without[:5]
    hit = next(
        h
        for h in chat_memory.search("job queue database", limit=5, config=on).hits
        if h.content == answer
    )
    breakdown = hit.explain["breakdown"]
    assert breakdown["context"] > 0
    assert breakdown["context"] <= breakdown["keyword"] + breakdown["vector"] + 1e-9
    assert "from the turns around it" in hit.explain["reason"]


def test_the_context_never_crosses_a_filter(chat_memory: stratamem.Memory) -> None:
    config = SearchConfig(expand_seeds=0, mmr="off")
    # The answer is a minute after the question: a window that ends before it keeps it out.
    from datetime import UTC, datetime, timedelta

    question_at = datetime(2026, 3, 2, 9, 0, tzinfo=UTC) + timedelta(minutes=len(FILLER) * 3)
    hits = chat_memory.search(
        "job queue database", limit=40, config=config, until=question_at + timedelta(seconds=30)
    ).hits
    assert "which database runs the job queue now" in [h.content for h in hits]
    assert "Postgres, since March" not in [h.content for h in hits]
    assert all(h.time_start is not None and h.time_start <= question_at for h in hits)
    # And never reaches from one conversation into another.
    misc = chat_memory.search("job queue database", limit=40, config=config, sources=["chat:misc"])
    assert all(h.tree_scope == "chat:misc" for h in misc.hits)


def test_documents_rank_as_without_context(shared: stratamem.Memory) -> None:
    documents = ("record", "email", "document")
    on = shared.search("queue database decision", limit=30, kinds=documents)
    off = shared.search(
        "queue database decision",
        limit=30,
        kinds=documents,
        config=replace(shared.config, context_share=0.0),
    )
    assert [(h.node_id, h.score) for h in on.hits] == [(h.node_id, h.score) for h in off.hits]
    assert all(h.explain["breakdown"]["context"] == 0 for h in on.hits)


def test_spreading_keeps_the_best_turn_where_it_was() -> None:
    from stratamem.retrieval.hybrid import _spread

    own = {"q": 1.0, "a": 0.0, "x": 0.5, "doc": 0.9}
    around = {"q": [("a", 1), ("x", 2)], "a": [("q", 1), ("x", 1)], "x": [("q", 2), ("a", 1)]}
    scores, lent = _spread(own, around, 0.4)
    assert scores["doc"] == 0.9  # not a turn: untouched
    turns = ("q", "a", "x")
    assert max(scores[k] for k in turns) == pytest.approx(1.0)
    raw = {"q": 1.0 + 0.4 * 0.5, "a": 0.4 * 1.0 + 0.4 * 0.5, "x": 0.5 + 0.4 * 1.0}
    scale = 1.0 / max(raw.values())
    for key in turns:
        assert scores[key] == pytest.approx(raw[key] * scale)
        assert lent[key] == pytest.approx((raw[key] - own[key]) * scale)


def test_the_context_settings_reach_the_search_config(tmp_path: Path) -> None:
    from stratamem.config import load
    from stratamem.errors import ConfigError

    home = {"XDG_CONFIG_HOME": str(tmp_path)}
    config = load(home).search_config()
    assert (config.context_share, config.context_window) == (0.4, 2)
    config = load(
        {**home, "STRATAMEM_SEARCH_CONTEXT_SHARE": "0", "STRATAMEM_SEARCH_CONTEXT_WINDOW": "1"}
    ).search_config()
    assert (config.context_share, config.context_window) == (0.0, 1)
    with pytest.raises(ConfigError, match=r"search\.context_share"):
        load({**home, "STRATAMEM_SEARCH_CONTEXT_SHARE": "1.5"})
    with pytest.raises(ValueError, match="context_window"):
        SearchConfig(context_window=-1)
