from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from stratamem.errors import SchemaError, StoreError
from stratamem.store.sqlite.migrations import SCHEMA_VERSION, migrate
from stratamem.store.sqlite.store import SQLiteStore


def test_migrations_are_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    SQLiteStore(path).close()
    conn = sqlite3.connect(path)
    assert migrate(conn) == SCHEMA_VERSION
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"sources", "chunks", "chunks_fts", "entity_index", "entity_edges"} <= tables


def test_vectors_move_to_rowid_tables_where_each_keeps_its_page(tmp_path: Path) -> None:
    from stratamem.store.sqlite.migrations import MIGRATIONS, _statements

    path = tmp_path / "v10.db"
    conn = sqlite3.connect(path)
    for version, script in enumerate(MIGRATIONS[:10], start=1):
        for statement in _statements(script):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {version}")
    conn.execute(
        "INSERT INTO sources (id, scope, kind, platform, location, ingested_at)"
        " VALUES ('s1', 'notes', 'document', 'files', '/n', 0)"
    )
    vectors = {f"n{i}": bytes([i % 256]) * 1536 for i in range(300)}
    conn.executemany(
        "INSERT INTO embeddings VALUES (?, 'm', 's1', 384, ?, ?)",
        [(node, vector, f"sha-{node}") for node, vector in vectors.items()],
    )
    conn.commit()
    conn.close()
    with SQLiteStore(path) as store:
        rows = store.conn.execute("SELECT node_id, vector, dim FROM embeddings").fetchall()
        assert {r[0]: r[1] for r in rows} == vectors
        assert {r[2] for r in rows} == {384}
        for table in ("embeddings", "summary_vectors", "fact_vectors"):
            sql = store.conn.execute(
                "SELECT sql FROM sqlite_master WHERE name = ?", (table,)
            ).fetchone()[0]
            assert "WITHOUT ROWID" not in sql
        overflow = store.conn.execute(
            "SELECT count(*) FROM dbstat WHERE name = 'embeddings' AND pagetype = 'overflow'"
        ).fetchone()[0]
        leaves = store.conn.execute(
            "SELECT count(*) FROM dbstat WHERE name = 'embeddings' AND pagetype = 'leaf'"
        ).fetchone()[0]
        assert overflow == 0
        assert leaves <= 160
        assert (
            store.conn.execute(
                "SELECT node_id FROM embeddings WHERE model = 'm' AND content_sha256 = 'sha-n7'"
            ).fetchone()[0]
            == "n7"
        )


def test_pragmas(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "p.db") as store:
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert store.conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(SchemaError, match="newer"):
        SQLiteStore(path)


def test_a_file_that_is_not_sqlite_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match=r"junk\.db"):
        SQLiteStore(path)


def test_transaction_rolls_back_on_error(tmp_path: Path) -> None:
    from stratamem.types import SourceKind

    def add_then_fail(store: SQLiteStore, scope: str) -> None:
        with store.transaction():
            store.upsert_source(scope=scope, kind=SourceKind.CHAT, platform="p", location="l")
            raise RuntimeError(scope)

    with SQLiteStore(tmp_path / "t.db") as store:
        with pytest.raises(RuntimeError):
            add_then_fail(store, "x")
        assert store.sources() == []
        with store.transaction():
            with pytest.raises(RuntimeError):
                add_then_fail(store, "inner")
            store.upsert_source(scope="outer", kind=SourceKind.CHAT, platform="p", location="l")
        assert [s.scope for s in store.sources()] == ["outer"]


def test_sqlite_store_fulfils_the_store_protocol(tmp_path: Path) -> None:
    from stratamem.store.base import Store

    with SQLiteStore(tmp_path / "s.db") as store:
        assert isinstance(store, Store)


