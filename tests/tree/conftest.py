"""Writing synthetic chat histories straight into a store, for tree tests.

The helpers are handed to tests as fixtures (``chat``, ``shape``); ``store`` is a new store
on each backend, ``fresh_stores`` hands out new empty ones (one per Hypothesis example).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from stratamem.plugins import open_store
from stratamem.store.base import Store
from stratamem.store.jobs import SEAL_KIND, seal_job_key
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
    store: Store,
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
        seqs = {c.seq for c in chunks}  # what stood at these places is replaced
        store.delete_chunks(sid, [c.id for c in store.iter_chunks(sid) if c.seq in seqs])
        store.insert_chunks(chunks)
        tree_id = store.trees.ensure(sid, scope)
        store.jobs.enqueue(SEAL_KIND, seal_job_key(tree_id), {"tree_id": tree_id})
    return sid


def tree_shape(store: Store) -> set[tuple[str, str | None, tuple[str, ...]]]:
    """Every live summary as (id, parent, children): what two builds must agree on."""
    rows = store.conn.execute(
        "SELECT id, parent_id, child_ids FROM summaries WHERE deleted = 0"
    ).fetchall()
    return {(r[0], r[1], tuple(json.loads(r[2]))) for r in rows}


@pytest.fixture
def store(store_location: str) -> Iterator[Store]:
    with open_store(store_location) as opened:
        yield opened


class FreshStores:
    """New empty stores on the backend of ``like``: in memory on SQLite; on PostgreSQL a
    database each. Each is closed (and its database dropped) once the one after the next is
    asked for, or the test ends: an example Hypothesis stops midway leaves its store open."""

    def __init__(self, like: str, locations: Any, folder: Path) -> None:
        self.like = like
        self.postgres = locations.is_postgres(like)
        self._locations = locations
        self._folder = folder
        self._made: list[tuple[Store, str | None]] = []

    def __call__(self) -> Store:
        self.clear(keep=1)
        if not self.postgres:
            store = open_store(":memory:")
            self._made.append((store, None))
            return store
        location = self._locations.new(self.like, self._folder, "fresh")
        store = open_store(location)
        self._made.append((store, location))
        return store

    def clear(self, keep: int = 0) -> None:
        """Close the stores made but the last ``keep``, and drop their databases."""
        while len(self._made) > keep:
            store, location = self._made.pop(0)
            store.close()
            if location is not None:
                self._locations.drop(location)


@pytest.fixture
def fresh_stores(store_location: str, locations: Any, tmp_path: Path) -> Iterator[FreshStores]:
    made = FreshStores(store_location, locations, tmp_path)
    yield made
    made.clear()


@pytest.fixture
def chat() -> Callable[..., str]:
    return add_chat


@pytest.fixture
def shape() -> Callable[[Store], set[tuple[str, str | None, tuple[str, ...]]]]:
    return tree_shape
