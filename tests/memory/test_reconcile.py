"""Reconciling statements into bitemporal facts.

First each rule by example, then random sequences of statements, corrections and passing
transaction time, checked against a replay of the same rules over a much plainer model: the
valid-time axis cut into cells at a few dates, each holding a value or nothing, plus the set of
cells where a row begins (the rule for where an open statement ends needs them).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from stratamem.memory.facts import Change, Statement, as_of, history, reconcile, retract
from stratamem.store.facts import ORIGINS, Fact
from suite import examples

Key = tuple[str, str]
Span = tuple[datetime | None, datetime | None, str]

T0 = datetime(2030, 1, 1, tzinfo=UTC)  # transaction time starts here
D1, D2, D3, D4, D5 = DAYS = tuple(datetime(2020, month, 1, tzinfo=UTC) for month in range(1, 6))


def apply(rows: dict[str, Fact], change: Change, now: datetime) -> None:
    """What the store does with a change: expired rows get their end, recorded rows are added."""
    for row_id in change.expire:
        rows[row_id] = replace(rows[row_id], expired_at=now)
    for row in change.record:
        rows[row.id] = row


def state(
    rows: dict[str, Fact],
    value: str,
    now: datetime,
    valid_from: datetime | None = None,
    valid_to: datetime | None = None,
    key: Key = ("ada", "city"),
) -> Change:
    change = reconcile(rows.values(), Statement(*key, value, valid_from, valid_to), now)
    apply(rows, change, now)
    return change


def spans(facts: list[Fact]) -> list[Span]:
    return [(f.valid_from, f.valid_to, f.object) for f in facts]


def believed_spans(rows: dict[str, Fact]) -> list[Span]:
    return spans(history(rows.values()))


# -- the rules by example ------------------------------------------------------------------------


def test_a_new_value_closes_the_open_row_where_it_starts() -> None:
    rows: dict[str, Fact] = {}
    state(rows, "paris", T0)
    (paris,) = rows.values()
    later = T0 + timedelta(days=1)

    change = state(rows, "lyon", later, D2)

    assert change.expire == [paris.id]
    assert sorted(spans(change.record), key=str) == sorted(
        [(None, D2, "paris"), (D2, None, "lyon")], key=str
    )
    assert all(r.recorded_at == later and r.believed for r in change.record)
    assert believed_spans(rows) == [(None, D2, "paris"), (D2, None, "lyon")]
    # The old row is expired, not deleted: its valid time is as it was.
    assert rows[paris.id] == replace(paris, expired_at=later)


def test_the_same_value_again_changes_nothing() -> None:
    rows: dict[str, Fact] = {}
    state(rows, "paris", T0, D1)
    later = T0 + timedelta(days=1)
    for valid_from, valid_to in [(D1, None), (D3, None), (D2, D4)]:
        change = reconcile(
            rows.values(), Statement("ada", "city", "paris", valid_from, valid_to), later
        )
        assert change.empty, (valid_from, valid_to)
    # Partly covered is not covered: the span before D1 is unknown.
    assert not reconcile(rows.values(), Statement("ada", "city", "paris"), later).empty


def test_the_same_value_over_contiguous_rows_changes_nothing() -> None:
    rows: dict[str, Fact] = {}
    state(rows, "paris", T0)
    state(rows, "lyon", T0 + timedelta(days=1), D2)
    state(rows, "paris", T0 + timedelta(days=2), D2)
    assert believed_spans(rows) == [(None, D2, "paris"), (D2, None, "paris")]
    change = reconcile(
        rows.values(), Statement("ada", "city", "paris", D1, D3), T0 + timedelta(days=3)
    )
    assert change.empty


def test_an_earlier_statement_fills_history_and_leaves_the_present() -> None:
    rows: dict[str, Fact] = {}
    state(rows, "paris", T0, D3)
    (paris,) = rows.values()

    change = state(rows, "lyon", T0 + timedelta(days=1), D1)

    assert change.expire == []
    assert spans(change.record) == [(D1, D3, "lyon")]
    assert rows[paris.id] == paris
    assert believed_spans(rows) == [(D1, D3, "lyon"), (D3, None, "paris")]
    assert [r.object for r in as_of(rows.values())] == ["paris"]
    assert [r.object for r in as_of(rows.values(), valid_at=D2)] == ["lyon"]


def test_the_same_value_either_side_of_a_gap_does_not_cover_it() -> None:
    rows: dict[str, Fact] = {}
    state(rows, "paris", T0, None, D2)
    state(rows, "paris", T0, D3)

    change = state(rows, "paris", T0 + timedelta(days=1), D1, D4)

    assert not change.empty
    assert [r.object for r in as_of(rows.values(), valid_at=D2)] == ["paris"]


def test_the_same_value_starting_inside_the_span_does_not_cover_it() -> None:
    rows: dict[str, Fact] = {}
    state(rows, "paris", T0, D2)

    change = state(rows, "paris", T0 + timedelta(days=1), D1, D3)

    assert not change.empty
    assert [r.object for r in as_of(rows.values(), valid_at=D1)] == ["paris"]


def test_an_open_statement_stops_at_the_next_known_change_even_across_a_gap() -> None:
    rows: dict[str, Fact] = {}
    state(rows, "paris", T0, D1, D2)
    state(rows, "oslo", T0 + timedelta(days=1), D4)

    state(rows, "lyon", T0 + timedelta(days=2), D1)

    assert believed_spans(rows) == [(D1, D4, "lyon"), (D4, None, "oslo")]


def test_a_bounded_statement_inside_a_span_splits_it_in_three() -> None:
    rows: dict[str, Fact] = {}
    state(rows, "paris", T0)
    (paris,) = rows.values()
    later = T0 + timedelta(days=1)

    change = state(rows, "lyon", later, D2, D3)

    assert change.expire == [paris.id]
    assert len(change.record) == 3
    assert believed_spans(rows) == [(None, D2, "paris"), (D2, D3, "lyon"), (D3, None, "paris")]
    assert [r.object for r in as_of(rows.values(), valid_at=D3)] == ["paris"]
    assert [r.object for r in as_of(rows.values(), valid_at=D3 - timedelta(seconds=1))] == ["lyon"]


def test_the_same_words_twice_in_one_instant_are_two_rows() -> None:
    rows: dict[str, Fact] = {}
    for value in ("paris", "lyon", "paris"):
        change = reconcile(rows.values(), Statement("ada", "city", value), T0)
        assert not {r.id for r in change.record} & set(rows), value
        apply(rows, change, T0)
    assert len(rows) == 3
    assert believed_spans(rows) == [(None, None, "paris")]
    # Recorded and expired in the same instant, the first two were never believed.
    assert [r.object for r in as_of(rows.values(), known_at=T0)] == ["paris"]


def test_the_parts_recorded_again_keep_what_the_row_said() -> None:
    rows: dict[str, Fact] = {}
    statement = Statement(
        "ada", "city", "paris", evidence=("doc:1",), confidence=0.5, origin="model"
    )
    apply(rows, reconcile([], statement, T0), T0)
    later = T0 + timedelta(days=1)

    change = state(rows, "lyon", later, D2, D3)

    kept = [r for r in change.record if r.object == "paris"]
    assert len(kept) == 2
    for row in kept:
        assert (row.evidence, row.confidence, row.origin) == (("doc:1",), 0.5, "model")
    assert len({r.id for r in change.record}) == 3


def test_retract_ends_transaction_time_only() -> None:
    rows: dict[str, Fact] = {}
    state(rows, "paris", T0, D1, D3)
    state(rows, "lyon", T0, D3)
    paris = next(r for r in rows.values() if r.object == "paris")
    later = T0 + timedelta(days=1)

    change = retract(paris, later)
    assert change.expire == [paris.id]
    assert change.record == []
    apply(rows, change, later)

    assert rows[paris.id] == replace(paris, expired_at=later)
    assert believed_spans(rows) == [(D3, None, "lyon")]
    assert as_of(rows.values(), valid_at=D2) == []
    assert as_of(rows.values(), valid_at=D2, known_at=T0) == [rows[paris.id]]
    assert retract(rows[paris.id], later + timedelta(days=1)).empty


def test_as_of_before_a_change_reads_the_old_belief() -> None:
    rows: dict[str, Fact] = {}
    state(rows, "paris", T0)
    state(rows, "lyon", T0 + timedelta(days=2), D2)

    def city(valid_at: datetime | None, known_at: datetime | None) -> list[str]:
        return [r.object for r in as_of(rows.values(), valid_at=valid_at, known_at=known_at)]

    before = T0 + timedelta(days=1)
    assert city(None, before) == ["paris"]
    assert city(D3, before) == ["paris"]
    assert city(None, None) == ["lyon"]
    assert city(D3, None) == ["lyon"]
    assert city(D1, None) == ["paris"]
    assert city(None, T0 - timedelta(seconds=1)) == []
    # The half-open ends: a row is known from recorded_at, and no longer at expired_at.
    assert city(D3, T0 + timedelta(days=2)) == ["lyon"]
    assert city(D3, T0) == ["paris"]


def test_reconcile_ignores_other_subjects_and_predicates() -> None:
    rows: dict[str, Fact] = {}
    state(rows, "oslo", T0, D3, key=("bob", "city"))
    state(rows, "acme", T0, D3, key=("ada", "employer"))
    state(rows, "rome", T0, None, D2, key=("ada", "city"))
    others = {k: v for k, v in rows.items() if v.subject == "bob" or v.predicate == "employer"}

    change = reconcile(rows.values(), Statement("ada", "city", "paris", D1), T0 + timedelta(days=1))

    assert set(change.expire).isdisjoint(others)
    # Bob's and the employer's rows starting at D3 do not bound Ada's city.
    assert (D1, None, "paris") in spans(change.record)
    assert all((r.subject, r.predicate) == ("ada", "city") for r in change.record)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"subject": ""}, "subject"),
        ({"subject": "  "}, "subject"),
        ({"predicate": ""}, "predicate"),
        ({"object": " \n"}, "object"),
        ({"valid_from": D2, "valid_to": D2}, "valid_to"),
        ({"valid_from": D2, "valid_to": D1}, "valid_to"),
        ({"confidence": -0.01}, "confidence"),
        ({"confidence": 1.5}, "confidence"),
        ({"origin": "rumour"}, "origin"),
    ],
)
def test_a_bad_statement_is_refused_naming_the_field(kwargs: dict[str, object], field: str) -> None:
    given_ = {"subject": "ada", "predicate": "city", "object": "paris", **kwargs}
    with pytest.raises(ValueError, match=field):
        Statement(**given_)  # type: ignore[arg-type]


@pytest.mark.parametrize("confidence", [0.0, 1.0])
def test_confidence_bounds_are_inclusive(confidence: float) -> None:
    assert Statement("ada", "city", "paris", confidence=confidence).confidence == confidence


# -- the plain model -----------------------------------------------------------------------------

# Cell 0 is everything before D1, cell i is [DAYS[i-1], DAYS[i]), the last is DAYS[-1] on.
CELLS = len(DAYS) + 1
KEYS: tuple[Key, ...] = (("ada", "city"), ("ada", "employer"), ("bob", "city"))
VALUES = ("paris", "lyon")
MAYBE_DAYS = (None, *DAYS)
# Valid times read back: on each date, between dates, before and after all of them, and None,
# the open-ended present.
PROBES: tuple[datetime | None, ...] = (
    None,
    D1 - timedelta(days=400),
    *DAYS,
    *(day + timedelta(days=9) for day in DAYS),
)


def first_cell(valid_from: datetime | None) -> int:
    return 0 if valid_from is None else DAYS.index(valid_from) + 1


def stop_cell(valid_to: datetime | None) -> int:
    return CELLS if valid_to is None else DAYS.index(valid_to) + 1


def cell_start(cell: int) -> datetime | None:
    return None if cell == 0 else DAYS[cell - 1]


def cell_stop(cell: int) -> datetime | None:
    return None if cell == CELLS else DAYS[cell - 1]


@dataclass
class Timeline:
    """One (subject, predicate) as believed at one transaction time."""

    cells: list[str | None]
    starts: set[int]

    @classmethod
    def empty(cls) -> Timeline:
        return cls([None] * CELLS, set())

    def copy(self) -> Timeline:
        return Timeline(list(self.cells), set(self.starts))

    def value_at(self, when: datetime | None) -> str | None:
        if when is None:
            return self.cells[-1]
        return self.cells[sum(1 for day in DAYS if day <= when)]

    def set(self, value: str, first: int, stop: int | None) -> bool:
        """Say ``value`` from cell ``first`` to ``stop`` (None: to the next row's start, else
        on); False when every cell there already says it."""
        if stop is None:
            stop = min((cell for cell in self.starts if cell > first), default=CELLS)
        if all(cell == value for cell in self.cells[first:stop]):
            return False
        self.cells[first:stop] = [value] * (stop - first)
        self.starts = {cell for cell in self.starts if not first < cell < stop} | {first}
        if stop < CELLS and self.cells[stop] is not None:
            self.starts.add(stop)
        return True

    def clear(self, first: int, stop: int) -> None:
        self.cells[first:stop] = [None] * (stop - first)
        self.starts -= set(range(first, stop))

    def segments(self) -> list[Span]:
        found: list[Span] = []
        cell = 0
        while cell < CELLS:
            value = self.cells[cell]
            if value is None:
                cell += 1
                continue
            assert cell in self.starts, "a value begins where no row does"
            stop = cell + 1
            while stop < CELLS and stop not in self.starts and self.cells[stop] is not None:
                assert self.cells[stop] == value
                stop += 1
            found.append((cell_start(cell), cell_stop(stop), value))
            cell = stop
        return found


def says(said: Fact | Statement) -> tuple[object, ...]:
    """What a row or statement says, leaving out when."""
    return (
        said.subject,
        said.predicate,
        said.object,
        said.evidence,
        said.confidence,
        said.origin,
        said.object_is_entity,
    )


def is_part_of(part: Fact, old: Fact) -> bool:
    return (
        says(part) == says(old)
        and first_cell(old.valid_from) <= first_cell(part.valid_from)
        and stop_cell(part.valid_to) <= stop_cell(old.valid_to)
    )


class World:
    """The rows as a store holds them, next to the model replayed alongside."""

    def __init__(self) -> None:
        self.rows: dict[str, Fact] = {}
        self.seen: dict[str, Fact] = {}
        self.now = T0
        self.present = {key: Timeline.empty() for key in KEYS}
        self.past: list[tuple[datetime, dict[Key, Timeline]]] = []

    # What happens.

    def say(self, statement: Statement) -> None:
        key = (statement.subject, statement.predicate)
        change = reconcile(list(self.rows.values()), statement, self.now)
        self.check_change(change, statement)
        stop = None if statement.valid_to is None else stop_cell(statement.valid_to)
        changed = self.present[key].set(statement.object, first_cell(statement.valid_from), stop)
        assert change.empty is not changed
        self.apply(change, key)
        self.close()
        again = reconcile(list(self.rows.values()), statement, self.now + timedelta(hours=5))
        assert again.empty, again

    def correct(self, pick: int) -> None:
        believed = sorted((r for r in self.rows.values() if r.believed), key=lambda r: r.id)
        if not believed:
            return
        row = believed[pick % len(believed)]
        change = retract(row, self.now)
        assert change.expire == [row.id]
        assert change.record == []
        key = (row.subject, row.predicate)
        assert (row.valid_from, row.valid_to, row.object) in self.present[key].segments()
        self.present[key].clear(first_cell(row.valid_from), stop_cell(row.valid_to))
        self.apply(change, key)
        self.close()
        assert retract(self.rows[row.id], self.now).empty

    def wait(self, by: timedelta) -> None:
        self.now += by

    def close(self) -> None:
        """Keeps the timelines as they stand after a change; several changes may share one
        transaction time, and what it shows is how the last one left them."""
        self.past.append((self.now, {key: t.copy() for key, t in self.present.items()}))

    def apply(self, change: Change, key: Key) -> None:
        assert len(set(change.expire)) == len(change.expire)
        for row_id in change.expire:
            assert row_id in self.rows, "expires a row that is not there"
            row = self.rows[row_id]
            assert row.believed, "expires a row already expired"
            assert (row.subject, row.predicate) == key
            self.rows[row_id] = replace(row, expired_at=self.now)
        for row in change.record:
            assert row.id not in self.rows, "records over an existing id"
            assert (row.subject, row.predicate) == key
            assert row.recorded_at == self.now
            assert row.believed
            self.rows[row.id] = row

    def check_change(self, change: Change, statement: Statement) -> None:
        """A recorded row is the statement's own, or part of a row it expires, as it was."""
        if change.empty:
            return
        own = [r for r in change.record if r.valid_from == statement.valid_from]
        assert len(own) == 1
        assert says(own[0]) == says(statement)
        expired = [self.rows[row_id] for row_id in change.expire]
        for part in change.record:
            if part is not own[0]:
                assert any(is_part_of(part, old) for old in expired), part

    # What must hold.

    def timeline(self, key: Key, known_at: datetime | None) -> Timeline:
        if known_at is None:
            return self.present[key]
        found = Timeline.empty()
        for when, timelines in self.past:
            if when <= known_at:
                found = timelines[key]
        return found

    def known_ats(self) -> list[datetime]:
        return [T0 - timedelta(days=1)] + [
            k for when, _ in self.past for k in (when - timedelta(milliseconds=500), when)
        ]

    def check_believed_do_not_overlap(self) -> None:
        for key in KEYS:
            rows = [r for r in history(self.rows.values()) if (r.subject, r.predicate) == key]
            for before, after in itertools.pairwise(rows):
                assert before.valid_to is not None
                assert after.valid_from is not None
                assert before.valid_to <= after.valid_from

    def check_kept(self) -> None:
        for row_id, old in self.seen.items():
            assert row_id in self.rows, "a row was removed"
            new = self.rows[row_id]
            if not old.believed:
                assert new == old, "an expired row changed"
            elif new != old:
                assert new.expired_at is not None
                assert new == replace(old, expired_at=new.expired_at)
        self.seen = dict(self.rows)

    def check_as_of(self, known_at: datetime | None) -> None:
        timelines = {key: self.timeline(key, known_at) for key in KEYS}
        for valid_at in PROBES:
            found = as_of(self.rows.values(), valid_at=valid_at, known_at=known_at)
            by_key: dict[Key, list[str]] = {key: [] for key in KEYS}
            for row in found:
                by_key[(row.subject, row.predicate)].append(row.object)
            for key in KEYS:
                value = timelines[key].value_at(valid_at)
                expected = [] if value is None else [value]
                assert by_key[key] == expected, (key, valid_at, known_at)

    def check_history(self, known_at: datetime | None) -> None:
        found = history(self.rows.values(), known_at=known_at)
        for key in KEYS:
            rows = [r for r in found if (r.subject, r.predicate) == key]
            assert spans(rows) == self.timeline(key, known_at).segments(), (key, known_at)


