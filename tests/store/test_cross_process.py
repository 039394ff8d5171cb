"""A store held open by one process sees what another process commits, whole or not at all.

The reader is this process: it opens the store once, warms every cache a search uses (the
sparse keyword index, the vector index, the entity postings, the chunk count) and never
reopens it. The writer is a worker process started once for the module, which ingests,
embeds, forgets, or keeps replacing one source until told to stop. Nothing here sleeps:
the reader waits on the writer's answers.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import stratamem
from stratamem.api import Memory
from stratamem.errors import StoreError
from stratamem.types import Filters, SearchResponse
from suite import PATIENCE_S

pytestmark = pytest.mark.slow

WORKER = r"""
import json, os, shutil, sys
import stratamem


def churn(db, versions, target, stop, rounds):
    # Replace the one source's chunks again and again, each version in its own ingest
    # transaction and its vectors in the next: every commit is a state a reader may see.
    done = 0
    with stratamem.open(db, embedder="hashing") as memory:
        while done < rounds and not os.path.exists(stop):
            shutil.copyfile(versions[done % len(versions)], target + ".tmp")
            os.replace(target + ".tmp", target)
            memory.ingest(target, format="jsonl", parallel=False, trees=False)
            memory.indexes.embed()
            done += 1
    return done


def step(action, db, *args):
    if action == "churn":
        return churn(db, *args)
    with stratamem.open(db, embedder="hashing") as memory:
        if action == "ingest":
            report = memory.ingest(args[0], format="jsonl", parallel=False, trees=False)
            return [s.error for s in report.sources if s.error]
        if action == "embed":
            return memory.indexes.embed().embedded
        if action == "forget":
            return memory.sources.forget(args[0])
    raise ValueError(action)


for line in sys.stdin:
    try:
        result = {"ok": [step(*s) for s in json.loads(line)]}
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"}
    print(json.dumps(result), flush=True)
"""


class Writer:
    """The other process: runs a list of steps per request, answering when they are done."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def send(self, *steps: list[Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(list(steps)) + "\n")

    def answered(self) -> bool:
        """Whether the answer to the last request is waiting to be read."""
        assert self.proc.stdout is not None
        return bool(select.select([self.proc.stdout], [], [], 0)[0])

    def answer(self) -> list[Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"the writer exited (code {self.proc.poll()})"
        result = json.loads(line)
        assert "error" not in result, result["error"]
        return list(result["ok"])

    def run(self, *steps: list[Any]) -> list[Any]:
        self.send(*steps)
        return self.answer()

    def close(self) -> None:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=PATIENCE_S)
        self.proc.stdout.close()


@pytest.fixture(scope="module")
def writer() -> Iterator[Writer]:
    process = Writer()
    yield process
    process.close()


STATIC = [
    "The lighthouse keeper logs the weather every morning before breakfast.",
    "Alice Chen reviewed the harbour budget and the ferry timetable for spring.",
    "Bob Martins fixed the lighthouse lamp after the storm on Tuesday #maintenance.",
    "The ferry to the island leaves at nine; tickets are sold at the harbour office.",
    "Dana Ortiz wrote the report on tide tables and the new mooring buoys.",
    "A storm warning closed the harbour; the lighthouse stayed lit all night.",
    "Fishing quotas for cod and haddock were discussed at the council meeting.",
    "The museum opened an exhibition of old lighthouse lenses and maps #history.",
]


def _write(path: Path, source: str, texts: list[str], *, tag: str = "") -> Path:
    with path.open("w") as out:
        for i, text in enumerate(texts):
            row = {
                "id": f"{source}-{tag}{i}",
                "source": source,
                "kind": "document",
                "timestamp": f"2024-03-{1 + i:02d}T10:00:00+00:00",
                "author": "Alice Chen" if i % 2 else "Bob Martins",
                "text": text,
            }
            out.write(json.dumps(row) + "\n")
    return path


def _version(n: int) -> list[str]:
    """Five lines that differ between versions in every line (so every chunk is replaced)
    and share the words the test queries for."""
    word = ["quokka", "wombat"][n % 2]
    return [
        f"Version {n}: the lighthouse {word} survey counted {10 * n + i} birds on the cliff."
        for i in range(5)
    ]


@pytest.fixture
def store(store_location: str, tmp_path: Path, writer: Writer) -> str:
    """A store with the static source ingested and embedded by the writer."""
    db = store_location
    static = _write(tmp_path / "static.jsonl", "static", STATIC)
    assert writer.run(["ingest", db, str(static)], ["embed", db]) == [[], len(STATIC)]
    return db


def _reader(db: str) -> Memory:
    return stratamem.open(db, embedder="hashing")


def _warm(memory: Memory) -> None:
    """A search in every mode, so that every cache of the read path is built."""
    for mode in ("hybrid", "keyword", "vector", "graph"):
        memory.search("lighthouse Alice Chen #maintenance", mode=mode, limit=5)
    assert memory.vectors is not None
    embedded = memory.stats()["chunks"] - memory.indexes.pending()
    assert len(memory.vectors.index()) == embedded


