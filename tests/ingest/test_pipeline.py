from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import stratamem
from stratamem.errors import SourceFormatError, UnknownFormatError
from stratamem.ingest import registry
from stratamem.ingest.model import ReadContext, Record, SourceStream
from stratamem.ingest.reader import read_events
from stratamem.types import SourceKind
from suite import PATIENCE_S


def write_jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def counts(memory: stratamem.Memory) -> dict[str, int]:
    one = memory.store.conn.execute
    return {
        "sources": one("SELECT count(*) FROM sources").fetchone()[0],
        "chunks": one("SELECT count(*) FROM chunks").fetchone()[0],
        "fts": memory.store.keyword_state().docs,
        "mentions": one("SELECT count(*) FROM entity_index").fetchone()[0],
        "edges": one("SELECT count(*) FROM entity_edges").fetchone()[0],
    }


NOTES = [
    {
        "text": "Alice Chen proposed dropping Redis for SQLite.",
        "author": "Alice Chen",
        "timestamp": "2024-03-12T10:00:00Z",
        "source": "team",
        "kind": "document",
    },
    {
        "text": "Bob Martins found a migration bug in the release.",
        "author": "Bob Martins",
        "timestamp": "2024-03-15T10:00:00Z",
        "source": "team",
        "kind": "document",
    },
]


def test_reingest_of_unchanged_content_adds_nothing(
    tmp_memory: stratamem.Memory, tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "notes.jsonl", NOTES)
    first = tmp_memory.ingest(path)
    before = counts(tmp_memory)
    second = tmp_memory.ingest(path)
    assert first.added == 2
    assert second.added == 0
    assert second.sources[0].unchanged == 2
    assert second.sources[0].removed == 0
    assert counts(tmp_memory) == before


def test_changed_content_replaces_the_old_chunks(
    tmp_memory: stratamem.Memory, tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "notes.jsonl", NOTES)
    tmp_memory.ingest(path)
    changed = [NOTES[0], {**NOTES[1], "text": "Carol Diaz wrote the postmortem."}]
    report = tmp_memory.ingest(write_jsonl(path, changed))
    assert (report.added, report.sources[0].removed) == (1, 1)
    assert tmp_memory.search("migration", mode="keyword").total == 0
    assert tmp_memory.search("postmortem", mode="keyword").total == 1
    assert counts(tmp_memory)["fts"] == counts(tmp_memory)["chunks"] == 2


def test_forget_removes_everything_derived(tmp_memory: stratamem.Memory, tmp_path: Path) -> None:
    keep = write_jsonl(tmp_path / "keep.jsonl", [{"text": "Dan Okafor keeps this"}])
    tmp_memory.ingest(keep)
    baseline = counts(tmp_memory)
    tmp_memory.ingest(write_jsonl(tmp_path / "notes.jsonl", NOTES))
    assert counts(tmp_memory)["edges"] > baseline["edges"]
    removed = tmp_memory.sources.forget("jsonl:team")
    assert removed == 2
    assert counts(tmp_memory) == baseline
    assert tmp_memory.search("redis", mode="keyword").total == 0
    assert tmp_memory.search_entities("alice") == []


def test_unknown_path_and_format(tmp_memory: stratamem.Memory, tmp_path: Path) -> None:
    with pytest.raises(stratamem.IngestError, match=r"no such file"):
        tmp_memory.ingest(tmp_path / "missing")
    odd = tmp_path / "photo.bin"
    odd.write_bytes(bytes(range(256)) * 10)
    with pytest.raises(UnknownFormatError, match=r"photo\.bin"):
        tmp_memory.ingest(odd)


class FailingConnector:
    """Yields a good source, then a source whose records fail half-way, then another good one."""

    name = "failing-test"

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]:
        def good(tag: str) -> Iterator[Record]:
            for i in range(3):
                yield Record(text=f"{tag} message {i}", ref=f"{path}:{i}")

        def broken() -> Iterator[Record]:
            yield Record(text="written before the failure", ref=f"{path}:1")
            raise SourceFormatError(str(path), "line 2", "unexpected end of data")

        for scope, records in (("a", good("alpha")), ("b", broken()), ("c", good("gamma"))):
            yield SourceStream(
                scope=scope,
                kind=SourceKind.RECORD,
                platform="test",
                location=str(path),
                records=records,
            )


