"""Records in the store (the ``RecordStore`` role): one row per (source, key), the
record itself as compressed JSON in ``body``."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from stratamem.store.dialect import Connection, Dialect
from stratamem.store.records import RecordRow, RecordState, StoredRecord, decode_record
from stratamem.store.tables.filters import gate_sql
from stratamem.timeparse import to_ms

_READ = 500


class RecordTables:
    """The records half of a store (SQLite\'s or PostgreSQL\'s)."""

    conn: Connection
    dialect: Dialect

    if TYPE_CHECKING:

        def visible_ids(self) -> list[str] | None: ...

        def _delete_chunks(self, where: str, params: list[Any]) -> int: ...

        def _delete_nodes(self, source_id: str, nodes: list[str]) -> int: ...

    def record_states(self, source_id: str, keys: Sequence[str]) -> dict[str, RecordState]:
        d = self.dialect
        found: dict[str, RecordState] = {}
        for part, marks in d.batches(keys):
            for key, digest, ts, revised in self.conn.execute(
                f"""SELECT key, digest, ts, revised FROM records
                    WHERE source_id = {d.p} AND key IN ({marks})""",
                [source_id, *part],
            ):
                found[key] = RecordState(digest, ts, revised)
        return found

    def put_records(self, source_id: str, records: Iterable[RecordRow]) -> None:
        d = self.dialect
        now = to_ms(datetime.now(UTC))
        self.conn.executemany(
            f"""INSERT INTO records (source_id, key, ts, sort_key, digest, body, revised,
                 added_at, updated_at) VALUES ({d.marks(9)})
               ON CONFLICT (source_id, key) DO UPDATE SET ts = excluded.ts,
                 sort_key = excluded.sort_key, digest = excluded.digest, body = excluded.body,
                 revised = excluded.revised, updated_at = excluded.updated_at""",
            ((source_id, *r, now, now) for r in records),
        )

    def delete_records(self, source_id: str, keys: Sequence[str]) -> int:
        d = self.dialect
        removed = 0
        for part, marks in d.batches(keys):
            removed += self.conn.execute(
                f"DELETE FROM records WHERE source_id = {d.p} AND key IN ({marks})",
                [source_id, *part],
            ).rowcount
        return removed

    def record_keys(self, source_id: str) -> Iterator[str]:
        d = self.dialect
        cursor = self.conn.execute(f"SELECT key FROM records WHERE source_id = {d.p}", (source_id,))
        while rows := cursor.fetchmany(_READ):
            for (key,) in rows:
                yield key

    def record_count(self, source_id: str) -> int:
        d = self.dialect
        row = self.conn.execute(
            f"SELECT count(*) FROM records WHERE source_id = {d.p}", (source_id,)
        ).fetchone()
        return int(row[0])

    def record_timeline(self, source_id: str) -> tuple[list[int], int]:
        d = self.dialect
        times = [
            row[0]
            for row in self.conn.execute(
                f"""SELECT ts FROM records WHERE source_id = {d.p} AND ts IS NOT NULL
                    ORDER BY ts""",
                (source_id,),
            )
        ]
        (timeless,) = self.conn.execute(
            f"SELECT count(*) FROM records WHERE source_id = {d.p} AND ts IS NULL", (source_id,)
        ).fetchone()
        return times, int(timeless)

    def records_between(
        self, source_id: str, start_ms: int | None, end_ms: int | None
    ) -> Iterator[StoredRecord]:
        d = self.dialect
        if start_ms is None or end_ms is None:
            sql = f"""SELECT key, sort_key, digest, body FROM records
                     WHERE source_id = {d.p} AND ts IS NULL ORDER BY sort_key"""
            params: list[Any] = [source_id]
        else:
            sql = f"""SELECT key, sort_key, digest, body FROM records
                     WHERE source_id = {d.p} AND ts BETWEEN {d.p} AND {d.p} ORDER BY ts, sort_key"""
            params = [source_id, start_ms, end_ms]
        cursor = self.conn.execute(sql, params)
        while rows := cursor.fetchmany(_READ):
            for key, sort_key, digest, body in rows:
                yield StoredRecord(key, decode_record(body), digest, sort_key)

    def records_by_key(self, source_id: str, keys: Sequence[str]) -> list[StoredRecord]:
        d = self.dialect
        found: list[tuple[int, int | None, StoredRecord]] = []
        for part, marks in d.batches(keys):
            for key, ts, sort_key, digest, body in self.conn.execute(
                f"""SELECT key, ts, sort_key, digest, body FROM records
                    WHERE source_id = {d.p} AND key IN ({marks})""",
                [source_id, *part],
            ):
                stored = StoredRecord(key, decode_record(body), digest, sort_key)
                found.append((ts is None, ts, stored))
        found.sort(key=lambda item: (item[0], item[1] or 0, item[2].sort_key))
        return [stored for _, _, stored in found]

    def find_records(self, key: str) -> list[tuple[str, StoredRecord]]:
        d = self.dialect
        gate, params = gate_sql(self.dialect, self.visible_ids())
        return [
            (source_id, StoredRecord(key, decode_record(body), digest, sort_key))
            for source_id, sort_key, digest, body in self.conn.execute(
                f"""SELECT r.source_id, r.sort_key, r.digest, r.body FROM records r
                   JOIN sources s ON s.id = r.source_id
                   WHERE r.key = {d.p} AND {gate} ORDER BY r.source_id""",
                (key, *params),
            )
        ]

    def derived_chunks_between(
        self, source_id: str, start_ms: int | None, end_ms: int | None
    ) -> list[str]:
        d = self.dialect
        if start_ms is None or end_ms is None:
            sql = f"""SELECT id FROM chunks WHERE source_id = {d.p} AND record_key IS NOT NULL
                     AND ts_start IS NULL"""
            params: list[Any] = [source_id]
        else:
            sql = f"""SELECT id FROM chunks WHERE source_id = {d.p} AND record_key IS NOT NULL
                     AND ts_start BETWEEN {d.p} AND {d.p}"""
            params = [source_id, start_ms, end_ms]
        return [row[0] for row in self.conn.execute(sql, params)]

    def derived_chunks_of(self, source_id: str, keys: Sequence[str]) -> list[str]:
        d = self.dialect
        found: list[str] = []
        for part, marks in d.batches(keys):
            found.extend(
                row[0]
                for row in self.conn.execute(
                    f"SELECT id FROM chunks WHERE source_id = {d.p} AND record_key IN ({marks})",
                    [source_id, *part],
                )
            )
        return found

    def delete_chunks(self, source_id: str, ids: Sequence[str]) -> int:
        d = self.dialect
        nodes: list[str] = []
        for part, marks in d.batches(ids):
            nodes.extend(
                row[0]
                for row in self.conn.execute(
                    f"SELECT id FROM chunks WHERE source_id = {d.p} AND id IN ({marks})",
                    [source_id, *part],
                )
            )
        return self._delete_nodes(source_id, nodes)

    def renumber_chunks(self, source_id: str) -> int:
        d = self.dialect
        # The records' sort keys are read once, from the index that holds them: looking a
        # record up per chunk would read its whole row each time (SQLite loads an overflowing
        # key-ordered row whole to compare it), which made a long record's chunks quadratic.
        sort_keys: dict[str, str] = dict(
            self.conn.execute(
                f"SELECT key, sort_key FROM records WHERE source_id = {d.p}", (source_id,)
            ).fetchall()
        )
        rows = self.conn.execute(
            f"SELECT id, seq, ts_start, record_key, meta FROM chunks WHERE source_id = {d.p}",
            (source_id,),
        ).fetchall()

        def order(r: Any) -> tuple[Any, ...]:
            key = r[3]
            return (r[2] is None, r[2] or 0, sort_keys.get(key) or "", key or r[0], _part(r[4]))

        rows.sort(key=order)
        moved = [(seq, row[0]) for seq, row in enumerate(rows) if row[1] != seq]
        self.conn.executemany(f"UPDATE chunks SET seq = {d.p} WHERE id = {d.p}", moved)
        return len(moved)

    def retire_replaced_chunks(self, source_id: str) -> int:
        """Remove the source's chunks that are not derived from records (stored before it kept
        records) whose content a derived chunk now holds; returns how many."""
        d = self.dialect
        return self._delete_chunks(
            f"""source_id = {d.p} AND record_key IS NULL AND content_sha256 IN (
                   SELECT content_sha256 FROM chunks
                   WHERE source_id = {d.p} AND record_key IS NOT NULL)""",
            [source_id, source_id],
        )


def _part(meta: str) -> int:
    if not meta or meta == "{}":
        return 0
    value = json.loads(meta).get("part", 0)
    return value if isinstance(value, int) else 0
