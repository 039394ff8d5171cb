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
from pathlib import Path
from typing import IO, Any

import pytest

import stratamem
from stratamem.errors import NotFoundError
from stratamem.ingest.model import ReadContext, SourceStream
from stratamem.types import Record, SourceKind

DEADLINE_S = 60
ENV = {**os.environ, "PYTHONPATH": str(Path(stratamem.__file__).parents[1])}
WORDS = "alpha beta gamma delta queue sqlite lease seal tree worker crash release deploy".split()
CHAT_SCOPE = "jsonl:chan"

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
    conn = mem.store.conn
    assert [tuple(row) for row in conn.execute("PRAGMA integrity_check")] == [("ok",)]
    conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
    counts = conn.execute(
        "SELECT (SELECT count(*) FROM chunks), (SELECT count(*) FROM chunks_fts_docsize)"
    ).fetchone()
    assert counts[0] == counts[1]


def digest(db: Path) -> dict[str, list[tuple[Any, ...]]]:
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
        for source in mem.sources():
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


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["records", "chunks"])
def test_a_killed_merge_leaves_the_store_before_or_after_and_a_rerun_converges(
    tmp_path: Path, stage: str
) -> None:
    """``stage``: killed while the export's records are merged, or while the chunks they
    changed are derived again."""
    db = tmp_path / "merge.db"
    part1 = write_chat(tmp_path / "part1" / "chan.jsonl", range(10_000))
    part2 = write_chat(tmp_path / "part2" / "chan.jsonl", range(5_000, 60_000))
    with stratamem.open(db, embedder=None) as mem:
        mem.ingest(part1, trees=False)
    before = digest(db)

    deadline = time.monotonic() + DEADLINE_S
    proc = start(MERGE_SCRIPT, db, part2)
    killed_at = None
    for line in lines(proc.stdout, deadline):
        records, chunks = map(int, line.split())
        if (stage == "records" and records >= 20_000) or (stage == "chunks" and chunks >= 300):
            killed_at = (records, chunks)
            break
    rest = kill(proc)
    assert killed_at is not None, "the merge never got that far"
    assert "done" not in rest
    killed = digest(db)

    subprocess.run(
        [sys.executable, "-c", MERGE_SCRIPT, db, part2],
        env=ENV,
        check=True,
        capture_output=True,
        timeout=max(1, deadline - time.monotonic()),
    )
    after = digest(db)
    # The whole merge of a source is one transaction, committed after its chunks are derived:
    # a kill lands before the commit (most likely, as it was still printing progress) or after.
    assert killed in (before, after)
    assert after != before

    union = write_chat(tmp_path / "union" / "chan.jsonl", range(60_000))
    with stratamem.open(tmp_path / "union.db", embedder=None) as mem:
        mem.ingest(union, trees=False)
    assert content(db) == content(tmp_path / "union.db")
