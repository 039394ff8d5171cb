"""Copying a store between backends (``copy_store``, ``stratamem copy``) against real servers:
a SQLite store with every kind of row (chunks, vectors, trees, facts, rollups, a principal, a
locked source, a pending seal job) goes to PostgreSQL and back, row for row; searches rank
alike on all three; the locked source opens on each copy with its passphrase; a destination
that is not empty is refused, and a copy that fails or is interrupted half-way leaves the
destination as it was."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import stratamem
from stratamem.access import crypto
from stratamem.cli import main
from stratamem.config import TreeConfig
from stratamem.errors import StoreError, WrongPassphrase
from stratamem.plugins import open_store
from stratamem.store import copy as copying
from stratamem.store.copy import TABLES, CopyProgress, copy_store
from stratamem.testing import HashingEmbedder

SECRET = "jsonl:secret"
PASSPHRASE = "correct horse battery staple"
CANARY = "zqxcanary"
FAST_KDF = crypto.Scrypt(n=2**10, r=8, p=1)
TREES = TreeConfig(input_token_budget=200, summary_fanout=3)
QUERIES = ("redis queue", "deploy freeze", "onboarding", "Alice budget review", "release")
Dump = dict[str, list[tuple[Any, ...]]]


@dataclass(frozen=True)
class Built:
    db: Path
    token: str
    high_water: int


@pytest.fixture(autouse=True)
def _index_dir_of_the_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Index files of stores on the server go to the test's own folder (not the run's, as
    elsewhere): a copy must find only the index files it was given."""
    monkeypatch.setenv("STRATAMEM_INDEX_DIR", str(tmp_path / "indexes"))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """A SQLite store holding a row in every table: three sources ingested, embedded and
    summarised, facts remembered and consolidated, entities merged, a principal, a source
    locked, a seal job pending, and a forgotten source's chunk rowids (never handed out
    again)."""
    folder = tmp_path_factory.mktemp("copy-source")
    db = folder / "source.db"
    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    secret = folder / "secret.jsonl"
    secret.write_text(
        "".join(
            json.dumps(
                {
                    "id": f"s{n}",
                    "source": "secret",
                    "kind": "chat",
                    "timestamp": 1_710_000_000 + n * 5_400,
                    "author": ("Zqxanna Vorpal", "Bob Martins")[n % 2],
                    "text": f"Review {n} of Project Zqxhelion: {CANARY} budget for the launch",
                }
            )
            + "\n"
            for n in range(24)
        )
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(crypto, "DEFAULT_KDF", FAST_KDF)
        with stratamem.open(db, embedder=HashingEmbedder(), tree_config=TREES) as mem:
            mem.ingest(fixtures / "slack", trees=False)
            mem.ingest(fixtures / "jsonl" / "export.jsonl", trees=False)
            mem.ingest(secret, trees=False)
            mem.indexes.embed()
            mem.trees.flush()
            for predicate, value in (("works_at", "org:acme"), ("lives_in", "city:lisbon")):
                mem.facts.remember("person:alice chen", predicate, value)
            mem.facts.remember("person:alice chen", "likes", "tea", many=True)
            mem.facts.remember("person:alice chen", "likes", "chess", many=True)
            mem.facts.consolidate(min_facts=1)
            mem.facts.remember("person:a. chen", "likes", "tea")
            mem.entities.merge("person:a. chen", "person:alice chen")
            token = mem.principals.add("reader", ["team"])
            mem.items.add("A late note on the deploy freeze", source="notes:late", author="Bob")
            mem.items.add("Gone soon", source="notes:gone")
            mem.sources.forget("notes:gone")
            mem.locks.lock(SECRET, passphrase=PASSPHRASE)
    with sqlite3.connect(db) as conn:
        (high,) = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'chunks'").fetchone()
        (top,) = conn.execute("SELECT max(rowid) FROM chunks").fetchone()
    conn.close()
    assert high > top
    return Built(db, token, int(high))


def _counts(location: str | Path) -> dict[str, int]:
    store = open_store(location)
    try:
        return {
            t.name: int(store.conn.execute(f"SELECT count(*) FROM {t.name}").fetchone()[0])
            for t in TABLES
        }  # type: ignore[attr-defined]
    finally:
        store.close()


def _store_id(location: str | Path) -> str:
    store = open_store(location)
    try:
        return store.store_id()
    finally:
        store.close()


def _dump(db: Path) -> Dump:
    """Every row of every table of a SQLite store, rowids included, and its counters."""
    conn = sqlite3.connect(db)
    try:
        out: Dump = {}
        for table in (*(t.name for t in TABLES), "settings", "sqlite_sequence"):
            rows = (
                conn.execute(f"SELECT rowid, * FROM {table}")
                if table in ("facts", "embeddings", "summary_vectors", "fact_vectors")
                else conn.execute(f"SELECT * FROM {table}")
            )
            out[table] = sorted((tuple(r) for r in rows), key=repr)
        # Hidden rowids of tables nothing addresses by them are the engine's own.
        for table in ("embeddings", "summary_vectors", "fact_vectors"):
            out[table] = sorted((r[1:] for r in out[table]), key=repr)
        for word in ("redis", "deploy", "onboarding", "alice"):
            out[f"match:{word}"] = list(
                conn.execute(
                    "SELECT rowid, rank FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rowid",
                    (word,),
                )
            )
        return out
    finally:
        conn.close()


def _keyword(location: str | Path, query: str, **options: Any) -> list[tuple[str, float]]:
    with stratamem.open(location, embedder=HashingEmbedder(), **options) as mem:
        hits = mem.search(query, mode="keyword", limit=10).hits
    return [(h.node_id, h.score) for h in hits]


def _same(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> bool:
    return [n for n, _ in a] == [n for n, _ in b] and all(
        math.isclose(x, y, rel_tol=1e-9) for (_, x), (_, y) in zip(a, b, strict=True)
    )


def test_sqlite_to_postgresql_and_back_keeps_every_row(
    built: Built, postgres_url: str, tmp_path: Path
) -> None:
    source = _counts(built.db)
    assert all(source.values()), source  # the store has a row in every table
    seen: list[CopyProgress] = []
    there = copy_store(built.db, postgres_url, progress=seen.append)
    back = tmp_path / "back.db"
    again = copy_store(postgres_url, back)

    assert there.verified
    assert again.verified
    assert there.queries >= 2
    assert {k: v for k, v in there.tables.items() if k != "settings"} == source
    assert again.tables == there.tables
    assert _counts(postgres_url) == source == _counts(back)
    assert [p.table for p in seen if p.done] == ["settings", *(t.name for t in TABLES)]
    assert _store_id(postgres_url) == _store_id(back) == _store_id(built.db) == there.store_id
    assert _dump(back) == _dump(built.db)


def test_copies_search_alike_and_open_the_locked_source(
    built: Built, postgres_url: str, postgres_server: Any, tmp_path: Path
) -> None:
    copy_store(built.db, postgres_url)
    back = tmp_path / "back.db"
    copy_store(postgres_url, back)
    second = postgres_server.new_database()
    copy_store(postgres_url, second)  # PostgreSQL to PostgreSQL keeps pgvector's column
    vector_hits = []
    for location in (postgres_url, second):
        with stratamem.open(location, embedder=HashingEmbedder()) as mem:
            vector_hits.append([h.node_id for h in mem.search("deploy freeze", mode="vector").hits])
    assert vector_hits[0]
    assert vector_hits[0] == vector_hits[1]
    for query in QUERIES:
        expected = _keyword(built.db, query)
        assert expected, query
        assert _same(_keyword(postgres_url, query), expected), query
        assert _same(_keyword(back, query), expected), query

    with stratamem.open(postgres_url, embedder=HashingEmbedder(), tree_config=TREES) as mem:
        assert mem.principals.authenticate(built.token).name == "reader"
        assert {f.object for f in mem.facts.recall("person:alice chen")} >= {"org:acme", "tea"}
        assert mem.facts.rollups()
        assert not _keyword(postgres_url, CANARY)
        with pytest.raises(WrongPassphrase):
            mem.locks.unlock(SECRET, passphrase="not it")
        assert mem.locks.unlock(SECRET, passphrase=PASSPHRASE).chunks > 0
    with stratamem.open(back, embedder=HashingEmbedder(), tree_config=TREES) as mem:
        assert mem.locks.unlock(SECRET, passphrase=PASSPHRASE).chunks > 0
    unlocked_here = _keyword(postgres_url, CANARY)
    assert unlocked_here
    assert _same(unlocked_here, _keyword(back, CANARY))
    # A chunk written on a copy takes a rowid the source never gave out.
    for location in (postgres_url, back):
        with stratamem.open(location, embedder=None) as mem:
            mem.items.add("Written on the copy", source="notes:late")
            (rowid,) = mem.store.conn.execute(  # type: ignore[attr-defined]
                "SELECT max(rowid) FROM chunks"
            ).fetchone()
        assert rowid > built.high_water


def test_a_source_locked_on_postgresql_opens_on_a_sqlite_copy(
    built: Built, postgres_url: str, tmp_path: Path
) -> None:
    copy_store(built.db, postgres_url)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(crypto, "DEFAULT_KDF", FAST_KDF)
        with stratamem.open(postgres_url, embedder=HashingEmbedder(), tree_config=TREES) as mem:
            mem.locks.unlock(SECRET, passphrase=PASSPHRASE)
            expected = _keyword(postgres_url, CANARY)
            mem.locks.lock("slack:#eng", passphrase="another one")
            mem.locks.lock(SECRET, passphrase=PASSPHRASE)
    back = tmp_path / "back.db"
    assert copy_store(postgres_url, back).verified
    with stratamem.open(back, embedder=HashingEmbedder(), tree_config=TREES) as mem:
        mem.locks.unlock(SECRET, passphrase=PASSPHRASE)
        mem.locks.unlock("slack:#eng", passphrase="another one")
    assert expected
    assert _same(_keyword(back, CANARY), expected)
    with sqlite3.connect(back) as conn:
        assert conn.execute("SELECT count(*) FROM locks").fetchone() == (0,)
    conn.close()


def test_the_keyword_tokenizer_travels(tmp_path: Path, postgres_server: Any) -> None:
    db = tmp_path / "plain.db"
    with stratamem.open(db, embedder=None) as mem:
        mem.ingest(Path(__file__).resolve().parents[1] / "fixtures" / "slack")
        assert mem.indexes.set_keyword_tokenizer("plain")
    first, second = postgres_server.new_database(), postgres_server.new_database()
    assert copy_store(db, first).verified
    assert copy_store(first, second).verified  # PostgreSQL to PostgreSQL
    back = tmp_path / "back.db"
    assert copy_store(second, back).verified
    for location in (first, second, back):
        store = open_store(location)
        try:
            assert store.keyword_tokenizer() == "plain"
        finally:
            store.close()
    # "deploys" is not stemmed to "deploy" under the plain tokenizer: no hit on any copy.
    assert _keyword(db, "deploys") == _keyword(back, "deploys") == _keyword(second, "deploys")


def test_a_destination_that_is_not_empty_is_refused(built: Built, store_location: str) -> None:
    with stratamem.open(store_location, embedder=None) as mem:
        mem.items.add("Already here", source="notes:mine")
    before, own = _counts(store_location), _store_id(store_location)
    with pytest.raises(StoreError, match="the destination is not empty") as caught:
        copy_store(built.db, store_location)
    assert "\n" not in str(caught.value)
    assert "sources has rows" in str(caught.value)
    assert _counts(store_location) == before
    assert _store_id(store_location) == own


@pytest.mark.parametrize("failure", [RuntimeError("the disk is full"), KeyboardInterrupt()])
def test_a_copy_that_fails_half_way_leaves_the_destination_as_it_was(
    built: Built, store_location: str, monkeypatch: pytest.MonkeyPatch, failure: BaseException
) -> None:
    open_store(store_location).close()  # an empty store, with an id of its own
    own = _store_id(store_location)
    read = copying._read_batches

    def failing(store: Any, table: Any, columns: list[str]) -> Iterator[Any]:
        if table.name == "facts":  # chunks, vectors and trees are written by now
            raise failure
        return read(store, table, columns)

    monkeypatch.setattr(copying, "_read_batches", failing)
    with pytest.raises(type(failure)):
        copy_store(built.db, store_location)
    assert set(_counts(store_location).values()) == {0}
    assert _store_id(store_location) == own
    monkeypatch.setattr(copying, "_read_batches", read)
    assert copy_store(built.db, store_location).verified  # and it can be copied into after


def test_a_copy_whose_searches_differ_is_not_committed(
    built: Built, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ranked = copying._ranked

    def skewed(store: Any, expression: str) -> list[tuple[str, float]]:
        found = ranked(store, expression)
        return [(n, s * 2) for n, s in found] if store.name == "postgresql" else found

    monkeypatch.setattr(copying, "_ranked", skewed)
    with pytest.raises(StoreError, match="ranks differently"):
        copy_store(built.db, postgres_url)
    assert set(_counts(postgres_url).values()) == {0}


def test_a_new_file_is_removed_when_the_copy_fails(
    built: Built, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(*args: Any) -> Iterator[Any]:
        raise RuntimeError("the disk is full")

    monkeypatch.setattr(copying, "_read_batches", failing)
    target = tmp_path / "new.db"
    with pytest.raises(RuntimeError):
        copy_store(built.db, target)
    assert list(tmp_path.iterdir()) == []


def test_what_cannot_be_copied(built: Built, tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no store there"):
        copy_store(tmp_path / "missing.db", tmp_path / "new.db")
    assert not (tmp_path / "new.db").exists()
    with pytest.raises(StoreError, match="the destination is the source"):
        copy_store(built.db, Path(str(built.db)))


def test_cli_copies_with_progress_and_a_json_report(
    built: Built, postgres_url: str, tmp_path: Path
) -> None:
    # The test server takes any password: the one in the URL must not be shown.
    with_password = postgres_url.replace("postgres:@", "postgres:hunter2@")
    assert "hunter2" in with_password
    result = CliRunner().invoke(main, ["copy", str(built.db), with_password, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["verified"] is True
    assert report["store_id"] == _store_id(built.db)
    assert report["tables"]["chunks"] == _counts(built.db)["chunks"]
    assert "***" in report["destination"]
    assert "hunter2" not in result.stdout + result.stderr
    assert "chunks" in result.stderr
    assert "sealed" in result.stderr

    back = tmp_path / "back.db"
    quiet = CliRunner().invoke(main, ["copy", postgres_url, str(back), "--quiet"])
    assert quiet.exit_code == 0, quiet.output
    assert quiet.stderr == ""
    assert "verified" in quiet.stdout
    assert _counts(back) == _counts(built.db)

    refused = CliRunner().invoke(main, ["copy", str(built.db), str(back)])
    assert refused.exit_code == 1
    lines = refused.stderr.strip().splitlines()
    assert lines[-1].startswith("error:")
    assert "not empty" in lines[-1]
    missing = CliRunner().invoke(main, ["copy", str(tmp_path / "none.db"), str(tmp_path / "x")])
    assert missing.exit_code == 1
    assert "no store there" in missing.stderr
    assert not (tmp_path / "x").exists()