def test_a_failing_source_is_rolled_back_and_the_rest_goes_on(
    tmp_memory: stratamem.Memory, tmp_path: Path
) -> None:
    registry.register("failing-test", FailingConnector, lambda p: 0, "test connector")
    report = tmp_memory.ingest(tmp_path, format="failing-test")
    assert [(s.scope, s.error is None) for s in report.sources] == [
        ("a", True),
        ("b", False),
        ("c", True),
    ]
    assert "line 2: unexpected end of data" in (report.sources[1].error or "")
    assert [s.scope for s in tmp_memory.sources.list()] == ["a", "c"]
    assert tmp_memory.search("written before the failure", mode="keyword").total == 0


class AnyFailureConnector:
    """A source whose records fail with an error no parser lists, a source with nothing
    readable, a good source, then a connector that fails while opening the next source."""

    name = "any-failure-test"

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]:
        def records(*texts: str, fail: BaseException | None = None) -> Iterator[Record]:
            for i, text in enumerate(texts):
                yield Record(text=text, ref=f"{path}:{i}")
            if fail is not None:
                raise fail

        def stream(scope: str, records: Iterator[Record]) -> SourceStream:
            return SourceStream(
                scope=scope,
                kind=SourceKind.RECORD,
                platform="test",
                location=str(path),
                records=records,
            )

        yield stream("a", records("never kept", fail=RecursionError("deep")))
        ctx.skip(path, "line 9", "the only item of b")
        yield stream("b", records())
        yield stream("c", records("gamma stays"))
        ctx.skip(path, "line 10", "before the failure")
        raise TypeError("'int' object is not iterable")


@pytest.mark.parametrize("parallel", [False, True])
def test_any_failure_of_a_source_or_a_connector_is_reported_in_one_line(
    tmp_memory: stratamem.Memory, tmp_path: Path, parallel: bool
) -> None:
    registry.register("any-failure-test", AnyFailureConnector, lambda p: 0, "test connector")
    report = tmp_memory.ingest(tmp_path, format="any-failure-test", parallel=parallel)
    assert [(s.scope, s.error) for s in report.sources] == [
        ("a", f"{tmp_path}: nested too deeply to read"),
        ("c", None),
        (str(tmp_path), f"{tmp_path}: cannot be read (TypeError: 'int' object is not iterable)"),
    ]
    assert [p.where for p in report.problems] == ["line 9", "line 10"]
    # The source with nothing readable left no row behind.
    assert [s.scope for s in tmp_memory.sources.list()] == ["c"]
    assert counts(tmp_memory)["chunks"] == 1


def test_a_source_emptied_by_bad_input_keeps_what_was_stored(
    tmp_memory: stratamem.Memory, tmp_path: Path
) -> None:
    file = write_jsonl(tmp_path / "team.jsonl", NOTES)
    tmp_memory.ingest(file, trees=False)
    before = counts(tmp_memory)
    file.write_text("not json\n", encoding="utf-8")
    report = tmp_memory.ingest(file, trees=False)
    assert report.sources == []
    assert [p.where for p in report.problems] == ["line 1"]
    assert counts(tmp_memory) == before


def test_max_item_bytes_must_be_positive(tmp_memory: stratamem.Memory, tmp_path: Path) -> None:
    file = write_jsonl(tmp_path / "team.jsonl", NOTES)
    with pytest.raises(ValueError, match="max_item_bytes"):
        tmp_memory.ingest(file, max_item_bytes=0)


CRASH_SCRIPT = """
import sys, stratamem
with stratamem.open(sys.argv[1]) as mem:
    def progress(p):
        print(p.chunks, flush=True)
    mem.ingest(sys.argv[2], progress=progress)
"""


@pytest.mark.slow
@pytest.mark.crash
def test_a_killed_ingest_leaves_the_store_as_it_was(store_location: str, tmp_path: Path) -> None:
    db = store_location
    with stratamem.open(db) as mem:
        mem.ingest(write_jsonl(tmp_path / "notes.jsonl", NOTES))
        before = counts(mem)
    big = tmp_path / "big.jsonl"
    with big.open("w") as fh:
        for i in range(200_000):
            fh.write(json.dumps({"text": f"message {i} about the queue and @bob{i % 50}"}) + "\n")
    env = {**os.environ, "PYTHONPATH": str(Path(stratamem.__file__).parents[1])}
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASH_SCRIPT, db, str(big)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + PATIENCE_S
    written = 0
    while written < 5000 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        written = int(line)
    assert written >= 5000, "the ingest never got going"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    with stratamem.open(db) as mem:
        assert counts(mem) == before
        assert [s.scope for s in mem.sources.list()] == ["jsonl:team"]
        assert_intact(mem)