def test_conversation_neighbours_within_a_window(tmp_path: Path) -> None:
    import stratamem
    from stratamem.types import Filters

    rows = (
        "".join(
            f'{{"text": "turn {i}", "source": "chat-a", "kind": "chat", "author": "A"}}\n'
            for i in range(6)
        )
        + '{"text": "a note", "source": "notes", "kind": "document"}\n'
    )
    path = tmp_path / "mixed.jsonl"
    path.write_text(rows)
    config = stratamem.ingest.chunking.ChunkingConfig(chat_max_messages=1)
    with stratamem.open(tmp_path / "w.db", embedder=None) as mem:
        mem.ingest(path, chunking=config)
        chat = list(mem.store.iter_chunks(mem.store.resolve_source("jsonl:chat-a").id))
        note = list(mem.store.iter_chunks(mem.store.resolve_source("jsonl:notes").id))
        around = mem.store.neighbour_chunks([chat[2].id, note[0].id], Filters(), window=2)
    assert around[chat[2].id] == [
        (chat[0].id, 2),
        (chat[1].id, 1),
        (chat[3].id, 1),
        (chat[4].id, 2),
    ]
    assert around[note[0].id] == []


def _ingest(tmp_path: Path, texts: list[str]):  # type: ignore[no-untyped-def]
    import json

    import stratamem

    path = tmp_path / "docs.jsonl"
    path.write_text(
        "".join(
            json.dumps({"text": t, "source": "docs", "kind": "document", "title": ""}) + "\n"
            for t in texts
        )
    )
    mem = stratamem.open(tmp_path / "r.db", embedder=None)
    mem.ingest(path, trees=False)
    return mem


def test_pending_chunks_and_their_vectors_are_typed(tmp_path: Path) -> None:
    from stratamem.store.vectors import ChunkVector, PendingChunk

    with _ingest(tmp_path, ["first text", "second text"]) as mem:
        store = mem.store
        pending = store.pending_embeddings("m", 10)
        assert all(isinstance(p, PendingChunk) for p in pending)
        assert [p.content for p in pending] == ["first text", "second text"]
        assert store.count_pending_embeddings("m") == 2
        blob = b"\x00\x00\x80\x3f"  # one float32, 1.0
        with store.transaction():
            store.insert_vectors(
                ChunkVector(p.id, "m", p.source_id, 1, blob, p.content_sha256) for p in pending
            )
        assert store.pending_embeddings("m", 10) == []
        assert store.vector_keys("m") == [(p.rowid, p.id) for p in pending]
        assert store.cached_vectors("m", [pending[0].content_sha256]) == {
            pending[0].content_sha256: blob
        }


def test_the_keyword_role_reads_terms_and_statistics(tmp_path: Path) -> None:
    with _ingest(tmp_path, ["running cats", "dog runs"]) as mem:
        store = mem.store
        schema = store.keyword_schema()
        assert schema.columns == ("content", "title")
        assert schema.weights == (1.0, 0.6)
        state = store.keyword_state()
        assert (state.docs, state.totals) == (2, (4, 0))
        rows = store.keyword_postings()
        assert [(int(r), i) for r, i in zip(rows.rowids, rows.ids, strict=True)] == (
            store.keyword_rows()
        )
        assert sorted(rows.postings.terms) == ["cat", "dog", "run"]
        assert rows.postings.lengths.tolist() == [[2, 0], [2, 0]]
        first = int(rows.rowids[0])
        assert store.keyword_postings(above=first).ids == rows.ids[1:]
        assert store.keyword_phrases(["Running", "job_queue", "?"]) == [
            ("run",),
            ("job", "queue"),
            (),
        ]
        assert not store.in_transaction()
        with store.keyword_snapshot():
            assert store.keyword_state() == state


