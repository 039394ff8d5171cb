"""Facts in a real store, per source, through statements, corrections, locks and forgets.

Random steps run against ``Memory`` over a new store and, alongside, against a plain model:
for each source and each (subject, predicate), the believed rows as a list of spans over
valid time, kept as they stood after every step. A statement without a start, made where its
timeline already holds a value, starts at its transaction time (the present: every date
below is long past). Every read must match the model over the sources that are neither
locked nor forgotten; a locked source leaves no row of its facts in the database and comes
back exactly on unlock; a forgotten one takes its whole past with it.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from memory_kit import connect

import stratamem
from stratamem.access import crypto
from stratamem.errors import LockError, NotFoundError, WrongPassphrase
from stratamem.store.facts import Fact
from stratamem.store.sources import source_id_for
from suite import examples

# Transaction time starts here, an hour a step: after every valid date below and before the
# clock this runs by, so that a value starting at its transaction time is true now.
T0 = datetime(2021, 1, 1, tzinfo=UTC)
DAYS = tuple(datetime(2020, month, 1, tzinfo=UTC) for month in (1, 3, 5))
# A row's start when it has none (as far back as known) and its stop when it has none.
EARLIEST = datetime.min.replace(tzinfo=UTC)
LATEST = datetime.max.replace(tzinfo=UTC)
SUBJECTS = ("person:ada", "person:bob")
PREDICATES = ("city", "employer")
KEYS = tuple(itertools.product(SUBJECTS, PREDICATES))
VALUES = ("paris", "lyon", "oslo")
ASSERTED = "facts:asserted"  # made by the first fact asserted into it, and again after a forget
NOTES = ("notes:a", "notes:b")  # made by an item; a fact cannot make them
SCOPES = (*NOTES, ASSERTED)
PASSPHRASE = "correct horse battery staple"
POSTGRES_EXAMPLES = 5
FAST_KDF = crypto.Scrypt(n=2**10, r=8, p=1)
# Valid times read back: before every date, on each, between them, and the present (None).
PROBES: tuple[datetime | None, ...] = (
    None,
    DAYS[0] - timedelta(days=400),
    *DAYS,
    *(day + timedelta(days=9) for day in DAYS),
)
SPANS = [
    (start, end)
    for start in (None, *DAYS)
    for end in (None, *DAYS)
    if start is None or end is None or start < end
]

Key = tuple[str, str]
# Where, what, and over which valid time: (scope or None for the default, key, value, span).
Statement = tuple[str | None, Key, str, tuple[datetime | None, datetime | None]]
Said = tuple[str, str, str, str, datetime | None, datetime | None]  # source id, s, p, o, from, to


def start_of(valid_from: datetime | None) -> datetime:
    return EARLIEST if valid_from is None else valid_from


def stop_of(valid_to: datetime | None) -> datetime:
    return LATEST if valid_to is None else valid_to


def bounds(first: datetime, stop: datetime) -> tuple[datetime | None, datetime | None]:
    return (None if first == EARLIEST else first, None if stop == LATEST else stop)


@dataclass(frozen=True)
class Row:
    """A believed row of the model: valid time [first, stop) says ``value``."""

    first: datetime
    stop: datetime
    value: str

    def holds(self, valid_at: datetime | None) -> bool:
        """Whether the row is true at ``valid_at`` (None: the present, the open end)."""
        if valid_at is None:
            return self.stop == LATEST
        return self.first <= valid_at < self.stop


def after_saying(
    rows: tuple[Row, ...], value: str, first: datetime, stop: datetime | None
) -> tuple[Row, ...]:
    """The rows after ``value`` is said from ``first`` to ``stop`` (None: up to the next
    row's start, else on). The same rows when they already say it over the whole span."""
    if stop is None:
        stop = min((r.first for r in rows if r.first > first), default=LATEST)
    hit = sorted((r for r in rows if r.first < stop and first < r.stop), key=lambda r: r.first)
    reach = first  # how far from ``first`` the rows say ``value`` without a break
    for r in hit:
        if r.value != value or r.first > reach:
            break
        reach = max(reach, r.stop)
    if reach >= stop:
        return rows
    kept = [r for r in rows if r not in hit]
    for r in hit:
        if r.first < first:
            kept.append(Row(r.first, first, r.value))
        if stop < r.stop:
            kept.append(Row(stop, r.stop, r.value))
    kept.append(Row(first, stop, value))
    return tuple(sorted(kept, key=lambda r: r.first))


Timelines = dict[str, dict[Key, tuple[Row, ...]]]  # scope → key → believed rows


def statements() -> st.SearchStrategy[Statement]:
    # Mostly one timeline of one source, so that its rows pile up.
    return st.tuples(
        st.sampled_from((NOTES[0], NOTES[0], *SCOPES, None)),
        st.sampled_from((KEYS[0], KEYS[0], *KEYS)),
        st.sampled_from(VALUES),
        st.sampled_from(SPANS),
    )


def empty() -> dict[Key, tuple[Row, ...]]:
    return dict.fromkeys(KEYS, ())


class Facts(RuleBasedStateMachine):
    new_location: Callable[[], str]  # where the next example's store goes

    def __init__(self) -> None:
        super().__init__()
        self.db = self.new_location()
        self.memory = stratamem.open(self.db, embedder=None)
        self.peek = connect(self.db)  # the database as it stands, read past the store
        for scope in NOTES:
            self.memory.items.add("an item that makes the source", source=scope)
        # "open", "locked" or "gone" (never made, or forgotten).
        self.status = {**dict.fromkeys(NOTES, "open"), ASSERTED: "gone"}
        self.now = T0
        self.checked = T0  # the transaction time the history was last read at
        self.present: Timelines = {scope: empty() for scope in SCOPES}
        self.past: list[tuple[datetime, Timelines]] = []
        self.seen: dict[str, Fact] = {}
        self.sealed: dict[str, list[Fact]] = {}
        self.hidden: list[str] = []  # ids of rows of sources now locked or forgotten

    def teardown(self) -> None:
        try:
            for known_at in self.known_ats():
                self.check_reads(known_at)
        finally:
            self.memory.close()
            self.peek.close()

    # -- steps ---------------------------------------------------------------------------------

    def tick(self) -> None:
        self.now += timedelta(hours=1)

    def keep(self) -> None:
        """The timelines as this step left them, read back at its transaction time."""
        copy = {scope: dict(timelines) for scope, timelines in self.present.items()}
        self.past.append((self.now, copy))

    @initialize(said=st.lists(statements(), min_size=2, max_size=8))
    def begin(self, said: list[Statement]) -> None:
        for statement in said:
            self.say(statement)

    @rule(said=st.lists(statements(), min_size=1, max_size=4))
    def remember(self, said: list[Statement]) -> None:
        """A few statements, each at its own transaction time."""
        for statement in said:
            self.say(statement)

    def say(self, statement: Statement) -> None:
        scope, key, value, (valid_from, valid_to) = statement
        self.tick()
        home = scope or ASSERTED
        status = self.status[home]
        if status == "locked" or (status == "gone" and home != ASSERTED):
            with pytest.raises(LockError if status == "locked" else NotFoundError):
                self.memory.facts.remember(
                    *key,
                    value,
                    valid_from=valid_from,
                    valid_to=valid_to,
                    source=scope,
                    now=self.now,
                )
            return
        wrote = self.memory.facts.remember(
            *key, value, valid_from=valid_from, valid_to=valid_to, source=scope, now=self.now
        )
        self.status[home] = "open"
        before = self.present[home][key]
        start = valid_from
        if start is None and before and (valid_to is None or valid_to > self.now):
            # A new value with no start of its own starts now and closes the old one there.
            start = self.now
        after = after_saying(before, value, start_of(start), valid_to)
        self.present[home][key] = after
        assert (wrote.expired == () and wrote.recorded == ()) is (after == before)
        assert all(f.source_id == source_id_for(home) for f in wrote.recorded)
        self.keep()

    @precondition(
        lambda self: any(
            self.status[self.scope_of(f.source_id)] == "open" for f in self.seen.values()
        )
    )
    @rule(pick=st.integers(min_value=0, max_value=60))
    def retract(self, pick: int) -> None:
        """Correct a row of the history as read: a believed one goes, an expired one stays."""
        self.tick()
        rows = self.readable()
        row = rows[pick % len(rows)]
        scope, key = self.scope_of(row.source_id), (row.subject, row.predicate)
        wrote = self.memory.facts.retract(row.id, now=self.now)
        if row.believed:
            model = Row(start_of(row.valid_from), stop_of(row.valid_to), row.object)
            assert model in self.present[scope][key], (row, self.present[scope][key])
            self.present[scope][key] = tuple(r for r in self.present[scope][key] if r != model)
            assert wrote.expired == (row.id,)
        else:
            assert wrote.expired == ()
        assert wrote.recorded == ()
        self.keep()

    @precondition(lambda self: self.held() > 0)
    @rule(pick=st.integers(min_value=0, max_value=60), said=statements())
    def say_too_late(self, pick: int, said: Statement) -> None:
        """A statement older than its timeline's last row is refused and changes nothing."""
        rows = self.readable()
        if not rows:
            return
        row = rows[pick % len(rows)]
        key = (row.subject, row.predicate)
        latest = max(
            f.recorded_at for f in self.memory.facts.history(*key) if f.source_id == row.source_id
        )
        _, _, value, (valid_from, valid_to) = said
        with pytest.raises(ValueError, match="only moves forward"):
            self.memory.facts.remember(
                *key,
                value,
                valid_from=valid_from,
                valid_to=valid_to,
                source=self.scope_of(row.source_id),
                now=latest - timedelta(minutes=1),
            )

    @precondition(lambda self: bool(self.hidden))
    @rule(pick=st.integers(min_value=0, max_value=40))
    def retract_hidden(self, pick: int) -> None:
        """A row of a locked or forgotten source cannot be found, let alone corrected."""
        self.tick()
        with pytest.raises(NotFoundError):
            self.memory.facts.retract(self.hidden[pick % len(self.hidden)], now=self.now)

    @precondition(lambda self: self.held() > 0)
    @rule(scope=st.sampled_from(SCOPES), wrong=st.booleans())
    def lock_or_unlock(self, scope: str, wrong: bool) -> None:
        """Lock an open source, unlock a locked one (trying a wrong passphrase first, now and
        then); each refuses the other's state and a source there is not."""
        self.tick()
        status = self.status[scope]
        if status == "gone":
            with pytest.raises(NotFoundError):
                self.memory.locks.lock(scope, passphrase=PASSPHRASE)
            with pytest.raises(NotFoundError):
                self.memory.locks.unlock(scope, passphrase=PASSPHRASE)
        elif status == "open":
            with pytest.raises(LockError, match="not locked"):
                self.memory.locks.unlock(scope, passphrase=PASSPHRASE)
            self.sealed[scope] = self.rows_of(scope)
            self.memory.locks.lock(scope, passphrase=PASSPHRASE)
            self.status[scope] = "locked"
            self.hidden += [f.id for f in self.sealed[scope]]
        else:
            with pytest.raises(LockError, match="already locked"):
                self.memory.locks.lock(scope, passphrase=PASSPHRASE)
            if wrong:
                with pytest.raises(WrongPassphrase):
                    self.memory.locks.unlock(scope, passphrase="not it")
                self.check_reads(None)
            self.memory.locks.unlock(scope, passphrase=PASSPHRASE)
            self.status[scope] = "open"
            back = self.sealed.pop(scope)
            assert self.rows_of(scope) == back, "unlocking did not put back the rows sealed"
            self.hidden = [i for i in self.hidden if i not in {f.id for f in back}]
        self.check_reads_at_every_time()

    @precondition(lambda self: self.held() >= 4)
    @rule(scope=st.sampled_from(SCOPES))
    def forget(self, scope: str) -> None:
        self.tick()
        if self.status[scope] == "gone":
            with pytest.raises(NotFoundError):
                self.memory.sources.forget(scope)
            return
        gone = self.rows_of(scope) if self.status[scope] == "open" else self.sealed.pop(scope)
        self.memory.sources.forget(scope)
        self.status[scope] = "gone"
        self.present[scope] = empty()
        for _, timelines in self.past:
            timelines[scope] = empty()
        for row in gone:
            self.seen.pop(row.id, None)
            if row.id not in self.hidden:
                self.hidden.append(row.id)
        self.check_reads_at_every_time()

    @precondition(lambda self: any(self.status[scope] == "gone" for scope in NOTES))
    @rule(pick=st.sampled_from(NOTES))
    def make_again(self, pick: str) -> None:
        scope = pick if self.status[pick] == "gone" else next(s for s in NOTES if s != pick)
        self.tick()
        self.memory.items.add("an item that makes the source again", source=scope)
        self.status[scope] = "open"

    # -- what must hold --------------------------------------------------------------------------

    @invariant()
    def reads_match_the_model_now_and_at_the_last_steps(self) -> None:
        self.check_reads(None)
        for when, _ in self.past[-2:]:
            self.check_reads(when)
            self.check_reads(when - timedelta(minutes=30))
        # One earlier transaction time, a different one each step (every one of them is read
        # after a lock, an unlock or a forget, and at the end).
        if self.past:
            hours = (self.now - T0) // timedelta(hours=1)
            when, _ = self.past[hours * 7 % len(self.past)]
            self.check_reads(when - timedelta(minutes=30))

    @invariant()
    def the_database_holds_the_rows_of_open_sources_only(self) -> None:
        for scope in SCOPES:
            source_id = source_id_for(scope)
            (count,) = self.peek.execute(
                "SELECT count(*) FROM facts WHERE source_id = ?", (source_id,)
            ).fetchone()
            (sealed,) = self.peek.execute(
                "SELECT count(*) FROM sealed WHERE source_id = ?", (source_id,)
            ).fetchone()
            if self.status[scope] == "open":
                assert count == len(self.rows_of(scope)), scope
                assert sealed == 0, scope
            elif self.status[scope] == "locked":
                assert count == 0, f"{scope} is locked and the database holds its facts"
                assert sealed > 0, scope
            else:
                assert (count, sealed) == (0, 0), f"{scope} is forgotten and left rows"

    @invariant()
    def history_keeps_every_row_and_changes_only_what_a_step_expired(self) -> None:
        rows = {f.id: f for key in KEYS for f in self.memory.facts.history(*key)}
        for row in rows.values():
            scope = self.scope_of(row.source_id)
            assert self.status[scope] == "open", f"a row of {scope} ({self.status[scope]}) is read"
        for row_id, old in self.seen.items():
            if self.status[self.scope_of(old.source_id)] != "open":
                continue
            assert row_id in rows, f"row {row_id} was removed"
            new = rows[row_id]
            if new != old:
                assert old.believed
                assert new == replace(old, expired_at=new.expired_at)
                assert new.expired_at is not None
                assert self.checked < new.expired_at <= self.now, "expired outside the step"
        for row_id, row in rows.items():
            if row_id not in self.seen:
                assert self.checked < row.recorded_at <= self.now, "recorded outside the step"
        # A locked source's rows are out of sight, not out of mind: they must come back.
        self.seen = rows | {
            i: f
            for i, f in self.seen.items()
            if self.status[self.scope_of(f.source_id)] == "locked"
        }
        self.checked = self.now

    # -- reads and the model's answers -------------------------------------------------------------

    def readable(self) -> list[Fact]:
        """Every row the history shows, believed or not, in a fixed order."""
        return sorted(
            (f for key in KEYS for f in self.memory.facts.history(*key)), key=lambda f: f.id
        )

    def held(self) -> int:
        """How many believed rows the sources hold, locked or not."""
        return sum(len(rows) for by_key in self.present.values() for rows in by_key.values())

    def scope_of(self, source_id: str) -> str:
        (scope,) = (s for s in SCOPES if source_id_for(s) == source_id)
        return scope

    def rows_of(self, scope: str) -> list[Fact]:
        source_id = source_id_for(scope)
        return [
            f for key in KEYS for f in self.memory.facts.history(*key) if f.source_id == source_id
        ]

    def known_ats(self) -> Iterator[datetime]:
        yield T0 - timedelta(days=1)
        for when, _ in self.past:
            yield when - timedelta(minutes=30)
            yield when

    def timelines(self, known_at: datetime | None) -> Timelines:
        if known_at is None:
            return self.present
        found: Timelines = {scope: empty() for scope in SCOPES}
        for when, timelines in self.past:
            if when <= known_at:
                found = timelines
        return found

    def expected(self, known_at: datetime | None, valid_at: datetime | None) -> Counter[Said]:
        found: Counter[Said] = Counter()
        for scope, timelines in self.timelines(known_at).items():
            if self.status[scope] != "open":
                continue
            for (subject, predicate), rows in timelines.items():
                for row in rows:
                    if row.holds(valid_at):
                        said = (source_id_for(scope), subject, predicate, row.value)
                        found[(*said, *bounds(row.first, row.stop))] += 1
        return found

    def check_reads(
        self, known_at: datetime | None, probes: tuple[datetime | None, ...] = PROBES
    ) -> None:
        """``recall`` at each valid time of ``probes``, and the whole timeline of each key,
        as known at ``known_at``."""
        for valid_at in probes:
            read = self.memory.facts.recall(as_of=valid_at, known_at=known_at)
            got = Counter(
                (f.source_id, f.subject, f.predicate, f.object, f.valid_from, f.valid_to)
                for f in read
            )
            assert got == self.expected(known_at, valid_at), (valid_at, known_at)
        if known_at is None:
            return
        timelines = self.timelines(known_at)
        for key in KEYS:
            got = Counter(
                (f.source_id, f.object, f.valid_from, f.valid_to)
                for f in self.memory.facts.history(*key, known_at=known_at)
            )
            want = Counter(
                (source_id_for(scope), r.value, *bounds(r.first, r.stop))
                for scope, by_key in timelines.items()
                if self.status[scope] == "open"
                for r in by_key[key]
            )
            assert got == want, (key, known_at)

    def check_reads_at_every_time(self) -> None:
        # The timelines cover every valid time; recall is read at the present and one date.
        for known_at in self.known_ats():
            self.check_reads(known_at, (None, DAYS[1]))


def test_the_model_alone() -> None:
    """The model's own rules, by example, so that a wrong model cannot pass for a right store."""
    first, second, third = DAYS
    rows = after_saying((), "paris", EARLIEST, None)
    assert rows == (Row(EARLIEST, LATEST, "paris"),)
    rows = after_saying(rows, "lyon", second, None)
    assert rows == (Row(EARLIEST, second, "paris"), Row(second, LATEST, "lyon"))
    assert after_saying(rows, "lyon", third, None) == rows
    assert after_saying(rows, "paris", first, second) == rows
    # An open statement stops at the next row's start.
    assert after_saying(rows, "oslo", first, None) == (
        Row(EARLIEST, first, "paris"),
        Row(first, second, "oslo"),
        Row(second, LATEST, "lyon"),
    )
    # A bounded one splits the row it falls in.
    assert after_saying(rows, "oslo", second, third) == (
        Row(EARLIEST, second, "paris"),
        Row(second, third, "oslo"),
        Row(third, LATEST, "lyon"),
    )
    # The same value either side of a gap does not cover it.
    gap = (Row(EARLIEST, first, "paris"), Row(second, LATEST, "paris"))
    assert after_saying(gap, "paris", EARLIEST, LATEST) == (Row(EARLIEST, LATEST, "paris"),)
    # A new value from the present closes the old one there; the past keeps it.
    now = T0 + timedelta(hours=3)
    later = after_saying(rows, "oslo", now, None)
    assert later == (
        Row(EARLIEST, second, "paris"),
        Row(second, now, "lyon"),
        Row(now, LATEST, "oslo"),
    )
    assert [r.value for r in later if r.holds(third)] == ["lyon"]
    assert [r.value for r in later if r.holds(None)] == ["oslo"]


def test_facts_through_statements_corrections_locks_and_forgets(
    store_location: str, locations: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[str] = []

    def new_location() -> str:
        made.append(locations.new(store_location, tmp_path, f"facts-{len(made)}"))
        return made[-1]

    monkeypatch.setattr(crypto, "DEFAULT_KDF", FAST_KDF)
    monkeypatch.setattr(Facts, "new_location", staticmethod(new_location), raising=False)
    # On PostgreSQL each example costs a database: the same steps, fewer examples.
    drawn = POSTGRES_EXAMPLES if locations.is_postgres(store_location) else examples(20)
    try:
        run_state_machine_as_test(
            Facts, settings=settings(max_examples=drawn, stateful_step_count=40, deadline=None)
        )
    finally:
        for location in made:
            locations.drop(location)


# -- transaction time does not go back past a correction ------------------------------------------


def test_a_statement_older_than_a_correction_is_refused(store_location: str) -> None:
    with stratamem.open(store_location, embedder=None) as memory:
        (paris,) = memory.facts.remember("person:ada", "city", "paris", now=T0).recorded
        memory.facts.retract(paris.id, now=T0 + timedelta(hours=10))

        with pytest.raises(ValueError, match="only moves forward"):
            memory.facts.remember("person:ada", "city", "lyon", now=T0 + timedelta(hours=5))

        # Else, as known at hour 7, Ada lived in two cities at once.
        then = memory.facts.recall("person:ada", predicate="city", known_at=T0 + timedelta(hours=7))
        assert [f.object for f in then] == ["paris"]


@pytest.mark.parametrize(
    "hours",
    [
        pytest.param(-1, id="before-the-row-was-recorded"),
        pytest.param(5, id="before-the-timeline-last-changed"),
    ],
)
def test_a_correction_older_than_its_timeline_is_refused(store_location: str, hours: int) -> None:
    with stratamem.open(store_location, embedder=None) as memory:
        early = DAYS[0], DAYS[1]
        (paris,) = memory.facts.remember(
            "person:ada", "city", "paris", valid_from=early[0], valid_to=early[1], now=T0
        ).recorded
        memory.facts.remember(
            "person:ada", "city", "lyon", valid_from=DAYS[2], now=T0 + timedelta(hours=10)
        )
        seen = memory.facts.recall("person:ada", as_of=early[0], known_at=T0 + timedelta(hours=7))
        assert [f.id for f in seen] == [paris.id]

        with pytest.raises(ValueError, match="only moves forward"):
            memory.facts.retract(paris.id, now=T0 + timedelta(hours=hours))

        # What a read of the past returned, it returns again.
        again = memory.facts.recall("person:ada", as_of=early[0], known_at=T0 + timedelta(hours=7))
        assert again == seen
