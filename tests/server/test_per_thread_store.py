"""The store a server opens once per thread (``Memory(location, per_thread=True)``), on each
backend: a SQLite file (:class:`PerThreadStore`) and a PostgreSQL database
(:class:`PerThreadPostgresStore`) keep one contract. Every thread reads through a connection
of its own and answers as one connection would, who reads is set per thread, a write made on
one thread is found by the next search on another, and closing leaves no connection open:
a thread's own at once, an ended thread's with it, a running thread's at its next call.

Threads are made to run side by side with barriers and events, never with sleeps.
"""

from __future__ import annotations

import gc
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from stratamem.api import Memory
from stratamem.errors import StoreError
from stratamem.plugins import open_store
from stratamem.store.postgres.threads import PerThreadPostgresStore
from stratamem.store.sqlite.threads import PerThreadStore
from stratamem.testing import HashingEmbedder
from stratamem.types import SearchResponse
from suite import PATIENCE_S

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workspace"
THREADS = 4
T0 = datetime(2024, 4, 1, 9, 0, tzinfo=UTC)
QUERIES = ("queue stall", "Carol Diaz", "release plan", "architecture of the worker")
MODES = ("keyword", "vector", "graph", "hybrid")

Ranked = list[tuple[str, float, str]]


def build(location: str) -> str:
    """The channels (``team``) and the notes (``private``), embedded; ``alice`` reads team."""
    with Memory(location, embedder=HashingEmbedder()) as memory:
        memory.ingest(EXAMPLES / "slack-export", parallel=False)
        memory.ingest(EXAMPLES / "notes", parallel=False)
        memory.indexes.embed()
        memory.principals.add("alice", "team")
    return location


def per_thread(location: str) -> Memory:
    return Memory(location, embedder=HashingEmbedder(), per_thread=True)


def threads_of(memory: Memory) -> Any:
    store = memory.store
    assert isinstance(store, PerThreadStore | PerThreadPostgresStore)
    return store


def ranked(response: SearchResponse) -> Ranked:
    return [(h.node_id, h.score, h.tree_scope) for h in response.hits]


def answers(memory: Memory) -> dict[tuple[str, str], Ranked]:
    return {(q, m): ranked(memory.search(q, mode=m, limit=8)) for q in QUERIES for m in MODES}


def plain(location: str, principal: str | None = None) -> dict[tuple[str, str], Ranked]:
    """What one connection opened now answers."""
    with Memory(location, embedder=HashingEmbedder(), principal=principal) as memory:
        return answers(memory)


def closed(store: Any) -> bool:
    """Whether a thread's store has its connection closed."""
    raw = store.conn.raw if hasattr(store.conn, "raw") else None
    if raw is not None:
        return bool(raw.closed)
    try:
        store.conn.execute("SELECT 1")
    except sqlite3.ProgrammingError:
        return True
    return False


def on_a_new_thread(job: Callable[[], Any]) -> Any:
    with ThreadPoolExecutor(1) as one:
        return one.submit(job).result(PATIENCE_S)


def test_open_store_per_thread_picks_the_backend_by_scheme(store_location: str) -> None:
    with open_store(store_location, per_thread=True) as store:
        backend = PerThreadPostgresStore if "://" in store_location else PerThreadStore
        assert isinstance(store, backend)
        assert store.name == ("postgresql" if "://" in store_location else "sqlite")
    with pytest.raises(ValueError, match="not mongodb:// stores"):
        open_store("mongodb://db.example/memory", per_thread=True)


def test_threads_read_side_by_side_and_answer_as_one_connection(store_location: str) -> None:
    build(store_location)
    want = {None: plain(store_location), "alice": plain(store_location, "alice")}
    assert want[None] != want["alice"]
    together = threading.Barrier(THREADS, timeout=PATIENCE_S)

    def read(n: int) -> tuple[str | None, dict[tuple[str, str], Ranked]]:
        reader = "alice" if n % 2 else None
        store = threads_of(memory)
        with store.reading_as(reader):
            together.wait()  # every thread reads at once, half of them as alice
            return reader, answers(memory)

    with per_thread(store_location) as memory:
        with ThreadPoolExecutor(THREADS) as pool:
            found = list(pool.map(read, range(THREADS)))
            assert threads_of(memory).connections() == THREADS + 1  # and this thread's
        for reader, got in found:
            assert got == want[reader]
        assert memory.principal is None  # what one thread said for a block stays there
        gc.collect()
        # The threads have ended: their connections went with them.
        assert threads_of(memory).connections() == 1


