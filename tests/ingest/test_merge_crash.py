"""A merge or a single-item write killed with SIGKILL leaves the store as it was before or as
it is after, never between; running the merge again converges on the uninterrupted result.

The killed process runs in its own session and the whole group is killed, so a reader child
process of the ingest dies with it. Each test waits on the progress the killed process prints
(never on a clock) and is bounded by a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

import stratamem
from stratamem.errors import NotFoundError
from stratamem.ingest.model import ReadContext, SourceStream
from stratamem.types import Record, SourceKind
from suite import PATIENCE_S

# Processes killed mid-write: the full tier's (make test-all).
pytestmark = pytest.mark.crash

DEADLINE_S = PATIENCE_S
ENV = {**os.environ, "PYTHONPATH": str(Path(stratamem.__file__).parents[1])}
WORDS = ("alpha", "beta", "gamma", "delta", "queue", "sqlite", "lease", "seal", "tree", "worker")

MERGE_SCRIPT = """
import sys, stratamem
with stratamem.open(sys.argv[1], embedder=None) as mem:
    def progress(p):
        print(p.records, p.chunks, flush=True)
    mem.ingest(sys.argv[2], trees=False, progress=progress)
print("done", flush=True)
"""


def chat_line(n: int) -> str:
    """Message ``n`` of a chat log: its own instant (97 s apart, an hour's silence after every
    40, so the log falls into many windows and segments), an id, three authors, some threads."""
    return json.dumps(
        {
            "id": f"m{n}",
            "timestamp": 1_700_000_000 + n * 97 + n // 40 * 3600,
            "author": ("alice", "bob", "carol")[n % 3],
            "thread": "t1" if n % 11 == 0 else None,
            "kind": "chat",
            "source": "chan",
            "text": " ".join(WORDS[n * k % len(WORDS)] for k in range(1, 9)) + f" n{n}",
        }
    )


def write_chat(path: Path, numbers: range) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fh.writelines(chat_line(n) + "\n" for n in numbers)
    return path


def start(script: str, *args: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)],
        stdout=subprocess.PIPE,
        text=True,
        env=ENV,
        start_new_session=True,
    )


def kill(proc: subprocess.Popen[str]) -> str:
    """SIGKILL the process and its children; returns what it printed that was not read yet."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.stdout is not None
    rest = proc.stdout.read()
    proc.stdout.close()
    return rest


def lines(stdout: IO[str] | None, deadline: float) -> Iterator[str]:
    assert stdout is not None
    while time.monotonic() < deadline and (line := stdout.readline()):
        yield line


def check_integrity(mem: stratamem.Memory) -> None:
    """SQLite's and FTS5's own checks; on PostgreSQL, which keeps its tables consistent itself,
    the keyword statistics its triggers keep against a count of the chunks."""
    conn = mem.store.conn
    if mem.store.name != "sqlite":
        counted = conn.execute(
            "SELECT count(*), coalesce(sum(terms_content), 0), coalesce(sum(terms_title), 0)"
            " FROM chunks"
        ).fetchone()
        kept = conn.execute("SELECT docs, content, title FROM keyword_stats").fetchone()
        assert tuple(kept) == tuple(counted)
        return
    assert [tuple(row) for row in conn.execute("PRAGMA integrity_check")] == [("ok",)]
    conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
    counts = conn.execute(
        "SELECT (SELECT count(*) FROM chunks), (SELECT count(*) FROM chunks_fts_docsize)"
    ).fetchone()
    assert counts[0] == counts[1]


def digest(db: str) -> dict[str, list[tuple[Any, ...]]]:
    """Everything a merge writes, as sorted rows; wall-clock fields left out."""
    queries = {
        "sources": "SELECT id, scope, kind, platform, location FROM sources",
        "records": "SELECT source_id, key, ts, sort_key, digest, body FROM records",
        "chunks": """SELECT id, source_id, seq, content, content_sha256, ts_start, ts_end, author,
                            thread, source_ref, record_key, meta FROM chunks""",
        "fts": "SELECT rowid, sz FROM chunks_fts_docsize",
        "mentions": "SELECT entity_id, node_id FROM entity_index",
        "edges": "SELECT a, b, weight FROM entity_edges",
        "jobs": "SELECT kind, dedupe_key, status FROM jobs",
    }
    with stratamem.open(db, embedder=None) as mem:
        check_integrity(mem)
        if mem.store.name != "sqlite":  # each chunk's token counts, in place of FTS5's sizes
            queries["fts"] = "SELECT rowid, terms_content, terms_title FROM chunks"
        conn = mem.store.conn
        return {
            name: sorted(tuple(row) for row in conn.execute(sql)) for name, sql in queries.items()
        }


