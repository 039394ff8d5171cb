"""Facts in the store (the ``FactStore`` role): one row per fact, read through the
gate of the source that owns it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from stratamem.store.dialect import Connection, Dialect, Row
from stratamem.store.facts import FACTS_LIMIT, Fact, Origin
from stratamem.store.tables.filters import gate_sql
from stratamem.timeparse import from_ms, to_ms

_COLUMNS = (
    "f.id, f.source_id, f.subject, f.predicate, f.object, f.object_is_entity, f.valid_from, "
    "f.valid_to, f.recorded_at, f.expired_at, f.evidence, f.confidence, f.origin, f.single, "
    "f.reason"
)


# Rows to expire are found by id: ``+`` keeps SQLite from reading them through the source's
# index instead, which visits every fact of the source on each write.
def expire_facts_sql(d: Dialect, marks: str) -> str:
    return f"""UPDATE facts SET expired_at = {d.p}
               WHERE {d.hint}source_id = {d.p} AND expired_at IS NULL AND id IN ({marks})"""


class FactTables:
    """The facts half of a store (SQLite\'s or PostgreSQL\'s)."""

    conn: Connection
    dialect: Dialect

    if TYPE_CHECKING:

        def visible_ids(self) -> list[str] | None: ...

    def fact_rows(self, source_id: str, subject: str, predicate: str) -> list[Fact]:
        d = self.dialect
        rows = self.conn.execute(
            f"""SELECT {_COLUMNS} FROM facts f
                WHERE f.source_id = {d.p} AND f.subject = {d.p} AND f.predicate = {d.p}""",
            (source_id, subject, predicate),
        ).fetchall()
        return [_fact(row) for row in rows]

    def write_facts(
        self, source_id: str, expire: Sequence[str], record: Sequence[Fact], now: datetime
    ) -> None:
        d = self.dialect
        stamp = to_ms(now)
        for part, marks in d.batches(expire):
            self.conn.execute(expire_facts_sql(d, marks), (stamp, source_id, *part))
        self.conn.executemany(
            f"""INSERT INTO facts (id, source_id, subject, predicate, object, object_is_entity,
                   valid_from, valid_to, recorded_at, expired_at, evidence, confidence, origin,
                   single, reason)
               VALUES ({d.marks(15)})""",
            [
                (
                    f.id,
                    source_id,
                    f.subject,
                    f.predicate,
                    f.object,
                    int(f.object_is_entity),
                    to_ms(f.valid_from),
                    to_ms(f.valid_to),
                    to_ms(f.recorded_at),
                    to_ms(f.expired_at),
                    json.dumps(list(f.evidence)),
                    f.confidence,
                    f.origin,
                    int(f.single),
                    f.reason,
                )
                for f in record
            ],
        )

    def facts(
        self,
        *,
        subject: str | None = None,
        predicate: str | None = None,
        ids: Sequence[str] | None = None,
        believed_only: bool = True,
        limit: int = FACTS_LIMIT,
    ) -> list[Fact]:
        d = self.dialect
        gate, params = gate_sql(self.dialect, self.visible_ids())
        where: list[str] = [gate]
        args: list[Any] = list(params)
        if subject is not None:
            where.append(f"f.subject = {d.p}")
            args.append(subject)
        if predicate is not None:
            where.append(f"f.predicate = {d.p}")
            args.append(predicate)
        if ids is not None:
            where.append(f"f.id IN (SELECT value FROM {d.json_rows})")
            args.append(json.dumps(list(ids)))
        if believed_only:
            where.append("f.expired_at IS NULL")
        rows = self.conn.execute(
            f"""SELECT {_COLUMNS} FROM facts f JOIN sources s ON s.id = f.source_id
                WHERE {" AND ".join(where)}
                ORDER BY f.subject, f.predicate, coalesce(f.valid_from, -1) DESC, f.id
                LIMIT {d.p}""",
            (*args, max(1, limit)),
        ).fetchall()
        return [_fact(row) for row in rows]

    def write_fact_vectors(self, model: str, vectors: Sequence[tuple[str, bytes]]) -> None:
        d = self.dialect
        self.conn.executemany(
            d.upsert("fact_vectors", ("fact_id", "model", "vector"), key=("fact_id", "model")),
            [(fact, model, blob) for fact, blob in vectors],
        )

    def fact_vectors(self, model: str, ids: Sequence[str]) -> dict[str, bytes]:
        d = self.dialect
        found: dict[str, bytes] = {}
        for part, marks in d.batches(ids):
            for fact, blob in self.conn.execute(
                f"""SELECT fact_id, vector FROM fact_vectors
                    WHERE model = {d.p} AND fact_id IN ({marks})""",
                (model, *part),
            ):
                found[fact] = bytes(blob)
        return found


def _fact(row: Row) -> Fact:
    return Fact(
        id=row["id"],
        subject=row["subject"],
        predicate=row["predicate"],
        object=row["object"],
        valid_from=from_ms(row["valid_from"]),
        valid_to=from_ms(row["valid_to"]),
        recorded_at=datetime.fromtimestamp(row["recorded_at"] / 1000, tz=UTC),
        expired_at=from_ms(row["expired_at"]),
        evidence=tuple(json.loads(row["evidence"])),
        confidence=float(row["confidence"]),
        origin=cast(Origin, row["origin"]),
        object_is_entity=bool(row["object_is_entity"]),
        source_id=row["source_id"],
        single=bool(row["single"]),
        reason=row["reason"] or "",
    )
