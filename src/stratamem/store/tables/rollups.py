"""Fact scores and rollups in the store (the ``RollupStore`` role).

A rollup is read only when every source it names passes the reader's gate, and
``rollup_sources`` removes its rollup when any of its rows goes (a trigger): forgetting a
source removes them by cascade, locking one deletes its rows in the sealing transaction.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from stratamem.errors import StoreError
from stratamem.store.dialect import Connection, Dialect, Row
from stratamem.store.rollups import ROLLUPS_LIMIT, FactScore, Rollup
from stratamem.store.tables.filters import gate_sql
from stratamem.timeparse import to_ms


class RollupTables:
    """The rollups half of a store (SQLite\'s or PostgreSQL\'s)."""

    conn: Connection
    dialect: Dialect

    if TYPE_CHECKING:

        def visible_ids(self) -> list[str] | None: ...

    def write_fact_scores(self, scores: Sequence[FactScore], now: datetime) -> None:
        d = self.dialect
        stamp = to_ms(now)
        self.conn.executemany(
            d.upsert(
                "fact_scores",
                ("fact_id", "recency", "importance", "relevance", "score", "scored_at"),
                key=("fact_id",),
                values=f"SELECT {d.marks(6)} WHERE EXISTS (SELECT 1 FROM facts WHERE id = {d.p})",
            ),
            [
                (s.fact_id, s.recency, s.importance, s.relevance, s.score, stamp, s.fact_id)
                for s in scores
            ],
        )

    def fact_scores(self, ids: Sequence[str] | None = None) -> dict[str, FactScore]:
        d = self.dialect
        gate, params = gate_sql(self.dialect, self.visible_ids())
        where, args = [gate], list(params)
        if ids is not None:
            where.append(f"fs.fact_id IN (SELECT value FROM {d.json_rows})")
            args.append(json.dumps(list(ids)))
        rows = self.conn.execute(
            f"""SELECT fs.fact_id, fs.recency, fs.importance, fs.relevance, fs.score
                FROM fact_scores fs JOIN facts f ON f.id = fs.fact_id
                JOIN sources s ON s.id = f.source_id
                WHERE {" AND ".join(where)}""",
            args,
        ).fetchall()
        return {
            row[0]: FactScore(row[0], float(row[1]), float(row[2]), float(row[3]), float(row[4]))
            for row in rows
        }

    def rollup_hashes(self) -> dict[tuple[str, str], tuple[str, str]]:
        return {
            (subject, scope): (rollup_id, digest)
            for rollup_id, subject, scope, digest in self.conn.execute(
                "SELECT id, subject, scope, fact_set_hash FROM rollups"
            )
        }

    def write_rollup(self, rollup: Rollup) -> None:
        d = self.dialect
        if not rollup.sources:
            raise StoreError(f"rollup {rollup.id} names no source")
        readable = {
            row[0]
            for part, marks in d.batches(rollup.sources)
            for row in self.conn.execute(
                f"SELECT id FROM sources WHERE locked = 0 AND id IN ({marks})", part
            )
        }
        missing = sorted(set(rollup.sources) - readable)
        if missing:
            raise StoreError(f"rollup {rollup.id}: sources missing or locked: {', '.join(missing)}")
        self.conn.execute(f"DELETE FROM rollups WHERE id = {d.p}", (rollup.id,))
        self.conn.execute(
            f"""INSERT INTO rollups (id, subject, scope, fact_set_hash, built_at, score, body)
               VALUES ({d.marks(7)})""",
            (
                rollup.id,
                rollup.subject,
                rollup.scope,
                rollup.fact_set_hash,
                to_ms(rollup.built_at),
                rollup.score,
                json.dumps(rollup.body, sort_keys=True),
            ),
        )
        self.conn.executemany(
            f"INSERT INTO rollup_sources (rollup_id, source_id) VALUES ({d.marks(2)})",
            [(rollup.id, source) for source in sorted(set(rollup.sources))],
        )

    def drop_rollups(self, ids: Sequence[str]) -> int:
        d = self.dialect
        dropped = 0
        for part, marks in d.batches(ids):
            dropped += self.conn.execute(
                f"DELETE FROM rollups WHERE id IN ({marks})", part
            ).rowcount
        return dropped

    def rollups(self, *, subject: str | None = None, limit: int = ROLLUPS_LIMIT) -> list[Rollup]:
        d = self.dialect
        gate, params = gate_sql(self.dialect, self.visible_ids())
        where, args = [], []
        if subject is not None:
            where.append(f"r.subject = {d.p}")
            args.append(subject)
        # Every source of the rollup readable: none of its rows fails the gate.
        where.append(
            f"""NOT EXISTS (SELECT 1 FROM rollup_sources rs JOIN sources s
                            ON s.id = rs.source_id
                            WHERE rs.rollup_id = r.id AND NOT ({gate}))"""
        )
        args.extend(params)
        rows = self.conn.execute(
            f"""SELECT r.id, r.subject, r.scope, r.fact_set_hash, r.built_at, r.score, r.body,
                       (SELECT {d.group_array("source_id")} FROM
                          (SELECT source_id FROM rollup_sources
                           WHERE rollup_id = r.id ORDER BY source_id)) AS sources
                FROM rollups r WHERE {" AND ".join(where)}
                ORDER BY r.score DESC, r.subject, r.id LIMIT {d.p}""",
            (*args, max(1, limit)),
        ).fetchall()
        return [_rollup(row) for row in rows]


def _rollup(row: Row | tuple[Any, ...]) -> Rollup:
    return Rollup(
        id=row[0],
        subject=row[1],
        scope=row[2],
        fact_set_hash=row[3],
        built_at=datetime.fromtimestamp(row[4] / 1000, tz=UTC),
        score=float(row[5]),
        body=json.loads(row[6]),
        sources=tuple(json.loads(row[7])),
    )