def content(db: Path | str) -> dict[str, Any]:
    """A store's records and chunks as the property compares them across stores, whose refs
    (file and line) differ: records by (key, text, time, author), chunks by (scope, seq,
    content, title, author, time range, thread)."""
    with stratamem.open(db, embedder=None) as mem:
        out: dict[str, Any] = {}
        for source in mem.sources.list():
            store = mem.store
            stored = store.records_by_key(source.id, list(store.record_keys(source.id)))
            out[source.scope] = (
                [(s.key, s.record.text, s.record.time, s.record.author) for s in stored],
                [
                    (c.seq, c.content, c.title, c.author, c.time_start, c.time_end, c.thread)
                    for c in store.iter_chunks(source.id)
                ],
            )
        return out


@dataclass(frozen=True, slots=True)
class ChatExports:
    """Part 1 of a chat log, part 2 (larger, overlapping it) to merge into a store holding
    part 1, and what one ingest of the whole log stores."""

    root: Path
    part1: Path
    part2: Path
    whole: dict[str, Any]
    # Per backend, a store holding part 1, made once for the module and copied by each test.
    stores: dict[bool, str] = field(default_factory=dict)

    def store(self, like: str, locations: Any, folder: Path) -> str:
        """A new store holding part 1 (in ``folder`` where it is a file), on the backend of
        ``like``."""
        postgres = locations.is_postgres(like)
        if postgres not in self.stores:
            made = locations.new(like, self.root, f"part1-{postgres}")
            with stratamem.open(made, embedder=None) as mem:
                mem.ingest(self.part1, trees=False)
            self.stores[postgres] = made
        return str(locations.copy(self.stores[postgres], folder, "merge"))


@pytest.fixture(scope="module")
def chat_exports(tmp_path_factory: pytest.TempPathFactory) -> ChatExports:
    root = tmp_path_factory.mktemp("exports")
    whole = write_chat(root / "whole" / "chan.jsonl", range(30_000))
    with stratamem.open(root / "whole.db", embedder=None) as mem:
        mem.ingest(whole, trees=False)
    return ChatExports(
        root=root,
        part1=write_chat(root / "part1" / "chan.jsonl", range(6_000)),
        part2=write_chat(root / "part2" / "chan.jsonl", range(3_000, 30_000)),
        whole=content(root / "whole.db"),
    )


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["records", "chunks"])
def test_a_killed_merge_leaves_the_store_before_or_after_and_a_rerun_converges(
    store_location: str, locations: Any, tmp_path: Path, chat_exports: ChatExports, stage: str
) -> None:
    """``stage``: killed while the export's records are merged, or while the chunks they
    changed are derived again."""
    db = chat_exports.store(store_location, locations, tmp_path)
    before = digest(db)

    deadline = time.monotonic() + DEADLINE_S
    proc = start(MERGE_SCRIPT, db, chat_exports.part2)
    killed_at = None
    for line in lines(proc.stdout, deadline):
        records, chunks = map(int, line.split())
        if (stage == "records" and records >= 12_000) or (stage == "chunks" and chunks >= 200):
            killed_at = (records, chunks)
            break
    kill(proc)
    assert killed_at is not None, "the merge never got that far"
    killed = digest(db)

    subprocess.run(
        [sys.executable, "-c", MERGE_SCRIPT, db, chat_exports.part2],
        env=ENV,
        check=True,
        capture_output=True,
        timeout=DEADLINE_S,
    )
    after = digest(db)
    # The merge of a source is one transaction, committed after its chunks are derived: a
    # kill lands before the commit (surely, as the merge was still reporting progress) or
    # after it; a rerun from either ends where an uninterrupted run does.
    assert killed in (before, after)
    assert after != before
    assert content(db) == chat_exports.whole


