"""One store file opened once per thread (``Memory(path, per_thread=True)``): every thread
answers as a single connection would, principals set per thread never leak into one another,
and the in-memory indexes all threads share follow writes made on any connection.

Threads are made to run side by side with barriers and events, never with sleeps.
"""

from __future__ import annotations

import random
import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

import stratamem
from stratamem.api import Memory
from stratamem.errors import StoreError
from stratamem.retrieval.index.vectors import VectorIndex
from stratamem.store.sqlite.threads import PerThreadStore
from stratamem.testing import HashingEmbedder
from stratamem.types import SearchResponse
from suite import PATIENCE_S

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workspace"
THREADS = 4
LIMIT = 8
# Bounds a wait on another thread so that a broken test fails instead of hanging.
T0 = datetime(2024, 4, 1, 9, 0, tzinfo=UTC)

MODES = ("hybrid", "keyword", "vector", "graph")
QUERIES = (
    "queue stall",
    "sqlite job queue decision",
    "Carol Diaz",
    "release 2.0 plan",
    "who is on call for incidents",
    "architecture of the worker",
)
SLACK = frozenset({"slack:#eng", "slack:#general", "slack:#incidents"})
NOTES = "notes:notes"
LOG = "log"  # a record source written in the tests, opened to `team`
SCRATCH = "scratch"  # a record source left `private`: neither principal may read it
# alice reads what `team` may (the channels); bob reads `private` but only the notes.
PRINCIPALS: dict[str, tuple[str, tuple[str, ...]]] = {
    "alice": ("team", ()),
    "bob": ("private", ("notes:*",)),
}
READERS: tuple[str | None, ...] = (None, "alice", "bob")
# The scopes each reader may ever be answered from; None: the owner, who reads everything.
MAY_READ: dict[str | None, frozenset[str] | None] = {
    None: None,
    "alice": SLACK | {LOG},
    "bob": frozenset({NOTES}),
}

Ranked = list[tuple[str, float, str]]
Key = tuple[str, str]
T = TypeVar("T")


def build(path: Path) -> Path:
    """The channels and the notes of the example workspace, embedded, and two principals."""
    with Memory(path, embedder=HashingEmbedder()) as memory:
        memory.ingest(EXAMPLES / "slack-export", parallel=False)
        memory.ingest(EXAMPLES / "notes", parallel=False)
        memory.indexes.embed()
        for name, (scopes, sources) in PRINCIPALS.items():
            memory.principals.add(name, scopes, sources=sources)
    return path


def per_thread(path: Path, *, principal: str | None = None) -> Memory:
    return Memory(path, embedder=HashingEmbedder(), per_thread=True, principal=principal)


@contextmanager
def serving(
    path: Path, *, principal: str | None = None
) -> Iterator[tuple[Memory, ThreadPoolExecutor]]:
    """A per-thread memory and the threads that call it, drained before the memory closes
    (a connection closed while its thread is inside a query can crash the process)."""
    with per_thread(path, principal=principal) as memory, ThreadPoolExecutor(THREADS) as pool:
        yield memory, pool


def threads_of(memory: Memory) -> PerThreadStore:
    store = memory.store
    assert isinstance(store, PerThreadStore)
    return store


def ranked(response: SearchResponse) -> Ranked:
    return [(h.node_id, h.score, h.tree_scope) for h in response.hits]


def search_one(memory: Memory, query: str, mode: str) -> Ranked:
    return ranked(memory.search(query, mode=mode, limit=LIMIT))


def search_all(memory: Memory, queries: tuple[str, ...] = QUERIES) -> dict[Key, Ranked]:
    return {(q, m): search_one(memory, q, m) for q in queries for m in MODES}


def plain(
    path: Path, principal: str | None = None, queries: tuple[str, ...] = QUERIES
) -> dict[Key, Ranked]:
    """What one connection opened now answers."""
    with Memory(path, embedder=HashingEmbedder(), principal=principal) as memory:
        return search_all(memory, queries)


