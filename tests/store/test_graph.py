"""The graph role's reads, on both backends."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

import stratamem
from stratamem.store.base import Store
from stratamem.types import Filters

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workspace"


@pytest.fixture(scope="module")
def memory(module_location: str) -> Iterator[stratamem.Memory]:
    """The example workspace: chats, mail and notes, which name people, channels and topics."""
    with stratamem.open(module_location, embedder=None) as memory:
        for part in ("slack-export", "mail/team.mbox", "notes"):
            memory.ingest(EXAMPLES / part)
        yield memory


def weight_sets(store: Store) -> list[dict[str, float]]:
    """Sets of entity weights as expansion makes them: each chunk's entities, weighted by
    how rare they are; several sets sharing entities, one empty, one of an unknown entity."""
    chunks = [c.id for s in store.sources(counts=False) for c in store.iter_chunks(s.id)]
    mentions = store.mentions_of(chunks)
    found = [m for m in mentions.values() if m][:12]
    frequencies = store.entity_frequencies(sorted({e for m in found for e in m}))
    sets = [{e: 1.0 / frequencies[e] for e in m if e in frequencies} for m in found]
    return [*sets, {}, {"topic:nothing-names-this": 1.0}, {e: 0.5 for m in found for e in m}]


@pytest.mark.parametrize(
    "filters",
    [
        Filters(),
        Filters(since=datetime(2024, 1, 1, tzinfo=UTC)),
        Filters(since=datetime(2024, 1, 1, tzinfo=UTC), until=datetime(2030, 1, 1, tzinfo=UTC)),
        Filters(until=datetime(2024, 3, 20, tzinfo=UTC), kinds=()),
    ],
    ids=["no filter", "since", "since and until", "until"],
)
@pytest.mark.parametrize("limit", [1, 3, 50])
def test_nodes_by_entities_many_reads_what_each_set_alone_reads(
    memory: stratamem.Memory, filters: Filters, limit: int
) -> None:
    store = memory.store
    sets = weight_sets(store)
    exclude = [c.id for s in store.sources(counts=False) for c in store.iter_chunks(s.id)][:3]
    for skip in ((), exclude):
        alone = [store.nodes_by_entities(w, filters, limit, exclude=skip) for w in sets]
        together = store.nodes_by_entities_many(sets, filters, limit, exclude=skip)
        assert together == alone
        assert [list(found) for found in together] == [list(found) for found in alone]
    assert any(alone)  # the sets do reach nodes


def test_nodes_by_entities_many_of_no_sets_reads_nothing(memory: stratamem.Memory) -> None:
    since = Filters(since=datetime(2024, 1, 1, tzinfo=UTC))
    assert memory.store.nodes_by_entities_many([], since, 3) == []
    assert memory.store.nodes_by_entities_many([{}, {}], since, 3) == [{}, {}]


def test_mentions_per_source_and_day_add_up_to_each_ids_count(memory: stratamem.Memory) -> None:
    store = memory.store
    chunks = [c for s in store.sources(counts=False) for c in store.iter_chunks(s.id)]
    mentions = store.mentions_of([c.id for c in chunks])
    ids = sorted({e for found in mentions.values() for e in found})[:40]
    rows = store.entity_mention_days(ids)
    assert rows == sorted(rows, key=lambda r: (r[0], r[1], -1 if r[2] is None else r[2]))
    totals: dict[str, int] = {}
    for entity, _, _, count in rows:
        totals[entity] = totals.get(entity, 0) + count
    assert totals == {m.canonical_id: m.mention_count for m in store.entity_stats(ids)}
    # Each day is that of a chunk of that source that mentions the id.
    expected = {
        (e, c.source_id, None if c.time_start is None else int(c.time_start.timestamp() // 86400))
        for c in chunks
        for e in mentions.get(c.id, ())
        if e in ids
    }
    assert {(e, s, d) for e, s, d, _ in rows} <= expected
    assert store.entity_mention_days([]) == []
    assert store.entity_mention_days(["topic:nothing-names-this"]) == []
