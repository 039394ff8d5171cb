"""Fuzzy lookup over the entity index: "is alice's canonical id email:… or person:…?"."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from stratamem.store.base import Store
from stratamem.types import EntityMatch

DEFAULT_LIMIT = 5
MAX_LIMIT = 100
MAX_QUERY_CHARS = 1000
MAX_NEIGHBOURS = 1000


def search_entities(
    store: Store, query: str, *, kinds: Sequence[str] = (), limit: int = DEFAULT_LIMIT
) -> list[EntityMatch]:
    """Entities whose id or surface contains ``query``, case-insensitively.

    Each id found (in the entity index, among the aliases the reader's sources state, or as
    the subject or entity object of a current fact) stands for its entity (see
    :mod:`stratamem.store.resolution`): one match per canonical id, counting the mentions
    of every id of it (a fact naming it counts as a mention) and listing the others as
    ``aliases``; ``kinds`` keeps an entity one of whose ids is of such a kind.

    Ordered by mention count, then most recent mention, then id. A blank
    query matches nothing rather than the whole index; a query longer than
    :data:`MAX_QUERY_CHARS` is a ``ValueError``. ``limit`` 0 means the default (5) and is
    clamped to 100.
    """
    needle = query.strip().lower()
    if not needle:
        return []
    if len(needle) > MAX_QUERY_CHARS:
        raise ValueError(
            f"an entity query is at most {MAX_QUERY_CHARS:,} characters; this one has "
            f"{len(needle):,}"
        )
    return _matching(store, needle, kinds, limit)


def top_entities(
    store: Store, *, kinds: Sequence[str] = (), limit: int = DEFAULT_LIMIT
) -> list[EntityMatch]:
    """The most mentioned entities the reader may see, each as :func:`search_entities`
    gives it (one per canonical id, its mentions counted over every id of it), in the same
    order. ``limit`` as there."""
    return _matching(store, "", kinds, limit)


def _matching(store: Store, needle: str, kinds: Sequence[str], limit: int) -> list[EntityMatch]:
    """The entities one of whose ids or surfaces contains ``needle`` (every one for "")."""
    limit = DEFAULT_LIMIT if limit <= 0 else min(limit, MAX_LIMIT)
    resolution = store.entity_resolution()
    pool = max(limit * _POOL_FACTOR, _MIN_POOL)
    found = [m.canonical_id for m in store.search_entities(needle, tuple(kinds), pool)]
    found += store.search_named_entities(needle, pool)
    found += resolution.matching(needle)
    groups: dict[str, tuple[str, ...]] = {}
    for entity in found:
        canonical = resolution.canonical(entity)
        groups.setdefault(canonical, resolution.members(canonical))
    every = sorted({m for members in groups.values() for m in members})
    stats = {m.canonical_id: m for m in store.entity_stats(every)}
    facts = store.fact_mentions(every)
    wanted = set(kinds)
    out: list[EntityMatch] = []
    for canonical, members in groups.items():
        if wanted and not any(_kind(m, stats) in wanted for m in members):
            continue
        counted = [stats[m] for m in members if m in stats]
        mentions = sum(m.mention_count for m in counted) + sum(
            facts[m][0] for m in members if m in facts
        )
        if not mentions:
            continue
        times = [m.last_seen for m in counted if m.last_seen is not None]
        times += [t for m in members if m in facts and (t := facts[m][1]) is not None]
        own = stats.get(canonical)
        out.append(
            EntityMatch(
                canonical_id=canonical,
                kind=_kind(canonical, stats),
                surface=own.surface if own is not None else _surface(canonical),
                mention_count=mentions,
                last_seen=max(times) if times else None,
                aliases=members[1:],
            )
        )
    out.sort(key=lambda m: (-m.mention_count, -_stamp(m.last_seen), m.canonical_id))
    return out[:limit]


# Candidate ids read per result asked for (at least _MIN_POOL): several ids may make one entity.
_POOL_FACTOR = 4
_MIN_POOL = 50


def _kind(entity_id: str, stats: dict[str, EntityMatch]) -> str:
    found = stats.get(entity_id)
    return found.kind if found is not None else entity_id.partition(":")[0]


def _surface(entity_id: str) -> str:
    return entity_id.partition(":")[2] or entity_id


def _stamp(when: datetime | None) -> float:
    return when.timestamp() if when is not None else float("-inf")


@dataclass(frozen=True, slots=True)
class MentionCount:
    """How many nodes of one source mention an entity on one UTC day (``day`` None: the
    mentions that have no time)."""

    source_id: str
    day: date | None
    count: int


def mention_counts(store: Store, entity_id: str) -> list[MentionCount]:
    """The mentions of ``entity_id``'s entity (every id of it: see
    :mod:`stratamem.store.resolution`) the reader may see, per source and day, oldest day
    first (those without a time last), then by source."""
    members = store.entity_resolution().members(entity_id)
    counts: dict[tuple[str, int | None], int] = {}
    for _, source, day, count in store.entity_mention_days(members):
        counts[(source, day)] = counts.get((source, day), 0) + count
    ordered = sorted(counts.items(), key=lambda kv: (kv[0][1] is None, kv[0][1] or 0, kv[0][0]))
    return [
        MentionCount(source, None if day is None else _EPOCH + timedelta(days=day), count)
        for (source, day), count in ordered
    ]


_EPOCH = date(1970, 1, 1)


def neighbours(store: Store, entity_id: str, *, limit: int = 10) -> list[tuple[str, float]]:
    """Entities co-mentioned with ``entity_id`` or any id of its entity (see
    :mod:`stratamem.store.resolution`), strongest first, each named by its canonical id,
    over unlocked sources; ``limit`` is taken between 1 and :data:`MAX_NEIGHBOURS`."""
    limit = min(max(1, limit), MAX_NEIGHBOURS)
    resolution = store.entity_resolution()
    members = resolution.members(entity_id)
    if len(members) == 1 and not resolution.canonical_of:
        return store.neighbours(entity_id, limit)
    weights: dict[str, float] = {}
    for member in members:
        for other, weight in store.neighbours(member, limit + len(members)):
            canonical = resolution.canonical(other)
            if canonical not in members:
                weights[canonical] = weights.get(canonical, 0.0) + weight
    ranked = sorted(weights.items(), key=lambda item: (-item[1], item[0]))
    return ranked[:limit]