ITEMS_SCRIPT = """
import json, random, sys
from datetime import UTC, datetime, timedelta
import stratamem

run = int(sys.argv[2])
rng = random.Random(run)
start = datetime(2024, 3, 11, tzinfo=UTC) + timedelta(days=30 * run)
live = []
with stratamem.open(sys.argv[1], embedder=None) as mem:
    for n in range(1_000_000):
        words = " ".join(rng.choice(sys.argv[3].split()) for _ in range(rng.randint(3, 30)))
        text = f"{words} r{run}n{n}"
        roll = rng.random()
        if roll < 0.6 or len(live) < 3:
            key, source = f"r{run}-{n}", ("notes", "loop")[n % 2]
            op = ["add", key, source, text]
        elif roll < 0.85:
            key, source = rng.choice(live)
            op = ["update", key, source, text]
        else:
            key, source = live.pop(rng.randrange(len(live)))
            op = ["delete", key, source, None]
        print(json.dumps(op), flush=True)
        # Chat items 7 minutes apart, with an hour's silence after every fifth: many windows.
        when = start + timedelta(minutes=7 * n + 60 * (n // 5))
        if op[0] == "add":
            kind = "chat" if source == "loop" else None
            mem.items.add(text, id=key, source=source, kind=kind, time=when, author="alice")
            live.append((key, source))
        elif op[0] == "update":
            moved = {"time": when} if source == "loop" and n % 3 == 0 else {}
            mem.items.edit(key, source=source, text=text, **moved)
        else:
            mem.items.rm(key, source=source)
        print("ok", flush=True)
"""


class Exports:
    """A connector yielding stored records again, as one source."""

    name = "exports"

    def __init__(self, scope: str, kind: SourceKind, records: Sequence[Record]) -> None:
        self.scope, self.kind, self.records = scope, kind, list(records)

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]:
        yield SourceStream(
            scope=self.scope,
            kind=self.kind,
            platform="memory",
            location=str(path),
            records=iter(self.records),
            title=self.scope,
        )


def check_derived(mem: stratamem.Memory) -> None:
    """Every chunk's record is stored, every record of a record source has its chunks, and
    each source's chunks are exactly those one ingest of its records derives."""
    store = mem.store
    for source in mem.sources.list():
        stored = store.records_by_key(source.id, list(store.record_keys(source.id)))
        chunks = list(store.iter_chunks(source.id))
        keys = {s.key for s in stored}
        assert {c.record_key for c in chunks} <= keys, "a chunk outlived its record"
        if source.kind is SourceKind.RECORD:
            assert keys <= {c.record_key for c in chunks}, "a record lost its chunks"
        with stratamem.open(":memory:", embedder=None) as fresh:
            again = Exports(source.scope, source.kind, [s.record for s in stored])
            fresh.ingest("again", connector=again, parallel=False, trees=False)
            expected = list(fresh.store.iter_chunks(source.id))
        assert chunks == expected
        assert [c.meta for c in chunks] == [c.meta for c in expected]


@pytest.mark.slow
def test_killed_single_item_writes_keep_every_committed_write(store_location: str) -> None:
    """Five runs of adds, updates and deletes to a record source and a chat source, each
    killed just after it announced a write: every write it reported done is there exactly, the
    one it was making is there whole or not at all, and the chunks are the records'."""
    db = store_location
    expected: dict[str, str | None] = {}  # key → text, None once deleted
    done = 0
    deadline = time.monotonic() + DEADLINE_S
    for run, writes in enumerate((150, 260, 90, 400, 40)):
        proc = start(ITEMS_SCRIPT, db, run, " ".join(WORDS))
        pending: list[Any] | None = None
        announced = 0
        out: list[str] = []
        for line in lines(proc.stdout, deadline):
            out.append(line)
            if line.startswith("["):
                announced += 1
                if announced > writes:
                    break
        out.extend(kill(proc).splitlines(keepends=True))
        assert announced > writes, "the writes never got going"
        for line in out:
            if not line.endswith("\n"):
                break  # cut off by the kill
            if line.startswith("["):
                pending = json.loads(line)
            else:
                assert pending is not None
                op, key, _, text = pending
                expected[key] = None if op == "delete" else text
                pending = None
                done += 1

        with stratamem.open(db, embedder=None) as mem:
            check_integrity(mem)
            check_derived(mem)
            for key, text in expected.items():
                if pending is not None and key == pending[1]:
                    continue
                assert _text(mem, key) == text, key
            if pending is not None:
                op, key, _, text = pending
                now = _text(mem, key)
                assert now in (expected.get(key), None if op == "delete" else text)
                expected[key] = now  # whichever it was, later runs find it so
    assert done >= 900


def _text(mem: stratamem.Memory, key: str) -> str | None:
    try:
        return mem.items.get(key).text
    except NotFoundError:
        return None
