"""After ``forget``, no byte of the forgotten text is left in the database file, its WAL or
any file beside it; on PostgreSQL, in no row of any table nor in this process's index files
(the server's own files and WAL are its to recycle: see docs/postgres.md)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import stratamem
from stratamem.embed.hashing import HashingEmbedder
from stratamem.retrieval.legs.keyword import sparse_index
from stratamem.retrieval.legs.vector import VectorLeg
from stratamem.types import Filters

CANARIES = ("zqxcanaryalpha", "zqxcanarybravo", "zqxcanarycharlie")


def write_source(path: Path, source: str, lines: list[str]) -> Path:
    with path.open("w") as fh:
        for i, text in enumerate(lines):
            record = {"id": f"{source}-{i}", "text": text, "source": source, "kind": "document"}
            fh.write(json.dumps(record) + "\n")
    return path


def fts_tokens(text: str) -> set[str]:
    """The tokens the store's full-text index makes of ``text``."""
    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE VIRTUAL TABLE t USING fts5(x, tokenize = 'porter unicode61 remove_diacritics 2')"
    )
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, row)")
    conn.execute("INSERT INTO t (x) VALUES (?)", (text,))
    return {str(row[0]) for row in conn.execute("SELECT term FROM v")}


def needles() -> set[bytes]:
    found: set[bytes] = set()
    for canary in CANARIES:
        for word in {canary, *fts_tokens(canary)}:
            found.add(word.encode())
            # FTS5 stores a term after the prefix it shares with the one before it.
            found.add(word[-8:].encode())
    return found


def residue(folder: Path, words: set[bytes]) -> dict[str, list[bytes]]:
    hits: dict[str, list[bytes]] = {}
    for path in sorted(folder.iterdir()):
        if path.is_file():
            data = path.read_bytes().lower()
            present = [w for w in words if w in data]
            if present:
                hits[path.name] = present
    return hits


def rows_holding(memory: stratamem.Memory, words: set[bytes]) -> dict[str, int]:
    """Per table, the rows any of whose columns holds one of ``words`` (as text)."""
    conn = memory.store.conn
    tables = [
        str(name)
        for (name,) in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
        )
    ]
    found = {}
    for table in tables:
        held = conn.execute(
            f"SELECT count(*) FROM {table} t WHERE EXISTS"
            f" (SELECT 1 FROM {memory.store.dialect.json_rows} w"
            " WHERE strpos(lower(CAST(t AS TEXT)), w.value) > 0)",
            (json.dumps(sorted(w.decode() for w in words)),),
        ).fetchone()[0]
        if held:
            found[table] = held
    return found


def test_forget_leaves_no_byte_of_the_text_behind(store_location: str, tmp_path: Path) -> None:
    data, home = tmp_path / "data", tmp_path / "home"
    data.mkdir()
    home.mkdir()
    postgres = store_location.startswith("postgresql:")
    location = store_location if postgres else str(home / "mem.db")
    secret = [
        f"Meeting {i}: {CANARIES[i % 3]} said the {CANARIES[(i + 1) % 3]} launch slips"
        for i in range(30)
    ]
    public = [f"Public note {i} about the roadmap and the release train" for i in range(60)]
    with stratamem.open(location, embedder=HashingEmbedder()) as mem:
        base = mem.store.index_base()
        assert base is not None
        if postgres:  # the index files are in a folder of their own
            home = Path(base).parent
        mem.ingest(write_source(data / "secret.jsonl", "secret", secret), trees=False)
        mem.ingest(write_source(data / "public.jsonl", "public", public), trees=False)
        mem.indexes.embed()
        embedder = mem.embedder
        assert embedder is not None
        mem._vectors = VectorLeg(mem.store, embedder, hnsw_threshold=16)
        sparse_index(mem.store).persist_min_docs = 0
        assert mem.search(CANARIES[0]).hits
        mem.trees.flush()
        summaries = mem.store.conn.execute(
            f"SELECT count(*) FROM summaries WHERE content LIKE {mem.store.dialect.p}",
            (f"%{CANARIES[0]}%",),
        ).fetchone()[0]
        assert summaries  # the trees summarised the canaries too
        mem._vectors.saver.flush()
        sparse_index(mem.store).saver.flush()
        bm25 = f"{Path(base).name}.bm25.idx"
        side = {p.name for p in home.iterdir()}
        assert {bm25} <= side
        # On PostgreSQL pgvector searches the vectors on the server: no file holds them here.
        assert postgres or any(".vectors-" in name for name in side)
        before = residue(home, needles())
        assert bm25 in before  # the check can see a canary where one is
        if postgres:
            assert rows_holding(mem, needles())["chunks"] > 0

        mem.sources.forget("jsonl:secret")

        assert residue(home, needles()) == {}
        if postgres:
            assert rows_holding(mem, needles()) == {}
        found = mem.search("roadmap release")
        assert found.hits
        assert all(h.content.startswith("Public note") for h in found.hits)
        assert not mem.search(CANARIES[1], mode="keyword").hits
        keys = mem.store.vector_keys(embedder.spec.signature)
        assert mem._vectors.index().ids().tolist() == [rowid for rowid, _ in keys]
        assert sparse_index(mem.store).search(["roadmap"], Filters(), 5)
    assert residue(home, needles()) == {}
