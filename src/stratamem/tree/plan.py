"""Which buffered items seal together: the seal rules, as pure functions over buffer items.

Level 0 of a stream (chat, mail, records) is walked in source order. A run of leaves seals
when its tokens reach the input budget, or when it has gone stale: the next leaf comes more
than ``flush_age`` after the run's oldest leaf, or, for the last run, the source's newest leaf
does (or ``force``, an explicit flush). Level 0 of a document source seals per document, since
a document arrives whole; leaves without a document are packed into runs of the budget. Levels
≥ 1 seal every ``fanout`` items, oldest first, and are never forced: a partial group waits for
more.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from stratamem.store.trees import BufferItem


def stream_runs(
    items: Sequence[BufferItem],
    *,
    budget: int,
    flush_age: timedelta,
    newest: datetime | None,
    force: bool = False,
) -> list[list[BufferItem]]:
    """The stream's leaves cut into runs that are due: full ones, stale ones, and the last
    one when it is stale against ``newest`` (the source's newest leaf) or ``force``d."""
    runs: list[list[BufferItem]] = []
    run: list[BufferItem] = []
    tokens = 0
    oldest: datetime | None = None
    for item in items:
        if run and _stale(oldest, item.time_start, flush_age):
            runs.append(run)
            run, tokens, oldest = [], 0, None
        run.append(item)
        tokens += item.tokens
        if item.time_start is not None:
            oldest = item.time_start if oldest is None else min(oldest, item.time_start)
        if tokens >= budget:
            runs.append(run)
            run, tokens, oldest = [], 0, None
    if run and (force or _stale(oldest, newest, flush_age)):
        runs.append(run)
    return runs


def document_runs(items: Sequence[BufferItem], *, budget: int) -> list[list[BufferItem]]:
    """Each document's leaves, cut into runs of about ``budget`` tokens. Leaves without a
    document (records, each whole in one or a few chunks) are packed together in source order
    into runs of about ``budget`` tokens: one summary of a single short record would be about
    as long as the record, and there would be as many of them as records."""
    runs: list[list[BufferItem]] = []
    by_doc: dict[str | None, list[BufferItem]] = {}
    for item in items:
        by_doc.setdefault(item.doc_id, []).append(item)
    for leaves in by_doc.values():
        run: list[BufferItem] = []
        tokens = 0
        for item in leaves:
            run.append(item)
            tokens += item.tokens
            if tokens >= budget:
                runs.append(run)
                run, tokens = [], 0
        if run:
            runs.append(run)
    return runs


def fanout_runs(items: Sequence[BufferItem], *, fanout: int) -> list[list[BufferItem]]:
    """Full groups of ``fanout`` items, oldest first; the remainder waits."""
    full = len(items) - len(items) % fanout
    return [list(items[i : i + fanout]) for i in range(0, full, fanout)]


def _stale(oldest: datetime | None, later: datetime | None, age: timedelta) -> bool:
    return oldest is not None and later is not None and later - oldest > age
