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
