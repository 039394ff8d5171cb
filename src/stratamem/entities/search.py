"""Fuzzy lookup over the entity index: "is alice's canonical id email:… or person:…?"."""

from __future__ import annotations

from collections.abc import Sequence

from stratamem.store.sqlite.store import SQLiteStore, from_ms
from stratamem.types import EntityMatch

DEFAULT_LIMIT = 5
MAX_LIMIT = 100


def search_entities(
    store: SQLiteStore, query: str, *, kinds: Sequence[str] = (), limit: int = DEFAULT_LIMIT
) -> list[EntityMatch]:
    """Entities whose id or surface contains ``query`` (case-insensitive, LIKE-escaped).

    Grouped by canonical id and ordered by mention count, then most recent mention. A blank
    query matches nothing rather than the whole index.
    """
    needle = query.strip().lower()
    if not needle:
        return []
    limit = DEFAULT_LIMIT if limit <= 0 else min(limit, MAX_LIMIT)
    pattern = "%" + needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    kind_sql = f"AND e.kind IN ({','.join('?' * len(kinds))})" if kinds else ""
    rows = store.conn.execute(
        f"""SELECT e.entity_id, min(e.kind) AS kind, min(e.surface) AS surface,
                   count(*) AS mentions, max(e.ts) AS last_seen
            FROM entity_index e JOIN sources s ON s.id = e.source_id
            WHERE s.locked = 0
              AND (lower(e.entity_id) LIKE ? ESCAPE '\\' OR lower(e.surface) LIKE ? ESCAPE '\\')
              {kind_sql}
            GROUP BY e.entity_id
            ORDER BY mentions DESC, last_seen DESC, e.entity_id
            LIMIT ?""",
        (pattern, pattern, *kinds, limit),
    ).fetchall()
    return [
        EntityMatch(
            canonical_id=row["entity_id"],
            kind=row["kind"],
            surface=row["surface"],
            mention_count=row["mentions"],
            last_seen=from_ms(row["last_seen"]),
        )
        for row in rows
    ]


def neighbours(store: SQLiteStore, entity_id: str, *, limit: int = 10) -> list[tuple[str, float]]:
    """Entities co-mentioned with ``entity_id``, strongest first, over unlocked sources."""
    rows = store.conn.execute(
        """SELECT other, sum(weight) AS w FROM (
               SELECT b AS other, weight, source_id FROM entity_edges WHERE a = ?
               UNION ALL
               SELECT a AS other, weight, source_id FROM entity_edges WHERE b = ?
           ) x JOIN sources s ON s.id = x.source_id
           WHERE s.locked = 0
           GROUP BY other ORDER BY w DESC, other LIMIT ?""",
        (entity_id, entity_id, limit),
    ).fetchall()
    return [(row["other"], float(row["w"])) for row in rows]
