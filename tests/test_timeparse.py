"""Times: what people type, naive and aware values alike (naive is UTC), and the range of
years 1–9999 guarded with ``ValueError`` rather than ``OverflowError`` or ``TypeError``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

import stratamem
from stratamem.api import Memory
from stratamem.timeparse import as_utc, days_before, parse_when
from stratamem.types import Filters

ROOT = Path(__file__).resolve().parents[1]
NOW = datetime(2024, 3, 15, 12, 0, tzinfo=UTC)
PLUS_TWO = timezone(timedelta(hours=2))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-03-12", datetime(2024, 3, 12, tzinfo=UTC)),
        ("2024-03-12T09:30+02:00", datetime(2024, 3, 12, 7, 30, tzinfo=UTC)),
        ("2024-03-12T09:30Z", datetime(2024, 3, 12, 9, 30, tzinfo=UTC)),
        ("24h", NOW - timedelta(hours=24)),
        ("2w", NOW - timedelta(weeks=2)),
        ("0d", NOW),
        ("0001-01-01", datetime(1, 1, 1, tzinfo=UTC)),
    ],
)
def test_parse_when(text: str, expected: datetime) -> None:
    assert parse_when(text, now=NOW) == expected


@pytest.mark.parametrize(
    "text",
    [
        "99999999999d",
        "99999999999w",
        "1" * 5000 + "d",
        "0001-01-01T00:00:00+01:00",
        "9999-12-31T23:59:59-01:00",
        "2024-02-30",
        "yesterday-ish",
    ],
)
def test_parse_when_refuses_with_one_line(text: str) -> None:
    with pytest.raises(ValueError, match=r"^[^\n]{1,200}$"):
        parse_when(text, now=NOW)


def test_a_naive_now_is_utc() -> None:
    assert parse_when("1h", now=datetime(2024, 3, 15, 12)) == NOW - timedelta(hours=1)


def test_as_utc() -> None:
    assert as_utc(datetime(2024, 3, 15, 12)) == NOW
    assert as_utc(datetime(2024, 3, 15, 14, tzinfo=PLUS_TWO)) == NOW
    assert as_utc(NOW).tzinfo is UTC
    with pytest.raises(ValueError, match="outside years 1–9999"):
        as_utc(datetime(1, 1, 1, tzinfo=PLUS_TWO), name="since")
    with pytest.raises(ValueError, match="must be a datetime"):
        as_utc("2024-03-15", name="since")  # type: ignore[arg-type]


@pytest.mark.parametrize("days", [float("nan"), float("inf"), -1, 1e12, True, "7"])
def test_days_before_refuses(days: object) -> None:
    with pytest.raises(ValueError, match="days"):
        days_before(NOW, days)  # type: ignore[arg-type]


def test_days_before() -> None:
    assert days_before(NOW, 1.5) == NOW - timedelta(days=1.5)
    assert days_before(datetime(2024, 3, 15, 12), 0) == NOW


def test_filters_mix_naive_and_aware() -> None:
    filters = Filters(since=datetime(2024, 3, 15, 11), until=NOW)
    assert filters.since == NOW - timedelta(hours=1)
    assert filters.since is not None
    assert filters.since.tzinfo is not None
    assert Filters(since=datetime(2024, 3, 15, 12)) == Filters(since=NOW)
    with pytest.raises(ValueError, match="before since"):
        Filters(since=NOW, until=datetime(2024, 3, 15, 11))


@pytest.fixture(scope="module")
def memory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Memory]:
    path = tmp_path_factory.mktemp("times") / "times.db"
    with stratamem.open(path, embedder=None) as opened:
        opened.ingest(ROOT / "examples" / "workspace" / "slack-export", parallel=False)
        opened.trees.flush()
        yield opened


SINCE_NAIVE, UNTIL_NAIVE = datetime(2024, 1, 1), datetime(2024, 12, 31)
SINCE, UNTIL = SINCE_NAIVE.replace(tzinfo=UTC), UNTIL_NAIVE.replace(tzinfo=UTC)
UNTIL_PLUS_TWO = datetime(2025, 1, 1, 2, tzinfo=PLUS_TWO)  # the same instant as UNTIL + 1 day


def _ids(hits: object) -> list[str]:
    return [h.node_id for h in hits]  # type: ignore[attr-defined]


def test_search_takes_naive_and_aware_times(memory: Memory) -> None:
    aware = memory.search("release", since=SINCE, until=UNTIL, mode="keyword")
    mixed = memory.search("release", since=SINCE_NAIVE, until=UNTIL, mode="keyword")
    naive = memory.search("release", since=SINCE_NAIVE, until=UNTIL_NAIVE, mode="keyword")
    assert aware.hits
    assert _ids(aware.hits) == _ids(mixed.hits) == _ids(naive.hits)


def test_the_primitives_take_naive_and_aware_times(memory: Memory) -> None:
    for since, until in [(SINCE, UNTIL), (SINCE_NAIVE, UNTIL), (SINCE, UNTIL_NAIVE)]:
        assert memory.query_global(since=since, until=until).hits
        assert memory.cover_window(since=since, until=until).hits
        memory.query_topic("topic:redis", since=since, until=until)
    assert _ids(memory.cover_window(since=SINCE_NAIVE, until=UNTIL_PLUS_TWO).hits) == _ids(
        memory.cover_window(since=SINCE, until=UNTIL + timedelta(days=1)).hits
    )
    naive_now = memory.query_source(time_window_days=3650, now=datetime(2025, 1, 1))
    aware_now = memory.query_source(time_window_days=3650, now=datetime(2025, 1, 1, tzinfo=UTC))
    assert _ids(naive_now.hits) == _ids(aware_now.hits)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.query_global(since=UNTIL, until=SINCE_NAIVE),
        lambda m: m.query_global(since=datetime(1, 1, 1, tzinfo=PLUS_TWO), until=UNTIL),
        lambda m: m.cover_window(since=UNTIL_NAIVE, until=SINCE),
        lambda m: m.query_topic("topic:redis", since=UNTIL, until=SINCE_NAIVE),
        lambda m: m.search("x", since=UNTIL, until=SINCE_NAIVE),
        lambda m: m.query_source(time_window_days=1e12),
        lambda m: m.query_source(time_window_days=float("nan")),
        lambda m: m.query_source(time_window_days=-1),
        lambda m: m.query_source(time_window_days=1, now=datetime(1, 1, 1, tzinfo=PLUS_TWO)),
        lambda m: m.search_entities("person:alice " * 5000),
    ],
)
def test_bad_times_and_queries_are_value_errors(memory: Memory, call: object) -> None:
    with pytest.raises(ValueError, match=r"^[^\n]+$"):
        call(memory)  # type: ignore[operator]


def test_huge_limits_are_capped_not_errors(memory: Memory) -> None:
    assert memory.query_source(limit=10**30).hits
    assert memory.query_global(since=SINCE, until=UNTIL, limit=10**30).hits
    assert memory.cover_window(since=SINCE, until=UNTIL, limit=10**30).hits
    memory.query_topic("topic:redis", limit=10**30)
    assert memory.search("release", limit=10**30).hits
    assert len(memory.search_entities("a", limit=10**30)) <= 100
    memory.drill_down("sum_x", max_depth=10**30, limit=10**30)
    memory.related("person:alice", limit=10**30)
