"""What is the SQLite file's own: migrations, PRAGMAs, FTS5, query plans. (What every backend
does alike is in test_backends.py.)"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from stratamem.errors import StoreError
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


def database_at_version(path: Path, version: int) -> sqlite3.Connection:
    """A new database file as stratamem's schema ``version`` left it."""
    from stratamem.store.sqlite.migrations import MIGRATIONS, _statements

    conn = sqlite3.connect(path)
    for number, script in enumerate(MIGRATIONS[:version], start=1):
        for statement in _statements(script):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {number}")
    return conn


def test_vectors_move_to_rowid_tables_where_each_keeps_its_page(tmp_path: Path) -> None:
    path = tmp_path / "v10.db"
    conn = database_at_version(path, 10)
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
                f"SELECT sql FROM sqlite_master WHERE name = {store.dialect.p}", (table,)
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


def test_vectors_made_before_are_indexed_by_a_prefix_of_their_digest(tmp_path: Path) -> None:
    """Migration 20: the index the lookup of a content's earlier vector reads is of the first
    16 hex digits of the digest, not of the model and the whole digest; the rows stay."""
    path = tmp_path / "v19.db"
    conn = database_at_version(path, 19)
    conn.execute(
        "INSERT INTO sources (id, scope, kind, platform, location, ingested_at)"
        " VALUES ('s1', 'notes', 'document', 'files', '/n', 0)"
    )
    digests = {f"n{i}": f"{i:064x}" for i in range(50)}
    conn.executemany(
        "INSERT INTO embeddings VALUES (?, 'm', 's1', 1, x'003c', ?)", list(digests.items())
    )
    conn.commit()
    conn.close()
    with SQLiteStore(path) as store:
        c = store.conn
        assert dict(c.execute("SELECT node_id, content_sha256 FROM embeddings")) == digests
        (sql,) = c.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'embeddings_hash'"
        ).fetchone()
        assert "substr(content_sha256, 1, 16)" in sql
        assert "model" not in sql
        wanted = [digests["n7"], digests["n42"]]
        assert store.cached_vectors("m", wanted) == dict.fromkeys(wanted, b"\x00\x3c")
        plan = " ".join(
            row[3]
            for row in c.execute(
                "EXPLAIN QUERY PLAN SELECT vector FROM embeddings"
                " WHERE substr(content_sha256, 1, 16) IN ('a', 'b')"
            )
        )
        assert "USING INDEX embeddings_hash" in plan


def test_chunks_name_their_summary_by_its_rowid_after_migration_21(tmp_path: Path) -> None:
    """The summary id each chunk held becomes that summary's rowid; an id naming no summary
    becomes NULL (the chunk goes back to its tree's buffer); the old column is left empty,
    and the new one is indexed in its place."""
    path = tmp_path / "v20.db"
    conn = database_at_version(path, 20)
    conn.execute(
        "INSERT INTO sources (id, scope, kind, platform, location, ingested_at)"
        " VALUES ('s1', 'notes', 'document', 'files', '/n', 0)"
    )
    conn.execute(
        "INSERT INTO trees (id, scope, source_id, created_at) VALUES ('t1', 'notes', 's1', 0)"
    )
    for rowid, summary in ((7, "sum_a"), (9, "sum_b")):
        conn.execute(
            "INSERT INTO summaries (rowid, id, tree_id, source_id, level, child_ids, content,"
            " token_count, sealed_at, summarizer, content_sha256)"
            " VALUES (?, ?, 't1', 's1', 1, '[]', 'x', 1, 0, 'e', 'h')",
            (rowid, summary),
        )
    parents = {"c0": "sum_a", "c1": "sum_b", "c2": "sum_b", "c3": None, "c4": "sum_gone"}
    conn.executemany(
        "INSERT INTO chunks (id, source_id, seq, content, token_count, content_sha256,"
        " parent_summary_id) VALUES (?, 's1', ?, 'text', 1, 'h', ?)",
        [(chunk, seq, parent) for seq, (chunk, parent) in enumerate(parents.items())],
    )
    conn.commit()
    conn.close()
    with SQLiteStore(path) as store:
        c = store.conn
        columns = {row[1] for row in c.execute("PRAGMA table_info(chunks)")}
        assert "parent_summary" in columns
        assert c.execute("SELECT count(parent_summary_id) FROM chunks").fetchone()[0] == 0
        found = dict(c.execute("SELECT id, parent_summary FROM chunks").fetchall())
        assert found == {"c0": 7, "c1": 9, "c2": 9, "c3": None, "c4": None}
        assert store.trees.parents_of_chunks(list(parents)) == {
            "c0": "sum_a",
            "c1": "sum_b",
            "c2": "sum_b",
        }
        (sql,) = c.execute("SELECT sql FROM sqlite_master WHERE name = 'chunks_parent'").fetchone()
        assert "parent_summary)" in sql


