"""A merge of the same records in any order, in any split, leaves the same store as one ingest
of them all (:mod:`stratamem.ingest.merge`): the same records, chunks and keyword hits.

Records at the same instant are ordered by their ``ref`` and then their key, and a record seen
again unchanged keeps the ``ref`` it was first stored with. So every record here keeps one
``ref`` in every export that holds it (``export.jsonl:<n>``, ``n`` its place in the drawn
history), and the stores compare whole: records, chunk ids and refs included. Times may repeat.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stratamem
from stratamem.ingest.chunking import ChunkingConfig
from stratamem.ingest.model import ReadContext, SourceStream
from stratamem.store.records import record_digest
from stratamem.types import Record, SourceKind
from suite import examples

SCOPE = "test:exports"
SCOPES = (SCOPE, "test:other")
T0 = datetime(2024, 3, 11, 9, 0, tzinfo=UTC)
GAP = ChunkingConfig().chat_gap
# Steps between consecutive records: the same instant, well inside a window, either side of
# the gap that closes one (a step of exactly the gap keeps the window open), far beyond it.
STEPS = (
    timedelta(minutes=3),
    timedelta(0),
    GAP - timedelta(seconds=1),
    GAP,
    GAP + timedelta(seconds=1),
    timedelta(hours=5),
)
WORDS = [
    "queue",
    "sqlite",
    "redis",
    "lease",
    "seal",
    "tree",
    "worker",
    "crash",
    "release",
    "deploy",
    "postgres",
    "review",
    "merge",
    "incident",
    "budget",
    "migration",
    "outage",
    "phoenix",
    "rollout",
    "schema",
]
# Most texts are a few words; some are long enough to split (chat over 2,000 characters, mail
# over 4,000, a record over 1,200); some are blank (a record that yields no chunk, but whose
# time still counts where chat windows close).
REPEATS = (1, 1, 1, 40, 130, 0)
AUTHORS = (None, "Alice Chen", "bob")
THREADS = (None, "t1", "t2")
QUERIES = ("queue", "sqlite redis", "incident", "phoenix rollout", "merge review")
KINDS = (SourceKind.CHAT, SourceKind.EMAIL, SourceKind.RECORD)
# Each example empties the test's one store (see ``empty``) before it ingests.
SETTINGS = settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
Empty = Callable[[], str]
# The tables whose rows a new store holds from the start (``keyword_stats``: its one row of
# totals) or that say what schema it is.
_KEPT = ("stratamem_schema", "keyword_stats")


@pytest.fixture
def empty(store_location: str, locations: Any, request: pytest.FixtureRequest) -> Empty:
    """Where the next store of an example goes, empty: in memory on SQLite; on PostgreSQL the
    test's one database, emptied (a new database per store would take longer than the
    ingests), and its row ids started over, as a new store's are."""
    if not locations.is_postgres(store_location):
        return lambda: ":memory:"
    postgres_server = request.getfixturevalue("postgres_server")
    database = store_location.split("?", 1)[0].rsplit("/", 1)[1]
    stratamem.open(store_location, embedder=None).close()
    tables = postgres_server.psql(
        "SELECT tablename FROM pg_tables WHERE schemaname = 'public'", database
    )
    sequences = postgres_server.psql(
        "SELECT sequencename FROM pg_sequences WHERE schemaname = 'public'", database
    )
    # Without triggers (foreign keys included), so that the tables may be emptied in any order.
    sql = "; ".join(
        [
            "SET session_replication_role = replica",
            *(f"DELETE FROM {name}" for (name,) in tables if name not in _KEPT),
            *(f"ALTER SEQUENCE {name} RESTART" for (name,) in sequences),
            "UPDATE keyword_stats SET docs = 0, content = 0, title = 0",
        ]
    )

    def emptied() -> str:
        postgres_server.psql(sql, database)
        return store_location

    return emptied


class Files:
    """A connector yielding one ingest's files, each a stream of one of :data:`SCOPES`, in the
    order given: the files of one source may follow each other or lie between another's."""

    name = "files"

    def __init__(self, kind: SourceKind, files: Sequence[tuple[str, Sequence[Record]]]) -> None:
        self.kind = kind
        self.files = list(files)

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]:
        for n, (scope, records) in enumerate(self.files):
            yield SourceStream(
                scope=scope,
                kind=self.kind,
                platform="test",
                location=f"{path}/file-{n}",
                records=iter(list(records)),
                title=scope,
            )


