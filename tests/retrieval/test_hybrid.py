from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import sqlite3
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

import stratamem
from stratamem.config import SearchConfig
from stratamem.embed.base import ModelSpec
from stratamem.embed.hashing import HashingEmbedder
from stratamem.retrieval.rerank import HTTPReranker
from stratamem.store.sqlite.filters import filter_sql
from stratamem.store.sqlite.store import SQLiteStore
from stratamem.types import Filters, SourceKind

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "workspace"


@pytest.fixture
def mem(tmp_path: Path) -> Iterator[stratamem.Memory]:
    with stratamem.open(tmp_path / "h.db", embedder=HashingEmbedder()) as memory:
        for part in ("slack-export", "mail/team.mbox", "notes"):
            memory.ingest(EXAMPLES / part)
        memory.embed()
        yield memory


def test_all_three_legs_run_and_every_hit_explains_itself(mem: stratamem.Memory) -> None:
    response = mem.search("why did we drop Redis for the SQLite queue?", limit=5)
    assert set(response.legs) == {"keyword", "vector", "graph"}
    assert all(state.startswith("ok") for state in response.legs.values()), response.legs
    assert len(response.hits) == 5
    for hit in response.hits:
        breakdown = hit.explain["breakdown"]
        assert set(breakdown) >= {"keyword", "vector", "graph", "freshness", "final"}
        assert breakdown["final"] == pytest.approx(hit.score, abs=1e-6)
        assert hit.explain["reason"]
    assert "redis" in response.hits[0].content.lower()


def test_vector_leg_off_without_vectors_and_says_why(tmp_path: Path) -> None:
    with stratamem.open(tmp_path / "n.db", embedder=HashingEmbedder()) as memory:
        memory.ingest(EXAMPLES / "mail" / "team.mbox")
        response = memory.search("redis")
        assert response.legs["vector"].startswith("off: no vectors yet")
        assert response.hits
        assert all(h.explain["breakdown"]["vector"] == 0 for h in response.hits)


def test_a_changed_model_turns_the_vector_leg_off(mem: stratamem.Memory, tmp_path: Path) -> None:
    other = HashingEmbedder(spec=ModelSpec(name="hashing-v1", dim=384, query_prefix="q: "))
    with stratamem.open(mem.path, embedder=other) as changed:
        response = changed.search("redis")
        assert "reindex" in response.legs["vector"]
        with pytest.raises(stratamem.StratamemError, match="reindex"):
            changed.embed()
        report = changed.reindex()
        assert report.embedded + report.cached > 0
        assert changed.search("redis").legs["vector"].startswith("ok")