def test_a_write_on_one_thread_is_found_by_the_next_search_on_another(
    store_location: str,
) -> None:
    build(store_location)
    text = "zephyr quasar migration finished #zephyr"
    with per_thread(store_location) as memory:
        assert not on_a_new_thread(lambda: memory.search("zephyr", mode="keyword")).hits
        added = on_a_new_thread(lambda: memory.items.add(text, source="log", id="z", time=T0))
        (node,) = added.chunks_added
        for mode in MODES:
            found = on_a_new_thread(lambda mode=mode: memory.search("zephyr", mode=mode))
            assert node in [h.node_id for h in found.hits], mode
        on_a_new_thread(lambda: memory.items.rm("z", source="log"))
        for mode in MODES:
            found = memory.search("zephyr quasar", mode=mode)
            assert node not in [h.node_id for h in found.hits], mode


def test_close_leaves_no_connection_open(store_location: str) -> None:
    """Closed on this thread: this thread's connection closes at once, an ended thread's with
    it, and a thread still running closes its own at its next call, which is refused."""
    build(store_location)
    memory = per_thread(store_location)
    store = threads_of(memory)
    mine = store._mine()
    ended = on_a_new_thread(lambda: (memory.search("queue"), store._mine())[1])
    running = threading.Event()
    go_on = threading.Event()
    held: list[Any] = []

    def call_then_wait() -> str:
        memory.search("queue")
        held.append(store._mine())
        running.set()
        assert go_on.wait(PATIENCE_S)
        with pytest.raises(StoreError, match="closed") as refused:
            memory.search("queue")
        return str(refused.value)

    with ThreadPoolExecutor(1) as one:
        later = one.submit(call_then_wait)
        assert running.wait(PATIENCE_S)
        memory.close()
        assert closed(mine)
        assert closed(ended)
        assert not closed(held[0])  # never under a thread that may be inside a statement
        go_on.set()
        assert "closed" in later.result(PATIENCE_S)
    assert closed(held[0])
    assert store.connections() == 0
    with pytest.raises(StoreError, match="closed"):
        memory.search("queue")
    with pytest.raises(StoreError, match="closed"):
        on_a_new_thread(lambda: memory.search("queue"))


def test_the_database_sees_no_connection_once_a_server_s_threads_and_store_are_done(
    postgres_server: Any,
) -> None:
    url = build(postgres_server.new_database())
    database = urlsplit(url).path.lstrip("/")

    def connected_now() -> int:
        rows = postgres_server.psql(
            f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{database}'"
        )
        return int(rows[0][0])

    def settles_at(count: int) -> bool:
        """Whether the server counts ``count`` connections (it drops a closed one soon after
        the close, not at once)."""
        deadline = time.monotonic() + PATIENCE_S
        while connected_now() != count:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    assert settles_at(0)
    together = threading.Barrier(THREADS, timeout=PATIENCE_S)

    def search(_: int) -> None:
        together.wait()
        memory.search("queue stall")

    with per_thread(url) as memory:
        store = threads_of(memory)
        with ThreadPoolExecutor(THREADS) as pool:
            list(pool.map(search, range(THREADS)))
            saving = int(store._counters._conn is not None)  # an index saver's, if one ran
            assert store.connections() == THREADS + 1
            assert settles_at(THREADS + 1 + saving)
        # What is committed is read on one connection every thread shares: a saver's
        # short-lived thread opens none of its own.
        on_a_new_thread(store.committed_generations)
        assert store.connections() == 1
        assert settles_at(2)
    assert settles_at(0)


def test_a_bad_url_fails_at_open_in_one_line(tmp_path: Path) -> None:
    url = f"postgresql://someone:hunter2@/memory?host={tmp_path}"
    with pytest.raises(StoreError, match="cannot connect") as refused:
        PerThreadPostgresStore(url)
    assert "hunter2" not in str(refused.value)
    assert "\n" not in str(refused.value)