@st.composite
def histories(draw: st.DrawFn, kind: SourceKind) -> list[Record]:
    """Records in time order (those without a time anywhere), each with its own ``ref``; most
    with an id, some without (keyed by their content: a copy of one is the same record, and
    two with the same content and different refs would not keep one ``ref``, so a record whose
    content an earlier one without an id holds is given an id)."""
    records: list[Record] = []
    unkeyed: set[str] = set()
    when = T0
    for n in range(draw(st.integers(min_value=1, max_value=14))):
        when += draw(st.sampled_from(STEPS))
        words = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6))
        record = Record(
            text=" ".join(words * draw(st.sampled_from(REPEATS))) or " ",
            ref=f"export.jsonl:{n + 1}",
            time=None if draw(st.integers(0, 9)) == 0 else when,
            author=draw(st.sampled_from(AUTHORS)),
            id=None if draw(st.integers(0, 4)) == 0 else f"m{n}",
            thread=draw(st.sampled_from(THREADS)),
            title=None if kind is SourceKind.CHAT else f"about {words[0]}",
        )
        if record.id is None:
            digest = record_digest(record)
            if digest in unkeyed:
                record = dataclasses.replace(record, id=f"m{n}")
            unkeyed.add(digest)
        records.append(record)
    return records


def splits(size: int, *, min_size: int = 0) -> st.SearchStrategy[list[list[int]]]:
    """One to four exports of a history of ``size`` records, as the places of their records in
    it, in any order: overlapping, a record twice in one."""
    picks = st.lists(st.integers(min_value=0, max_value=size - 1), min_size=min_size, max_size=20)
    return st.lists(picks, min_size=1, max_size=4)


def canonical(history: Sequence[Record], places: Iterable[int]) -> list[Record]:
    """The records at these places, each once, in canonical order (time, then ``ref``: here
    their place; those without a time last)."""
    return [
        history[n]
        for n in sorted(
            set(places), key=lambda n: (history[n].time is None, history[n].time or T0, n)
        )
    ]


Plan = list[tuple[list[tuple[str, list[int]]], bool]]
Ingests = Sequence[tuple[Sequence[tuple[str, Sequence[Record]]], bool]]


def ingested_files(empty: Empty, ingests: Ingests, kind: SourceKind) -> Any:
    """The state of an empty store that ran these ingests one after another, each its files
    (a scope and its records, in order) and whether it syncs."""
    with stratamem.open(empty(), embedder=None) as mem:
        for n, (files, sync) in enumerate(ingests):
            mem.ingest(
                f"ingest-{n}",
                connector=Files(kind, files),
                parallel=False,
                trees=False,
                sync=sync,
            )
        return state(mem)


def ingested(
    empty: Empty, exports: Sequence[Sequence[Record]], kind: SourceKind, *, sync: bool = False
) -> Any:
    """The state of an empty store that ingested these exports of the test's one source one
    after another (the last one with ``sync``)."""
    last = len(exports) - 1
    return ingested_files(
        empty, [([(SCOPE, records)], sync and n == last) for n, records in enumerate(exports)], kind
    )


def state(mem: stratamem.Memory) -> dict[str, Any]:
    """What the property compares: each source's records and chunks in canonical order, the
    entities each chunk mentions, and the keyword hits (score, content) of a few queries, ties
    in score in content order (a tie is broken by row order, which differs between stores)."""
    store = mem.store
    sources: dict[str, Any] = {}
    for source in mem.sources.list():
        stored = store.records_by_key(source.id, list(store.record_keys(source.id)))
        chunks = list(store.iter_chunks(source.id))
        mentions = store.mentions_of([chunk.id for chunk in chunks])
        sources[source.scope] = {
            "records": [(s.key, s.digest, s.record) for s in stored],
            "chunks": [(chunk, dict(chunk.meta), mentions[chunk.id]) for chunk in chunks],
        }
    hits = {}
    for query in QUERIES:
        found = mem.search(query, mode="keyword", limit=1000)
        ranked = sorted((-round(h.score, 6), h.content, h.source_ref) for h in found.hits)
        hits[query] = (found.total, ranked)
    return {"sources": sources, "hits": hits}


@SETTINGS
@given(data=st.data(), kind=st.sampled_from(KINDS))
def test_merging_exports_in_any_split_and_order_equals_one_ingest(
    empty: Empty, data: st.DataObject, kind: SourceKind
) -> None:
    history = data.draw(histories(kind), label="history")
    parts = data.draw(splits(len(history)), label="exports")
    exports = [[history[n] for n in part] for part in parts]
    whole = canonical(history, (n for part in parts for n in part))
    assert ingested(empty, exports, kind) == ingested(empty, [whole], kind)


