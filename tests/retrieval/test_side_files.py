"""Index files beside the database (for a store on PostgreSQL, in a cache folder named by its
store id): bound to the database and rows they were built from, and saved off the search path.

On PostgreSQL the vectors are searched by pgvector and no vector file is written: what is said
of vector files holds on SQLite, what is said of the keyword file on both."""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pytest

import stratamem
from stratamem.embed.hashing import HashingEmbedder
from stratamem.retrieval.index import bm25_file, vectors_file
from stratamem.retrieval.index.file import rows_digest
from stratamem.retrieval.index.vectors import VectorIndex
from stratamem.retrieval.legs.keyword import SparseKeywordIndex, sparse_index
from stratamem.retrieval.legs.vector import VectorLeg
from stratamem.store.vectors import unpack_vectors
from stratamem.types import Filters
from suite import PATIENCE_S

THRESHOLD = 16  # small enough that the test stores build an HNSW graph and save it


def write_docs(path: Path, texts: list[str], source: str) -> Path:
    with path.open("w") as fh:
        for i, text in enumerate(texts):
            record = {"id": f"{source}-{i}", "text": text, "source": source, "kind": "document"}
            fh.write(json.dumps(record) + "\n")
    return path


def texts(prefix: str, n: int) -> list[str]:
    return [f"{prefix} note {i} about {prefix}{i % 7} and topic{i % 11} item{i}" for i in range(n)]


def ingest(mem: stratamem.Memory, where: Path, prefix: str, n: int) -> None:
    mem.ingest(write_docs(where / f"{prefix}.jsonl", texts(prefix, n), prefix), trees=False)
    mem.indexes.embed()


def legs(mem: stratamem.Memory) -> tuple[VectorLeg, SparseKeywordIndex]:
    embedder = mem.embedder
    assert embedder is not None
    return (
        VectorLeg(mem.store, embedder, hnsw_threshold=THRESHOLD),
        SparseKeywordIndex(mem.store, persist_min_docs=0),
    )


def save_both(mem: stratamem.Memory) -> tuple[Path | None, Path]:
    """The saved files of both legs: the vector file (None where the store searches its
    vectors itself) and the keyword file."""
    vectors, keyword = legs(mem)
    vectors.index()
    assert keyword.search(["note"], Filters(), 5)
    vectors.saver.flush()
    keyword.saver.flush()
    vector_path, keyword_path = vectors.index_path(), keyword.index_path()
    if vectors.native:
        assert vector_path is None
    else:
        assert vector_path is not None
        assert vector_path.exists()
    assert keyword_path is not None
    assert keyword_path.exists()
    return vector_path, keyword_path


def database(location: str) -> str:
    return urlsplit(location).path.lstrip("/")


def is_postgres(location: str) -> bool:
    return location.startswith(("postgresql:", "postgres:"))


def reach_generation(mem: stratamem.Memory, target: int) -> None:
    assert mem.store.generation() <= target
    while mem.store.generation() < target:
        mem.store.bump_generation()


def assert_serves_only_this_store(mem: stratamem.Memory) -> None:
    """Both legs answer exactly as freshly built ones would, and vector recall is perfect."""
    vectors, keyword = legs(mem)
    fresh = VectorLeg(mem.store, vectors.embedder, hnsw_threshold=THRESHOLD, persist=False)
    stored = [rowid for rowid, _ in mem.store.vector_keys(vectors.signature)]
    assert vectors.index().ids().tolist() == stored
    embedder = vectors.embedder
    sample = [c for s in mem.sources.list() for c in list(mem.store.iter_chunks(s.id))[:10]]
    hits = 0
    for chunk in sample:
        query = embedder.embed_batch([chunk.content])[0]
        found = vectors.search(query, Filters(), 10)
        assert found == fresh.search(query, Filters(), 10)
        hits += chunk.id in found
    assert hits == len(sample)  # recall@10 of a chunk's own text is 1.0, as a fresh build's
    fresh_keyword = SparseKeywordIndex(mem.store, persist=False)
    for terms in (["note", "topic3"], ["alpha1", "item7"], ["beta2", "delta4", "gamma5"]):
        ranked = keyword.search(terms, Filters(), 10)
        assert ranked is not None
        assert ranked == fresh_keyword.search(terms, Filters(), 10)
        assert keyword.note == "" or "rebuilt" in keyword.note


