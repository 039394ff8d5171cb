"""Fuzzy lookup over the entity index: "is alice's canonical id email:… or person:…?"."""

from __future__ import annotations

from collections.abc import Sequence

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

    Grouped by canonical id and ordered by mention count, then most recent mention. A blank
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
    limit = DEFAULT_LIMIT if limit <= 0 else min(limit, MAX_LIMIT)
    return store.search_entities(needle, tuple(kinds), limit)


def neighbours(store: Store, entity_id: str, *, limit: int = 10) -> list[tuple[str, float]]:
    """Entities co-mentioned with ``entity_id``, strongest first, over unlocked sources;
    ``limit`` is taken between 1 and :data:`MAX_NEIGHBOURS`."""
    return store.neighbours(entity_id, min(max(1, limit), MAX_NEIGHBOURS))
