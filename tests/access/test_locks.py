"""Locked sources through the Python API: a lock and an unlock give back every row as it was;
while locked nothing of the source is readable, searchable, derivable or sent to a model, and
no byte of it is left in any file; a wrong or missing passphrase changes nothing; a store
opened with the source unlocked in memory reads it and writes nothing, to the file or at all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from locked_store import (
    CANARIES,
    FAST_KDF,
    FIXTURES,
    PASSPHRASE,
    SECRET,
    SECRET_ID,
    SECRET_PERSON,
    TREES,
    Db,
    build_store,
    files_of,
    residue,
    secret_lines,
    source_dump,
    store_dump,
    write_secret,
)

import stratamem
from stratamem.access import crypto
from stratamem.access.locks import PASSPHRASE_ENV, lock_source
from stratamem.api import Memory
from stratamem.embed.registry import get_embedder
from stratamem.errors import (
    LockError,
    NotFoundError,
    StoreError,
    StratamemError,
    WrongPassphrase,
)
from stratamem.retrieval.legs.keyword import sparse_index
from stratamem.retrieval.legs.vector import VectorLeg
from stratamem.retrieval.rerank import get_reranker
from stratamem.store.postgres.server import PostgresServer
from stratamem.store.tables import locks as table_locks
from stratamem.testing import FakeModelServer, HashingEmbedder
from stratamem.tree.llm import LLMSummarizer
from suite import PATIENCE_S

MODES = ("hybrid", "keyword", "vector", "graph")
# Queries that would find the secret source: its words, never a canary (a query is sent to
# the embedding server, and the canaries must not be).
QUERIES = ("Project Zqxhelion review", "Zqxanna Vorpal budget", "the #zqxlaunch plan")
EVER = {"since": datetime(1990, 1, 1, tzinfo=UTC), "until": datetime(2100, 1, 1, tzinfo=UTC)}
Copy = Callable[[], str]
Connect = Callable[[str | Path], Db]


def child_env() -> dict[str, str]:
    """A child process's environment: this one's (the index folder of the run included)."""
    return {**os.environ, "PYTHONPATH": str(Path(stratamem.__file__).parents[1])}


def leaks(found: Any) -> list[str]:
    """What of the secret source ``found`` (hits, a response, any value) shows: its canaries,
    its id, its scope, its person."""
    text = json.dumps(_plain(found), default=str).lower()
    marks = (*CANARIES, SECRET_ID, SECRET, "zqxhelion", "zqxanna")
    return [mark for mark in marks if mark in text]


def _plain(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def hit_keys(mem: Memory, query: str, mode: str) -> list[tuple[str, float]]:
    return [(h.node_id, round(h.score, 9)) for h in mem.search(query, mode=mode).hits]


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert text
    assert "\n" not in text
    return text


def sealed_rows(conn: Db) -> list[tuple[Any, ...]]:
    return sorted(
        (
            *conn.execute("SELECT * FROM sealed ORDER BY source_id, part").fetchall(),
            *conn.execute("SELECT * FROM locks ORDER BY source_id").fetchall(),
        ),
        key=repr,
    )


# -- round trip ------------------------------------------------------------------------------


def test_lock_then_unlock_puts_back_every_row_byte_for_byte(
    store_copy: Copy, open_db: Connect
) -> None:
    db = store_copy()
    conn = open_db(db)
    source_before, store_before = source_dump(conn), store_dump(conn)
    assert all(source_before[name] for name in source_before)  # every table holds some of it
    assert len({row[4] for row in source_before["summaries"]}) == 2  # two levels
    with stratamem.open(db, embedder=HashingEmbedder(), tree_config=TREES) as mem:
        searches = {(q, m): hit_keys(mem, q, m) for q in (*QUERIES, CANARIES[0]) for m in MODES}
        assert leaks(mem.search(CANARIES[0]).hits)

        locked = mem.locks.lock(SECRET, passphrase=PASSPHRASE)
        assert (locked.chunks, locked.summaries, locked.records) == (
            len(source_before["chunks"]),
            len(source_before["summaries"]),
            len(source_before["records"]),
        )
        during = source_dump(conn)
        assert during.pop("sources")[0][7] == 1  # the row stays, marked locked
        assert {name: rows for name, rows in during.items() if rows} == {}
        parts, lock = conn.execute(
            "SELECT count(*), (SELECT parts FROM locks WHERE source_id = ?) FROM sealed "
            "WHERE source_id = ?",
            (SECRET_ID, SECRET_ID),
        ).fetchone()
        assert parts == lock >= 1

        unlocked = mem.locks.unlock(SECRET, passphrase=PASSPHRASE)
        assert (unlocked.chunks, unlocked.summaries, unlocked.records) == (
            locked.chunks,
            locked.summaries,
            locked.records,
        )
        assert source_dump(conn) == source_before
        assert store_dump(conn) == store_before
        assert conn.execute("SELECT count(*) FROM sealed").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM locks").fetchone() == (0,)
        if not conn.postgres:
            conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
        assert {key: hit_keys(mem, *key) for key in searches} == searches


def test_a_source_sealed_in_many_parts_comes_back_whole_and_a_cut_one_does_not(
    store_copy: Copy,
    open_db: Connect,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(table_locks, "PART_BYTES", 2048)
    db = store_copy()
    conn = open_db(db)
    before = source_dump(conn)
    with stratamem.open(db, embedder=None) as mem:
        mem.locks.lock(SECRET, passphrase=PASSPHRASE)
        (parts,) = conn.execute("SELECT count(*) FROM sealed").fetchone()
        assert parts > 5
        mem.locks.unlock(SECRET, passphrase=PASSPHRASE)
        assert source_dump(conn) == before

        mem.locks.lock(SECRET, passphrase=PASSPHRASE)
        with conn:  # drop the last part, and make the lock count one fewer
            conn.execute(
                "DELETE FROM sealed WHERE source_id = ? AND part = "
                "(SELECT max(part) FROM sealed WHERE source_id = ?)",
                (SECRET_ID, SECRET_ID),
            )
            conn.execute("UPDATE locks SET parts = parts - 1 WHERE source_id = ?", (SECRET_ID,))
        locked = store_dump(conn), sealed_rows(conn)
        with pytest.raises(LockError, match="does not decrypt"):
            mem.locks.unlock(SECRET, passphrase=PASSPHRASE)
        assert (store_dump(conn), sealed_rows(conn)) == locked


def test_a_reused_summary_rowid_does_not_stop_an_unlock(
    store_location: str, tmp_path: Path
) -> None:
    """Summaries' rowids are handed out again on SQLite: one the locked source's newest
    summary had may be taken by another source's before the unlock. (PostgreSQL hands out
    none twice: there the unlock puts back the same summaries all the same.)"""
    data = tmp_path / "data"
    data.mkdir()
    public = data / "public.jsonl"
    lines = [json.loads(line) for line in secret_lines(30, start=100)]
    public.write_text(
        "\n".join(
            json.dumps({**line, "source": "public", "text": f"public note {n} on the roadmap"})
            for n, line in enumerate(lines)
        )
    )
    with stratamem.open(store_location, embedder=None, tree_config=TREES) as mem:
        mem.ingest(write_secret(data), trees=False)
        mem.trees.flush()
        conn = mem.store.conn
        newest = "SELECT source_id FROM summaries ORDER BY rowid DESC LIMIT 1"
        assert conn.execute(newest).fetchone()[0] == SECRET_ID
        secret = source_dump(conn)
        chunk_ids = [row[1] for row in secret["chunks"]]
        parents = mem.store.trees.parents_of_chunks(chunk_ids)
        assert len(parents) == len(chunk_ids)
        mem.locks.lock(SECRET, passphrase=PASSPHRASE)
        mem.ingest(public, trees=False)
        mem.trees.flush()
        taken = conn.execute(
            "SELECT count(*) FROM summaries WHERE rowid IN ({})".format(
                ",".join(str(row[0]) for row in secret["summaries"])
            )
        ).fetchone()[0]
        # Another source's summaries took some of the rowids.
        assert taken if mem.store.name == "sqlite" else not taken
        mem.locks.unlock(SECRET, passphrase=PASSPHRASE)
        after = source_dump(conn)
        # The same summaries, in the same order, under new rowids.
        assert [row[1:] for row in sorted(after.pop("summaries"))] == [
            row[1:] for row in sorted(secret.pop("summaries"))
        ]
        # Each chunk names its summary by the summary's new rowid.
        assert mem.store.trees.parents_of_chunks(chunk_ids) == parents
        columns = [c[0] for c in conn.execute("SELECT * FROM chunks LIMIT 0").description]
        rowid_at = columns.index("parent_summary")
        for dump in (after, secret):
            dump["chunks"] = [row[:rowid_at] + row[rowid_at + 1 :] for row in dump["chunks"]]
        # Ranks moved with the other source's rows, which the full-text statistics count.
        ranked = [name for name in secret if name.startswith("match:")]
        assert after == secret | {name: after[name] for name in ranked}
        assert all([r[0] for r in after[n]] == [r[0] for r in secret[n]] for n in ranked)


# -- invisible while locked ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Twins:
    """The store with the secret source locked, the same store built without it, and the
    secret source's chunk, summary and tree ids from before the lock."""

    locked: Memory
    without: Memory
    secret: dict[str, list[str]]