def test_a_new_database_at_the_same_path_never_uses_the_old_files(
    store_location: str, locations: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    db = store_location
    with stratamem.open(db, embedder=HashingEmbedder()) as a:
        ingest(a, data, "alpha", 120)
        old_id = a.store.store_id()
        vector_path, keyword_path = save_both(a)
        generation = a.store.generation()
    locations.drop(db)
    if is_postgres(db):
        request.getfixturevalue("postgres_server").new_database(database(db))
    vector_bytes = None if vector_path is None else vector_path.read_bytes()
    keyword_bytes = keyword_path.read_bytes()

    with stratamem.open(db, embedder=HashingEmbedder()) as b:
        assert b.store.store_id() != old_id
        ingest(b, data, "beta", 40)
        reach_generation(b, generation)
        assert b.store.generation() == generation
        # The old files are still there, of the same model, dimension and generation ...
        assert keyword_path.read_bytes() == keyword_bytes
        # ... and refused all the same.
        keys = b.store.vector_keys(HashingEmbedder().spec.signature)
        if vector_path is not None:
            assert vector_path.read_bytes() == vector_bytes
            assert (
                VectorIndex.load(
                    vector_path,
                    384,
                    lambda: pytest.fail("a file of another store is refused before its vectors"),
                    signature=HashingEmbedder().spec.signature,
                    generation=generation,
                    store_id=b.store.store_id(),
                )
                is None
            )
        with pytest.raises(bm25_file.Rejected, match="another database"):
            bm25_file.read_file(keyword_path, b.store.keyword_schema(), store_id=b.store.store_id())
        assert len(keys) == 40
        assert_serves_only_this_store(b)


def test_a_restored_backup_beside_newer_files_rebuilds(
    store_location: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    db = store_location
    if is_postgres(db):
        # A database copied whole (its store id and its rowid counters with it), and later
        # put back in the original's place.
        server = request.getfixturevalue("postgres_server")
        name, backup = database(db), f"{database(db)}_backup"
        with stratamem.open(db, embedder=HashingEmbedder()) as mem:
            ingest(mem, data, "alpha", 60)
        server.psql(f'CREATE DATABASE "{backup}" TEMPLATE "{name}"')
        with stratamem.open(db, embedder=HashingEmbedder()) as mem:
            ingest(mem, data, "gamma", 60)
            vector_path, keyword_path = save_both(mem)
            store_id, generation = mem.store.store_id(), mem.store.generation()
        server.psql(f'DROP DATABASE "{name}"')
        server.psql(f'CREATE DATABASE "{name}" TEMPLATE "{backup}"')
    else:
        backup_file = tmp_path / "backup.db"
        with stratamem.open(db, embedder=HashingEmbedder()) as mem:
            ingest(mem, data, "alpha", 60)
            with sqlite3.connect(backup_file) as copy:
                mem.store.conn.backup(copy)
            ingest(mem, data, "gamma", 60)
            vector_path, keyword_path = save_both(mem)
            store_id, generation = mem.store.store_id(), mem.store.generation()
        for suffix in ("-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        shutil.copyfile(backup_file, db)

    with stratamem.open(db, embedder=HashingEmbedder()) as restored:
        assert restored.store.store_id() == store_id  # a restored backup keeps its id
        ingest(restored, data, "delta", 60)  # same rowids as gamma had, other chunks
        reach_generation(restored, generation)
        if vector_path is not None:
            header = _header(vector_path)
            assert header["store_id"] == store_id
            assert header["generation"] == generation
            keys = restored.store.vector_keys(HashingEmbedder().spec.signature)
            assert header["rows_sha256"] != rows_digest([k[0] for k in keys], [k[1] for k in keys])
        # The keyword file is of the same store, chunk generation and highest rowid, and
        # holds other rows.
        header = _header(keyword_path)
        state = restored.store.keyword_state()
        assert header["store_id"] == store_id
        assert (header["generation"], header["max_rowid"]) == (state.generation, state.max_rowid)
        rows = restored.store.keyword_rows()
        assert header["rows_sha256"] != rows_digest([r[0] for r in rows], [r[1] for r in rows])
        assert_serves_only_this_store(restored)


def test_a_file_of_this_store_and_rows_is_reused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with stratamem.open(tmp_path / "s.db", embedder=HashingEmbedder()) as mem:
        ingest(mem, data, "alpha", 40)
        vector_path, _ = save_both(mem)
        vectors, _ = legs(mem)
        index = vectors.index()
        assert index.kind == "hnsw"
        assert vectors._rows  # loaded, with the rows it was checked against
        assert_serves_only_this_store(mem)
        assert vector_path.exists()


def test_the_rows_digest_is_of_rowid_and_chunk_id_pairs() -> None:
    assert rows_digest([1, 2], ["a", "b"]) != rows_digest([1, 2], ["b", "a"])
    assert rows_digest([1, 2], ["a", "b"]) != rows_digest([1, 3], ["a", "b"])
    assert rows_digest([], []) == rows_digest(np.empty(0, np.int64), [])
    with pytest.raises(ValueError, match="rowids but"):
        rows_digest([1], [])


# -- saving off the search path --------------------------------------------------------------


class HeldWrite:
    """A write_file stand-in that records its thread and blocks until released."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, *args: object, **kwargs: object) -> None:
        self.threads.append(threading.current_thread())
        self.started.set()
        assert self.release.wait(PATIENCE_S)


def test_a_vector_search_never_waits_for_the_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    held = HeldWrite()
    monkeypatch.setattr(vectors_file, "write_file", held)
    with stratamem.open(tmp_path / "s.db", embedder=HashingEmbedder()) as mem:
        ingest(mem, data, "alpha", 40)
        vectors, _ = legs(mem)
        query = vectors.embedder.embed_batch(["alpha note"])[0]
        assert vectors.search(query, Filters(), 5)
        assert held.started.wait(PATIENCE_S)  # the save is running, and held ...
        ingest(mem, data, "beta", 20)
        assert len(vectors.search(query, Filters(), 5)) == 5  # ... yet searches go on
        assert vectors.saver.busy
        held.release.set()
        vectors.saver.flush()
    assert held.threads
    assert threading.main_thread() not in held.threads


def test_a_keyword_search_never_waits_for_the_save(
    store_location: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    held = HeldWrite()
    monkeypatch.setattr(bm25_file, "write_file", held)
    with stratamem.open(store_location, embedder=None) as mem:
        mem.ingest(write_docs(data / "a.jsonl", texts("alpha", 40), "alpha"), trees=False)
        keyword = SparseKeywordIndex(mem.store, persist_min_docs=0)
        assert keyword.search(["note"], Filters(), 5)
        assert held.started.wait(PATIENCE_S)
        mem.ingest(write_docs(data / "b.jsonl", texts("beta", 20), "beta"), trees=False)
        assert keyword.search(["beta"], Filters(), 5)
        assert keyword.saver.busy
        held.release.set()
        keyword.saver.flush()
    assert held.threads
    assert threading.main_thread() not in held.threads


def test_closing_the_memory_finishes_the_save(store_location: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with stratamem.open(store_location, embedder=HashingEmbedder()) as mem:
        keyword = sparse_index(mem.store)
        keyword.persist_min_docs = 0  # small thresholds, so that files are written at all
        ingest(mem, data, "alpha", 40)
        embedder = mem.embedder
        assert embedder is not None
        mem._vectors = VectorLeg(mem.store, embedder, hnsw_threshold=THRESHOLD)
        mem.search("alpha note", mode="vector")
        mem.search("alpha note", mode="keyword")
        native = mem._vectors.native
        path, keyword_path = mem._vectors.index_path(), keyword.index_path()
    if not native:
        assert path is not None
        assert path.exists()
    assert keyword_path is not None
    assert keyword_path.exists()


def _header(path: Path) -> dict[str, object]:
    data = path.read_bytes()
    length = int.from_bytes(data[8:12], "little")
    header: dict[str, object] = json.loads(data[12 : 12 + length])
    return header


def test_a_rowid_reused_by_another_connection_gets_its_new_vector(
    store_location: str, tmp_path: Path
) -> None:
    """SQLite gives a deleted row's rowid to the next insert: a live index that matched rows
    on rowid alone would go on serving the forgotten chunk's vector for the new chunk."""
    db = store_location
    with stratamem.open(db, embedder=HashingEmbedder()) as writer:
        ingest(writer, tmp_path, "alpha", 40)
        ingest(writer, tmp_path, "beta", 20)
        with stratamem.open(db, embedder=HashingEmbedder()) as reader:
            vectors, _ = legs(reader)
            vectors.index()
            old = reader.store.vector_keys(vectors.signature)
            writer.sources.forget("jsonl:beta")
            # Rowids are never handed out again (AUTOINCREMENT) in stores made since the
            # records migration; an older store, or a restored one, may still reuse them.
            with writer.store.transaction():
                writer.store.conn.execute(
                    "SELECT setval(pg_get_serial_sequence('chunks', 'rowid'), max(rowid)) "
                    "FROM chunks"
                    if is_postgres(db)
                    else "UPDATE sqlite_sequence SET seq = (SELECT max(rowid) FROM chunks) "
                    "WHERE name = 'chunks'"
                )
            ingest(writer, tmp_path, "gamma", 20)
            keys = reader.store.vector_keys(vectors.signature)
            assert {rowid for rowid, _ in keys} & {rowid for rowid, _ in old[40:]}, (
                "the new chunks should take the forgotten chunks' rowids"
            )
            index = vectors.index()
            stored = reader.store.vectors_by_rowid(vectors.signature, [r for r, _ in keys])
            found, matrix = index.vectors([r for r, _ in keys])
            by_rowid = dict(zip(found.tolist(), matrix, strict=True))
            dim = reader.embedder.spec.dim
            for rowid, blob in stored.items():
                np.testing.assert_allclose(
                    by_rowid[rowid], unpack_vectors([blob], dim)[0], atol=1e-5
                )


class Syncs:
    """Counts how often a leg compares every vector key of the store (its full sync)."""

    def __init__(self, leg: VectorLeg, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full = 0
        compare = leg._sync_all

        def counted(*args: Any) -> None:
            self.full += 1
            compare(*args)

        monkeypatch.setattr(leg, "_sync_all", counted)


def assert_holds_the_stored_vectors(leg: VectorLeg, mem: stratamem.Memory) -> None:
    """The live index holds exactly the store's vectors, under the right chunk ids."""
    index = leg.index()
    keys = mem.store.vector_keys(leg.signature)
    assert index.ids().tolist() == [rowid for rowid, _ in keys]
    assert leg._rows == dict(keys)
    stored = mem.store.vectors_by_rowid(leg.signature, [rowid for rowid, _ in keys])
    found, matrix = index.vectors([rowid for rowid, _ in keys])
    expected = unpack_vectors([stored[int(r)] for r in found], leg.embedder.spec.dim)
    np.testing.assert_allclose(matrix, expected, atol=1e-6)


def test_another_process_s_new_vectors_are_added_without_reading_every_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "store.db")
    with stratamem.open(db, embedder=HashingEmbedder()) as writer:
        ingest(writer, tmp_path, "alpha", 40)
        with stratamem.open(db, embedder=HashingEmbedder()) as reader:
            leg, _ = legs(reader)
            leg.index()
            syncs = Syncs(leg, monkeypatch)
            ingest(writer, tmp_path, "beta", 30)  # new chunks and their vectors
            assert_holds_the_stored_vectors(leg, reader)
            assert len(leg.index()) == 70
            # A vector written again for a chunk the index holds replaces its old one.
            node = writer.store.conn.execute("SELECT id FROM chunks ORDER BY rowid").fetchone()[0]
            other = HashingEmbedder().embed_batch(["something else entirely"], role="passage")[0]
            with writer.store.transaction():
                writer.store.conn.execute(
                    f"UPDATE embeddings SET vector = {writer.store.dialect.p}"
                    f" WHERE node_id = {writer.store.dialect.p}",
                    (np.asarray(other, "<f2").tobytes(), node),
                )
                writer.store.bump_generation(chunks=False)
            # (an UPDATE keeps the row key: that is not how vectors are written, so the
            # index cannot tell; a write as the store does it takes a new key.)
            row = writer.store.conn.execute(
                "SELECT node_id, model, source_id, dim, vector, content_sha256 FROM embeddings"
                f" WHERE node_id = {writer.store.dialect.p}",
                (node,),
            ).fetchone()
            with writer.store.transaction():
                writer.store.insert_vectors([tuple(row)])
            assert_holds_the_stored_vectors(leg, reader)
            rowid = reader.store.ids_to_rowids([node])[node]
            np.testing.assert_allclose(leg.index().vectors([rowid])[1][0], other, atol=2e-3)
            assert syncs.full == 0


@pytest.mark.parametrize(
    "change", ["forget", "delete vectors", "drop a vector", "top row gone", "top row retaken"]
)
def test_after_anything_is_taken_away_every_key_is_compared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    db = str(tmp_path / "store.db")
    with stratamem.open(db, embedder=HashingEmbedder()) as writer:
        ingest(writer, tmp_path, "alpha", 40)
        ingest(writer, tmp_path, "beta", 20)
        store = writer.store
        kept = store.conn.execute(
            "SELECT node_id, model, source_id, dim, vector, content_sha256 FROM embeddings"
            " ORDER BY rowid LIMIT 1 OFFSET 5"
        ).fetchone()
        if change == "top row retaken":  # a chunk with no vector yet, to be given one later
            with store.transaction():
                store.conn.execute(
                    f"DELETE FROM embeddings WHERE node_id = {store.dialect.p}", (kept[0],)
                )
                store.bump_generation(chunks=False)
        with stratamem.open(db, embedder=HashingEmbedder()) as reader:
            leg, _ = legs(reader)
            leg.index()
            syncs = Syncs(leg, monkeypatch)
            if change == "top row retaken":
                # The last row goes and the next vector written takes its row key: as many
                # vectors as before, none after the last key seen, but another chunk's.
                with store.transaction():
                    store.conn.execute(
                        "DELETE FROM embeddings WHERE rowid = (SELECT max(rowid) FROM embeddings)"
                    )
                    store.insert_vectors([tuple(kept)])
            elif change == "forget":
                writer.sources.forget("jsonl:beta")
            elif change == "delete vectors":
                with store.transaction():
                    store.delete_vectors(keep_model="another model")
            else:
                order = "DESC" if change == "top row gone" else "ASC"
                with store.transaction():
                    store.conn.execute(
                        "DELETE FROM embeddings WHERE rowid ="
                        f" (SELECT rowid FROM embeddings ORDER BY rowid {order} LIMIT 1)"
                    )
                    store.bump_generation(chunks=False)
            if change == "forget":
                ingest(writer, tmp_path, "gamma", 5)  # and something new besides
            assert_holds_the_stored_vectors(leg, reader)
            assert syncs.full == 1
            if change not in ("delete vectors", "top row retaken"):
                # The chunk that lost its vector gets one again (with anything new): only
                # what was written since is read.
                ingest(writer, tmp_path, "delta", 5)
                assert_holds_the_stored_vectors(leg, reader)
                assert syncs.full == 1


def test_a_save_started_before_another_process_removed_a_source_is_dropped(
    store_location: str, tmp_path: Path
) -> None:
    db = store_location
    with stratamem.open(db, embedder=HashingEmbedder(dim=64)) as mem:
        ingest(mem, tmp_path, "keep", 30)
        ingest(mem, tmp_path, "secretword", 30)
        vectors, keyword = legs(mem)
        vectors.index()
        assert keyword.search(["note"], Filters(), 5)
        vectors.saver.flush()
        keyword.saver.flush()
        keyword_path = keyword.index_path()
        assert keyword_path is not None
        paths = [p for p in (vectors.index_path(), keyword_path) if p is not None]
        assert b"secretword" in keyword_path.read_bytes()
        # Another process forgets the source (a lock removes its rows the same way) and
        # rewrites the files without it; then this one's pending save comes due.
        with stratamem.open(db, embedder=HashingEmbedder(dim=64)) as other:
            other.sources.forget("jsonl:secretword")
        after = {p: p.read_bytes() if p.exists() else None for p in paths}
        keyword._unsaved = 10**6
        keyword._save_snapshot()
        vectors._save_snapshot()
        assert {p: p.read_bytes() if p.exists() else None for p in paths} == after
        assert not keyword_path.exists() or b"secretword" not in keyword_path.read_bytes()


def test_built_indexes_are_read_by_the_next_process_rather_than_built(
    store_location: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stratamem.retrieval.legs import keyword as keyword_module

    db = store_location
    with stratamem.open(db, embedder=HashingEmbedder()) as mem:
        ingest(mem, tmp_path, "alpha", 40)
        vectors, keyword = legs(mem)
        mem._vectors = vectors  # small thresholds, so that files are written at all
        keyword_module._INDEXES[mem.store] = keyword
        took = mem.indexes.build()
        assert set(took) == {"keyword", "vectors"}
        vector_path, keyword_path = vectors.index_path(), keyword.index_path()
        if not vectors.native:
            assert vector_path is not None
            assert vector_path.exists()
        assert keyword_path is not None
        assert keyword_path.exists()
        expected = mem.search("alpha note", limit=5).hits

    def built(*args: object, **kwargs: object) -> None:
        raise AssertionError("an index was built instead of read from its file")

    monkeypatch.setattr(VectorIndex, "rebuild", built)
    monkeypatch.setattr(SparseKeywordIndex, "_build", built)
    with stratamem.open(db, embedder=HashingEmbedder()) as mem:
        vectors, keyword = legs(mem)
        mem._vectors = vectors
        keyword_module._INDEXES[mem.store] = keyword
        assert [h.node_id for h in mem.search("alpha note", limit=5).hits] == [
            h.node_id for h in expected
        ]
    with stratamem.open(db, embedder=None) as mem:
        mem.store.principal_name = "someone"  # a principal may read, not build
        with pytest.raises(stratamem.StratamemError):
            mem.indexes.build()