@SETTINGS
@given(data=st.data(), kind=st.sampled_from(KINDS))
def test_a_later_export_that_edits_a_record_equals_the_edited_union(
    empty: Empty, data: st.DataObject, kind: SourceKind
) -> None:
    history = data.draw(histories(kind), label="history")
    # An edit is a record seen again under its key with other content: it needs an id.
    keyed = [n for n, record in enumerate(history) if record.id is not None]
    target = data.draw(st.sampled_from(keyed or [0]), label="edited")
    if not keyed:
        history[target] = dataclasses.replace(history[target], id="edited")
    parts = data.draw(splits(len(history)), label="exports")
    exports = [[history[n] for n in part] for part in parts]
    original = history[target]
    # Mostly its text; sometimes its time too, which moves it to another window or segment.
    times = sorted({r.time for r in history if r.time is not None})
    moved = st.builds(operator.add, st.sampled_from(times), st.sampled_from(STEPS))
    when = data.draw(
        st.one_of(st.just(original.time), st.none(), moved if times else st.none()), label="time"
    )
    edited = dataclasses.replace(original, text=f"{original.text} amended postmortem", time=when)
    # The last export holds the edit, after any copy of the original in it: the later holds.
    exports[-1].append(edited)
    history[target] = edited
    expected = canonical(history, [*(n for part in parts for n in part), target])
    assert ingested(empty, exports, kind) == ingested(empty, [expected], kind)


@SETTINGS
@given(data=st.data(), kind=st.sampled_from(KINDS))
def test_a_synced_export_equals_one_ingest_of_it_alone(
    empty: Empty, data: st.DataObject, kind: SourceKind
) -> None:
    history = data.draw(histories(kind), label="history")
    parts = data.draw(splits(len(history)), label="exports")
    truth = data.draw(splits(len(history), min_size=1), label="truth")[0]
    exports = [[history[n] for n in part] for part in [*parts, truth]]
    assert ingested(empty, exports, kind, sync=True) == ingested(
        empty, [canonical(history, truth)], kind
    )


@pytest.mark.parametrize("kind", KINDS)
def test_a_record_twice_in_the_first_export_of_a_source_is_stored_once(
    empty: Empty, kind: SourceKind
) -> None:
    """The same record twice, with the same ``ref``, in what a new source first reads (an mbox
    holding one message twice): its chunks, derived twice while reading, are stored once. (A
    chat message is long enough here to fill a window of its own, so both copies make one.)"""
    record = Record(text="queue " * 300, ref="export.jsonl:1", time=T0, id="m0")
    assert ingested(empty, [[record, record]], kind) == ingested(empty, [[record]], kind)


# -- sources read in several files ------------------------------------------------------------


def plans(size: int) -> st.SearchStrategy[Plan]:
    """One to three ingests, each of one to four files (a scope and the places of its
    records, overlapping, in any order), each ingest with ``sync`` or not."""
    places = st.lists(st.integers(min_value=0, max_value=size - 1), max_size=12)
    files = st.lists(st.tuples(st.sampled_from(SCOPES), places), min_size=1, max_size=4)
    return st.lists(st.tuples(files, st.booleans()), min_size=1, max_size=3)


def held_after(plan: Plan) -> dict[str, set[int]]:
    """What each source holds after the plan, by the rules: an ingest reads a source in all
    its files; a source it read nothing of is left alone; ``sync`` keeps exactly what it
    read, otherwise what it read is added."""
    held: dict[str, set[int]] = {}
    for files, sync in plan:
        read: dict[str, set[int]] = {}
        for scope, places in files:
            read.setdefault(scope, set()).update(places)
        for scope, seen in read.items():
            if seen:
                held[scope] = set(seen) if sync else held.get(scope, set()) | seen
    return held


@SETTINGS
@given(data=st.data(), kind=st.sampled_from(KINDS))
def test_sources_read_in_several_files_with_sync_on_any_ingest_equal_one_ingest(
    empty: Empty, data: st.DataObject, kind: SourceKind
) -> None:
    history = data.draw(histories(kind), label="history")
    plan = data.draw(plans(len(history)), label="plan")
    merged = ingested_files(
        empty,
        [([(s, [history[p] for p in ps]) for s, ps in files], sync) for files, sync in plan],
        kind,
    )
    held = held_after(plan)
    whole = [(scope, canonical(history, held[scope])) for scope in sorted(held)]
    assert merged == ingested_files(empty, [(whole, False)], kind)