def _source_id(memory: Memory, name: str) -> str:
    """The id of the source a file of that name (its stem) was ingested as."""
    (found,) = [s.id for s in memory.sources.list() if name in (s.scope, s.scope.split(":")[-1])]
    return found


def _ids(found: SearchResponse) -> list[str]:
    return [hit.node_id for hit in found.hits]


def _sources(found: SearchResponse) -> set[str]:
    return {hit.source_id for hit in found.hits}


def _chunk_ids(memory: Memory) -> set[str]:
    return {
        chunk.id
        for source in memory.sources.list()
        for chunk in memory.store.iter_chunks(source.id)
    }


def test_appends_by_another_process_are_found_without_reopening(
    store: str, tmp_path: Path, writer: Writer
) -> None:
    news = _write(
        tmp_path / "news.jsonl",
        "news",
        ["The quokka colony moved to the basalt ridge #quokkawatch.", "Basalt quokka census."],
    )
    with _reader(store) as memory:
        _warm(memory)
        assert not _ids(memory.search("quokka basalt", mode="keyword"))
        assert writer.run(["ingest", store, str(news)], ["embed", store]) == [[], 2]
        news_id = _source_id(memory, "news")
        for mode in ("keyword", "vector", "hybrid"):
            found = memory.search("quokka basalt", mode=mode, limit=3)
            assert found.hits, mode
            assert found.hits[0].source_id == news_id, (mode, found.hits[0])
        graph = memory.search("#quokkawatch", mode="graph")
        assert _sources(graph) == {news_id}
        assert len(memory.vectors.index()) == len(STATIC) + 2  # type: ignore[union-attr]


def test_replaced_and_forgotten_chunks_are_never_served(
    store: str, tmp_path: Path, writer: Writer
) -> None:
    doc = tmp_path / "doc.jsonl"
    _write(doc, "doc", _version(0))
    assert writer.run(["ingest", store, str(doc)], ["embed", store]) == [[], 5]
    with _reader(store) as memory:
        _warm(memory)
        old = _chunk_ids(memory)
        before = memory.search("lighthouse quokka survey", mode="hybrid", limit=20)
        assert set(_ids(before)) & old
        _write(doc, "doc", _version(1))
        assert writer.run(["ingest", store, str(doc)], ["embed", store]) == [[], 5]
        live = _chunk_ids(memory)
        gone = old - live
        assert len(gone) == 5
        for mode in ("hybrid", "keyword", "vector", "graph"):
            found = memory.search("lighthouse survey wombat Bob Martins", mode=mode, limit=20)
            assert not set(_ids(found)) & gone, mode
            assert set(_ids(found)) <= live, mode
            assert [memory.get(i).node_id for i in _ids(found)] == _ids(found)
            assert len(memory.fetch_leaves(_ids(found)[:20])) == len(found.hits)
        doc_id = _source_id(memory, "doc")
        assert memory.sources.get(doc_id).chunk_count == 5

        assert writer.run(["forget", store, doc_id]) == [5]
        live = _chunk_ids(memory)
        for mode in ("hybrid", "keyword", "vector", "graph"):
            found = memory.search("lighthouse survey wombat Bob Martins", mode=mode, limit=20)
            assert doc_id not in _sources(found), mode
            assert set(_ids(found)) <= live, mode
            for hit in found.hits:
                assert memory.get(hit.node_id).content == hit.content
        assert len(memory.vectors.index()) == len(STATIC)  # type: ignore[union-attr]


def test_vectors_embedded_by_another_process_reach_the_vector_leg(
    store: str, tmp_path: Path, writer: Writer
) -> None:
    news = _write(tmp_path / "news.jsonl", "news", ["Quokka basalt census on the ridge."])
    assert writer.run(["ingest", store, str(news)]) == [[]]
    with _reader(store) as memory:
        _warm(memory)
        news_id = _source_id(memory, "news")
        assert news_id not in _sources(memory.search("quokka basalt census", mode="vector"))
        assert memory.indexes.pending() == 1
        assert writer.run(["embed", store]) == [1]
        found = memory.search("quokka basalt census", mode="vector", limit=3)
        assert found.hits[0].source_id == news_id
        assert len(memory.vectors.index()) == len(STATIC) + 1  # type: ignore[union-attr]
        hybrid = memory.search("quokka basalt census", limit=3)
        assert hybrid.hits[0].source_id == news_id
        assert hybrid.hits[0].explain["breakdown"]["vector"] > 0


def test_a_read_snapshot_holds_one_version_while_another_process_commits(
    store: str, tmp_path: Path, writer: Writer
) -> None:
    news = _write(tmp_path / "news.jsonl", "news", ["Quokka basalt census on the ridge."])
    with _reader(store) as memory:
        handle = memory.store
        before = (handle.keyword_state(), handle.generation(), handle.chunk_count())
        with handle.read_snapshot():
            assert (handle.keyword_state(), handle.generation(), handle.chunk_count()) == before
            assert not handle.in_transaction()  # a read snapshot is not a write transaction
            with pytest.raises(StoreError, match="inside a read snapshot"), handle.transaction():
                pass
            assert writer.run(["ingest", store, str(news)], ["embed", store]) == [[], 1]
            assert (handle.keyword_state(), handle.generation(), handle.chunk_count()) == before
            assert not _ids(memory.search("quokka basalt", mode="keyword"))
        after = (handle.keyword_state(), handle.generation(), handle.chunk_count())
        assert after[0].max_rowid > before[0].max_rowid
        assert after[1] > before[1]
        assert after[2] == before[2] + 1
        assert _ids(memory.search("quokka basalt", mode="keyword"))


