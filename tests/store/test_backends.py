"""What every backend's store does alike: transactions, the Store protocol, conversation
neighbours, typed pending chunks, the keyword role's terms and statistics, connections that
follow each other's writes, and a schema from a newer stratamem refused. (What is the SQLite
file's own, its PRAGMAs, query plans and FTS5, is in test_sqlite.py.)"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import stratamem
from stratamem.errors import SchemaError, StoreError
from stratamem.plugins import open_store
from stratamem.types import Filters, SourceKind


def _postgres(location: str) -> bool:
    return location.startswith("postgresql:")


def _as_schema(
    location: str, request: pytest.FixtureRequest, sql: str, *, sqlite: int, postgres: int
) -> None:
    """Run ``sql`` on the closed store at ``location`` and set its schema version back to
    the backend's version given: the store as an older stratamem left it."""
    if _postgres(location):
        database = location.split("?", 1)[0].rsplit("/", 1)[1]
        server: Any = request.getfixturevalue("postgres_server")
        server.psql(f"{sql}; UPDATE stratamem_schema SET version = {postgres};", database)
    else:
        conn = sqlite3.connect(location)
        conn.executescript(f"{sql}; PRAGMA user_version = {sqlite};")
        conn.close()


def test_newer_schema_is_refused(store_location: str, request: pytest.FixtureRequest) -> None:
    if _postgres(store_location):
        open_store(store_location).close()
        database = store_location.split("?", 1)[0].rsplit("/", 1)[1]
        server: Any = request.getfixturevalue("postgres_server")
        server.psql("UPDATE stratamem_schema SET version = version + 1", database)
    else:
        from stratamem.store.sqlite.migrations import SCHEMA_VERSION

        conn = sqlite3.connect(store_location)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        conn.close()
    with pytest.raises(SchemaError, match="newer"):
        open_store(store_location)


def test_items_of_a_store_from_before_item_versions_begin_their_history_at_their_record(
    store_location: str, request: pytest.FixtureRequest
) -> None:
    with stratamem.open(store_location, embedder=None) as mem:
        written = mem.items.add("Carol leads on-call", id="oncall")
        (before,) = mem.items.history("oncall")
    drop = "DROP TABLE item_nodes; DROP TABLE item_versions;"
    _as_schema(store_location, request, drop, sqlite=13, postgres=3)
    with stratamem.open(store_location, embedder=None) as mem:
        (after,) = mem.items.history("oncall")
        assert (after.version, after.action, after.text, after.nodes) == (
            1,
            "added",
            "Carol leads on-call",
            written.chunks_added,
        )
        # Recorded when the record took its content: in the write that recorded the version
        # the migration dropped, just before it.
        assert after.recorded_at <= before.recorded_at
        assert mem.get("oncall").content == "Carol leads on-call"


