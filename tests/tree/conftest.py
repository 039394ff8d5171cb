"""Writing synthetic chat histories straight into a store, for tree tests.

The helpers are handed to tests as fixtures (``chat``, ``shape``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from stratamem.store.jobs import SEAL_KIND, seal_job_key
from stratamem.store.sqlite.store import SQLiteStore
from stratamem.types import Chunk, SourceKind

EPOCH = datetime(2024, 3, 1, tzinfo=UTC)
WORDS = [
    *("redis", "queue", "sqlite", "deploy", "phoenix", "release"),
    *("alice", "bob", "carol", "migration", "outage", "budget"),
]


def message_text(n: int) -> str:
    words = [WORDS[(n * 7 + i * 3) % len(WORDS)] for i in range(3 + n % 5)]
    return f"message {n}: " + " ".join(words) + "."


def add_chat(
    store: SQLiteStore,
    scope: str,
    minutes: Sequence[int],
    *,
    kind: SourceKind = SourceKind.CHAT,
    start_seq: int = 0,
    doc: str | None = None,
    texts: Sequence[str] | None = None,
) -> str:
    """Messages at these minute offsets from :data:`EPOCH`, in order, with the seal job queued
    as ingest does."""
    with store.transaction():
        sid = store.upsert_source(scope=scope, kind=kind, platform="test", location=scope)
        chunks = []
        for i, minute in enumerate(minutes):
            seq = start_seq + i
            text = texts[i] if texts is not None else message_text(seq)
            ts = EPOCH + timedelta(minutes=minute)
            chunk_id = hashlib.sha256(f"{sid}|{seq}|{text}".encode()).hexdigest()[:32]
            chunks.append(
                Chunk(
                    id=chunk_id,
                    source_id=sid,
                    seq=seq,
                    content=text,
                    token_count=len(text.split()),
                    time_start=ts,
                    time_end=ts,
                    author="alice" if seq % 2 else "bob",
                    doc_id=doc,
                    content_sha256=hashlib.sha256(text.encode()).hexdigest(),
                )
            )
        store.replace_seqs(sid, [c.seq for c in chunks])
        store.insert_chunks(chunks)
        tree_id = store.trees.ensure(sid, scope)
        store.jobs.enqueue(SEAL_KIND, seal_job_key(tree_id), {"tree_id": tree_id})
    return sid


def tree_shape(store: SQLiteStore) -> set[tuple[str, str | None, tuple[str, ...]]]:
    """Every live summary as (id, parent, children): what two builds must agree on."""
    rows = store.conn.execute(
        "SELECT id, parent_id, child_ids FROM summaries WHERE deleted = 0"
    ).fetchall()
    return {(r[0], r[1], tuple(json.loads(r[2]))) for r in rows}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    with SQLiteStore(tmp_path / "trees.db") as opened:
        yield opened


@pytest.fixture
def chat() -> Callable[..., str]:
    return add_chat


@pytest.fixture
def shape() -> Callable[[SQLiteStore], set[tuple[str, str | None, tuple[str, ...]]]]:
    return tree_shape