def test_a_new_file_has_16_kib_pages_and_an_older_one_keeps_its_own(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "new.db") as store:
        assert store.conn.execute("PRAGMA page_size").fetchone()[0] == 16384
    database_at_version(tmp_path / "old.db", 19).close()
    with SQLiteStore(tmp_path / "old.db") as store:
        assert store.conn.execute("PRAGMA page_size").fetchone()[0] == 4096
        assert store.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_entity_mentions_are_keyed_by_entity_source_and_node(tmp_path: Path) -> None:
    """An older store's mentions move to tables keyed by (entity, source, node), which serve a
    gated entity lookup from the key alone, with no second index repeating it."""
    path = tmp_path / "v11.db"
    conn = database_at_version(path, 11)
    for source in ("s1", "s2"):
        conn.execute(
            "INSERT INTO sources (id, scope, kind, platform, location, ingested_at)"
            " VALUES (?, ?, 'document', 'files', '/n', 0)",
            (source, f"notes-{source}"),
        )
    mentions = [
        (f"person:{i % 7}", f"n{i}", "person", f"P{i % 7}", f"s{1 + i % 2}", i) for i in range(50)
    ]
    conn.executemany(
        "INSERT INTO entity_index (entity_id, node_id, kind, surface, source_id, ts)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        mentions,
    )
    conn.commit()
    conn.close()
    with SQLiteStore(path) as store:
        found = store.conn.execute(
            "SELECT entity_id, node_id, kind, surface, source_id, ts FROM entity_index"
        ).fetchall()
        assert sorted(tuple(r) for r in found) == sorted(mentions)
        indexes = {
            row[0]
            for row in store.conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name IN "
                "('entity_index', 'summary_entities')"
            )
        }
        # entity_index_source went in migration 19 (see test_a_sources_rows_go_by_its_chunks)
        assert indexes == {"entity_index_node"}  # summary_entities_summary went in 23
        plan = " ".join(
            row[3]
            for row in store.conn.execute(
                "EXPLAIN QUERY PLAN SELECT node_id FROM entity_index"
                " WHERE entity_id = 'person:3' AND source_id IN ('s2')"
            )
        )
        assert plan.startswith("SEARCH entity_index USING")
        assert "entity_id=?" in plan
        with pytest.raises(sqlite3.IntegrityError):
            store.conn.execute(
                "INSERT INTO entity_index (entity_id, node_id, kind, surface, source_id)"
                " VALUES ('person:0', 'n0', 'person', 'P0', 's1')"
            )


def test_pragmas(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "p.db") as store:
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert store.conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def test_an_ingest_keeps_a_larger_page_cache_while_it_writes(tmp_path: Path) -> None:
    """The ingest writes inside ``bulk_writes``: the page cache is 128 MiB while it runs and
    32 MiB again after it, whether it ends or fails; a bulk write inside another keeps the
    outer one's cache."""
    import stratamem

    def cache(mem: stratamem.Memory) -> int:
        return int(mem.store.conn.execute("PRAGMA cache_size").fetchone()[0])  # type: ignore[attr-defined]

    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(3):
        (folder / f"n{i}.md").write_text(f"# Note {i}\n\nAlice met Bob about item {i}.\n")
    with stratamem.open(tmp_path / "c.db", embedder=None) as mem:
        assert cache(mem) == -(32 << 10)
        seen: list[int] = []
        mem.ingest(folder, progress=lambda _: seen.append(cache(mem)))
        assert seen
        assert set(seen) == {-(128 << 10)}
        assert cache(mem) == -(32 << 10)

        def fail(_: object) -> None:
            raise RuntimeError("stopped")

        (folder / "n0.md").write_text("# Note 0\n\nChanged.\n")
        with pytest.raises(RuntimeError, match="stopped"):
            mem.ingest(folder, progress=fail)
        assert cache(mem) == -(32 << 10)
        assert mem.store.source_chunk_count(mem.sources.list()[0].id) == 3
        store = mem.store
        assert isinstance(store, SQLiteStore)
        with store.bulk_writes():
            with store.bulk_writes():
                assert cache(mem) == -(128 << 10)
            assert cache(mem) == -(128 << 10)  # the inner one leaves the outer one's cache
        assert cache(mem) == -(32 << 10)