def test_chunks_of_a_store_from_before_integer_back_links_keep_their_summaries(
    store_location: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A store whose chunks named their summary by its id (SQLite before migration 21,
    PostgreSQL before 9) comes back with each chunk under the same summary."""
    notes = tmp_path / "notes.jsonl"
    notes.write_text(
        "".join(
            json.dumps({"id": f"n{i}", "text": f"note {i} on the roadmap " * 30, "source": "n"})
            + "\n"
            for i in range(40)
        )
    )
    with stratamem.open(store_location, embedder=None) as mem:
        mem.ingest(notes)
        mem.trees.flush()
        ids = [row[0] for row in mem.store.conn.execute("SELECT id FROM chunks")]
        parents = mem.store.trees.parents_of_chunks(ids)
    assert parents
    back = """UPDATE chunks SET parent_summary_id = (
            SELECT s.id FROM summaries s WHERE s.rowid = chunks.parent_summary);
        DROP INDEX chunks_parent;
        ALTER TABLE chunks DROP COLUMN parent_summary;
        CREATE INDEX chunks_parent ON chunks(parent_summary_id);"""
    _as_schema(store_location, request, back, sqlite=20, postgres=8)
    with stratamem.open(store_location, embedder=None) as mem:
        assert mem.store.trees.parents_of_chunks(ids) == parents


def test_a_store_from_before_source_counts_counts_its_chunks_once_opened(
    store_location: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.jsonl"
    notes.write_text(
        "".join(json.dumps({"text": f"note {i}", "source": s}) + "\n" for i, s in enumerate("aab"))
    )
    with stratamem.open(store_location, embedder=None) as mem:
        mem.ingest(notes, trees=False)
    if _postgres(store_location):
        back = """DROP TRIGGER chunks_counted_in ON chunks;
            DROP TRIGGER chunks_counted_out ON chunks;
            DROP FUNCTION stratamem_chunks_added; DROP FUNCTION stratamem_chunks_removed;
            DROP TABLE source_counts"""
    else:
        back = "DROP TRIGGER chunks_counted_out; DROP TABLE source_counts"
    _as_schema(store_location, request, back, sqlite=23, postgres=11)
    with stratamem.open(store_location, embedder=None) as mem:
        assert mem.store.chunk_count() == 3
        assert {s.scope: s.chunk_count for s in mem.sources.list()} == {"jsonl:a": 2, "jsonl:b": 1}
        mem.sources.forget("jsonl:a")
        assert mem.store.chunk_count() == 1


def test_transaction_rolls_back_on_error(store_location: str) -> None:
    def add_then_fail(store: Any, scope: str) -> None:
        with store.transaction():
            store.upsert_source(scope=scope, kind=SourceKind.CHAT, platform="p", location="l")
            raise RuntimeError(scope)

    with open_store(store_location) as store:
        with pytest.raises(RuntimeError):
            add_then_fail(store, "x")
        assert store.sources() == []
        with store.transaction():
            with pytest.raises(RuntimeError):
                add_then_fail(store, "inner")
            store.upsert_source(scope="outer", kind=SourceKind.CHAT, platform="p", location="l")
        assert [s.scope for s in store.sources()] == ["outer"]


def test_the_store_fulfils_the_store_protocol(store_location: str) -> None:
    from stratamem.store.base import Store

    with open_store(store_location) as store:
        assert isinstance(store, Store)


def test_conversation_neighbours_within_a_window(store_location: str, tmp_path: Path) -> None:
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
    with stratamem.open(store_location, embedder=None) as mem:
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


def _ingest(
    location: str, tmp_path: Path, texts: list[str], embedder: Any = None
) -> stratamem.Memory:
    path = tmp_path / "docs.jsonl"
    path.write_text(
        "".join(
            json.dumps({"text": t, "source": "docs", "kind": "document", "title": ""}) + "\n"
            for t in texts
        )
    )
    mem = stratamem.open(location, embedder=embedder)
    mem.ingest(path, trees=False)
    return mem


def test_pending_chunks_and_their_vectors_are_typed(store_location: str, tmp_path: Path) -> None:
    from stratamem.store.vectors import ChunkVector, PendingChunk, unpack_vectors

    with _ingest(store_location, tmp_path, ["first text", "second text"]) as mem:
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
        # Kept as one float16 (1.0 is exact in it), and read back as the float32 given.
        assert store.cached_vectors("m", [pending[0].content_sha256]) == {
            pending[0].content_sha256: b"\x00\x3c"
        }
        assert store.vectors_of("m", [pending[1].id]) == {pending[1].id: b"\x00\x3c"}
        assert unpack_vectors([b"\x00\x3c", blob], 1).tolist() == [[1.0], [1.0]]
        with pytest.raises(StoreError, match="a stored vector has 3 bytes; 1 values take 2"):
            unpack_vectors([b"\x00\x3c", b"abc"], 1)


def test_vectors_made_before_are_found_by_their_whole_digest_and_model(
    store_location: str, tmp_path: Path
) -> None:
    """The index holds a digest's first 16 characters: rows that share them, or that another
    model made, are not taken for the one asked for."""
    from stratamem.store.vectors import ChunkVector

    with _ingest(store_location, tmp_path, ["first text", "second text"]) as mem:
        store = mem.store
        first, second = store.pending_embeddings("m", 10)
        twin = first.content_sha256[:16] + "f" * 48  # same prefix, another digest
        one, two = b"\x00\x00\x80\x3f", b"\x00\x00\x00\x40"  # 1.0 and 2.0
        with store.transaction():
            store.insert_vectors(
                [
                    ChunkVector(first.id, "m", first.source_id, 1, one, first.content_sha256),
                    ChunkVector(second.id, "m", second.source_id, 1, two, twin),
                    ChunkVector(second.id, "other", second.source_id, 1, two, first.content_sha256),
                ]
            )
        assert store.cached_vectors("m", [first.content_sha256]) == {
            first.content_sha256: b"\x00\x3c"
        }
        assert store.cached_vectors("m", [twin]) == {twin: b"\x00\x40"}
        assert store.cached_vectors("other", [twin]) == {}
        assert store.cached_vectors("m", ["0" * 64]) == {}


def test_float32_vectors_of_an_older_store_and_new_float16_ones_serve_alike(
    store_location: str, tmp_path: Path
) -> None:
    """Chunk vectors are written half as wide; rows an older stratamem wrote as float32 stay
    as they are, and the index, the store's reads and a search treat both alike."""
    import numpy as np

    from stratamem.embed.hashing import HashingEmbedder
    from stratamem.embed.indexing import embed_text

    embedder = HashingEmbedder()
    texts = [f"note {i} about the {word} rollout" for i, word in enumerate("abcdefghij")]
    with _ingest(store_location, tmp_path, texts, embedder) as mem:
        mem.indexes.embed()
        store, dim = mem.store, embedder.spec.dim
        model = embedder.spec.signature
        chunks = store.conn.execute("SELECT id, title, content FROM chunks ORDER BY id").fetchall()
        rows = sorted(store.vectors_of(model, [c[0] for c in chunks]).items())
        assert [n for n, _ in rows] == [c[0] for c in chunks]
        assert {len(blob) for _, blob in rows} == {2 * dim}
        made = embedder.embed_batch([embed_text(c[1], c[2]) for c in chunks], role="passage")
        exact = dict(zip([c[0] for c in chunks], made, strict=True))
        old = [node for node, _ in rows[::2]]  # as an older stratamem left them
        with store.transaction():
            for node in old:
                store.conn.execute(
                    f"UPDATE embeddings SET vector = {store.dialect.p}"
                    f" WHERE node_id = {store.dialect.p}",
                    (np.asarray(exact[node], "<f4").tobytes(), node),
                )
    with stratamem.open(store_location, embedder=embedder) as mem:
        leg = mem.vectors
        assert leg is not None
        nodes = list(exact)
        from_store = leg.vectors(nodes)
        leg.index()
        from_index = leg.vectors(nodes)
        for node in nodes:
            tolerance = 1e-7 if node in old else 2e-3
            np.testing.assert_allclose(from_store[node], exact[node], atol=tolerance)
            np.testing.assert_allclose(from_index[node], from_store[node], atol=1e-6)
            assert abs(float(np.linalg.norm(from_store[node])) - 1.0) < 1e-5
        top = mem.search(texts[3], mode="vector", limit=1).hits
        assert [hit.content for hit in top] == [texts[3]]


def test_the_counts_of_mentions_and_chunks_follow_every_write(
    store_location: str, tmp_path: Path
) -> None:
    """Triggers and the statements that write chunks keep ``row_counts`` equal to the
    mentions held and ``source_counts`` to each source's chunks, whatever writes them: an
    ingest, an edit of what was ingested, a forget, a lock and an unlock, a copy into a new
    SQLite file, SQL's own delete. The chunks a reader may see are summed from them."""
    from stratamem.store.copy import copy_store

    def counted(mem: stratamem.Memory) -> tuple[tuple[int, int], dict[str, int]]:
        conn = mem.store.conn
        kept = conn.execute("SELECT n FROM row_counts WHERE name = 'entity_index'").fetchone()
        mentions = (
            int(kept[0]),
            int(conn.execute("SELECT count(*) FROM entity_index").fetchone()[0]),
        )
        held = dict(conn.execute("SELECT source_id, chunks FROM source_counts WHERE chunks > 0"))
        actual = dict(conn.execute("SELECT source_id, count(*) FROM chunks GROUP BY source_id"))
        assert held == actual
        assert mem.store.chunk_count() == sum(actual.values())
        assert {s.id: s.chunk_count for s in mem.sources.list() if s.chunk_count} == actual
        return mentions, actual

    def written(texts: list[tuple[str, str]]) -> Path:
        notes.write_text("".join(json.dumps({"text": t, "source": s}) + "\n" for s, t in texts))
        return notes

    notes = tmp_path / "notes.jsonl"
    texts = [(src, f"Alice Chen met Bob Stone about #release{i}") for i, src in enumerate("aabbc")]
    with stratamem.open(store_location, embedder=None) as mem:
        mem.ingest(written(texts), trees=False)
        (held, actual), chunks = counted(mem)
        assert held == actual > 0
        assert sorted(chunks.values()) == [1, 2, 2]
        mem.ingest(written([*texts, ("c", "Carol joined"), ("d", "Dan left")]), trees=False)
        assert sorted(counted(mem)[1].values()) == [1, 2, 2, 2]
        mem.sources.forget("jsonl:b")
        after_forget = counted(mem)
        assert after_forget[0][0] == after_forget[0][1] < actual
        assert sorted(after_forget[1].values()) == [1, 2, 2]
        mem.locks.lock("jsonl:a", passphrase="correct horse battery")
        locked = counted(mem)
        assert locked[0][0] == locked[0][1] < after_forget[0][1]
        assert sorted(locked[1].values()) == [1, 2]
        mem.locks.unlock("jsonl:a", passphrase="correct horse battery")
        assert counted(mem) == after_forget
        copy_store(mem.store, tmp_path / "copy.db")
        with stratamem.open(tmp_path / "copy.db", embedder=None) as copied:
            assert counted(copied) == after_forget
        with mem.store.transaction():
            mem.store.conn.execute("DELETE FROM entity_index")
            mem.store.conn.execute("DELETE FROM chunks")
        assert counted(mem) == ((0, 0), {})


def test_the_keyword_role_reads_terms_and_statistics(store_location: str, tmp_path: Path) -> None:
    with _ingest(store_location, tmp_path, ["running cats", "dog runs"]) as mem:
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


def test_a_query_of_more_new_words_than_the_phrase_cache_holds_reads_them_all(
    store_location: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stratamem.store.postgres import keyword as postgres_keyword
    from stratamem.store.sqlite import fts_terms

    monkeypatch.setattr(fts_terms, "_QUERY_CACHE", 3)
    monkeypatch.setattr(postgres_keyword, "_PHRASES_KEPT", 3)
    with _ingest(store_location, tmp_path, ["running cats"]) as mem:
        store = mem.store
        assert store.keyword_phrases(["running", "cats"]) == [("run",), ("cat",)]
        words = ["running", "dogs", "birds", "fishes", "cats"]
        assert store.keyword_phrases(words) == [("run",), ("dog",), ("bird",), ("fish",), ("cat",)]


def test_the_source_lists_a_search_reads_follow_other_connections(store_location: str) -> None:
    with open_store(store_location) as reader, open_store(store_location) as writer:
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
        writer.conn.execute(f"UPDATE sources SET locked = 1 WHERE id = {writer.dialect.p}", (chat,))
        assert reader.scopes() == {notes: "vault:notes"}
        only_chat = Filters(kinds=(SourceKind.CHAT,))
        assert reader.nodes_by_entities({"topic:x": 1.0}, only_chat, 5) == {}

        def unlock_then_fail() -> None:
            with reader.transaction():
                reader.conn.execute(
                    f"UPDATE sources SET locked = 0 WHERE id = {reader.dialect.p}", (chat,)
                )
                assert chat in reader.scopes()
                raise RuntimeError("rolled back")

        with pytest.raises(RuntimeError):
            unlock_then_fail()
        assert reader.scopes() == {notes: "vault:notes"}  # what it read there was not kept
        writer.conn.execute(f"UPDATE sources SET locked = 0 WHERE id = {writer.dialect.p}", (chat,))
        assert reader.scopes() == {chat: "slack:#eng", notes: "vault:notes"}


def test_an_items_versions_are_read_by_key_within_one_source(store_location: str) -> None:
    with stratamem.open(store_location) as mem:
        mem.items.add("carol carries the pager", source="notes:team", id="t1")
        mem.items.add("dave carries the pager", source="notes:ops", id="t1")
        store = mem.store
        team = store.resolve_source("notes:team")
        (version,) = store.item_versions(["t1"], source_id=team.id)
        assert (version.source_id, version.text) == (team.id, "carol carries the pager")
        assert len(version.nodes) == 1
        assert len(store.item_versions(["t1"])) == 2


def test_a_bulk_write_of_chunks_keeps_every_field_and_each_mention_once(
    store_location: str,
) -> None:
    """Chunks and their mentions written in bulk (one statement, or one COPY) read back as
    written, text that needs escaping included; a mention named twice in a chunk is kept
    once; the chunks are found by keyword at once; a failed write leaves nothing."""
    from dataclasses import replace
    from datetime import UTC, datetime

    from stratamem.types import Chunk, Mention

    when = datetime(2024, 3, 1, 12, 30, tzinfo=UTC)
    awkward = 'tab\there, a back\\slash, "quotes", a newline\nand \\N that is not NULL'
    with open_store(store_location) as store:
        with store.transaction():
            sid = store.upsert_source(
                scope="bulk", kind=SourceKind.DOCUMENT, platform="files", location="/b"
            )
            chunks = [
                Chunk(
                    id=f"c{i}",
                    source_id=sid,
                    seq=i,
                    content=f"zebra number {i}: {awkward}",
                    token_count=9,
                    time_start=when if i % 2 else None,
                    time_end=when if i % 2 else None,
                    author=None if i % 2 else "Ann",
                    title=awkward if i == 0 else "",
                    tags=("x", "y") if i == 1 else (),
                    meta={"part": i} if i else {},
                )
                for i in range(3)
            ]
            store.trees.ensure(sid, "bulk")
            store.insert_chunks(chunks)
            twice = Mention("person:ann", "person", "Ann")
            store.insert_mentions(
                [(c, [twice, twice, Mention("topic:zebra", "topic", "zebra")]) for c in chunks]
            )
        assert store.chunks(["c2", "c0", "c1"]) == [chunks[2], chunks[0], chunks[1]]
        assert [c.meta for c in store.chunks(["c0", "c1"])] == [{}, {"part": 1}]
        assert store.chunk_heads(["c1", "nowhere", "c0"]) == {
            c.id: (c.source_id, c.seq, c.content_sha256, c.tags) for c in chunks[:2]
        }
        assert store.chunk_heads(["c1"])["c1"].tags == ("x", "y")
        assert store.mentions_of(["c0", "c1"]) == {
            "c0": ["person:ann", "topic:zebra"],
            "c1": ["person:ann", "topic:zebra"],
        }
        asked = ["c1", "nowhere", "c0"]
        assert store.chunks_and_mentions(asked) == (store.chunks(asked), store.mentions_of(asked))
        with store.transaction():
            store.insert_chunks([replace(chunks[0], id="c5", seq=5, content="a quiet gnu")])
        assert store.chunks_and_mentions(["c5"])[1] == {"c5": []}
        hits, _ = store.fts_search('"zebra"', Filters(), 10, snippets=False, count=False)
        assert len(hits) == 3
        okapi = Chunk(
            id="c9",
            source_id=sid,
            seq=9,
            content="okapi",
            token_count=1,
            time_start=None,
            time_end=None,
        )

        def write_with_a_taken_id() -> None:
            with store.transaction():
                store.insert_chunks([okapi])
                store.insert_chunks([chunks[0]])

        with pytest.raises(Exception, match=r"(?i)unique|duplicate"):
            write_with_a_taken_id()
        assert store.chunks(["c9"]) == []
        assert store.fts_search('"okapi"', Filters(), 10, snippets=False, count=False)[0] == []


def test_a_large_ingest_writes_the_edges_and_the_count_a_rebuild_finds(
    store_location: str, tmp_path: Path
) -> None:
    """Enough chunks that the mentions are written in bulk (the count raised by the rows
    written) and the new chunks' co-mention pairs counted in memory: the edges are those
    the stored mentions give, and the count is the table's."""
    rows = [
        {
            "text": f"Alice Chen and @bob{i % 7} moved Redis{i % 3} to SQLite #queue{i % 5}",
            "source": f"team{i % 2}",
        }
        for i in range(400)
    ]
    path = tmp_path / "team.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with stratamem.open(store_location, embedder=None) as mem:
        mem.ingest(path, trees=False)
        conn = mem.store.conn

        def edges() -> list[tuple[str, str, str, float]]:
            found = conn.execute("SELECT a, b, source_id, weight FROM entity_edges")
            return sorted((str(a), str(b), str(s), float(w)) for a, b, s, w in found)

        kept = edges()
        assert len({source for _, _, source, _ in kept}) == 2
        assert max(weight for *_, weight in kept) >= 100
        (counted,) = conn.execute("SELECT n FROM row_counts WHERE name = 'entity_index'").fetchone()
        (held,) = conn.execute("SELECT count(*) FROM entity_index").fetchone()
        assert int(counted) == int(held) >= 2 * 256  # each source past the bulk write's floor
        with mem.store.transaction():
            for source in mem.sources.list():
                mem.store.rebuild_edges(source.id)
        assert edges() == kept


def test_a_large_ingest_leaves_the_planner_statistics_current(
    store_location: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL plans a table it has no statistics of as a small one until autovacuum
    samples it: an ingest of many chunks has them taken at its end (SQLite keeps none)."""
    from stratamem.ingest import pipeline

    monkeypatch.setattr(pipeline, "STATISTICS_AFTER", 30)
    path = tmp_path / "docs.jsonl"

    def analyzed(mem: stratamem.Memory) -> bool:
        if mem.store.name != "postgresql":
            return False
        found = mem.store.conn.execute(
            "SELECT last_analyze FROM pg_stat_user_tables WHERE relname = 'chunks'"
        ).fetchone()
        return found[0] is not None

    with stratamem.open(store_location, embedder=None) as mem:
        for n, scope in ((20, "few"), (40, "many")):
            lines = ({"text": f"note {i} of {n}", "kind": "document"} for i in range(n))
            path.write_text("".join(json.dumps(line) + "\n" for line in lines))
            report = mem.ingest(path, trees=False, scope=scope)
            if n == 20:
                assert not analyzed(mem)
        assert sum(s.added for s in report.sources) >= 30
        assert analyzed(mem) == (mem.store.name == "postgresql")