def reader_of(memory: Memory) -> str | None:
    found = memory.principal
    return None if found is None else found.name


def on_every_thread(pool: ThreadPoolExecutor, fn: Callable[[], T]) -> list[T]:
    """``fn`` run once on each of the pool's ``THREADS`` threads: every call waits for the
    others to start, so no thread can take two."""
    barrier = threading.Barrier(THREADS, timeout=PATIENCE_S)

    def run() -> tuple[int, T]:
        barrier.wait()
        return threading.get_ident(), fn()

    done = [f.result() for f in [pool.submit(run) for _ in range(THREADS)]]
    assert len({ident for ident, _ in done}) == THREADS
    return [result for _, result in done]


def scopes_outside(principal: str | None, found: Ranked) -> set[str]:
    allowed = MAY_READ[principal]
    if allowed is None:
        return set()
    return {scope for _, _, scope in found if scope not in allowed}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shared by the tests that only read."""
    return build(tmp_path_factory.mktemp("per-thread") / "mem.db")


@pytest.fixture(scope="module")
def expected(workspace: Path) -> dict[str | None, dict[Key, Ranked]]:
    return {reader: plain(workspace, reader) for reader in READERS}


def test_the_expected_answers_tell_the_readers_apart(
    expected: dict[str | None, dict[Key, Ranked]],
) -> None:
    """What the other tests compare with is worth comparing: every mode answers, and each
    principal sees less than the owner, within its scopes."""
    owner, alice, bob = expected[None], expected["alice"], expected["bob"]
    for mode in MODES:
        assert any(owner[(q, mode)] for q in QUERIES), mode
    assert any(alice.values())
    assert any(bob.values())
    assert alice != owner
    assert bob != owner
    assert alice != bob
    for reader in ("alice", "bob"):
        for found in expected[reader].values():
            assert not scopes_outside(reader, found)


def test_every_thread_answers_as_one_connection_does(
    workspace: Path, expected: dict[str | None, dict[Key, Ranked]]
) -> None:
    with serving(workspace) as (memory, pool):
        # Each query in each mode twice, shuffled over the threads: the first call on a
        # thread may build a shared index, a later one reuses what another thread built.
        calls = [key for key in expected[None] for _ in range(2)]
        random.Random(7).shuffle(calls)
        futures = [pool.submit(search_one, memory, *key) for key in calls]
        for key, future in zip(calls, futures, strict=True):
            assert future.result() == expected[None][key], key
        for answers in on_every_thread(pool, lambda: search_all(memory)):
            assert answers == expected[None]


def test_principals_interleaved_on_the_same_threads_never_mix(
    workspace: Path, expected: dict[str | None, dict[Key, Ranked]]
) -> None:
    rng = random.Random(20240312)
    base = "alice"  # what every thread reads as outside a block
    inherit = "inherit"  # a call that sets no principal
    who: list[str | None] = [None, "alice", "bob", inherit]
    calls = [(rng.choice(who), rng.choice(QUERIES), rng.choice(MODES)) for _ in range(360)]

    with serving(workspace, principal=base) as (memory, pool):

        def call(principal: str | None, query: str, mode: str) -> dict[str, Any]:
            before = reader_of(memory)
            if principal == inherit:
                found = search_one(memory, query, mode)
                return {"before": before, "inside": before, "after": before, "found": found}
            with threads_of(memory).reading_as(principal):
                inside = reader_of(memory)
                found = search_one(memory, query, mode)
            return {"before": before, "inside": inside, "after": reader_of(memory), "found": found}

        futures = [pool.submit(call, *c) for c in calls]
        for (principal, query, mode), future in zip(calls, futures, strict=True):
            done = future.result()
            reader = base if principal == inherit else principal
            assert done["before"] == base
            assert done["after"] == base
            assert done["inside"] == reader
            assert not scopes_outside(reader, done["found"]), (reader, query, mode)
            assert done["found"] == expected[reader][(query, mode)], (reader, query, mode)
        assert reader_of(memory) == base


def test_reading_as_is_the_calling_threads_alone_and_restored_on_error(workspace: Path) -> None:
    with serving(workspace) as (memory, pool):
        inside = threading.Event()
        leave = threading.Event()

        def hold_as_bob() -> str | None:
            with threads_of(memory).reading_as("bob"):
                inside.set()
                assert leave.wait(PATIENCE_S)
                return reader_of(memory)

        held = pool.submit(hold_as_bob)
        try:
            assert inside.wait(PATIENCE_S)
            # Another thread, and this one, still read as the owner while bob's block is open.
            assert pool.submit(reader_of, memory).result() is None
            assert reader_of(memory) is None
        finally:
            leave.set()
        assert held.result() == "bob"

        def fail_as_alice() -> None:
            with threads_of(memory).reading_as("alice"):
                threads_of(memory).read_as("bob")  # a change inside the block is undone with it
                raise RuntimeError("the call failed")

        with pytest.raises(RuntimeError, match="the call failed"):
            fail_as_alice()
        assert reader_of(memory) is None

        # The store's own principal is every thread's, a thread's block its own.
        threads_of(memory).read_as("alice")
        assert on_every_thread(pool, lambda: reader_of(memory)) == ["alice"] * THREADS
        with ThreadPoolExecutor(1) as later:
            assert later.submit(reader_of, memory).result() == "alice"
        with threads_of(memory).reading_as(None):
            assert reader_of(memory) is None
            assert pool.submit(reader_of, memory).result() == "alice"
        assert reader_of(memory) == "alice"


def test_reads_while_a_writer_writes(tmp_path: Path) -> None:
    """One thread writes through the memory the others read through: no read fails or
    shows a source its reader may not see, and once writing stops every thread answers as
    a connection opened afterwards does."""
    path = build(tmp_path / "mem.db")
    queries = ("zephyr queue stall", "Carol Diaz zephyr", "release plan")
    rounds = 24
    with serving(path) as (memory, pool):
        memory.items.add("zephyr: the log starts here", source=LOG, id="log-start", time=T0)
        memory.sources.set_access(LOG, scopes="team")
        on_every_thread(pool, lambda: search_all(memory, queries))
        done = threading.Event()

        def write() -> int:
            try:
                for i in range(rounds):
                    when = T0 + timedelta(minutes=i)
                    memory.items.add(
                        f"zephyr {i}: Carol Diaz restarted the queue after the stall",
                        source=LOG,
                        id=f"log-{i}",
                        time=when,
                    )
                    memory.items.add(
                        f"zephyr scratch {i}: queue stall notes", source=SCRATCH, time=when
                    )
                    if i % 4 == 1:
                        memory.items.rm(f"log-{i - 1}", source=LOG)
                    if i % 6 == 3:
                        memory.sources.forget(SCRATCH)
                return rounds
            finally:
                done.set()

        def read(seed: int) -> list[tuple[str | None, Ranked]]:
            rng = random.Random(seed)
            seen: list[tuple[str | None, Ranked]] = []
            while not done.is_set() or len(seen) < 10:
                reader = rng.choice(READERS)
                with threads_of(memory).reading_as(reader):
                    found = memory.search(rng.choice(queries), mode=rng.choice(MODES), limit=LIMIT)
                seen.append((reader, ranked(found)))
            return seen

        writer = pool.submit(write)
        readers = [pool.submit(read, seed) for seed in range(THREADS - 1)]
        assert writer.result() == rounds
        seen = [pair for future in readers for pair in future.result()]
        for reader, found in seen:
            assert not scopes_outside(reader, found), reader
        # Not vacuous: alice was answered from the log while it was being written.
        assert any(r == "alice" and any(s == LOG for _, _, s in f) for r, f in seen)

        want = {reader: plain(path, reader, queries) for reader in READERS}
        assert any(s == LOG for answers in want[None].values() for _, _, s in answers)
        assert any(s == SCRATCH for answers in want[None].values() for _, _, s in answers)

        def final() -> dict[str | None, dict[Key, Ranked]]:
            out = {}
            for reader in READERS:
                with threads_of(memory).reading_as(reader):
                    out[reader] = search_all(memory, queries)
            return out

        for answers in on_every_thread(pool, final):
            assert answers == want


def test_a_write_through_another_connection_reaches_every_thread(tmp_path: Path) -> None:
    path = build(tmp_path / "mem.db")
    queries = ("quokka migration", "Carol Diaz")
    with serving(path) as (memory, pool):
        for answers in on_every_thread(pool, lambda: search_all(memory, queries)):
            assert not any(s == LOG for found in answers.values() for _, _, s in found)

        with stratamem.open(path, embedder=HashingEmbedder()) as other:
            added = other.items.add(
                "Carol Diaz planned the quokka migration of the job queue",
                source=LOG,
                id="quokka",
                time=T0,
            )
            want = plain(path, None, queries)
            assert added.chunks_added
            new = added.chunks_added[0]
            for mode in ("hybrid", "keyword", "vector"):
                assert want[("quokka migration", mode)][0][0] == new, mode

            # While the other connection is still open, and again after it closed.
            for answers in on_every_thread(pool, lambda: search_all(memory, queries)):
                assert answers == want
        for answers in on_every_thread(pool, lambda: search_all(memory, queries)):
            assert answers == want


def test_the_graph_leg_follows_appends_and_removals_made_on_another_thread(tmp_path: Path) -> None:
    path = build(tmp_path / "mem.db")
    # Entities named by more than a few nodes are hubs the leg skips: each item gets a tag
    # of its own, and two of them share one the notes name once.
    queries = ("zephyr0 zephyr1 zephyr2 zephyr3 zephyr4", "release zephyr1", "release plan")

    def graph(memory: Memory) -> dict[str, Ranked]:
        return {q: ranked(memory.search(q, mode="graph", limit=20)) for q in queries}

    def graph_now() -> dict[str, Ranked]:
        with Memory(path, embedder=HashingEmbedder()) as fresh:
            return graph(fresh)

    with serving(path) as (memory, pool):
        before = graph_now()
        for answers in on_every_thread(pool, lambda: graph(memory)):
            assert answers == before

        def append() -> list[str]:
            return [
                memory.items.add(
                    f"Dan paired on queue fix {i} #zephyr{i}" + (" #release" if i < 2 else ""),
                    source=LOG,
                    id=f"pair-{i}",
                    time=T0 + timedelta(hours=i),
                ).chunks_added[0]
                for i in range(5)
            ]

        new = set(pool.submit(append).result())
        after = graph_now()
        assert after != before
        assert any(node in new for found in after.values() for node, _, _ in found)
        for answers in on_every_thread(pool, lambda: graph(memory)):
            assert answers == after

        pool.submit(memory.items.rm, "pair-0", source=LOG).result()
        removed = graph_now()
        assert removed != after
        for answers in on_every_thread(pool, lambda: graph(memory)):
            assert answers == removed


def test_a_reader_in_an_older_snapshot_never_sees_what_came_after_it(tmp_path: Path) -> None:
    """The shared indexes move forward as soon as any thread reads a newer version; a
    thread still inside an older read snapshot is answered from them without anything of
    that newer version, and sees it once its snapshot ends."""
    path = build(tmp_path / "mem.db")
    query = "quokka migration Carol Diaz"
    holding = threading.Event()
    release = threading.Event()

    with serving(path) as (memory, pool):

        def old_reader() -> tuple[dict[str | None, Ranked], dict[str, Ranked]]:
            inside: dict[str | None, Ranked] = {}
            with threads_of(memory).read_snapshot():
                memory.search(query, mode="hybrid", limit=LIMIT)  # fixes the snapshot
                holding.set()
                assert release.wait(PATIENCE_S)
                for reader in READERS:
                    with threads_of(memory).reading_as(reader):
                        for mode in MODES:
                            inside[reader] = inside.get(reader, []) + search_one(
                                memory, query, mode
                            )
            later = {mode: search_one(memory, query, mode) for mode in MODES}
            return inside, later

        held = pool.submit(old_reader)
        assert holding.wait(PATIENCE_S)

        def write_and_read() -> tuple[str, dict[Key, Ranked]]:
            added = memory.items.add(
                "Carol Diaz planned the quokka migration", source=LOG, id="quokka", time=T0
            )
            memory.sources.set_access(LOG, scopes="team")
            # Brings every shared index up to the new version.
            return added.chunks_added[0], search_all(memory, (query,))

        try:
            new, newest = pool.submit(write_and_read).result()
        finally:
            release.set()
        for mode in MODES:
            assert new in [node for node, _, _ in newest[(query, mode)]], mode
        inside, later = held.result()
        for reader, found in inside.items():
            assert new not in [node for node, _, _ in found], reader
            assert not scopes_outside(reader, found), reader
        for mode in ("hybrid", "keyword", "vector"):
            assert new in [node for node, _, _ in later[mode]], mode


def test_connections_are_counted_and_closed_with_the_store(tmp_path: Path) -> None:
    path = build(tmp_path / "mem.db")
    memory = per_thread(path)
    assert threads_of(memory).connections() == 1  # the thread that opened it
    conns: list[sqlite3.Connection] = [threads_of(memory).conn]
    with ThreadPoolExecutor(3) as three:
        barrier = threading.Barrier(3, timeout=PATIENCE_S)

        def first_use() -> sqlite3.Connection:
            barrier.wait()
            memory.search("queue stall", mode="keyword")
            conn: sqlite3.Connection = threads_of(memory).conn
            return conn

        conns += [f.result() for f in [three.submit(first_use) for _ in range(3)]]
        assert len({id(c) for c in conns}) == 4
        assert threads_of(memory).connections() == 4
        # Threads that have one use it again rather than open another.
        list(three.map(lambda _: memory.search("queue", mode="keyword"), range(9)))
        assert threads_of(memory).connections() == 4

        memory.close()
        # The closing thread's connection closes now; a thread still running closes its own
        # at its next call (closing it under a query could crash the process).
        assert threads_of(memory).connections() == 3
        with pytest.raises(sqlite3.ProgrammingError):
            conns[0].execute("SELECT 1")
        again = threading.Barrier(3, timeout=PATIENCE_S)

        def after_close() -> str:
            again.wait()
            with pytest.raises(StoreError, match="closed") as refused:
                memory.search("queue", mode="keyword")
            return str(refused.value)

        assert len(list(three.map(lambda _: after_close(), range(3)))) == 3
        assert threads_of(memory).connections() == 0
        for conn in conns:
            with pytest.raises(sqlite3.ProgrammingError):
                conn.execute("SELECT 1")
        with ThreadPoolExecutor(1) as fresh, pytest.raises(StoreError, match="closed"):
            fresh.submit(memory.search, "queue", mode="keyword").result()


def test_a_thread_that_had_a_connection_gets_a_store_error_after_close(tmp_path: Path) -> None:
    memory = per_thread(build(tmp_path / "mem.db"))
    memory.search("queue", mode="keyword")
    memory.close()
    with pytest.raises(StoreError, match="closed"):
        memory.search("queue", mode="keyword")


def test_a_store_in_memory_or_unlocked_cannot_be_per_thread() -> None:
    with pytest.raises(StoreError, match="in memory"):
        PerThreadStore(":memory:")
    with pytest.raises(ValueError, match="per thread"):
        Memory(":memory:", embedder=None, unlock=["notes"], per_thread=True)


class _Signalling:
    """A condition that lets ``waiter`` know when ``thread`` has to wait on it for the
    searches running to end: the paused search may then go on."""

    def __init__(self, inner: Any, thread: Callable[[], int | None], waiter: threading.Event):
        self.inner, self.thread, self.waiter = inner, thread, waiter

    def wait_for(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        if threading.get_ident() == self.thread() and not predicate():
            self.waiter.set()
        return bool(self.inner.wait_for(predicate, PATIENCE_S if timeout is None else timeout))

    def notify_all(self) -> None:
        self.inner.notify_all()


def test_a_vector_search_is_never_answered_from_an_index_changing_under_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One thread's vector search is paused inside the shared index while another thread
    deletes an item and searches (which brings the index up to date): the paused search,
    in a snapshot that still holds the item, must still find it first."""
    path = build(tmp_path / "mem.db")
    query = "zephyr alpha bravo charlie delta"
    with Memory(path, embedder=HashingEmbedder()) as setup:
        setup.items.add(query, source=LOG, id="target", time=T0)
        for i in range(3):
            setup.items.add(f"filler {i} about lunch", source=LOG, id=f"filler-{i}", time=T0)
    want = plain(path, None, (query,))[(query, "vector")]
    assert want[0][2] == LOG

    paused, go_on = threading.Event(), threading.Event()
    searcher: list[int] = []
    updater: list[int] = []
    select = VectorIndex._select

    def pausing_select(self: VectorIndex, *args: Any) -> Any:
        if threading.get_ident() in searcher and not paused.is_set():
            paused.set()
            assert go_on.wait(PATIENCE_S)
        return select(self, *args)

    monkeypatch.setattr(VectorIndex, "_select", pausing_select)
    with per_thread(path) as memory, ThreadPoolExecutor(2) as two:
        assert ranked(memory.search(query, mode="vector", limit=LIMIT)) == want
        leg = memory.vectors
        assert leg is not None
        monkeypatch.setattr(
            leg, "_idle", _Signalling(leg._idle, lambda: next(iter(updater), None), go_on)
        )

        def search() -> Ranked:
            searcher.append(threading.get_ident())
            with threads_of(memory).read_snapshot():
                return ranked(memory.search(query, mode="vector", limit=LIMIT))

        def update() -> None:
            updater.append(threading.get_ident())
            memory.items.rm("target", source=LOG)
            memory.search("lunch", mode="vector", limit=1)
            go_on.set()

        held = two.submit(search)
        assert paused.wait(PATIENCE_S)
        updated = two.submit(update)
        assert held.result() == want
        updated.result()


def test_a_later_threads_connection_is_never_taken_for_an_ended_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread's connection, once its thread ends and its store is freed, may leave its
    address to the next thread's store; the shared entity postings must still see the new
    connection as a reader of its own (here every store is given one address)."""
    from stratamem.store.sqlite import threads

    monkeypatch.setattr(threads, "id", lambda _: 0, raising=False)
    path = build(tmp_path / "mem.db")
    query = "release zephyr0"

    with per_thread(path) as memory:

        def graph_on_a_new_thread() -> Ranked:
            with ThreadPoolExecutor(1) as one:
                return one.submit(lambda: ranked(memory.search(query, mode="graph"))).result()

        before = graph_on_a_new_thread()
        with stratamem.open(path, embedder=HashingEmbedder()) as other:
            new = other.items.add(
                "Dan fixed it #zephyr0", source=LOG, id="z0", time=T0
            ).chunks_added[0]
        after = graph_on_a_new_thread()
        assert new not in [node for node, _, _ in before]
        assert new in [node for node, _, _ in after]
        assert after == plain(path, None, (query,))[(query, "graph")]