def assert_intact(memory: stratamem.Memory) -> None:
    """The store's own consistency checks: SQLite's and FTS5's; on PostgreSQL, which keeps
    its tables consistent itself, the keyword statistics its triggers keep against a count."""
    run = memory.store.conn.execute
    if memory.store.name == "sqlite":
        assert run("PRAGMA integrity_check").fetchone()[0] == "ok"
        run("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
        return
    counted = run(
        "SELECT count(*), coalesce(sum(terms_content), 0), coalesce(sum(terms_title), 0)"
        " FROM chunks"
    ).fetchone()
    kept = run("SELECT docs, content, title FROM keyword_stats").fetchone()
    assert tuple(kept) == tuple(counted)


def test_a_source_that_shrank_loses_its_tail(tmp_memory: stratamem.Memory, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "notes.jsonl", NOTES)
    tmp_memory.ingest(path)
    report = tmp_memory.ingest(write_jsonl(path, NOTES[:1]))
    assert (report.added, report.sources[0].removed) == (0, 1)
    assert counts(tmp_memory)["chunks"] == counts(tmp_memory)["fts"] == 1
    assert tmp_memory.search("migration", mode="keyword").total == 0


@pytest.mark.parametrize("parallel", [False, True])
def test_inline_and_process_reading_store_the_same(
    store_location: str, locations: Any, tmp_path: Path, parallel: bool
) -> None:
    source = write_jsonl(tmp_path / "notes.jsonl", NOTES * 100)
    with stratamem.open(store_location) as mem:
        report = mem.ingest(source, parallel=parallel)
        rows = mem.store.conn.execute("SELECT id, seq, content FROM chunks ORDER BY seq").fetchall()
        mentions = mem.store.conn.execute(
            "SELECT entity_id, node_id FROM entity_index ORDER BY 1, 2"
        ).fetchall()
    assert report.chunks == 200
    with stratamem.open(locations.new(store_location, tmp_path, "reference")) as ref:
        ref.ingest(source, parallel=not parallel)
        assert [tuple(r) for r in rows] == [
            tuple(r)
            for r in ref.store.conn.execute("SELECT id, seq, content FROM chunks ORDER BY seq")
        ]
        assert [tuple(m) for m in mentions] == [
            tuple(m)
            for m in ref.store.conn.execute(
                "SELECT entity_id, node_id FROM entity_index ORDER BY 1, 2"
            )
        ]


def test_stored_chunks_are_the_chunks_read(tmp_memory: stratamem.Memory, tmp_path: Path) -> None:
    long_note = {**NOTES[0], "text": "Alice Chen moved the queue to SQLite. " * 100}
    path = write_jsonl(tmp_path / "notes.jsonl", [long_note, NOTES[1]])
    events = read_events(registry.detect(path), path, None, None)
    rows = [row for event in events if event[0] == "rows" for row in event[1]]
    # Rows cross a pipe when reading runs in a child process.
    piped = pickle.loads(pickle.dumps(rows))
    assert piped == rows
    assert [chunk.meta for chunk, _, _ in piped] == [chunk.meta for chunk, _, _ in rows]
    read = [chunk for chunk, _, _ in rows]
    assert read[0].meta == {"part": 0, "parts": len(read) - 1}

    tmp_memory.ingest(path)
    stored = list(tmp_memory.store.iter_chunks(read[0].source_id))
    assert stored == read
    assert [chunk.meta for chunk in stored] == [chunk.meta for chunk in read]
    mentions = tmp_memory.store.mentions_of([chunk.id for chunk in read])
    for chunk, fields, _ in rows:
        assert {m.entity_id for m in fields} <= set(mentions[chunk.id])


MEMORY_SCRIPT = """
import resource, sys, stratamem
with stratamem.open(sys.argv[1]) as mem:
    report = mem.ingest(sys.argv[2])
own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
reader = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(report.chunks, max(own, reader))
"""


def _mbox(path: Path, messages: int) -> Path:
    body = ("The queue worker restarted and drained the backlog without loss. " * 60 + "\n") * 2
    with path.open("w") as fh:
        for i in range(messages):
            fh.write(
                f"From sender{i % 7}@acme.io Mon Mar 11 09:00:00 2024\n"
                f"From: Sender {i % 7} <sender{i % 7}@acme.io>\n"
                f"To: team@acme.io\nSubject: status {i}\n"
                f"Message-ID: <m{i}@acme.io>\nDate: Mon, 11 Mar 2024 09:00:00 +0000\n\n"
                f"{body}\n"
            )
    return path


@pytest.mark.slow
def test_memory_stays_flat_as_the_mailbox_grows(
    store_location: str, locations: Any, tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(stratamem.__file__).parents[1])}
    peaks = {}
    for messages in (400, 4000):
        mbox = _mbox(tmp_path / f"m{messages}.mbox", messages)
        db = locations.new(store_location, tmp_path, f"m{messages}")
        out = subprocess.run(
            [sys.executable, "-c", MEMORY_SCRIPT, db, str(mbox)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        ).stdout.split()
        assert int(out[0]) >= messages
        peaks[messages] = int(out[1]) // 1024
    growth_mb = peaks[4000] - peaks[400]
    # 10x the mail (about 3.5 MB → 35 MB) may grow the SQLite page cache (capped at 32 MB),
    # but nothing proportional to the mailbox may stay in memory.
    assert growth_mb < 40, peaks


def test_a_pair_no_chunk_mentions_together_any_more_leaves_no_edge(
    tmp_memory: stratamem.Memory, tmp_path: Path
) -> None:
    """Changing the one note that named two entities together takes their edge back to
    nothing, and the edge goes; the other source's same pair stays."""
    path = tmp_path / "team.jsonl"
    rows = [
        {"id": "n1", "text": "Alice Chen met @bob about Redis", "source": "team"},
        {"id": "n2", "text": "Alice Chen wrote the Redis notes", "source": "team"},
        {"id": "o1", "text": "Alice Chen met @bob again", "source": "other"},
    ]
    tmp_memory.ingest(write_jsonl(path, rows))

    def pairs(source: str) -> set[tuple[str, str]]:
        return {
            (r[0], r[1])
            for r in tmp_memory.store.conn.execute(
                "SELECT e.a, e.b FROM entity_edges e JOIN sources s ON s.id = e.source_id"
                f" WHERE s.scope = {tmp_memory.store.dialect.p}",
                (source,),
            )
        }

    before = pairs("jsonl:team")
    assert any("bob" in a + b for a, b in before)
    rows[0] = {"id": "n1", "text": "Alice Chen met about Redis", "source": "team"}
    tmp_memory.ingest(write_jsonl(path, rows))
    after = pairs("jsonl:team")
    gone = before - after
    assert gone
    assert all("bob" in a + b for a, b in gone)
    assert all(w > 0 for (w,) in tmp_memory.store.conn.execute("SELECT weight FROM entity_edges"))
    assert pairs("jsonl:other") & gone == gone


def test_a_retired_summary_s_entity_rows_go_with_it(
    tmp_memory: stratamem.Memory, tmp_path: Path
) -> None:
    """The entity rows of summaries are those of the live summaries, each as its row lists
    them, after an edit retires the summary over the edited note."""
    path = tmp_path / "team.jsonl"
    rows = [
        {"id": f"n{i}", "text": f"Alice Chen met @bob{i % 4} about Redis #q{i}", "source": "team"}
        for i in range(60)
    ]
    tmp_memory.ingest(write_jsonl(path, rows))
    tmp_memory.trees.flush()
    conn = tmp_memory.store.conn
    rows[3] = {**rows[3], "text": "Dana Scully met @mulder about Postgres"}
    tmp_memory.ingest(write_jsonl(path, rows))
    tmp_memory.trees.flush()
    assert conn.execute("SELECT count(*) FROM summaries WHERE deleted = 1").fetchone()[0]
    found = {tuple(r) for r in conn.execute("SELECT entity_id, summary_id FROM summary_entities")}
    expected = {
        (entity, summary)
        for summary, entities in conn.execute(
            "SELECT id, entities FROM summaries WHERE deleted = 0"
        )
        for entity in json.loads(entities)
    }
    assert expected
    assert found == expected


def test_edges_kept_up_to_date_equal_a_rebuild(
    tmp_memory: stratamem.Memory, tmp_path: Path
) -> None:
    rows = [
        {
            "text": f"Alice Chen and @bob{i % 3} discussed Redis and SQLite #queue{i % 2}",
            "author": ["Carol Diaz", "Dan Okafor"][i % 2],
            "source": "team",
        }
        for i in range(150)
    ]
    path = write_jsonl(tmp_path / "team.jsonl", rows)
    tmp_memory.ingest(path)
    changed = rows[:40] + [{**r, "text": r["text"] + " and Postgres"} for r in rows[40:90]]
    tmp_memory.ingest(write_jsonl(path, changed))

    def edges() -> list[tuple[str, str, float]]:
        return [
            tuple(r)
            for r in tmp_memory.store.conn.execute(
                "SELECT a, b, weight FROM entity_edges ORDER BY a, b"
            )
        ]

    kept = edges()
    assert kept
    assert all(weight > 0 for _, _, weight in kept)
    source = tmp_memory.sources.list()[0].id
    with tmp_memory.store.transaction():
        tmp_memory.store.rebuild_edges(source)
    assert edges() == kept
