"""``mem.entities``' reads for browsing: the most mentioned entities, and one's mentions per
source and day (merging and splitting are tested with the resolution, in tests/entities)."""

from __future__ import annotations

from datetime import date

import stratamem


def test_the_most_mentioned_entities_come_as_a_search_finds_them(
    shared: stratamem.Memory,
) -> None:
    top = shared.entities.top(limit=10)
    assert len(top) == 10
    counts = [m.mention_count for m in top]
    assert counts == sorted(counts, reverse=True)
    for match in top[:3]:
        found = shared.search_entities(match.canonical_id, limit=100)
        assert match in found
    people = shared.entities.top(kinds=["person"], limit=100)
    assert people
    assert all(
        m.kind == "person" or any(a.startswith("person:") for a in m.aliases) for m in people
    )
    assert len(shared.entities.top(limit=1000)) <= 100


def test_mentions_are_counted_per_source_and_day(shared: stratamem.Memory) -> None:
    match = shared.entities.top(limit=1)[0]
    counts = shared.entities.mentions(match.canonical_id)
    assert counts
    topic = shared.query_topic(match.canonical_id, limit=1000)
    leaves = [h for h in topic.hits if h.node_kind.value == "leaf"]
    assert sum(c.count for c in counts) == len(leaves)
    assert {c.source_id for c in counts} == {h.source_id for h in leaves}
    days = [c.day for c in counts if c.day is not None]
    assert days == sorted(days)
    assert all(date(2024, 3, 1) <= d <= date(2024, 3, 31) for d in days)
    assert {(h.time_start.date() if h.time_start else None) for h in leaves} == {
        c.day for c in counts
    }
    assert shared.entities.mentions("person:nobody at all") == []