class _RolledBack(Exception):
    pass


def _search_and_roll_back(memory: Memory, path: Path) -> None:
    with memory.store.transaction():
        memory.ingest(path, format="jsonl", parallel=False, trees=False)
        memory.indexes.embed()
        assert memory.search("quokka basalt", mode="vector", limit=1).hits
        assert memory.search("#quokka", mode="graph").hits
        raise _RolledBack


def test_what_a_rolled_back_transaction_read_is_not_kept(store: str, tmp_path: Path) -> None:
    """A search inside a write transaction sees its uncommitted rows; once that is rolled back
    and another commit brings the generation and the highest rowid back to the same values
    (the rowid reused for another chunk), no cache may take itself for current."""
    gone = _write(tmp_path / "gone.jsonl", "gone", ["Quokka basalt census #quokka"])
    kept = _write(tmp_path / "kept.jsonl", "kept", ["Wombat granite survey #wombat"])
    with _reader(store) as memory:
        _warm(memory)
        with pytest.raises(_RolledBack):
            _search_and_roll_back(memory, gone)
        memory.ingest(kept, format="jsonl", parallel=False, trees=False)
        memory.indexes.embed()
        kept_id = _source_id(memory, "kept")
        assert memory.vectors is not None
        nearest = memory.vectors.search("wombat granite survey", Filters(), 1)
        assert [memory.get(node).source_id for node in nearest] == [kept_id]
        assert next(iter(nearest.values())) > 0.5  # its own vector, not the rolled-back one
        assert _sources(memory.search("#wombat", mode="graph")) == {kept_id}
        assert not memory.search("#quokka", mode="graph").hits


QUERY = "lighthouse survey quokka wombat Alice Chen #maintenance"
Result = dict[str, float]
MODES = ("hybrid", "keyword", "vector", "graph")


def _results(memory: Memory) -> tuple[Result, ...]:
    """What a search in each mode returns, as node id → score (no reranker, no MMR: each is
    a function of the store's contents alone)."""
    return tuple(
        {
            hit.node_id: hit.score
            for hit in memory.search(QUERY, mode=mode, limit=50, rerank=False, diversify=False).hits
        }
        for mode in MODES
    )


def _same(a: Result, b: Result) -> bool:
    return a.keys() == b.keys() and all(abs(a[k] - b[k]) <= 1e-9 * max(1.0, abs(a[k])) for k in a)


def test_a_search_never_sees_half_of_another_process_transaction(
    store: str, tmp_path: Path, writer: Writer
) -> None:
    """The writer replaces every chunk of one source in one transaction, then embeds the new
    chunks in another, over and over. Each of the four states it commits (either version,
    embedded or not) gives one exact result; every search made meanwhile must give one of
    them, whichever legs, caches and rowids it went through."""
    versions = [_write(tmp_path / f"v{n}.jsonl", "doc", _version(n)) for n in (0, 1)]
    target = tmp_path / "doc.jsonl"
    stop = tmp_path / "stop"
    churn = ["churn", store, [str(v) for v in versions], str(target), str(stop)]
    with _reader(store) as memory:
        _warm(memory)
        expected: list[tuple[Result, ...]] = []
        # Calibration, one committed state at a time: v0, v0 embedded, v1, v1 embedded, and
        # v0 again (rowids reused: the same results).
        for n in (0, 1, 0):
            _write(target, "doc", _version(n))
            assert writer.run(["ingest", store, str(target)]) == [[]]
            expected.append(_results(memory))
            assert writer.run(["embed", store]) == [5]
            expected.append(_results(memory))
        for mode in range(len(MODES)):
            assert _same(expected[4][mode], expected[0][mode])
            assert _same(expected[5][mode], expected[1][mode])
        states = expected[:4]
        hybrid = [state[0] for state in states]
        assert all(not _same(a, b) for i, a in enumerate(hybrid) for b in hybrid[i + 1 :])

        writer.send([*churn, 150])
        searches, deadline = 0, time.monotonic() + 20
        while searches < 600 and time.monotonic() < deadline and not writer.answered():
            # Each search is checked on its own: consecutive ones may see different commits.
            for mode, result in enumerate(_results(memory)):
                searches += 1
                assert any(_same(result, state[mode]) for state in states), (
                    f"{MODES[mode]} search {searches} matches no committed state: {result}"
                )
        stop.touch()
        (rounds,) = writer.answer()
        assert rounds >= 1
        final = _results(memory)
        for mode in range(len(MODES)):
            assert _same(final[mode], states[1 if rounds % 2 else 3][mode])