def test_a_file_that_is_not_sqlite_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match=r"junk\.db"):
        SQLiteStore(path)


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


@pytest.mark.parametrize("children", [1, 3, 50, 500])
def test_a_seal_claims_its_children_by_id_however_many(tmp_path: Path, children: int) -> None:
    from stratamem.store.tables.trees import claim_sql

    with SQLiteStore(tmp_path / "s.db") as store:
        marks = store.dialect.marks(children)
        ids = [f"n{i}" for i in range(children)]
        for level, table in ((1, "chunks"), (2, "summaries")):
            plan = store.conn.execute(
                "EXPLAIN QUERY PLAN " + claim_sql(store.dialect, level, marks), ("parent", *ids)
            ).fetchall()
            details = " ".join(row[3] for row in plan)
            # By the primary key's index, never by the parent column's: that one would visit
            # every unclaimed row of the store for each summary sealed.
            assert f"SEARCH {table} USING INDEX sqlite_autoindex_{table}_1 (id=?)" in details


@pytest.mark.parametrize("expired", [1, 50, 500])
def test_facts_to_expire_are_found_by_id(tmp_path: Path, expired: int) -> None:
    from stratamem.store.tables.facts import expire_facts_sql

    with SQLiteStore(tmp_path / "s.db") as store:
        marks = store.dialect.marks(expired)
        plan = store.conn.execute(
            "EXPLAIN QUERY PLAN " + expire_facts_sql(store.dialect, marks),
            (0, "src", *[f"f{i}" for i in range(expired)]),
        ).fetchall()
        assert [row[3] for row in plan] == [
            "SEARCH facts USING INDEX sqlite_autoindex_facts_1 (id=?)"
        ]


def test_items_written_before_versions_were_kept_get_their_record_as_version_one(
    tmp_path: Path,
) -> None:
    from stratamem.store.records import encode_record
    from stratamem.types import Record

    path = tmp_path / "v13.db"
    conn = database_at_version(path, 13)
    conn.executemany(
        "INSERT INTO sources (id, scope, kind, platform, location, ingested_at)"
        " VALUES (?, ?, 'record', ?, '', 0)",
        [("s_mem", "memory", "memory"), ("s_chat", "slack:#eng", "slack")],
    )
    body = encode_record(Record(text="Carol leads on-call", ref="memory#item_1", id="item_1"))
    conn.executemany(
        "INSERT INTO records (source_id, key, ts, sort_key, digest, body, added_at, updated_at)"
        " VALUES (?, ?, NULL, ?, 'd', ?, 5, 1717243200000)",
        [("s_mem", "item_1", "a", body), ("s_chat", "m1", "a", body)],
    )
    conn.executemany(
        "INSERT INTO chunks (id, source_id, seq, content, token_count, content_sha256,"
        " record_key) VALUES (?, ?, 0, 'Carol leads on-call', 4, 'h', ?)",
        [("c_mem", "s_mem", "item_1"), ("c_chat", "s_chat", "m1")],
    )
    conn.commit()
    conn.close()
    with SQLiteStore(path) as store:
        (version,) = store.item_versions(["item_1", "m1"])
        assert (version.source_id, version.id, version.version, version.action) == (
            "s_mem",
            "item_1",
            1,
            "added",
        )
        assert (version.text, version.closed_at, version.nodes) == (
            "Carol leads on-call",
            None,
            ("c_mem",),
        )
        assert version.recorded_at.isoformat() == "2024-06-01T12:00:00+00:00"
        assert store.item_node_versions(["c_mem", "c_chat"]) == {"c_mem": ("s_mem", "item_1", 1)}


