"""The keyword tokenizer: ``stemmed`` (every store's default) and ``plain``, what each makes of
words, that the choice is recorded with the full-text index and a switch rebuilds everything
built under the other one, and that ranking stays FTS5's (and a principal's stays that of a
store of what it may see) under either."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fts5_reference import fts5_index, fts5_top

import stratamem
from stratamem.access import crypto
from stratamem.cli import main
from stratamem.errors import StoreError
from stratamem.retrieval.index import bm25_file
from stratamem.retrieval.legs.keyword import SparseKeywordIndex, keyword_leg, keyword_search
from stratamem.retrieval.query import query_terms
from stratamem.store.sqlite.fts_terms import TOKENIZERS, decode_averages, tokenizer_name
from stratamem.store.sqlite.migrations import MIGRATIONS
from stratamem.types import Filters

DOCS = [
    ("She runs every morning before work", "Habits"),
    ("The running total was wrong again", ""),
    ("A café on the corner sells naïve art", "Cafés"),
    ("Runners met at the station", ""),
    ("Nothing to see here", ""),
]


def write_docs(path: Path, docs: list[tuple[str, str]], *, source: str = "docs") -> Path:
    with path.open("w") as fh:
        for i, (text, title) in enumerate(docs):
            record = {"id": f"{source}-{i}", "text": text, "title": title, "source": source}
            fh.write(json.dumps(record | {"kind": "document"}) + "\n")
    return path


@pytest.fixture
def mem(store_location: str, tmp_path: Path) -> Iterator[stratamem.Memory]:
    with stratamem.open(store_location, embedder=None) as memory:
        memory.ingest(write_docs(tmp_path / "docs.jsonl", DOCS))
        yield memory


def sparse(memory: stratamem.Memory, **kwargs: object) -> SparseKeywordIndex:
    return SparseKeywordIndex(memory.store, **kwargs)  # type: ignore[arg-type]


def texts(memory: stratamem.Memory, query: str) -> list[str]:
    return [h.content for h in memory.search(query, mode="keyword", limit=10).hits]


def assert_agrees_with_fts5(index: SparseKeywordIndex, memory: stratamem.Memory, q: str) -> None:
    found = index.search(query_terms(q), Filters(), 10)
    theirs = fts5_top(memory, q)
    assert found is not None
    assert list(found) == list(theirs)
    assert list(found.values()) == pytest.approx(list(theirs.values()), rel=1e-6)


# -- what each tokenizer makes of words -------------------------------------------------------


def test_a_new_store_is_stemmed_as_its_first_migration_declares(mem: stratamem.Memory) -> None:
    assert mem.indexes.keyword_tokenizer() == "stemmed"
    assert f"tokenize = '{TOKENIZERS['stemmed']}'" in MIGRATIONS[0]
    assert mem.store.keyword_schema().tokenizer == TOKENIZERS["stemmed"]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "stemmed",
            [("run",), ("run",), ("runner",), ("cafe",), ("naiv",), ("groß",), ("καλημερα",)],
        ),
        (
            "plain",
            [
                ("running",),
                ("runs",),
                ("runners",),
                ("cafe",),
                ("naive",),
                ("große",),
                ("καλημερα",),
            ],
        ),
    ],
)
def test_each_tokenizer_makes_these_tokens(
    mem: stratamem.Memory, name: str, expected: list[tuple[str, ...]]
) -> None:
    mem.indexes.set_keyword_tokenizer(name)
    # Case and Latin diacritics fold under both; only ``stemmed`` takes English suffixes off
    # (Porter's rules, which also reach a German word's final "e"); other scripts pass whole.
    words = ["Running", "RUNS", "runners", "Café", "naïve", "Größe", "ΚΑΛΗΜΕΡΑ"]
    assert mem.store.keyword_phrases(words) == expected


def test_tokens_are_the_same_on_every_connection_and_every_time(
    store_location: str, locations: Any, tmp_path: Path
) -> None:
    words = ["Running", "naïve", "x-ray", "e-mail", "Größe", "東京", "ΚΑΛΗΜΕΡΑ"]
    seen = []
    for location in (store_location, locations.new(store_location, tmp_path, "d1")):
        with stratamem.open(location, embedder=None) as memory:
            seen.append(memory.store.keyword_phrases(words))
            seen.append(memory.store.keyword_phrases(list(reversed(words)))[::-1])
    assert all(found == seen[0] for found in seen)
    assert seen[0][2] == ("x", "rai")  # a hyphenated word is a phrase of two tokens


def test_tokenizer_names_and_their_fts5_options() -> None:
    assert tokenizer_name("porter  unicode61 remove_diacritics 2") == "stemmed"
    assert tokenizer_name("unicode61 remove_diacritics 2") == "plain"
    assert tokenizer_name("trigram") == "trigram"


# -- search under each -------------------------------------------------------------------------


def test_the_stemmed_tokenizer_finds_inflected_forms(mem: stratamem.Memory) -> None:
    found = texts(mem, "running")
    assert set(found) == {DOCS[0][0], DOCS[1][0]}
    assert set(texts(mem, "runs")) == set(found)
    leg, status = keyword_leg(mem.store, "running", Filters(), 10)
    assert leg is not None
    assert len(leg) == 2
    assert status.startswith("ok")


def test_the_plain_tokenizer_finds_words_as_written(mem: stratamem.Memory) -> None:
    assert mem.indexes.set_keyword_tokenizer("plain") is True
    assert mem.indexes.keyword_tokenizer() == "plain"
    assert texts(mem, "running") == [DOCS[1][0]]
    assert texts(mem, "runs") == [DOCS[0][0]]
    assert texts(mem, "cafe") == [DOCS[2][0]]  # diacritics still fold
    # Snippets come from the same full-text table.
    hit = keyword_search(mem.store, "running").hits[0]
    assert "[running]" in hit.snippet


@pytest.mark.parametrize("name", ["stemmed", "plain"])
@pytest.mark.parametrize("query", ["running", "runs at the station", "café art corner"])
def test_the_sparse_index_ranks_as_fts5_under_either(
    mem: stratamem.Memory, name: str, query: str
) -> None:
    mem.indexes.set_keyword_tokenizer(name)
    assert_agrees_with_fts5(sparse(mem), mem, query)


# -- the choice is recorded, and a switch rebuilds what was built under the other one ---------


def test_switching_rebuilds_the_index_held_in_memory(mem: stratamem.Memory) -> None:
    index = sparse(mem)
    assert len(index.search(["running"], Filters(), 10) or {}) == 2
    mem.indexes.set_keyword_tokenizer("plain")
    assert len(index.search(["running"], Filters(), 10) or {}) == 1
    assert "tokenizer changed" in index.note
    assert_agrees_with_fts5(index, mem, "running runs")
    mem.indexes.set_keyword_tokenizer("stemmed")
    assert len(index.search(["running"], Filters(), 10) or {}) == 2
    assert_agrees_with_fts5(index, mem, "running runs")


def test_a_saved_index_of_the_other_tokenizer_is_rejected_and_rebuilt(
    mem: stratamem.Memory,
) -> None:
    first = sparse(mem, persist_min_docs=0)
    first.search(["running"], Filters(), 10)
    first.saver.flush()
    path = first.index_path()
    assert path is not None
    old = path.read_bytes()
    mem.store.set_keyword_tokenizer("plain")  # the store alone: the file is left as it was
    assert path.read_bytes() == old
    with pytest.raises(bm25_file.Rejected, match="tokenize"):
        bm25_file.read_file(path, mem.store.keyword_schema(), store_id=mem.store.store_id())
    second = sparse(mem, persist_min_docs=0)
    assert_agrees_with_fts5(second, mem, "running")
    assert "rebuilt" in second.note
    assert len(fts5_top(mem, "running")) == 1
    second.saver.flush()
    header_len = int.from_bytes(path.read_bytes()[8:12], "little")
    header = json.loads(path.read_bytes()[12 : 12 + header_len])
    assert header["tokenize"] == TOKENIZERS["plain"]


def test_the_api_switch_rewrites_the_saved_file(store_location: str, tmp_path: Path) -> None:
    docs = [(f"note {i}: the runner runs", "") for i in range(30)]
    with stratamem.open(store_location, embedder=None) as memory:
        memory.ingest(write_docs(tmp_path / "big.jsonl", docs))
        index = sparse(memory, persist_min_docs=0)
        index.search(["runs"], Filters(), 10)
        index.saver.flush()
        path = index.index_path()
        assert path is not None
        # The store's own index (the one the API rewrites) has the default threshold: make
        # it write this small store too.
        from stratamem.retrieval.legs.keyword import sparse_index

        sparse_index(memory.store).persist_min_docs = 0
        memory.indexes.set_keyword_tokenizer("plain")
        header_len = int.from_bytes(path.read_bytes()[8:12], "little")
        header = json.loads(path.read_bytes()[12 : 12 + header_len])
        assert header["tokenize"] == TOKENIZERS["plain"]


def test_another_connection_sees_the_switch(store_location: str, tmp_path: Path) -> None:
    path = store_location
    with stratamem.open(path, embedder=None) as writer:
        writer.ingest(write_docs(tmp_path / "docs.jsonl", DOCS))
        with stratamem.open(path, embedder=None) as reader:
            index = sparse(reader)
            assert len(index.search(["running"], Filters(), 10) or {}) == 2
            assert reader.store.keyword_phrases(["running"]) == [("run",)]
            writer.indexes.set_keyword_tokenizer("plain")
            assert reader.indexes.keyword_tokenizer() == "plain"
            assert reader.store.keyword_phrases(["running"]) == [("running",)]
            assert len(index.search(["running"], Filters(), 10) or {}) == 1
            assert_agrees_with_fts5(index, reader, "running runs")
            # Chunks added after the switch are tokenized the new way, here and there.
            writer.ingest(
                write_docs(tmp_path / "more.jsonl", [("running late", "")], source="more")
            )
            assert_agrees_with_fts5(index, reader, "running runs")
            assert len(index.search(["running"], Filters(), 10) or {}) == 2


def test_switching_to_the_tokenizer_in_use_changes_nothing(mem: stratamem.Memory) -> None:
    def declared() -> tuple[object, ...]:
        store = mem.store
        state = (store.keyword_schema(), store.keyword_state(), store.generation())
        if store.name != "sqlite":
            return state
        sql = store.conn.execute("SELECT sql FROM sqlite_master WHERE name = 'chunks_fts'")
        return (*state, sql.fetchone())

    before = declared()
    assert mem.indexes.set_keyword_tokenizer("stemmed") is False
    assert declared() == before


def test_an_unknown_tokenizer_is_refused_and_nothing_changes(mem: stratamem.Memory) -> None:
    with pytest.raises(ValueError, match=r"unknown tokenizer 'snowball'.*stemmed, plain"):
        mem.indexes.set_keyword_tokenizer("snowball")
    assert mem.indexes.keyword_tokenizer() == "stemmed"
    assert len(texts(mem, "running")) == 2


def test_a_switch_inside_a_read_snapshot_is_refused(mem: stratamem.Memory) -> None:
    with mem.store.read_snapshot(), pytest.raises(StoreError, match="read snapshot"):
        mem.store.set_keyword_tokenizer("plain")
    assert mem.indexes.keyword_tokenizer() == "stemmed"


def test_a_failed_switch_leaves_the_store_as_it_was(
    mem: stratamem.Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = mem.store.keyword_state()
    if mem.store.name == "sqlite":
        from stratamem.store.sqlite import fts_terms

        real = fts_terms.replace_fts_table

        def fail_after(conn: sqlite3.Connection, name: str) -> bool:
            real(conn, name)
            raise sqlite3.OperationalError("disk I/O error")

        monkeypatch.setattr("stratamem.store.sqlite.keyword.replace_fts_table", fail_after)
    else:
        from stratamem.store.postgres.keyword import Tokenizer

        counted = Tokenizer.counts

        def fail_after(self: Tokenizer, texts: list[tuple[str, str]]) -> list[tuple[int, int]]:
            counted(self, texts)  # every chunk counted again the new way, then the failure
            raise sqlite3.OperationalError("disk I/O error")

        monkeypatch.setattr(Tokenizer, "counts", fail_after)
    with pytest.raises(Exception, match="disk I/O error"):
        mem.indexes.set_keyword_tokenizer("plain")
    assert mem.indexes.keyword_tokenizer() == "stemmed"
    assert len(texts(mem, "running")) == 2
    assert mem.store.keyword_state() == before
    assert_agrees_with_fts5(sparse(mem), mem, "running runs")
    if mem.store.name == "sqlite":
        mem.store.conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")


def test_the_new_index_holds_every_chunk_and_keeps_the_column_weights(
    mem: stratamem.Memory,
) -> None:
    sqlite = mem.store.name == "sqlite"
    rank = "SELECT v FROM chunks_fts_config WHERE k = 'rank'"
    before = mem.store.conn.execute(rank).fetchone() if sqlite else None
    mem.indexes.set_keyword_tokenizer("plain")
    if sqlite:
        conn = mem.store.conn
        conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
        assert conn.execute(rank).fetchone() == before
    assert mem.store.keyword_schema().weights == (1.0, 0.6)
    state = mem.store.keyword_state()
    assert state.docs == len(DOCS)
    # The statistics are those FTS5 keeps for these chunks under the new tokenizer.
    with fts5_index(mem) as fts5:
        (blob,) = fts5.execute("SELECT block FROM chunks_fts_data WHERE id = 1").fetchone()
    assert decode_averages(blob) == (state.docs, state.totals)


# -- locked sources and principals --------------------------------------------------------------


def test_a_source_locked_during_the_switch_comes_back_tokenized_the_new_way(
    store_location: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(crypto, "DEFAULT_KDF", crypto.Scrypt(n=2**10, r=8, p=1))
    with stratamem.open(store_location, embedder=None) as memory:
        memory.ingest(write_docs(tmp_path / "open.jsonl", DOCS[:2], source="open"))
        memory.ingest(
            write_docs(tmp_path / "secret.jsonl", [("runs in secret", "")], source="secret")
        )
        memory.locks.lock("jsonl:secret", passphrase="pw")
        memory.indexes.set_keyword_tokenizer("plain")
        sqlite = memory.store.name == "sqlite"
        conn = memory.store.conn
        if sqlite:
            conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
        assert "runs in secret" not in texts(memory, "runs")
        if sqlite:
            vocab = {row[0] for row in conn.execute("SELECT term FROM temp.stratamem_bm25_vocab")}
            assert "secret" not in vocab
        assert "secret" not in memory.store.keyword_postings().postings.terms
        memory.locks.unlock("jsonl:secret", passphrase="pw")
        assert set(texts(memory, "runs")) == {DOCS[0][0], "runs in secret"}
        assert texts(memory, "running") == [DOCS[1][0]]
        if sqlite:
            conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
        assert_agrees_with_fts5(sparse(memory), memory, "runs running secret")


@pytest.mark.parametrize("name", ["stemmed", "plain"])
def test_a_principal_ranks_as_a_store_of_only_what_it_may_see(
    store_location: str, locations: Any, tmp_path: Path, name: str
) -> None:
    parts = {
        "ours": [("running late again", "runs"), ("a runner", ""), ("a long note " * 9, "")],
        "theirs": [("runs runs runs", "running"), ("runner runner", "")] * 4,
        "shared": [(f"note {i}: she runs the queue", "") for i in range(5)],
    }
    seen = ("ours", "shared")
    everything, alone_at = store_location, locations.new(store_location, tmp_path, "seen")
    with stratamem.open(everything, embedder=None) as memory:
        for part, docs in parts.items():
            memory.ingest(write_docs(tmp_path / f"{part}.jsonl", docs, source=part))
            memory.sources.set_access(f"jsonl:{part}", scopes="team" if part in seen else "private")
        memory.principals.add("reader", "team")
        memory.indexes.set_keyword_tokenizer(name)
    with stratamem.open(alone_at, embedder=None) as memory:
        for part in seen:
            memory.ingest(tmp_path / f"{part}.jsonl")
        memory.indexes.set_keyword_tokenizer(name)
    for query in (["running"], ["runs", "queue"], ["note", "runner", "late"]):
        with (
            stratamem.open(everything, embedder=None, principal="reader") as gated,
            stratamem.open(alone_at, embedder=None) as alone,
        ):
            found = sparse(gated).search(query, Filters(), 10)
            assert found
            assert found == sparse(alone).search(query, Filters(), 10)


# -- the command line ---------------------------------------------------------------------------


def test_reindex_tokenizer_on_the_command_line(store_location: str, tmp_path: Path) -> None:
    db = store_location
    runner = CliRunner()
    ingest = runner.invoke(
        main, ["--db", db, "ingest", str(write_docs(tmp_path / "d.jsonl", DOCS)), "--quiet"]
    )
    assert ingest.exit_code == 0, ingest.output
    done = runner.invoke(main, ["--db", db, "reindex", "--tokenizer", "plain", "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert report["tokenizer"] == "plain"
    assert report["changed"] is True
    again = runner.invoke(main, ["--db", db, "reindex", "--tokenizer", "plain", "--json"])
    assert json.loads(again.output)["changed"] is False
    found = runner.invoke(main, ["--db", db, "search", "running", "--mode", "keyword", "--json"])
    assert [h["content"] for h in json.loads(found.output)["hits"]] == [DOCS[1][0]]
    bad = runner.invoke(main, ["--db", db, "reindex", "--tokenizer", "snowball"])
    assert bad.exit_code != 0
    assert "snowball" in bad.output