@pytest.mark.parametrize(
    "change",
    [{"dim": 256}, {"name": "hashing-v2"}, {"query_prefix": "query: "}],
    ids=["same model name, another dimension", "another model", "another prefix"],
)
def test_vectors_are_never_compared_across_models_or_dimensions(
    mem: stratamem.Memory, change: dict[str, object]
) -> None:
    from dataclasses import replace

    assert mem.embedder is not None
    other = HashingEmbedder(spec=replace(mem.embedder.spec, **change))  # type: ignore[arg-type]
    with stratamem.open(mem.path, embedder=other) as changed:
        response = changed.search("why did we drop Redis for the SQLite queue?")
        assert response.legs["vector"].startswith("off: ")
        assert "reindex" in response.legs["vector"]
        assert response.hits  # the keyword and graph legs still answer
        assert all(h.explain["breakdown"]["vector"] == 0.0 for h in response.hits)
        assert changed.search("redis", mode="vector").hits == ()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_searches_with_its_own_embedding_thread(mem: stratamem.Memory) -> None:
    assert mem.search("redis").legs["vector"].startswith("ok")  # the parent's thread runs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork of a threaded process
        pid = os.fork()
    if pid == 0:
        ok = False
        try:
            response = mem.search("why did we drop Redis for the SQLite queue?")
            ok = response.legs["vector"].startswith("ok") and bool(response.hits)
        finally:
            os._exit(0 if ok else 1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail("the child's search never finished: its embedding thread did not run")


class FailingEmbedder(HashingEmbedder):
    def embed_batch(self, texts: Sequence[str], *, role: str = "passage"):  # type: ignore[override]
        if role == "query":
            raise stratamem.StratamemError("model server unreachable")
        return super().embed_batch(texts, role=role)  # type: ignore[arg-type]


def test_an_embedding_failure_degrades_to_the_other_legs(tmp_path: Path) -> None:
    with stratamem.open(tmp_path / "f.db", embedder=FailingEmbedder()) as memory:
        memory.ingest(EXAMPLES / "mail" / "team.mbox")
        memory.embed()
        response = memory.search("redis")
        assert "model server unreachable" in response.legs["vector"]
        assert response.hits


@pytest.mark.parametrize(
    "query", ["", "   ", "?!?", '"AND" OR NEAR(', "x" * 10_000, "the of and a"]
)
def test_odd_queries_never_crash(mem: stratamem.Memory, query: str) -> None:
    response = mem.search(query)
    assert response.total >= len(response.hits)


def test_filters_apply_before_the_limit_in_every_leg(mem: stratamem.Memory) -> None:
    # #incidents holds few chunks; the best global matches are elsewhere.
    response = mem.search("Redis queue release", sources=["slack:#incidents"], limit=5)
    assert response.hits
    assert {h.tree_scope for h in response.hits} == {"slack:#incidents"}
    for mode in ("keyword", "vector", "graph"):
        one = mem.search("Redis queue incident", sources=["slack:#incidents"], mode=mode)
        assert {h.tree_scope for h in one.hits} <= {"slack:#incidents"}


def test_same_query_same_ranking(mem: stratamem.Memory) -> None:
    first = [h.node_id for h in mem.search("release slipped to April").hits]
    assert first == [h.node_id for h in mem.search("release slipped to April").hits]


def test_budget_packs_cards_without_dropping_hits(mem: stratamem.Memory) -> None:
    response = mem.search("queue incident postmortem", limit=8, budget=300)
    assert len(response.cards) == len(response.hits) == 8
    assert sum(c.tokens for c in response.cards) <= 300
    forms = [c.form for c in response.cards]
    assert set(forms) <= {"full", "compact", "line"}
    assert "line" in forms or "compact" in forms
    roomy = mem.search("queue incident postmortem", limit=8, budget=20_000)
    assert [c.form for c in roomy.cards] == ["full"] * 8
    assert [c.hit.node_id for c in roomy.cards] == [c.hit.node_id for c in response.cards]
    tiny = mem.search("queue incident postmortem", limit=8, budget=30)
    assert 0 < len(tiny.cards) < 8
    assert any("did not fit" in note for note in tiny.notes)


def test_tier0_items_are_boosted(mem: stratamem.Memory) -> None:
    plain = mem.search("Redis SQLite queue decision", limit=20)
    boosted = [h for h in plain.hits if h.explain["breakdown"]["boost"] > 1]
    tagged = [h for h in plain.hits if {"decision", "pinned"} & set(h.topics)]
    assert [h.node_id for h in boosted] == [h.node_id for h in tagged]


class _RerankHandler(http.server.BaseHTTPRequestHandler):
    mode = "ok"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.mode == "slow":
            time.sleep(2)
        if self.mode == "error":
            self.send_response(500)
            self.end_headers()
            return
        # Scores prefer the shortest document: an order unlike the fused one.
        docs = body["documents"]
        results = [{"index": i, "relevance_score": 1.0 / (1 + len(d))} for i, d in enumerate(docs)]
        payload = json.dumps({"results": results}).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            pass  # the client gave up (the timeout case)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def rerank_server() -> Iterator[tuple[str, type[_RerankHandler]]]:
    handler = type("Handler", (_RerankHandler,), {"mode": "ok"})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = False  # server_close() waits for a sleeping handler to finish
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def test_rerank_reorders_the_top_and_failures_keep_the_fused_order(
    mem: stratamem.Memory, rerank_server: tuple[str, type[_RerankHandler]]
) -> None:
    url, handler = rerank_server
    fused = mem.search("queue", limit=5, rerank=False)
    mem.reranker = HTTPReranker(url, timeout=5)
    mem.config = SearchConfig(rerank_timeout_s=1.0)
    reranked = mem.search("queue", limit=5, diversify=False)
    lengths = [len(h.content) for h in reranked.hits]
    assert lengths == sorted(lengths)
    assert any("reranked the top" in n for n in reranked.notes)
    assert all(h.explain["breakdown"]["rerank"] is not None for h in reranked.hits)
    for mode, words in (("error", "failed"), ("slow", "timed out")):
        handler.mode = mode
        kept = mem.search("queue", limit=5)
        assert any(words in n and "fused order kept" in n for n in kept.notes), kept.notes
        assert [h.node_id for h in kept.hits] == [
            h.node_id for h in mem.search("queue", limit=5, rerank=False).hits
        ]
    assert fused.hits


def test_the_vector_index_follows_the_store_in_place(mem: stratamem.Memory) -> None:
    leg = mem.vectors
    assert leg is not None
    first = leg.index()
    before = len(first)
    mem.forget("mbox:team")
    after = leg.index()
    assert after is first  # synced in place, not rebuilt
    assert len(after) == before - 12
    mem.ingest(EXAMPLES / "mail" / "team.mbox")
    mem.embed()
    assert len(leg.index()) == before
    assert leg.index() is first
    hits = mem.search("Redis", mode="vector", sources=["mbox:team"]).hits
    assert hits


def test_a_search_writes_nothing_so_caches_of_the_store_stay_valid(
    mem: stratamem.Memory,
) -> None:
    store = mem.store
    assert isinstance(store, SQLiteStore)
    mem.search("why did we drop Redis for the SQLite queue?")
    before = store.write_state()
    mem.search("who owns the phoenix release and the billing migration?")
    assert store.write_state() == before


def test_the_vectors_mmr_weighs_are_the_stored_ones(mem: stratamem.Memory) -> None:
    import numpy as np

    leg = mem.vectors
    assert leg is not None
    ids = [row[0] for row in mem.store.conn.execute("SELECT id FROM chunks ORDER BY id LIMIT 30")]
    from_store = leg.vectors(ids)  # no index built yet: read from the store
    leg.index()
    from_index = leg.vectors([*ids, "no-such-chunk"])
    assert list(from_index) == list(from_store) == ids
    for node in ids:
        np.testing.assert_allclose(from_index[node], from_store[node], atol=1e-6)


def _nodes_by_entities_in_sql(
    store: SQLiteStore,
    weights: dict[str, float],
    filters: Filters,
    limit: int,
    exclude: list[str],
) -> list[tuple[str, float]]:
    where, params = filter_sql(filters)
    values = ",".join("(?, ?)" for _ in weights)
    skip = f"AND e.node_id NOT IN ({','.join('?' * len(exclude))})"
    return [
        (row[0], row[1])
        for row in store.conn.execute(
            f"""WITH q(entity_id, weight) AS (VALUES {values})
                SELECT e.node_id, sum(q.weight) AS score
                FROM q JOIN entity_index e ON e.entity_id = q.entity_id
                JOIN chunks c ON c.id = e.node_id JOIN sources s ON s.id = c.source_id
                WHERE {where} {skip}
                GROUP BY e.node_id ORDER BY score DESC, e.node_id LIMIT ?""",
            (*[x for pair in weights.items() for x in pair], *params, *exclude, limit),
        )
    ]


@pytest.mark.parametrize("locked", [False, True])
def test_the_in_memory_entity_postings_rank_as_the_sql_query_does(
    mem: stratamem.Memory, locked: bool
) -> None:
    store = mem.store
    assert isinstance(store, SQLiteStore)
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
    assert isinstance(store, SQLiteStore)
    entity = store.conn.execute(
        "SELECT entity_id FROM entity_index GROUP BY entity_id ORDER BY count(*) DESC, 1"
    ).fetchone()[0]
    before = store.entity_frequencies([entity])[entity]
    ranked = store.nodes_by_entities({entity: 1.0}, Filters(), 1000)
    assert len(ranked) == before
    node = next(iter(ranked))
    # A write on this connection.
    store.conn.execute(
        "DELETE FROM entity_index WHERE entity_id = ? AND node_id = ?", (entity, node)
    )
    assert store.entity_frequencies([entity])[entity] == before - 1
    assert node not in store.nodes_by_entities({entity: 1.0}, Filters(), 1000)
    # A commit by another connection to the same file.
    other = sqlite3.connect(store.path)
    with other:
        other.execute(
            """INSERT INTO entity_index (entity_id, node_id, kind, surface, source_id)
               SELECT ?, id, 'topic', 'x', source_id FROM chunks WHERE id = ?""",
            (entity, node),
        )
    other.close()
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
        store.conn.execute("DELETE FROM entity_index WHERE entity_id = ?", (entity,))
        assert store.entity_frequencies([entity]) == {}
        raise RuntimeError("roll back")
    assert store.entity_frequencies([entity])[entity] == before
    agrees()
    chunks = store.chunk_count()
    with contextlib.suppress(RuntimeError), store.transaction():
        store.conn.execute("DELETE FROM chunks WHERE id = ?", (node,))
        assert store.chunk_count() == chunks - 1
        raise RuntimeError("roll back")
    assert store.chunk_count() == chunks

    # New chunks (appended to what is held), then removed ones (read again).
    source = tmp_path / "more.md"
    source.write_text("# Kickoff\n\nAlice Chen and @bob met about #phoenix and Redis.\n")
    mem.ingest(source)
    agrees()
    mem.forget("mbox:team")
    agrees()


def test_the_keyword_leg_of_a_hybrid_search_says_which_index_answered(
    mem: stratamem.Memory,
) -> None:
    assert mem.search("redis queue").legs["keyword"].startswith("ok: ")
    assert "FTS5" not in mem.search("redis queue").legs["keyword"]
    assert "FTS5" in mem.search("redis job_queue").legs["keyword"]