def test_chunks_are_indexed_by_their_write_not_a_trigger(tmp_path: Path) -> None:
    """A store from before keeps the full-text rows its insert trigger wrote; once migrated,
    the trigger is gone and each write of chunks indexes exactly the chunks it wrote, and
    counts them in their source (the chunks from before counted by the migration)."""
    from dataclasses import replace

    from stratamem.types import Chunk

    path = tmp_path / "v17.db"
    conn = database_at_version(path, 17)
    conn.execute(
        "INSERT INTO sources (id, scope, kind, platform, location, ingested_at)"
        " VALUES ('s1', 'notes', 'document', 'files', '/n', 0)"
    )
    conn.execute(
        "INSERT INTO chunks (id, source_id, seq, content, token_count, content_sha256)"
        " VALUES ('old', 's1', 0, 'an older walrus', 3, 'x')"
    )
    conn.commit()
    conn.close()
    base = Chunk(
        id="", source_id="s1", seq=0, content="", token_count=2, time_start=None, time_end=None
    )
    with SQLiteStore(path) as store:
        triggers = {
            row[0]
            for row in store.conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'chunks'"
            )
        }
        assert triggers == {"chunks_fts_delete", "chunks_fts_update", "chunks_counted_out"}
        assert store.source_chunk_count("s1") == 1
        with store.transaction():
            store.insert_chunks(
                replace(base, id=f"new{i}", seq=i + 1, content=f"a newer walrus {i}")
                for i in range(3)
            )
        with store.transaction():
            store.insert_chunks([replace(base, id="last", seq=9, content="one more walrus")])
        found = store.conn.execute(
            "SELECT c.id FROM chunks_fts f JOIN chunks c ON c.rowid = f.rowid"
            " WHERE chunks_fts MATCH 'walrus' ORDER BY c.rowid"
        ).fetchall()
        assert [r[0] for r in found] == ["old", "new0", "new1", "new2", "last"]
        assert store.source_chunk_count("s1") == store.chunk_count() == 5
        # Every chunk indexed once, from its own text: FTS5 checks its index against them.
        store.conn.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('integrity-check', 1)")


def plan_of(conn: sqlite3.Connection, sql: str, params: dict[str, str]) -> str:
    return " | ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))


def test_a_sources_rows_go_by_its_chunks_with_no_index_on_source(tmp_path: Path) -> None:
    """A store from before keeps its mentions and vectors (vectors on their rowids), loses
    their indexes on source_id and the foreign keys that needed them, and deletes a source's
    rows through its chunks' ids, not by a scan; the edges keep their index and key."""
    from stratamem.store.tables.owned import delete_derived

    path = tmp_path / "v18.db"
    conn = database_at_version(path, 18)
    for source in ("s1", "s2"):
        conn.execute(
            "INSERT INTO sources (id, scope, kind, platform, location, ingested_at)"
            " VALUES (?, ?, 'document', 'files', '/n', 0)",
            (source, f"notes-{source}"),
        )
    for i in range(40):
        conn.execute(
            "INSERT INTO chunks (id, source_id, seq, content, token_count, content_sha256)"
            " VALUES (?, ?, ?, 'text', 1, ?)",
            (f"n{i}", f"s{1 + i % 2}", i, f"sha{i}"),
        )
    conn.execute(  # as the store's writes index them (migration 18)
        "INSERT INTO chunks_fts (rowid, content, title) SELECT rowid, content, title FROM chunks"
    )
    mentions = [
        (f"person:{i % 7}", f"n{i}", "person", f"P{i % 7}", f"s{1 + i % 2}", i) for i in range(40)
    ]
    conn.executemany(
        "INSERT INTO entity_index (entity_id, node_id, kind, surface, source_id, ts)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        mentions,
    )
    edges = [("person:0", f"person:{j}", f"s{1 + j % 2}", float(j)) for j in range(1, 7)]
    conn.executemany("INSERT INTO entity_edges VALUES (?, ?, ?, ?)", edges)
    vectors = [(f"n{i}", "m", f"s{1 + i % 2}", 2, bytes([i]) * 8, f"sha{i}") for i in range(40)]
    conn.executemany("INSERT INTO embeddings VALUES (?, ?, ?, ?, ?, ?)", vectors)
    conn.execute("DELETE FROM embeddings WHERE node_id = 'n0'")  # a gap in the rowids
    rowids = dict(conn.execute("SELECT node_id, rowid FROM embeddings").fetchall())
    conn.commit()
    conn.close()
    with SQLiteStore(path) as store:
        c = store.conn
        found = c.execute(
            "SELECT entity_id, node_id, kind, surface, source_id, ts FROM entity_index"
        )
        assert sorted(tuple(r) for r in found) == sorted(mentions)
        assert sorted(tuple(r) for r in c.execute("SELECT * FROM entity_edges")) == sorted(edges)
        assert dict(c.execute("SELECT node_id, rowid FROM embeddings").fetchall()) == rowids
        assert c.execute("SELECT n FROM row_counts WHERE name = 'entity_index'").fetchone()[0] == 40
        indexes = {
            row[0]
            for row in c.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name IN "
                "('entity_index', 'entity_edges', 'embeddings')"
            )
        }
        assert indexes == {
            "entity_index_node",
            "entity_edges_b",
            "embeddings_hash",
            "sqlite_autoindex_embeddings_1",
        }
        for table in ("entity_index", "embeddings"):
            assert c.execute(f"PRAGMA foreign_key_list({table})").fetchall() == []
        assert len(c.execute("PRAGMA foreign_key_list(entity_edges)").fetchall()) == 1
        for statement in delete_derived(store.dialect):
            plan = plan_of(c, statement, {"source": "s1"})
            assert "SCAN" not in plan.replace("SCAN CONSTANT ROW", ""), (statement, plan)
        store.delete_source("s1")
        assert {r[0] for r in c.execute("SELECT source_id FROM entity_index")} == {"s2"}
        assert {r[0] for r in c.execute("SELECT source_id FROM entity_edges")} == {"s2"}
        assert {r[0] for r in c.execute("SELECT source_id FROM embeddings")} == {"s2"}
        assert c.execute("SELECT n FROM row_counts WHERE name = 'entity_index'").fetchone()[0] == 20