def test_a_full_text_index_that_cannot_back_bm25_is_unavailable(tmp_path: Path) -> None:
    from stratamem.errors import KeywordIndexUnavailable

    with _ingest(tmp_path, ["some text"]) as mem:
        store = mem.store
        with store.transaction():
            assert store.in_transaction()
            with (
                pytest.raises(KeywordIndexUnavailable, match="write transaction"),
                store.keyword_snapshot(),
            ):
                pass
        store.conn.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('rank', 'mine()')")
        with pytest.raises(KeywordIndexUnavailable, match="not bm25"):
            store.keyword_schema()
    with SQLiteStore(tmp_path / "bare.db") as bare:
        bare.keyword_schema()
        bare.conn.execute("DROP TABLE chunks_fts")
        with pytest.raises(KeywordIndexUnavailable, match="no chunks_fts table"):
            bare.keyword_postings()  # a driver error, in the role's terms


def test_the_source_lists_a_search_reads_follow_other_connections(tmp_path: Path) -> None:
    from stratamem.types import Filters, SourceKind

    path = tmp_path / "s.db"
    with SQLiteStore(path) as reader, SQLiteStore(path) as writer:
        with writer.transaction():
            chat = writer.upsert_source(
                scope="slack:#eng", kind=SourceKind.CHAT, platform="slack", location="x"
            )
        assert reader.scopes() == {chat: "slack:#eng"}
        assert reader.scopes() == {chat: "slack:#eng"}  # the kept answer
        with writer.transaction():
            notes = writer.upsert_source(
                scope="vault:notes", kind=SourceKind.DOCUMENT, platform="obsidian", location="y"
            )
        assert reader.source_kinds() == {chat: SourceKind.CHAT, notes: SourceKind.DOCUMENT}
        writer.conn.execute("UPDATE sources SET locked = 1 WHERE id = ?", (chat,))
        assert reader.scopes() == {notes: "vault:notes"}
        only_chat = Filters(kinds=(SourceKind.CHAT,))
        assert reader.nodes_by_entities({"topic:x": 1.0}, only_chat, 5) == {}

        def unlock_then_fail() -> None:
            with reader.transaction():
                reader.conn.execute("UPDATE sources SET locked = 0 WHERE id = ?", (chat,))
                assert chat in reader.scopes()
                raise RuntimeError("rolled back")

        with pytest.raises(RuntimeError):
            unlock_then_fail()
        assert reader.scopes() == {notes: "vault:notes"}  # what it read there was not kept
        writer.conn.execute("UPDATE sources SET locked = 0 WHERE id = ?", (chat,))
        assert reader.scopes() == {chat: "slack:#eng", notes: "vault:notes"}


@pytest.mark.parametrize("children", [1, 3, 50, 500])
def test_a_seal_claims_its_children_by_id_however_many(tmp_path: Path, children: int) -> None:
    from stratamem.store.sqlite.trees import CLAIM_LEAVES, CLAIM_SUMMARIES

    with SQLiteStore(tmp_path / "s.db") as store:
        marks = ",".join("?" * children)
        ids = [f"n{i}" for i in range(children)]
        for claim, table in ((CLAIM_LEAVES, "chunks"), (CLAIM_SUMMARIES, "summaries")):
            plan = store.conn.execute(
                "EXPLAIN QUERY PLAN " + claim.format(marks=marks), ("parent", *ids)
            ).fetchall()
            details = " ".join(row[3] for row in plan)
            # By the primary key's index, never by the parent column's: that one would visit
            # every unclaimed row of the store for each summary sealed.
            assert f"SEARCH {table} USING INDEX sqlite_autoindex_{table}_1 (id=?)" in details


@pytest.mark.parametrize("expired", [1, 50, 500])
def test_facts_to_expire_are_found_by_id(tmp_path: Path, expired: int) -> None:
    from stratamem.store.sqlite.facts import EXPIRE_FACTS

    with SQLiteStore(tmp_path / "s.db") as store:
        marks = ",".join("?" * expired)
        plan = store.conn.execute(
            "EXPLAIN QUERY PLAN " + EXPIRE_FACTS.format(marks=marks),
            (0, "src", *[f"f{i}" for i in range(expired)]),
        ).fetchall()
        assert [row[3] for row in plan] == [
            "SEARCH facts USING INDEX sqlite_autoindex_facts_1 (id=?)"
        ]