# Every span a statement may give: the end, where given, after the start.
SPANS = [
    (start, end)
    for start in MAYBE_DAYS
    for end in MAYBE_DAYS
    if start is None or end is None or start < end
]


@st.composite
def statements(draw: st.DrawFn) -> Statement:
    # Mostly one timeline, so that its rows pile up; now and then the others, kept apart.
    key = draw(st.one_of(st.just(KEYS[0]), st.just(KEYS[0]), st.sampled_from(KEYS)))
    valid_from, valid_to = draw(st.sampled_from(SPANS))
    return Statement(
        *key,
        draw(st.sampled_from(VALUES)),
        valid_from,
        valid_to,
        evidence=(draw(st.sampled_from(("doc:1", "doc:2"))),),
        confidence=draw(st.sampled_from((0.5, 1.0))),
        origin=draw(st.sampled_from(ORIGINS)),
    )


picks = st.integers(min_value=0, max_value=50)
waits = st.integers(min_value=1, max_value=48).map(lambda hours: timedelta(hours=hours))


class Reconciling(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.world = World()

    @rule(said=statements())
    def say(self, said: Statement) -> None:
        self.world.say(said)

    @rule(pick=picks)
    def correct(self, pick: int) -> None:
        self.world.correct(pick)

    @rule(by=waits)
    def wait(self, by: timedelta) -> None:
        self.world.wait(by)

    @invariant()
    def believed_rows_do_not_overlap_and_match_the_model(self) -> None:
        self.world.check_believed_do_not_overlap()
        self.world.check_history(None)

    @invariant()
    def no_row_is_removed_and_expired_rows_never_change(self) -> None:
        self.world.check_kept()

    @invariant()
    def as_of_now_and_at_the_last_change_match_the_model(self) -> None:
        self.world.check_as_of(None)
        if self.world.past:
            self.world.check_as_of(self.world.past[-1][0])

    def teardown(self) -> None:
        for known_at in self.world.known_ats():
            self.world.check_as_of(known_at)


Reconciling.TestCase.settings = settings(
    max_examples=examples(300), stateful_step_count=60, deadline=None
)
test_reconciling = Reconciling.TestCase


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.one_of(statements(), picks, waits), min_size=10, max_size=60))
def test_no_value_is_lost_at_any_transaction_time(steps: list[Statement | int | timedelta]) -> None:
    world = World()
    for step in steps:
        if isinstance(step, Statement):
            world.say(step)
        elif isinstance(step, timedelta):
            world.wait(step)
        else:
            world.correct(step)
    world.check_history(None)
    for known_at in world.known_ats():
        world.check_history(known_at)