@pytest.fixture(scope="module")
def twins(
    tmp_path_factory: pytest.TempPathFactory, server: PostgresServer | None
) -> Iterator[Twins]:
    root = tmp_path_factory.mktemp("twins")
    a, b = (
        (str(root / "a" / "mem.db"), str(root / "b" / "mem.db"))
        if server is None
        else (server.new_database(), server.new_database())
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(crypto, "DEFAULT_KDF", FAST_KDF)
        (root / "a").mkdir()
        (root / "b").mkdir()
        build_store(a, FIXTURES, folder=root / "a")
        build_store(b, FIXTURES, folder=root / "b", secret=False)
        with (
            stratamem.open(a, embedder=HashingEmbedder()) as locked,
            stratamem.open(b, embedder=HashingEmbedder()) as without,
        ):
            conn = locked.store.conn
            secret = {
                table: [
                    r[0]
                    for r in conn.execute(
                        f"SELECT id FROM {table} WHERE source_id = {locked.store.dialect.p}",
                        (SECRET_ID,),
                    )
                ]
                for table in ("chunks", "summaries", "trees")
            }
            locked.locks.lock(SECRET, passphrase=PASSPHRASE)
            yield Twins(locked, without, secret)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("query", [*QUERIES, *CANARIES])
def test_no_search_finds_a_locked_source(twins: Twins, mode: str, query: str) -> None:
    found = twins.locked.search(query, mode=mode, limit=50)
    assert leaks(found.hits) == []
    assert hit_keys(twins.locked, query, mode) == hit_keys(twins.without, query, mode)


def test_no_read_of_a_node_or_tree_finds_a_locked_source(twins: Twins) -> None:
    mem, ids = twins.locked, twins.secret
    for node in (*ids["chunks"][:3], *ids["summaries"][:3]):
        with pytest.raises(NotFoundError):
            mem.get(node)
    assert mem.nodes([*ids["chunks"], *ids["summaries"]]) == []
    assert mem.fetch_leaves(ids["chunks"][:20]) == []
    (tree,) = ids["trees"]
    assert mem.trees.tops(tree) == []
    assert mem.trees.stats(tree) == {}
    with pytest.raises(NotFoundError):
        mem.trees.unsealed(tree)
    with pytest.raises(NotFoundError):
        mem.trees.get(SECRET)
    assert leaks(mem.trees.list()) == []
    assert [t.id for t in mem.trees.list()] == [t.id for t in twins.without.trees.list()]
    with pytest.raises(NotFoundError):
        mem.items.get("s1", source=SECRET)


def test_no_primitive_finds_a_locked_source(twins: Twins) -> None:
    mem = twins.locked
    summary = twins.secret["summaries"][-1]
    answers = [
        mem.query_source(SECRET),
        mem.query_source(SECRET, query=QUERIES[0]),
        mem.query_source(query=QUERIES[0]),
        mem.query_global(**EVER, query=QUERIES[1]),
        mem.query_topic(SECRET_PERSON),
        mem.cover_window(**EVER, limit=500),
        mem.drill_down(summary, max_depth=3),
    ]
    assert [leaks(answer) for answer in answers] == [[]] * len(answers)
    assert mem.query_global(**EVER).total == twins.without.query_global(**EVER).total


def test_no_entity_read_finds_a_locked_source(twins: Twins) -> None:
    mem = twins.locked
    assert mem.search_entities("Zqxanna Vorpal") == []
    assert mem.related(SECRET_PERSON) == []
    # A person it shares with other sources is seen only through them.
    assert mem.related("person:bob martins") == twins.without.related("person:bob martins")
    assert mem.search_entities("Bob") == twins.without.search_entities("Bob")


def test_stats_count_nothing_of_a_locked_source(twins: Twins) -> None:
    locked, without = twins.locked.stats(), twins.without.stats()
    assert locked.pop("locked") == 1
    assert without.pop("locked") == 0
    for key in ("path", "bytes"):
        locked.pop(key), without.pop(key)
    assert locked == without
    assert twins.locked.indexes.pending() == 0
    (source,) = [s for s in twins.locked.sources.list() if s.id == SECRET_ID]
    assert source.locked
    assert source.chunk_count == 0


def test_a_principal_does_not_see_a_locked_source_at_all(twins: Twins) -> None:
    twins.locked.principals.add("reader", "*")
    try:
        reader = twins.locked.as_principal("reader")
        with reader:
            assert SECRET not in [s.scope for s in reader.sources.list()]
            assert leaks(reader.search(QUERIES[0]).hits) == []
            with pytest.raises(NotFoundError):
                reader.sources.get(SECRET)
    finally:
        twins.locked.principals.remove("reader")


# -- nothing left on disk --------------------------------------------------------------------


def test_no_byte_of_a_locked_source_is_left_in_any_file(store_copy: Copy) -> None:
    db = store_copy()
    with stratamem.open(db, embedder=HashingEmbedder(), tree_config=TREES) as mem:
        embedder = mem.embedder
        assert embedder is not None
        mem._vectors = VectorLeg(mem.store, embedder, hnsw_threshold=16)
        sparse_index(mem.store).persist_min_docs = 0
        assert leaks(mem.search(CANARIES[0]).hits)
        mem._vectors.persist_now()
        sparse_index(mem.store).persist_now()
        before = residue(db)
        if mem.store.name == "sqlite":
            side = set(files_of(db))
            assert {"mem.db", "mem.db-wal", "mem.db-shm", "mem.db.bm25.idx"} <= side
            assert any(".vectors-" in name for name in side)
            assert {"mem.db", "mem.db.bm25.idx"} <= set(before)  # the check sees a canary
            index = "mem.db.bm25.idx"
        else:
            # The vectors are pgvector's, on the server: no index file holds them here.
            assert {"chunks", "store.bm25.idx"} <= set(before)  # the check sees a canary
            index = "store.bm25.idx"

        mem.locks.lock(SECRET, passphrase=PASSPHRASE)

        assert residue(db) == {}
        assert index in files_of(db)
        assert mem.search("redis queue").hits
        assert leaks(mem.search(QUERIES[0]).hits) == []
    assert residue(db) == {}


# -- passphrases and refusals ----------------------------------------------------------------


def test_a_wrong_passphrase_is_refused_and_changes_nothing(
    store_copy: Copy, open_db: Connect
) -> None:
    db = store_copy()
    conn = open_db(db)
    with stratamem.open(db, embedder=None) as mem:
        mem.locks.lock(SECRET, passphrase=PASSPHRASE)
        before = store_dump(conn), source_dump(conn), sealed_rows(conn)
        with pytest.raises(WrongPassphrase) as refused:
            mem.locks.unlock(SECRET, passphrase=PASSPHRASE.upper())
        assert SECRET in one_line(refused.value)
        assert (store_dump(conn), source_dump(conn), sealed_rows(conn)) == before
        assert mem.sources.get(SECRET).locked


def test_a_missing_passphrase_is_refused_and_changes_nothing(
    store_copy: Copy, open_db: Connect
) -> None:
    db = store_copy()
    conn = open_db(db)
    with stratamem.open(db, embedder=None) as mem:
        before = store_dump(conn)
        with pytest.raises(LockError) as refused:
            mem.locks.lock(SECRET)
        assert not isinstance(refused.value, WrongPassphrase)
        assert PASSPHRASE_ENV in one_line(refused.value)
        assert store_dump(conn) == before
        assert not mem.sources.get(SECRET).locked
        mem.locks.lock(SECRET, passphrase=PASSPHRASE)
        locked = store_dump(conn), sealed_rows(conn)
        with pytest.raises(LockError) as refused:
            mem.locks.unlock(SECRET)
        one_line(refused.value)
        assert (store_dump(conn), sealed_rows(conn)) == locked


def test_the_passphrase_comes_from_the_environment(
    store_copy: Copy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PASSPHRASE_ENV, PASSPHRASE)
    with stratamem.open(store_copy(), embedder=None) as mem:
        mem.locks.lock(SECRET)
        with pytest.raises(WrongPassphrase):
            mem.locks.unlock(SECRET, passphrase="given first")
        assert mem.locks.unlock(SECRET).chunks > 0


def test_the_passphrase_comes_from_the_os_keyring(
    store_copy: Copy, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[tuple[str, str]] = []

    def get_password(service: str, user: str) -> str | None:
        asked.append((service, user))
        return PASSPHRASE if (service, user) == ("stratamem", SECRET) else None

    errors = types.ModuleType("keyring.errors")
    errors.KeyringError = type("KeyringError", (Exception,), {})  # type: ignore[attr-defined]
    keyring = types.ModuleType("keyring")
    keyring.get_password = get_password  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "keyring", keyring)
    monkeypatch.setitem(sys.modules, "keyring.errors", errors)
    with stratamem.open(store_copy(), embedder=None) as mem:
        mem.locks.lock(SECRET)
        assert mem.locks.unlock(SECRET).chunks > 0
        with pytest.raises(LockError, match="keyring"):
            mem.locks.lock("slack:#eng")
    assert ("stratamem", SECRET) in asked
    assert ("stratamem", "slack:#eng") in asked


def test_locking_a_locked_source_or_unlocking_an_unlocked_one_is_refused(
    store_copy: Copy, open_db: Connect
) -> None:
    db = store_copy()
    conn = open_db(db)
    with stratamem.open(db, embedder=None) as mem:
        with pytest.raises(LockError) as refused:
            mem.locks.unlock(SECRET, passphrase=PASSPHRASE)
        assert "not locked" in one_line(refused.value)
        mem.locks.lock(SECRET, passphrase=PASSPHRASE)
        locked = sealed_rows(conn)
        with pytest.raises(LockError) as refused:
            mem.locks.lock(SECRET, passphrase=PASSPHRASE)
        assert "already locked" in one_line(refused.value)
        assert sealed_rows(conn) == locked
        with pytest.raises(NotFoundError):
            mem.locks.lock("jsonl:nothing", passphrase=PASSPHRASE)
        with pytest.raises(ValueError, match="empty"):
            lock_source(mem.store, "slack:#eng", "")


def test_a_moved_or_missing_part_is_refused_and_changes_nothing(
    store_copy: Copy, open_db: Connect
) -> None:
    db = store_copy()
    conn = open_db(db)
    other = "slack:#eng"
    with stratamem.open(db, embedder=None) as mem:
        mem.locks.lock(SECRET, passphrase=PASSPHRASE)
        mem.locks.lock(other, passphrase=PASSPHRASE)
        mine = conn.execute(
            "SELECT nonce, data FROM sealed WHERE source_id = ? AND part = 0", (SECRET_ID,)
        ).fetchone()
        with conn:  # the other source's first part, put in this one's place
            conn.execute(
                """UPDATE sealed SET (nonce, data) = (
                       SELECT nonce, data FROM sealed WHERE source_id = ? AND part = 0)
                   WHERE source_id = ? AND part = 0""",
                (mem.sources.get(other).id, SECRET_ID),
            )
        before = store_dump(conn), sealed_rows(conn)
        with pytest.raises(LockError, match="does not decrypt") as refused:
            mem.locks.unlock(SECRET, passphrase=PASSPHRASE)
        one_line(refused.value)
        assert (store_dump(conn), sealed_rows(conn)) == before
        with conn:
            conn.execute(
                "UPDATE sealed SET nonce = ?, data = ? WHERE source_id = ? AND part = 0",
                (*mine, SECRET_ID),
            )
            conn.execute("UPDATE locks SET parts = parts + 1 WHERE source_id = ?", (SECRET_ID,))
        with pytest.raises(LockError):
            mem.locks.unlock(SECRET, passphrase=PASSPHRASE)
        with conn:
            conn.execute("UPDATE locks SET parts = parts - 1 WHERE source_id = ?", (SECRET_ID,))
        assert mem.locks.unlock(SECRET, passphrase=PASSPHRASE).chunks > 0


def test_forgetting_a_locked_source_removes_its_sealed_content(
    store_copy: Copy, open_db: Connect
) -> None:
    db = store_copy()
    conn = open_db(db)
    with stratamem.open(db, embedder=None) as mem:
        mem.locks.lock(SECRET, passphrase=PASSPHRASE)
        assert mem.sources.forget(SECRET) == 0
        assert sealed_rows(conn) == []
        assert SECRET not in [s.scope for s in mem.sources.list()]


# -- nothing written into it, nothing derived from it ----------------------------------------


def test_nothing_is_written_into_a_locked_source(
    store_copy: Copy, open_db: Connect, tmp_path: Path
) -> None:
    db = store_copy()
    conn = open_db(db)
    with stratamem.open(db, embedder=HashingEmbedder(), tree_config=TREES) as mem:
        mem.locks.lock(SECRET, passphrase=PASSPHRASE)
        before = store_dump(conn), source_dump(conn), sealed_rows(conn)
        report = mem.ingest(write_secret(tmp_path / "more", 60))
        (failed,) = report.failed
        assert failed.error is not None
        assert "locked" in failed.error
        with pytest.raises(StratamemError, match="locked"):
            mem.items.add("one more zqxcanaryalpha", source=SECRET)
        assert (store_dump(conn), source_dump(conn), sealed_rows(conn)) == before
        mem.indexes.embed()
        assert mem.trees.flush().summaries == 0
        assert mem.trees.build().summaries == 0
        after = store_dump(conn), source_dump(conn), sealed_rows(conn)
        # Sealing every source makes a tree row for each, this one's included, with nothing
        # in it: a summary needs leaves, and it has none.
        new_trees = set(after[0].pop("trees")) - set(before[0].pop("trees"))
        assert {row[3] for row in new_trees} <= {SECRET_ID}
        assert after[0] == before[0]
        assert {name for name, rows in after[1].items() if rows} <= {"sources", "trees"}
        assert after[2] == before[2]
        mem.locks.unlock(SECRET, passphrase=PASSPHRASE)
        assert len(source_dump(conn)["trees"]) == 1


def test_no_model_server_is_sent_anything_of_a_locked_source(
    store_location: str, tmp_path: Path
) -> None:
    with FakeModelServer() as server:
        options: dict[str, Any] = {
            "embedder": get_embedder("openai", base_url=server.base_url, model="m", retries=1),
            "summarizer": LLMSummarizer(
                base_url=server.base_url, model="m", backoff=0.01, timeout=PATIENCE_S
            ),
            "reranker": get_reranker("http", base_url=server.url, model="m"),
        }
        db = store_location
        build_store(db, FIXTURES, folder=tmp_path, **options)
        sent = json.dumps([r.payload for r in server.requests]).lower()
        assert all(canary in sent for canary in CANARIES)  # the check can see them
        assert {r.path for r in server.requests} >= {"/v1/embeddings", "/v1/chat/completions"}

        with stratamem.open(db, tree_config=TREES, **options) as mem:
            mem.locks.lock(SECRET, passphrase=PASSPHRASE)
            server.reset()
            mem.ingest(FIXTURES / "jsonl" / "export.jsonl")
            mem.items.add("a new note about the budget review", source="notes:new")
            mem.indexes.embed()
            mem.trees.flush()
            mem.trees.build()
            for query in QUERIES:
                for mode in MODES:
                    assert leaks(mem.search(query, mode=mode, rerank=True).hits) == []
                assert leaks(mem.query_source(query=query)) == []
            paths = {r.path for r in server.requests}
        assert paths >= {"/v1/embeddings", "/v1/chat/completions", "/rerank"}
        sent = json.dumps([r.payload for r in server.requests]).lower()
        assert [canary for canary in CANARIES if canary in sent] == []


# -- unlocked in memory ----------------------------------------------------------------------


READ_LOCKED = """
import sys, stratamem
with stratamem.open(sys.argv[1], embedder=None) as mem:
    source = mem.sources.get("jsonl:secret")
    hits = mem.search(sys.argv[2], mode="keyword").hits
    print(source.locked, len(hits))
"""


def test_a_store_opened_unlocked_reads_the_source_in_memory_only(
    store_copy: Copy, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = store_copy()
    with stratamem.open(db, embedder=HashingEmbedder()) as mem:
        mem.locks.lock(SECRET, passphrase=PASSPHRASE)
    files = files_of(db)
    assert residue(db) == {}

    with stratamem.open(
        db, embedder=HashingEmbedder(), tree_config=TREES, unlock={SECRET: PASSPHRASE}
    ) as mem:
        assert mem.path == ":memory:"
        for mode in MODES:
            assert any(leaks(mem.search(query, mode=mode).hits) for query in QUERIES), mode
        hits = mem.search(CANARIES[0], mode="keyword").hits
        assert hits
        assert all(h.source_id == SECRET_ID for h in hits)
        assert mem.get(hits[0].node_id).content == hits[0].content
        assert leaks(mem.query_source(SECRET))
        assert leaks(mem.query_topic(SECRET_PERSON))
        assert mem.trees.stats(mem.trees.get(SECRET).id)
        assert mem.search_entities("Zqxanna Vorpal")
        assert not mem.sources.get(SECRET).locked
        sparse_index(mem.store).persist_min_docs = 0
        assert sparse_index(mem.store).index_path() is None
        assert mem.vectors is not None
        assert mem.vectors.index_path() is None

        # Elsewhere it is still locked: another open, another process.
        with stratamem.open(db, embedder=None) as other:
            assert other.sources.get(SECRET).locked
            assert other.search(CANARIES[0], mode="keyword").hits == ()
        seen = subprocess.run(
            [sys.executable, "-c", READ_LOCKED, str(db), CANARIES[0]],
            env=child_env(),
            capture_output=True,
            text=True,
            check=True,
        )
        assert seen.stdout.split() == ["True", "0"]

        # Writes are refused, to the source or anywhere.
        for write in (
            lambda: mem.items.add("a note", source="notes:new"),
            lambda: mem.locks.lock("slack:#eng", passphrase=PASSPHRASE),
            lambda: mem.trees.flush(),
            lambda: mem.sources.set_access(SECRET, add="team"),
            lambda: mem.sources.forget("slack:#eng"),
            lambda: mem.ingest(FIXTURES / "jsonl" / "export.jsonl"),
        ):
            with pytest.raises(StoreError, match="read-only") as refused:
                write()
            one_line(refused.value)
        with pytest.raises(LockError, match="not locked"):  # here it is not
            mem.locks.unlock(SECRET, passphrase=PASSPHRASE)

        assert residue(db) == {}
        assert set(files_of(db)) <= set(files) | {"mem.db-wal", "mem.db-shm"}
    assert residue(db) == {}

    monkeypatch.setenv(PASSPHRASE_ENV, PASSPHRASE)
    with stratamem.open(db, embedder=None, unlock=[SECRET, "slack:#eng"]) as mem:
        assert mem.search(CANARIES[1], mode="keyword").hits
    with pytest.raises(WrongPassphrase) as refused:
        stratamem.open(db, embedder=None, unlock={SECRET: "not it"})
    one_line(refused.value)
    with stratamem.open(db, embedder=None) as mem:
        assert mem.sources.get(SECRET).locked
    assert residue(db) == {}
