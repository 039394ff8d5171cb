"""Facts kept in a store: ``Memory.facts.remember``, ``retract``, ``recall`` and ``fact_history``
over a store holding the example Slack export (``team``) and notes (``private``)."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from memory_kit import execute, is_postgres, rows

import stratamem
from stratamem.errors import AccessDenied, LockError, NotFoundError, StratamemError
from stratamem.store.facts import Fact, FactWrite
from stratamem.store.sqlite.migrations import SCHEMA_VERSION

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workspace"
NOTES = "notes:notes"
ENG = "slack:#eng"
GENERAL = "slack:#general"
ASSERTED = "facts:asserted"
CAROL = "person:carol diaz"


def march(day: int, hour: int = 0) -> datetime:
    return datetime(2024, 3, day, hour, tzinfo=UTC)


@pytest.fixture(scope="module")
def template(module_location: str) -> str:
    """A store with the example Slack export and notes and no facts, copied by each test."""
    path = module_location
    with stratamem.open(path, embedder=None) as memory:
        memory.ingest(EXAMPLES / "slack-export", parallel=False)
        memory.ingest(EXAMPLES / "notes", parallel=False)
    # The notes' front matter states facts at ingest (see test_structure.py): these tests
    # start from a store that holds none.
    execute(path, "DELETE FROM facts")
    return path


@pytest.fixture
def db(template: str, locations: Any, tmp_path: Path) -> str:
    return str(locations.copy(template, tmp_path, "facts"))


@pytest.fixture
def memory(db: str) -> Iterator[stratamem.Memory]:
    with stratamem.open(db, embedder=None) as opened:
        yield opened


def node_in(memory: stratamem.Memory, scope: str, query: str = "release") -> str:
    """A node id of source ``scope``."""
    hits = memory.search(query, sources=[scope], mode="keyword", limit=3).hits
    assert hits, f"no hit for {query!r} in {scope}"
    assert {h.source_id for h in hits} == {memory.sources.get(scope).id}
    return hits[0].node_id


def table(db: Path | str, sql: str = "SELECT * FROM facts ORDER BY id", *args: Any) -> list[Any]:
    """What the database itself holds, read past the store."""
    return rows(db, sql, *args)


def files_holding(db: str, secret: bytes) -> list[str]:
    """The files of the SQLite store at ``db`` (the database, its WAL, the index files beside
    it) that hold ``secret``. (A database on a server has no files here: what the server
    keeps of deleted rows is its own, see docs/postgres.md.)"""
    return [path.name for path in Path(db).parent.iterdir() if secret in path.read_bytes()]


def spans(facts: list[Fact]) -> list[tuple[str, datetime | None, datetime | None]]:
    return [(f.object, f.valid_from, f.valid_to) for f in facts]


# -- round trip and canonical form ----------------------------------------------------------------


def test_remember_recall_and_history_round_trip(memory: stratamem.Memory, db: str) -> None:
    write = memory.facts.remember(
        "  person:Carol   DIAZ ",
        "Reports  To",
        "The Platform  Team",
        valid_from=march(1),
        evidence=(),
        confidence=0.75,
        now=march(2),
    )
    assert isinstance(write, FactWrite)
    assert write.expired == ()
    (fact,) = write.recorded
    assert (fact.subject, fact.predicate, fact.object) == (
        CAROL,
        "reports_to",
        "The Platform  Team",
    )
    assert not fact.object_is_entity
    assert (fact.valid_from, fact.valid_to, fact.recorded_at) == (march(1), None, march(2))
    assert fact.expired_at is None
    assert (fact.confidence, fact.origin) == (0.75, "asserted")
    assert fact.id.startswith("fact_")

    assert memory.facts.recall() == [fact]
    assert memory.facts.recall("person:CAROL diaz") == [fact]
    assert memory.facts.recall(CAROL, predicate="reports to") == [fact]
    assert memory.facts.recall(CAROL, predicate="leads") == []
    assert memory.facts.recall("person:dan ng") == []
    assert memory.facts.history("person:carol  diaz", "REPORTS TO") == [fact]
    assert table(db, "SELECT subject, predicate, object FROM facts") == [
        (CAROL, "reports_to", "The Platform  Team")
    ]


@pytest.mark.parametrize(
    ("given", "stored", "is_entity"),
    [
        ("person:Dan  NG", "person:dan ng", True),
        (" topic: Phoenix Release ", "topic:phoenix release", True),
        ("tag:P1", "tag:p1", True),
        ("Release Train  2.0", "Release Train  2.0", False),
        ("  2024-04-05\t", "2024-04-05", False),
        ("note:not a kind", "note:not a kind", False),
        ("person:", "person:", False),
    ],
)
def test_objects_are_entity_ids_in_canonical_form_or_literals_as_written(
    memory: stratamem.Memory, given: str, stored: str, is_entity: bool
) -> None:
    (fact,) = memory.facts.remember("topic:phoenix", "owner", given, now=march(2)).recorded
    assert (fact.object, fact.object_is_entity) == (stored, is_entity)
    assert memory.facts.recall("topic:phoenix") == [fact]


def test_recall_filters_and_limit(memory: stratamem.Memory) -> None:
    memory.facts.remember(CAROL, "leads", "on-call", now=march(2))
    memory.facts.remember(CAROL, "team", "platform", now=march(2))
    memory.facts.remember("person:dan ng", "leads", "release", now=march(2))
    assert [(f.subject, f.predicate) for f in memory.facts.recall()] == [
        (CAROL, "leads"),
        (CAROL, "team"),
        ("person:dan ng", "leads"),
    ]
    assert [f.object for f in memory.facts.recall(predicate="Leads")] == ["on-call", "release"]
    assert [f.object for f in memory.facts.recall(CAROL)] == ["on-call", "platform"]
    assert len(memory.facts.recall(limit=2)) == 2
    with pytest.raises(ValueError, match="not an entity id"):
        memory.facts.recall("carol")


# -- how statements change a timeline -------------------------------------------------------------


def test_the_same_statement_twice_changes_nothing(memory: stratamem.Memory, db: str) -> None:
    (first,) = memory.facts.remember(
        CAROL, "leads", "on-call", valid_from=march(1), now=march(2)
    ).recorded
    before = table(db)
    again = memory.facts.remember(
        "person:Carol  Diaz", "Leads", " on-call ", valid_from=march(1), now=march(20)
    )
    assert again == FactWrite(expired=(), recorded=())
    assert table(db) == before
    assert memory.facts.recall(CAROL) == [replace(first, recorded_at=_ms(first.recorded_at))]


def test_the_same_statement_with_sub_millisecond_times_changes_nothing(
    memory: stratamem.Memory,
    db: str,
) -> None:
    start = march(1) + timedelta(microseconds=1500)
    end = march(5) + timedelta(microseconds=2500)
    memory.facts.remember("topic:x", "state", "open", valid_from=start, valid_to=end, now=march(6))
    before = table(db)
    again = memory.facts.remember(
        "topic:x", "state", "open", valid_from=start, valid_to=end, now=march(7)
    )
    assert again == FactWrite(expired=(), recorded=())
    assert table(db) == before


def test_a_new_value_closes_the_old_row_and_keeps_it(memory: stratamem.Memory, db: str) -> None:
    (old,) = memory.facts.remember(
        CAROL, "leads", "on-call", valid_from=march(1), now=march(2)
    ).recorded
    change = memory.facts.remember(CAROL, "leads", "release", valid_from=march(10), now=march(11))
    assert change.expired == (old.id,)
    assert spans(list(change.recorded)) == [
        ("on-call", march(1), march(10)),
        ("release", march(10), None),
    ]
    assert all(f.recorded_at == march(11) for f in change.recorded)

    assert spans(memory.facts.recall(CAROL)) == [("release", march(10), None)]
    assert spans(memory.facts.recall(CAROL, as_of=march(5))) == [("on-call", march(1), march(10))]
    assert spans(memory.facts.recall(CAROL, as_of=march(10))) == [("release", march(10), None)]
    assert memory.facts.recall(CAROL, as_of=march(1) - timedelta(seconds=1)) == []

    # What was believed before the change: on-call, open-ended.
    assert [f.id for f in memory.facts.recall(CAROL, known_at=march(5))] == [old.id]
    assert [f.id for f in memory.facts.recall(CAROL, as_of=march(20), known_at=march(5))] == [
        old.id
    ]
    assert memory.facts.recall(CAROL, known_at=march(1)) == []
    assert spans(memory.facts.recall(CAROL, as_of=march(20), known_at=march(12))) == [
        ("release", march(10), None)
    ]

    history = memory.facts.history(CAROL, "leads")
    assert [(f.object, f.valid_from, f.valid_to, f.expired_at) for f in history] == [
        ("on-call", march(1), None, march(11)),
        ("on-call", march(1), march(10), None),
        ("release", march(10), None, None),
    ]
    assert history[0].id == old.id
    assert history[0].recorded_at == march(2)
    assert [f.id for f in memory.facts.history(CAROL, "leads", known_at=march(5))] == [old.id]
    assert len(table(db)) == 3


def test_a_statement_dated_before_the_present_value_fills_history_only(
    memory: stratamem.Memory,
) -> None:
    (present,) = memory.facts.remember(
        CAROL, "leads", "release", valid_from=march(10), now=march(11)
    ).recorded
    earlier = memory.facts.remember(CAROL, "leads", "on-call", valid_from=march(1), now=march(12))
    assert earlier.expired == ()
    assert spans(list(earlier.recorded)) == [("on-call", march(1), march(10))]
    assert [f.id for f in memory.facts.recall(CAROL)] == [present.id]
    assert spans(memory.facts.recall(CAROL, as_of=march(3))) == [("on-call", march(1), march(10))]
    assert all(f.expired_at is None for f in memory.facts.history(CAROL, "leads"))


def test_transaction_time_only_moves_forward(memory: stratamem.Memory, db: str) -> None:
    memory.facts.remember(CAROL, "leads", "on-call", valid_from=march(1), now=march(5))
    before = table(db)
    with pytest.raises(ValueError, match="transaction time only moves forward"):
        memory.facts.remember(CAROL, "leads", "release", valid_from=march(10), now=march(4))
    assert table(db) == before


def test_an_explicit_valid_to_splits_the_value_around_it(memory: stratamem.Memory) -> None:
    (whole,) = memory.facts.remember(
        CAROL, "leads", "on-call", valid_from=march(1), now=march(2)
    ).recorded
    change = memory.facts.remember(
        CAROL, "leads", "holiday", valid_from=march(5), valid_to=march(8), now=march(4)
    )
    assert change.expired == (whole.id,)
    assert sorted(spans(list(change.recorded)), key=str) == sorted(
        [
            ("on-call", march(1), march(5)),
            ("on-call", march(8), None),
            ("holiday", march(5), march(8)),
        ],
        key=str,
    )
    assert [f.object for f in memory.facts.recall(CAROL, as_of=march(6))] == ["holiday"]
    assert [f.object for f in memory.facts.recall(CAROL, as_of=march(2))] == ["on-call"]
    assert spans(memory.facts.recall(CAROL)) == [("on-call", march(8), None)]


def test_retract_ends_belief_and_keeps_the_row(memory: stratamem.Memory, db: str) -> None:
    (fact,) = memory.facts.remember(CAROL, "leads", "on-call", now=march(2)).recorded
    assert memory.facts.retract(fact.id, now=march(3)) == FactWrite(expired=(fact.id,), recorded=())
    assert memory.facts.recall() == []
    assert [f.id for f in memory.facts.recall(known_at=march(2, 12))] == [fact.id]
    (kept,) = memory.facts.history(CAROL, "leads")
    assert (kept.id, kept.expired_at) == (fact.id, march(3))
    assert memory.facts.history(CAROL, "leads", known_at=march(4)) == []
    # Retracted already: nothing more to do.
    assert memory.facts.retract(fact.id, now=march(4)) == FactWrite(expired=(), recorded=())
    assert table(db, "SELECT expired_at FROM facts") == [(int(march(3).timestamp()) * 1000,)]
    with pytest.raises(NotFoundError, match="fact_nope"):
        memory.facts.retract("fact_nope")


def _break_after_update(memory: stratamem.Memory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writes expire their rows, then fail before recording any."""
    original = memory.store.write_facts

    def write_facts(source_id: str, expire: Any, record: Any, now: datetime) -> None:
        original(source_id, expire, (), now)
        assert expired_inside(memory) > 0
        raise RuntimeError("the disk went away")

    monkeypatch.setattr(memory.store, "write_facts", write_facts)


