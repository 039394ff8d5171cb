"""The seal rules, on buffer items made by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from stratamem.store.trees import BufferItem
from stratamem.tree import plan

EPOCH = datetime(2024, 3, 1, tzinfo=UTC)
DAY = timedelta(days=1)


def item(n: int, *, at: timedelta | None, tokens: int = 1, doc: str | None = None) -> BufferItem:
    start = None if at is None else EPOCH + at
    return BufferItem(id=f"c{n}", tokens=tokens, time_start=start, time_end=start, doc_id=doc)


def ids(runs: list[list[BufferItem]]) -> list[list[str]]:
    return [[i.id for i in run] for run in runs]


def test_a_stream_seals_on_budget_and_on_age() -> None:
    items = [item(0, at=0 * DAY, tokens=3), item(1, at=DAY / 2, tokens=3), item(2, at=3 * DAY)]
    runs = plan.stream_runs(items, budget=6, flush_age=DAY, newest=EPOCH + 3 * DAY)
    assert ids(runs) == [["c0", "c1"]]  # the budget is met; c2 is young and waits
    runs = plan.stream_runs(items, budget=100, flush_age=DAY, newest=EPOCH + 3 * DAY)
    assert ids(runs) == [["c0", "c1"]]  # c2 came more than a day after c0: the run went stale
    runs = plan.stream_runs(items, budget=100, flush_age=DAY, newest=EPOCH + 5 * DAY)
    assert ids(runs) == [["c0", "c1"], ["c2"]]  # the newest leaf makes the last run stale


def test_age_is_strictly_more_than_the_flush_age() -> None:
    items = [item(0, at=0 * DAY), item(1, at=DAY)]
    assert plan.stream_runs(items, budget=100, flush_age=DAY, newest=EPOCH + DAY) == []


def test_a_forced_flush_seals_the_tail_and_unknown_times_never_go_stale() -> None:
    items = [item(0, at=None), item(1, at=None)]
    assert plan.stream_runs(items, budget=100, flush_age=DAY, newest=None) == []
    forced = plan.stream_runs(items, budget=100, flush_age=DAY, newest=None, force=True)
    assert ids(forced) == [["c0", "c1"]]


def test_documents_seal_whole_and_upper_levels_in_full_groups() -> None:
    items = [item(0, at=None, doc="a"), item(1, at=None, doc="b"), item(2, at=None, doc="a")]
    assert ids(plan.document_runs(items, budget=100)) == [["c0", "c2"], ["c1"]]
    assert ids(plan.fanout_runs(items, fanout=2)) == [["c0", "c1"]]


def test_leaves_of_no_document_are_packed_into_runs_of_the_budget() -> None:
    items = [
        item(0, at=None, tokens=40),
        item(1, at=None, tokens=40, doc="a"),
        item(2, at=None, tokens=40),
        item(3, at=None, tokens=40),
        item(4, at=None, tokens=40),
    ]
    # c0, c2, c3 reach 100 tokens together; c4 seals alone, since nothing more will join it
    # until the next ingest; document a seals whole, apart.
    assert ids(plan.document_runs(items, budget=100)) == [["c0", "c2", "c3"], ["c4"], ["c1"]]