def test_a_failed_migration_19_leaves_the_store_as_it_was(tmp_path: Path) -> None:
    """Its table rebuilds are one transaction: a step that fails half-way (here the second
    table's new name is taken) leaves every table, index and row of version 18."""
    path = tmp_path / "v18.db"
    conn = database_at_version(path, 18)
    conn.execute(
        "INSERT INTO sources (id, scope, kind, platform, location, ingested_at)"
        " VALUES ('s1', 'notes', 'document', 'files', '/n', 0)"
    )
    conn.execute(
        "INSERT INTO entity_index (entity_id, node_id, kind, surface, source_id)"
        " VALUES ('person:a', 'n1', 'person', 'A', 's1')"
    )
    conn.execute("CREATE TABLE embeddings_next (taken INTEGER)")
    conn.commit()
    schema = sorted(conn.execute("SELECT type, name, sql FROM sqlite_master").fetchall())
    conn.close()
    with pytest.raises(StoreError):
        SQLiteStore(path).close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 18
    assert sorted(conn.execute("SELECT type, name, sql FROM sqlite_master").fetchall()) == schema
    assert conn.execute("SELECT entity_id, source_id FROM entity_index").fetchall() == [
        ("person:a", "s1")
    ]


def test_a_bulk_write_of_mentions_keeps_their_count_and_the_trigger(tmp_path: Path) -> None:
    """A large write of mentions goes without the trigger that counts them row by row, and
    raises the count itself: the count and the trigger are as before, whether the write
    succeeds or fails half-way, and a later write by plain SQL is counted again."""
    from dataclasses import replace

    from stratamem.types import Chunk, Mention

    def state(store: SQLiteStore) -> tuple[int, int, str]:
        c = store.conn
        (counted,) = c.execute("SELECT n FROM row_counts WHERE name = 'entity_index'").fetchone()
        (held,) = c.execute("SELECT count(*) FROM entity_index").fetchone()
        (sql,) = c.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'entity_index_counted_in'"
        ).fetchone()
        return int(counted), int(held), str(sql)

    base = Chunk(
        id="", source_id="s1", seq=0, content="", token_count=2, time_start=None, time_end=None
    )
    chunks = [replace(base, id=f"n{i}", seq=i) for i in range(200)]
    mentions = [
        (chunk, [Mention(f"topic:t{i % 7}", "topic", "t"), Mention(f"tag:x{i}", "tag", "x")])
        for i, chunk in enumerate(chunks)
    ]
    with SQLiteStore(tmp_path / "m.db") as store:
        _, _, trigger = state(store)
        with store.transaction():
            store.insert_mentions([*mentions, mentions[0]])  # a mention twice counts once
        assert state(store) == (400, 400, trigger)
        broken = [
            (replace(base, id=f"b{i}"), [Mention(f"topic:b{i}", "topic", "b")]) for i in range(300)
        ]
        broken.append((replace(base, id="bad"), [Mention(None, "topic", "b")]))  # type: ignore[arg-type]
        with pytest.raises(sqlite3.IntegrityError), store.transaction():
            store.insert_mentions(broken)
        assert state(store) == (400, 400, trigger)
        with store.transaction():
            store.insert_mentions(broken[:-1])
        assert state(store) == (700, 700, trigger)
        with store.transaction():
            store.conn.execute(
                "INSERT INTO entity_index (entity_id, node_id, kind, surface, source_id)"
                " VALUES ('topic:one', 'n0', 'topic', 'one', 's1')"
            )
        assert state(store) == (701, 701, trigger)
