"""Where a new value stated without a start begins: at the time of its evidence, else at the
time it is stated; the old value is closed there and kept, so a read of the past still
answers with it. A first value, stated without a start, holds as far back as known."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

import stratamem

CAROL = "person:carol diaz"
MARCH = datetime(2024, 3, 1, tzinfo=UTC)
APRIL = datetime(2024, 4, 1, tzinfo=UTC)
MAY = datetime(2024, 5, 1, tzinfo=UTC)


@pytest.fixture
def mem(store_location: str) -> Iterator[stratamem.Memory]:
    with stratamem.open(store_location, embedder=None) as memory:
        yield memory


def spans(mem: stratamem.Memory) -> list[tuple[str, datetime | None, datetime | None, bool]]:
    return [
        (f.object, f.valid_from, f.valid_to, f.believed) for f in mem.facts.history(CAROL, "leads")
    ]


def objects_at(mem: stratamem.Memory, when: datetime | None) -> list[str]:
    return [f.object for f in mem.facts.recall(CAROL, predicate="leads", as_of=when)]


def test_a_new_value_starts_now_and_the_past_keeps_the_old_one(mem: stratamem.Memory) -> None:
    mem.facts.remember(CAROL, "leads", "on-call", now=MARCH)
    changed = mem.facts.remember(CAROL, "leads", "release", now=APRIL)
    assert [(f.object, f.valid_from, f.valid_to) for f in changed.recorded] == [
        ("on-call", None, APRIL),
        ("release", APRIL, None),
    ]
    assert objects_at(mem, datetime(2024, 3, 15, tzinfo=UTC)) == ["on-call"]
    assert objects_at(mem, datetime(2020, 1, 1, tzinfo=UTC)) == ["on-call"]
    assert objects_at(mem, None) == ["release"]
    assert sorted(spans(mem), key=repr) == sorted(
        [
            ("on-call", None, None, False),
            ("on-call", None, APRIL, True),
            ("release", APRIL, None, True),
        ],
        key=repr,
    )
    # The same value again, without a start, changes nothing.
    again = mem.facts.remember(CAROL, "leads", "release", now=MAY)
    assert (again.expired, again.recorded) == ((), ())


def test_a_new_value_starts_at_the_time_of_its_latest_evidence(mem: stratamem.Memory) -> None:
    mem.facts.remember(CAROL, "leads", "on-call", now=MARCH)
    said_early = datetime(2024, 3, 10, 8, 0, tzinfo=UTC)
    said_late = datetime(2024, 3, 20, 17, 45, tzinfo=UTC)
    early = mem.items.add(
        "Carol hands on-call over", time=said_early, source="notes:a"
    ).chunks_added
    late = mem.items.add("Carol now leads the release", time=said_late, source="notes:a").id
    mem.facts.remember(CAROL, "leads", "on-call", source="notes:a", now=MARCH)
    changed = mem.facts.remember(CAROL, "leads", "release", evidence=[*early, late], now=APRIL)
    assert [(f.object, f.valid_from, f.valid_to) for f in changed.recorded] == [
        ("on-call", None, said_late),
        ("release", said_late, None),
    ]
    assert objects_at(mem, datetime(2024, 3, 15, tzinfo=UTC)) == ["on-call", "on-call"]
    assert sorted(objects_at(mem, None)) == ["on-call", "release"]  # facts:asserted's too


def test_a_first_value_holds_as_far_back_as_known(mem: stratamem.Memory) -> None:
    (first,) = mem.facts.remember(CAROL, "leads", "on-call", now=APRIL).recorded
    assert (first.valid_from, first.valid_to) == (None, None)
    assert objects_at(mem, datetime(2020, 1, 1, tzinfo=UTC)) == ["on-call"]


def test_a_value_that_ends_before_the_default_start_keeps_its_open_start(
    mem: stratamem.Memory,
) -> None:
    mem.facts.remember(CAROL, "leads", "on-call", valid_from=MARCH, now=MARCH)
    earlier = mem.facts.remember(CAROL, "leads", "audit", valid_to=MARCH, now=APRIL)
    assert [(f.object, f.valid_from, f.valid_to) for f in earlier.recorded] == [
        ("audit", None, MARCH)
    ]


def test_a_value_of_many_adds_to_the_others_with_no_start(mem: stratamem.Memory) -> None:
    mem.facts.remember(CAROL, "likes", "tea", many=True, now=MARCH)
    added = mem.facts.remember(CAROL, "likes", "coffee", many=True, now=APRIL)
    assert added.expired == ()
    assert [(f.object, f.valid_from) for f in added.recorded] == [("coffee", None)]
