"""Entity aliases and recorded merges in the store (the ``AliasStore`` role); the
PostgreSQL store runs the same SQL.

``entity_aliases`` rows are what a source states (see :mod:`stratamem.entities.aliases`) and
are read through the reader's gate, so an alias a hidden or locked source states joins
nothing for that reader. ``entity_merges`` rows are what a person decided; they are read
whole, and :mod:`stratamem.store.resolution` applies each only for a reader that can see both
of its entities.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Hashable, Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from stratamem.store.dialect import Connection, Dialect
from stratamem.store.resolution import MERGE, Resolution, build
from stratamem.store.tables.filters import gate_sql
from stratamem.store.tables.owned import MENTIONS_OF_SOURCE
from stratamem.timeparse import from_ms, to_ms
from stratamem.types import EntityDecision, EntityMatch

T = TypeVar("T")


DECISION_ID_BITS = 31
"""A decision's id is drawn at random from 1 to 2**31 - 1 (PostgreSQL's ``INTEGER``)."""
_DAY_MS = 86_400_000

# The ids source ``{source}`` names (a chunk's mention, an alias, a fact's subject or entity
# object) that no other unlocked source names.
_NAMED_ALONE = f"""
    SELECT entity_id FROM entity_index WHERE {MENTIONS_OF_SOURCE}
    UNION SELECT alias FROM entity_aliases WHERE source_id = {{source}}
    UNION SELECT entity_id FROM entity_aliases WHERE source_id = {{source}}
    UNION SELECT subject FROM facts WHERE source_id = {{source}}
    UNION SELECT object FROM facts WHERE source_id = {{source}} AND object_is_entity = 1
    EXCEPT SELECT e.entity_id FROM entity_index e
        JOIN sources s ON s.id = e.source_id WHERE s.id <> {{source}} AND s.locked = 0
    EXCEPT SELECT a.alias FROM entity_aliases a
        JOIN sources s ON s.id = a.source_id WHERE s.id <> {{source}} AND s.locked = 0
    EXCEPT SELECT a.entity_id FROM entity_aliases a
        JOIN sources s ON s.id = a.source_id WHERE s.id <> {{source}} AND s.locked = 0
    EXCEPT SELECT f.subject FROM facts f
        JOIN sources s ON s.id = f.source_id WHERE s.id <> {{source}} AND s.locked = 0
    EXCEPT SELECT f.object FROM facts f
        JOIN sources s ON s.id = f.source_id
        WHERE s.id <> {{source}} AND s.locked = 0 AND f.object_is_entity = 1"""

DECISIONS_OF_SOURCE = f"entity_a IN ({_NAMED_ALONE}) OR entity_b IN ({_NAMED_ALONE})"
"""The ``entity_merges`` rows that belong to source ``{source}`` (a slot for the dialect's
named parameter ``source``: see :func:`decisions_of_source`): those
naming an id no other unlocked source names. They are sealed with it when it is locked and
put back when it is unlocked, and removed when it is forgotten, so an id only a locked or
forgotten source named does not stay in plain text in a decision."""


def decisions_of_source(d: Dialect) -> str:
    """:data:`DECISIONS_OF_SOURCE` with its parameter ``source`` (bound from a dict)."""
    return DECISIONS_OF_SOURCE.format(source=d.named("source"))


class AliasTables:
    """The aliases half of the store."""

    conn: Connection
    dialect: Dialect

    if TYPE_CHECKING:

        def visible_ids(self) -> list[str] | None: ...

        def _cached_read(self, what: Hashable, read: Callable[[], T]) -> T: ...

    def add_aliases(
        self,
        source_id: str,
        aliases: Iterable[tuple[str, str, str]],
        *,
        replace: bool = False,
    ) -> None:
        """Record ``(alias, entity id, origin)`` statements of a source, in the caller's
        transaction; ``replace`` drops what the source stated before (a document source is
        read whole each time), otherwise they add up as its records do."""
        d = self.dialect
        if replace:
            self.conn.execute(f"DELETE FROM entity_aliases WHERE source_id = {d.p}", (source_id,))
        rows = sorted({(a, e, source_id, o) for a, e, o in aliases if a and e and a != e})
        for part, _ in d.batches(rows):
            self.conn.executemany(
                f"INSERT INTO entity_aliases (alias, entity_id, source_id, origin) "
                f"VALUES ({d.marks(4)}) ON CONFLICT DO NOTHING",
                part,
            )

    def alias_rows(self) -> list[tuple[str, str, str]]:
        """Every ``(alias, entity id, origin)`` the reader's sources state, once each, in
        order; kept until the store changes."""

        def read() -> list[tuple[str, str, str]]:
            gate, params = gate_sql(self.dialect, self.visible_ids())
            rows = self.conn.execute(
                f"""SELECT a.alias, a.entity_id, min(a.origin) FROM entity_aliases a
                    JOIN sources s ON s.id = a.source_id
                    WHERE {gate}
                    GROUP BY a.alias, a.entity_id ORDER BY a.alias, a.entity_id""",
                params,
            ).fetchall()
            return [(row[0], row[1], row[2]) for row in rows]

        return self._cached_read("alias rows", read)

    def entity_resolution(self) -> Resolution:
        """Which ids name one entity for this reader (see :mod:`stratamem.store.resolution`);
        kept until the store changes."""

        def read() -> Resolution:
            decisions = self.entity_decisions()
            ends = [e for d in decisions if d.active and d.action == MERGE for e in d.pair]
            return build(self.alias_rows(), decisions, self.entities_seen(ends))

        return self._cached_read("entity resolution", read)

    def entity_decisions(self) -> list[EntityDecision]:
        """Every merge and split ever recorded, oldest first (undone ones too)."""

        def read() -> list[EntityDecision]:
            rows = self.conn.execute(
                """SELECT id, action, entity_a, entity_b, made_by, made_at, undone_by,
                          undone_at FROM entity_merges ORDER BY made_at, id"""
            ).fetchall()
            return [
                EntityDecision(
                    id=int(row[0]),
                    action=row[1],
                    entity_a=row[2],
                    entity_b=row[3],
                    made_by=row[4],
                    made_at=from_ms(row[5]),
                    undone_by=row[6],
                    undone_at=from_ms(row[7]),
                )
                for row in rows
            ]

        return self._cached_read("entity decisions", read)

    def record_entity_decision(
        self, action: str, entity_a: str, entity_b: str, *, by: str | None, at: datetime
    ) -> int:
        """Record a merge or a split (in the caller's transaction); returns its id, a random
        number (see :data:`DECISION_ID_BITS`), so ids neither count the decisions a reader
        cannot see nor collide between two writers. ``made_at`` is kept after every
        decision recorded before it, so the history's order is the order they were made."""
        d = self.dialect
        (last,) = self.conn.execute("SELECT max(made_at) FROM entity_merges").fetchone()
        made_at = max(to_ms(at) or 0, 0 if last is None else int(last) + 1)
        while True:
            new_id = secrets.randbelow(2**DECISION_ID_BITS - 1) + 1
            done = self.conn.execute(
                f"""INSERT INTO entity_merges (id, action, entity_a, entity_b, made_by, made_at)
                   VALUES ({d.marks(6)}) ON CONFLICT DO NOTHING""",
                (new_id, action, entity_a, entity_b, by, made_at),
            )
            if done.rowcount == 1:
                return new_id

    def undo_entity_decision(self, decision_id: int, *, by: str | None, at: datetime) -> None:
        """Mark a merge or a split undone (it stays in the history)."""
        d = self.dialect
        self.conn.execute(
            f"UPDATE entity_merges SET undone_by = {d.p}, undone_at = {d.p} "
            f"WHERE id = {d.p} AND undone_at IS NULL",
            (by, to_ms(at), decision_id),
        )

    def entities_seen(self, entity_ids: Sequence[str]) -> set[str]:
        """Which of these ids the reader can see named anywhere: mentioned by a chunk, stated
        as an alias, or the subject or entity object of a fact, in a source it may read."""
        d = self.dialect
        if not entity_ids:
            return set()
        gate, params = gate_sql(self.dialect, self.visible_ids(), probe=True)
        found: set[str] = set()
        for part, _ in d.batches(sorted(set(entity_ids))):
            marks = d.marks(len(part))
            for sql, count in (
                (
                    f"""SELECT DISTINCT e.entity_id FROM entity_index e
                        JOIN sources s ON s.id = e.source_id
                        WHERE e.entity_id IN ({marks}) AND {gate}""",
                    1,
                ),
                (
                    f"""SELECT DISTINCT a.alias FROM entity_aliases a
                        JOIN sources s ON s.id = a.source_id
                        WHERE a.alias IN ({marks}) AND {gate}
                        UNION SELECT DISTINCT a.entity_id FROM entity_aliases a
                        JOIN sources s ON s.id = a.source_id
                        WHERE a.entity_id IN ({marks}) AND {gate}""",
                    2,
                ),
                (
                    f"""SELECT DISTINCT f.subject FROM facts f
                        JOIN sources s ON s.id = f.source_id
                        WHERE f.subject IN ({marks}) AND {gate}
                        UNION SELECT DISTINCT f.object FROM facts f
                        JOIN sources s ON s.id = f.source_id
                        WHERE f.object_is_entity = 1 AND f.object IN ({marks}) AND {gate}""",
                    2,
                ),
            ):
                found.update(row[0] for row in self.conn.execute(sql, [*part, *params] * count))
        return found

    def entity_stats(self, entity_ids: Sequence[str]) -> list[EntityMatch]:
        """The mention count, kind, surface and last mention the reader may see of each of
        these ids that some chunk mentions (others are left out)."""
        d = self.dialect
        if not entity_ids:
            return []
        gate, params = gate_sql(self.dialect, self.visible_ids(), probe=True)
        out: list[EntityMatch] = []
        for part, _ in d.batches(sorted(set(entity_ids))):
            marks = d.marks(len(part))
            rows = self.conn.execute(
                f"""SELECT e.entity_id, min(e.kind), min(e.surface), count(*), max(e.ts)
                    FROM entity_index e JOIN sources s ON s.id = e.source_id
                    WHERE e.entity_id IN ({marks}) AND {gate}
                    GROUP BY e.entity_id""",
                [*part, *params],
            ).fetchall()
            out += [
                EntityMatch(
                    canonical_id=row[0],
                    kind=row[1],
                    surface=row[2],
                    mention_count=int(row[3]),
                    last_seen=from_ms(row[4]),
                )
                for row in rows
            ]
        return out

    def entity_mention_days(
        self, entity_ids: Sequence[str]
    ) -> list[tuple[str, str, int | None, int]]:
        """How many nodes the reader may see mention each of these ids, per source and per
        UTC day: (entity id, source id, day as days since 1970-01-01 or None for a mention
        without a time, count), in that order."""
        d = self.dialect
        if not entity_ids:
            return []
        gate, params = gate_sql(self.dialect, self.visible_ids(), probe=True)
        out: list[tuple[str, str, int | None, int]] = []
        for part, _ in d.batches(sorted(set(entity_ids))):
            marks = d.marks(len(part))
            rows = self.conn.execute(
                f"""SELECT e.entity_id, e.source_id, e.ts / {_DAY_MS} AS day, count(*)
                    FROM entity_index e JOIN sources s ON s.id = e.source_id
                    WHERE e.entity_id IN ({marks}) AND {gate}
                    GROUP BY e.entity_id, e.source_id, e.ts / {_DAY_MS}""",
                [*part, *params],
            ).fetchall()
            out += [
                (row[0], row[1], None if row[2] is None else int(row[2]), int(row[3]))
                for row in rows
            ]
        return sorted(out, key=lambda r: (r[0], r[1], -1 if r[2] is None else r[2]))

    def search_named_entities(self, needle: str, limit: int) -> list[str]:
        """Ids containing ``needle`` (lowercased) that only an alias or a fact names: alias
        ids and entity ids the reader's sources state, and the subjects and entity objects
        of its facts, most recently recorded first."""
        d = self.dialect
        gate, params = gate_sql(self.dialect, self.visible_ids())
        rows = self.conn.execute(
            f"""SELECT id FROM (
                    SELECT a.alias AS id, 0 AS at FROM entity_aliases a
                    JOIN sources s ON s.id = a.source_id
                    WHERE {gate} AND {d.strpos}(lower(a.alias), {d.p}) > 0
                    UNION ALL
                    SELECT a.entity_id AS id, 0 AS at FROM entity_aliases a
                    JOIN sources s ON s.id = a.source_id
                    WHERE {gate} AND {d.strpos}(lower(a.entity_id), {d.p}) > 0
                    UNION ALL
                    SELECT f.subject AS id, f.recorded_at AS at FROM facts f
                    JOIN sources s ON s.id = f.source_id
                    WHERE {gate} AND f.expired_at IS NULL
                      AND {d.strpos}(lower(f.subject), {d.p}) > 0
                    UNION ALL
                    SELECT f.object AS id, f.recorded_at AS at FROM facts f
                    JOIN sources s ON s.id = f.source_id
                    WHERE {gate} AND f.expired_at IS NULL AND f.object_is_entity = 1
                      AND {d.strpos}(lower(f.object), {d.p}) > 0
                ) x GROUP BY id ORDER BY max(at) DESC, id LIMIT {d.p}""",
            (*params, needle, *params, needle, *params, needle, *params, needle, limit),
        ).fetchall()
        return [row[0] for row in rows]

    def fact_mentions(self, entity_ids: Sequence[str]) -> dict[str, tuple[int, datetime | None]]:
        """For each of these ids, how many current facts the reader may see name it (as
        subject or entity object) and the latest time one holds from; absent ones left out."""
        d = self.dialect
        if not entity_ids:
            return {}
        gate, params = gate_sql(self.dialect, self.visible_ids(), probe=True)
        out: dict[str, tuple[int, datetime | None]] = {}
        for part, _ in d.batches(sorted(set(entity_ids))):
            marks = d.marks(len(part))
            rows = self.conn.execute(
                f"""SELECT id, count(*), max(at) FROM (
                        SELECT f.subject AS id, f.valid_from AS at FROM facts f
                        JOIN sources s ON s.id = f.source_id
                        WHERE f.subject IN ({marks}) AND f.expired_at IS NULL AND {gate}
                        UNION ALL
                        SELECT f.object AS id, f.valid_from AS at FROM facts f
                        JOIN sources s ON s.id = f.source_id
                        WHERE f.object IN ({marks}) AND f.object_is_entity = 1
                          AND f.expired_at IS NULL AND {gate}
                    ) x GROUP BY id""",
                [*part, *params, *part, *params],
            ).fetchall()
            out.update({row[0]: (int(row[1]), from_ms(row[2])) for row in rows})
        return out