def expired_inside(memory: stratamem.Memory) -> int:
    """Rows the running transaction has expired, seen from inside it."""
    return sum(f.expired_at is not None for f in memory.store.facts(believed_only=False))


def test_a_write_that_fails_midway_leaves_the_store_as_it_was(
    memory: stratamem.Memory, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (fact,) = memory.facts.remember(CAROL, "leads", "on-call", valid_from=march(1)).recorded
    before = table(db)
    _break_after_update(memory, monkeypatch)
    with pytest.raises(RuntimeError, match="disk"):
        memory.facts.remember(CAROL, "leads", "release", valid_from=march(10))
    with pytest.raises(RuntimeError, match="disk"):
        memory.facts.retract(fact.id)
    assert table(db) == before
    monkeypatch.undo()
    assert [f.id for f in memory.facts.recall()] == [fact.id]
    assert not memory.store.in_transaction()


def test_a_failed_first_write_leaves_no_default_source_behind(
    memory: stratamem.Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    def write_facts(*args: Any) -> None:
        raise RuntimeError("the disk went away")

    monkeypatch.setattr(memory.store, "write_facts", write_facts)
    with pytest.raises(RuntimeError):
        memory.facts.remember(CAROL, "leads", "on-call")
    monkeypatch.undo()
    with pytest.raises(NotFoundError):
        memory.sources.get(ASSERTED)


# -- evidence and the source a fact belongs to ----------------------------------------------------


def test_a_fact_belongs_to_the_source_of_its_evidence(memory: stratamem.Memory, db: str) -> None:
    first = node_in(memory, ENG)
    second = memory.search("Redis", sources=[ENG], mode="keyword", limit=5).hits[-1].node_id
    write = memory.facts.remember(
        "topic:phoenix", "status", "rehearsed", evidence=[first, second, first], now=march(2)
    )
    (fact,) = write.recorded
    assert fact.source_id == memory.sources.get(ENG).id
    assert fact.evidence == tuple(dict.fromkeys([first, second]))
    (stored,) = memory.facts.recall("topic:phoenix")
    assert (stored.source_id, stored.evidence) == (fact.source_id, fact.evidence)
    assert table(db, "SELECT source_id FROM facts") == [(memory.sources.get(ENG).id,)]
    # Naming the source the evidence is in is allowed.
    again = memory.facts.remember(
        "topic:phoenix", "status", "rehearsed", evidence=[first], source=ENG, now=march(3)
    )
    assert again == FactWrite(expired=(), recorded=())
    with pytest.raises(NotFoundError):
        memory.sources.get(ASSERTED)


def test_evidence_in_two_sources_is_refused(memory: stratamem.Memory, db: str) -> None:
    evidence = [node_in(memory, ENG), node_in(memory, NOTES)]
    with pytest.raises(ValueError, match="several sources"):
        memory.facts.remember("topic:phoenix", "status", "rehearsed", evidence=evidence)
    assert table(db) == []


def test_missing_evidence_is_not_found(memory: stratamem.Memory, db: str) -> None:
    with pytest.raises(NotFoundError, match="no-such-node"):
        memory.facts.remember(
            "topic:phoenix", "status", "x", evidence=[node_in(memory, ENG), "no-such-node"]
        )
    assert table(db) == []


def test_a_source_that_disagrees_with_the_evidence_is_refused(
    memory: stratamem.Memory, db: str
) -> None:
    with pytest.raises(ValueError, match="not in source 'notes:notes'"):
        memory.facts.remember(
            "topic:phoenix", "status", "x", evidence=[node_in(memory, ENG)], source=NOTES
        )
    assert table(db) == []


def test_without_evidence_a_fact_goes_to_a_private_source_made_on_first_use(
    memory: stratamem.Memory,
) -> None:
    with pytest.raises(NotFoundError):
        memory.sources.get(ASSERTED)
    (fact,) = memory.facts.remember(CAROL, "leads", "on-call").recorded
    made = memory.sources.get(ASSERTED)
    assert fact.source_id == made.id
    assert made.access == ("private",)
    assert made.kind.value == "record"
    assert not made.locked
    (second,) = memory.facts.remember(CAROL, "team", "platform", source=ASSERTED).recorded
    assert second.source_id == made.id
    assert [s.scope for s in memory.sources.list()].count(ASSERTED) == 1


def test_without_evidence_a_fact_can_go_to_a_named_source(memory: stratamem.Memory) -> None:
    (fact,) = memory.facts.remember(CAROL, "leads", "on-call", source=NOTES).recorded
    assert fact.source_id == memory.sources.get(NOTES).id
    (by_id,) = memory.facts.remember(CAROL, "team", "x", source=memory.sources.get(ENG).id).recorded
    assert by_id.source_id == memory.sources.get(ENG).id
    with pytest.raises(NotFoundError):
        memory.facts.remember(CAROL, "leads", "on-call", source="jsonl:nowhere")
    with pytest.raises(NotFoundError):
        memory.sources.get(ASSERTED)


def test_each_source_keeps_its_own_timeline(memory: stratamem.Memory) -> None:
    (noted,) = memory.facts.remember(
        "topic:phoenix", "status", "planned", source=NOTES, valid_from=march(1)
    ).recorded
    said = memory.facts.remember(
        "topic:phoenix",
        "status",
        "shipped",
        evidence=[node_in(memory, ENG)],
        valid_from=march(10),
    )
    assert said.expired == ()
    assert spans(list(said.recorded)) == [("shipped", march(10), None)]
    asserted = memory.facts.remember("topic:phoenix", "status", "planned", valid_from=march(1))
    assert len(asserted.recorded) == 1  # the same words in another source are a row of their own
    found = memory.facts.recall("topic:phoenix")
    assert sorted((f.object, f.source_id) for f in found) == sorted(
        [
            ("planned", memory.sources.get(NOTES).id),
            ("shipped", memory.sources.get(ENG).id),
            ("planned", memory.sources.get(ASSERTED).id),
        ]
    )
    assert noted.id in {f.id for f in found}
    assert all(f.expired_at is None for f in memory.facts.history("topic:phoenix", "status"))


def test_the_same_words_in_two_sources_at_one_instant_are_two_rows(
    memory: stratamem.Memory,
) -> None:
    first = memory.facts.remember("topic:phoenix", "status", "planned", source=NOTES, now=march(2))
    second = memory.facts.remember("topic:phoenix", "status", "planned", source=ENG, now=march(2))
    assert len(first.recorded) == len(second.recorded) == 1
    assert first.recorded[0].id != second.recorded[0].id
    assert sorted(f.source_id for f in memory.facts.recall("topic:phoenix")) == sorted(
        [memory.sources.get(NOTES).id, memory.sources.get(ENG).id]
    )


# -- many values at once --------------------------------------------------------------------------


def test_a_predicate_of_many_values_adds_rather_than_replaces(memory: stratamem.Memory) -> None:
    tea = memory.facts.remember(
        CAROL, "likes", "tea", many=True, valid_from=march(1), valid_to=march(10)
    ).recorded[0]
    coffee = memory.facts.remember(CAROL, "likes", "coffee", many=True, valid_from=march(5))
    assert coffee.expired == ()
    assert [(f.object, f.single) for f in memory.facts.recall(CAROL)] == [("coffee", False)]
    assert sorted(f.object for f in memory.facts.recall(CAROL, as_of=march(6))) == ["coffee", "tea"]
    assert [f.object for f in memory.facts.recall(CAROL, as_of=march(3))] == ["tea"]
    again = memory.facts.remember(
        CAROL, "likes", "tea", many=True, valid_from=march(1), valid_to=march(10)
    )
    assert again == FactWrite(expired=(), recorded=())
    longer = memory.facts.remember(CAROL, "likes", "tea", many=True, valid_from=march(1))
    assert longer.expired == (tea.id,)
    assert sorted(f.object for f in memory.facts.recall(CAROL)) == ["coffee", "tea"]
    memory.facts.retract(coffee.recorded[0].id)
    assert [f.object for f in memory.facts.recall(CAROL)] == ["tea"]
    # A single value beside them changes none of them.
    assert memory.facts.remember(CAROL, "likes", "water").expired == ()
    assert sorted(f.object for f in memory.facts.recall(CAROL)) == ["tea", "water"]


# -- what "now" means -----------------------------------------------------------------------------


def test_recall_without_as_of_is_what_holds_at_this_moment(memory: stratamem.Memory) -> None:
    today = datetime.now(UTC)
    memory.facts.remember(
        CAROL,
        "on_leave",
        "yes",
        valid_from=today - timedelta(days=1),
        valid_to=today + timedelta(days=7),
    )
    memory.facts.remember(CAROL, "role", "lead", valid_from=today + timedelta(days=300))
    assert [f.predicate for f in memory.facts.recall(CAROL)] == ["on_leave"]
    later = memory.facts.recall(CAROL, as_of=today + timedelta(days=301))
    assert [f.predicate for f in later] == ["role"]


def test_recall_is_not_cut_short_by_rows_of_the_past(
    memory: stratamem.Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store reads facts in pages (of ``FACTS_LIMIT`` rows; three here, to keep the test
    small): rows no longer true, and a limit above a page, must not hide the facts that are."""
    monkeypatch.setattr("stratamem.memory.remember.FACTS_LIMIT", 3)
    for day, value in ((1, "a"), (5, "b"), (10, "c")):
        memory.facts.remember("topic:a", "state", value, valid_from=march(day))
    memory.facts.remember("topic:b", "state", "x")
    memory.facts.remember("topic:c", "state", "y")
    memory.facts.remember("topic:d", "state", "z")
    now = memory.facts.recall()
    assert [(f.subject, f.object) for f in now] == [
        ("topic:a", "c"),
        ("topic:b", "x"),
        ("topic:c", "y"),
        ("topic:d", "z"),
    ]
    assert len(memory.facts.recall(limit=10)) == 4
    assert len(memory.facts.recall(limit=2)) == 2


# -- time travel ----------------------------------------------------------------------------------

STEPS = st.lists(
    st.tuples(
        st.sampled_from(["red", "green", "blue"]),
        st.one_of(st.none(), st.integers(1, 20)),
        st.one_of(st.none(), st.integers(1, 10)),
        st.booleans(),
    ),
    min_size=1,
    max_size=6,
)
_CASES = itertools.count()


@pytest.fixture(scope="module")
def travel(
    template: str, locations: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[stratamem.Memory]:
    """One store for every example; each example has a subject of its own."""
    path = locations.copy(template, tmp_path_factory.mktemp("travel"), "travel")
    with stratamem.open(path, embedder=None) as opened:
        yield opened


@settings(max_examples=25, deadline=None)
@given(steps=STEPS)
def test_known_at_reads_back_what_was_believed_after_each_write(
    travel: stratamem.Memory, steps: list[tuple[str, int | None, int | None, bool]]
) -> None:
    subject = f"topic:case {next(_CASES)}"
    probes = [None, *(march(day, 12) for day in (1, 4, 9, 15, 25))]
    seen: list[tuple[datetime, list[Any], list[str]]] = []
    for n, (value, start, length, retract_one) in enumerate(steps):
        now = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(hours=n)
        valid_from = None if start is None else march(start)
        valid_to = (
            None if valid_from is None or length is None else valid_from + timedelta(days=length)
        )
        write = travel.facts.remember(
            subject, "colour", value, valid_from=valid_from, valid_to=valid_to, now=now
        )
        if retract_one and write.recorded:
            travel.facts.retract(write.recorded[0].id, now=now + timedelta(minutes=30))
            now += timedelta(minutes=30)
        believed = [r for r in travel.facts.history(subject, "colour") if r.expired_at is None]
        for a, b in itertools.combinations(believed, 2):
            assert not overlaps(a, b), (a, b)
        views = [sorted(f.id for f in travel.facts.recall(subject, as_of=q)) for q in probes]
        seen.append((now, views, sorted(f.id for f in believed)))
    for now, views, believed_ids in seen:
        then = [
            sorted(f.id for f in travel.facts.recall(subject, as_of=q, known_at=now))
            for q in probes
        ]
        assert then == views
        history = travel.facts.history(subject, "colour", known_at=now)
        assert sorted(f.id for f in history) == believed_ids


def overlaps(a: Fact, b: Fact) -> bool:
    a_before_b_ends = a.valid_from is None or b.valid_to is None or a.valid_from < b.valid_to
    b_before_a_ends = b.valid_from is None or a.valid_to is None or b.valid_from < a.valid_to
    return a_before_b_ends and b_before_a_ends


# -- access ---------------------------------------------------------------------------------------


def test_a_principal_recalls_facts_of_the_sources_it_may_read(memory: stratamem.Memory) -> None:
    eng = memory.facts.remember("topic:a", "p", "eng", evidence=[node_in(memory, ENG)]).recorded[0]
    general = memory.facts.remember(
        "topic:a", "p", "general", evidence=[node_in(memory, GENERAL, "Phoenix")]
    ).recorded[0]
    memory.facts.remember("topic:a", "p", "notes", evidence=[node_in(memory, NOTES)])
    memory.facts.remember("topic:a", "p", "asserted")
    memory.facts.remember("topic:b", "p", "notes only", source=NOTES)
    memory.principals.add("bot", "team")
    assert len(memory.facts.recall()) == 5
    with memory.as_principal("bot") as bot:
        assert sorted(f.id for f in bot.facts.recall()) == sorted([eng.id, general.id])
        known = bot.facts.recall("topic:a", known_at=datetime.now(UTC) + timedelta(days=1))
        assert sorted(f.object for f in known) == ["eng", "general"]
        assert sorted(f.object for f in bot.facts.history("topic:a", "p")) == ["eng", "general"]
        assert bot.facts.recall("topic:b") == []
        assert bot.facts.history("topic:b", "p") == []
        with pytest.raises(AccessDenied):
            bot.facts.remember("topic:a", "p", "bot", evidence=[node_in(memory, ENG)])
        with pytest.raises(AccessDenied):
            bot.facts.remember("topic:c", "p", "bot")
        with pytest.raises(AccessDenied):
            bot.facts.retract(eng.id)
    assert len(memory.facts.recall()) == 5
    assert sorted(s.scope for s in memory.sources.list()).count(ASSERTED) == 1


# -- locks and forget -----------------------------------------------------------------------------


def test_locking_a_source_seals_its_facts_and_unlocking_restores_them(
    memory: stratamem.Memory, db: str
) -> None:
    secret = "zebra-quartz-vault"
    note = node_in(memory, NOTES)
    memory.facts.remember("topic:vault", "code", secret, evidence=[note], now=march(2))
    memory.facts.remember(
        "topic:vault", "code", f"{secret}-2", evidence=[note], valid_from=march(5), now=march(6)
    )
    (kept,) = memory.facts.remember(
        "topic:open", "p", "eng", evidence=[node_in(memory, ENG)]
    ).recorded
    before = memory.facts.history("topic:vault", "code")
    assert len(before) == 3
    notes_id = memory.sources.get(NOTES).id
    all_rows = table(db)
    if not is_postgres(db):  # a server's files are the server's: see files_holding
        assert files_holding(db, secret.encode())

    memory.locks.lock(NOTES, passphrase="pw")
    assert [f.id for f in memory.facts.recall()] == [kept.id]
    assert memory.facts.history("topic:vault", "code") == []
    assert memory.facts.recall(known_at=march(3)) == []
    assert table(db, "SELECT count(*) FROM facts WHERE source_id = ?", notes_id) == [(0,)]
    if not is_postgres(db):
        assert files_holding(db, secret.encode()) == []
    with pytest.raises(LockError, match="locked"):
        memory.facts.remember("topic:vault", "code", "x", source=NOTES)
    with pytest.raises(StratamemError):
        memory.facts.remember("topic:vault", "code", "x", evidence=[note])
    with pytest.raises(NotFoundError):
        memory.facts.retract(before[-1].id)

    with stratamem.open(db, embedder=None, unlock={NOTES: "pw"}) as unlocked:
        assert unlocked.facts.history("topic:vault", "code") == before
        with pytest.raises(StratamemError, match="read-only"):
            unlocked.facts.remember("topic:vault", "code", "x", source=ASSERTED)
    assert table(db, "SELECT count(*) FROM facts WHERE source_id = ?", notes_id) == [(0,)]

    memory.locks.unlock(NOTES, passphrase="pw")
    assert memory.facts.history("topic:vault", "code") == before
    assert table(db) == all_rows
    with stratamem.open(db, embedder=None) as reopened:
        assert reopened.facts.history("topic:vault", "code") == before


def test_forgetting_a_source_removes_its_facts(memory: stratamem.Memory, db: str) -> None:
    memory.facts.remember("topic:a", "p", "okapi-lantern-42", evidence=[node_in(memory, NOTES)])
    memory.facts.remember(
        "topic:a", "p", "later", evidence=[node_in(memory, NOTES)], valid_from=march(3)
    )
    (eng,) = memory.facts.remember("topic:a", "p", "eng", evidence=[node_in(memory, ENG)]).recorded
    memory.facts.remember("topic:b", "p", "asserted")
    notes_id = memory.sources.get(NOTES).id
    if not is_postgres(db):  # a server's files are the server's: see files_holding
        assert files_holding(db, b"okapi-lantern-42")
    memory.sources.forget(NOTES)
    assert table(db, "SELECT count(*) FROM facts WHERE source_id = ?", notes_id) == [(0,)]
    if not is_postgres(db):
        assert files_holding(db, b"okapi-lantern-42") == []
    assert [f.id for f in memory.facts.recall("topic:a")] == [eng.id]
    memory.sources.forget(ASSERTED)
    assert memory.facts.recall("topic:b") == []
    assert table(db, "SELECT source_id FROM facts") == [(memory.sources.get(ENG).id,)]


# -- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        (("carol diaz", "leads", "x"), {}, "'carol diaz' is not an entity id"),
        (("robot:r2", "leads", "x"), {}, "the kind one of agent, channel, email, handle"),
        (("person:  ", "leads", "x"), {}, "not an entity id"),
        ((CAROL, "  ", "x"), {}, "needs a predicate"),
        ((CAROL, "leads", "  "), {}, "object"),
        ((CAROL, "leads", "x"), {"valid_from": march(5), "valid_to": march(5)}, "must come after"),
        ((CAROL, "leads", "x"), {"valid_from": march(5), "valid_to": march(4)}, "must come after"),
        (
            (CAROL, "leads", "x"),
            {"valid_from": datetime(2024, 3, 1)},
            "valid_from needs a time zone",
        ),
        ((CAROL, "leads", "x"), {"valid_to": datetime(2024, 3, 1)}, "valid_to needs a time zone"),
        ((CAROL, "leads", "x"), {"now": datetime(2024, 3, 1)}, "now needs a time zone"),
        ((CAROL, "leads", "x"), {"confidence": 1.5}, "confidence must be within 0 and 1"),
        ((CAROL, "leads", "x"), {"confidence": -0.1}, "confidence must be within 0 and 1"),
        ((CAROL, "leads", "x"), {"confidence": float("nan")}, "confidence"),
        ((CAROL, "leads", "x"), {"origin": "guess"}, "origin must be one of asserted"),
    ],
)
def test_bad_statements_are_refused_and_write_nothing(
    memory: stratamem.Memory,
    db: str,
    args: tuple[str, str, str],
    kwargs: dict[str, Any],
    message: str,
) -> None:
    with pytest.raises(ValueError, match=message):
        memory.facts.remember(*args, **kwargs)
    assert table(db) == []
    with pytest.raises(NotFoundError):
        memory.sources.get(ASSERTED)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m.facts.recall(as_of=datetime(2024, 3, 1)), "as_of needs a time zone"),
        (lambda m: m.facts.recall(known_at=datetime(2024, 3, 1)), "known_at needs a time zone"),
        (
            lambda m: m.facts.history(CAROL, "leads", known_at=datetime(2024, 3, 1)),
            "known_at needs",
        ),
        (lambda m: m.facts.history("carol", "leads"), "not an entity id"),
        (lambda m: m.facts.history(CAROL, " "), "needs a predicate"),
        (lambda m: m.facts.retract("fact_x", now=datetime(2024, 3, 1)), "now needs a time zone"),
    ],
)
def test_bad_reads_are_refused(memory: stratamem.Memory, call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call(memory)


def test_times_in_other_zones_are_kept_as_utc(memory: stratamem.Memory) -> None:
    tokyo = datetime(2024, 3, 1, 18, tzinfo=timezone(timedelta(hours=9)))
    (fact,) = memory.facts.remember(CAROL, "leads", "x", valid_from=tokyo).recorded
    assert fact.valid_from == march(1, 9)
    assert fact.valid_from is not None
    assert fact.valid_from.tzinfo == UTC
    assert memory.facts.recall()[0].valid_from == march(1, 9)


# -- schema ---------------------------------------------------------------------------------------


# SQLite's own migrations (the PostgreSQL schema starts with the facts).
@pytest.mark.parametrize("module_location", ["sqlite"], indirect=True)
def test_a_store_from_before_facts_migrates(db: str) -> None:
    conn = sqlite3.connect(db)
    conn.executescript(
        "DROP TABLE rollup_sources; DROP TABLE rollups; DROP TABLE fact_scores; "
        "DROP TABLE fact_vectors; DROP TABLE facts; PRAGMA user_version = 7;"
    )
    conn.close()
    assert SCHEMA_VERSION > 7
    with stratamem.open(db, embedder=None) as memory:
        assert len(memory.sources.list()) == 4
        (fact,) = memory.facts.remember(
            CAROL, "leads", "on-call", evidence=[node_in(memory, ENG)]
        ).recorded
        assert memory.facts.recall() == [replace(fact, recorded_at=_ms(fact.recorded_at))]
    assert table(db, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert table(db, "SELECT count(*) FROM fact_vectors") == [(0,)]
    columns = [row[1] for row in table(db, "PRAGMA table_info(facts)")]
    assert columns == [
        "id",
        "source_id",
        "subject",
        "predicate",
        "object",
        "object_is_entity",
        "valid_from",
        "valid_to",
        "recorded_at",
        "expired_at",
        "evidence",
        "confidence",
        "origin",
        "single",
        "reason",
    ]
    indexes = {
        row[0] for row in table(db, "SELECT name FROM sqlite_master WHERE tbl_name = 'facts'")
    }
    assert {"facts_subject", "facts_source"} <= indexes


def _ms(when: datetime) -> datetime:
    """``when`` as the store keeps it: to the millisecond."""
    return when.replace(microsecond=when.microsecond // 1000 * 1000)
