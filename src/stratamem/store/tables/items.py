"""Item versions in the store (the ``ItemVersionStore`` role): one row per (source,
key, version) in ``item_versions``, the record as it was in ``body`` (compressed JSON, as
``records`` keeps it), and the chunk ids each version was derived into in ``item_nodes``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from stratamem.store.dialect import Connection, Dialect
from stratamem.store.items import ItemAction, ItemVersion, item_version
from stratamem.store.tables.filters import gate_sql
from stratamem.timeparse import from_ms, to_ms


class ItemVersionTables:
    """The item versions half of a store (SQLite\'s or PostgreSQL\'s)."""

    conn: Connection
    dialect: Dialect

    if TYPE_CHECKING:

        def visible_ids(self) -> list[str] | None: ...

    def item_versions(
        self, keys: Sequence[str], *, source_id: str | None = None
    ) -> list[ItemVersion]:
        d = self.dialect
        if not keys:
            return []
        gate, params = gate_sql(self.dialect, self.visible_ids())
        where = [gate, f"v.key IN (SELECT value FROM {d.json_rows})"]
        args: list[Any] = [*params, json.dumps(list(keys))]
        if source_id is not None:
            where.append(f"v.source_id = {d.p}")
            args.append(source_id)
        rows = self.conn.execute(
            f"""SELECT v.source_id, v.key, v.version, v.action, v.body, v.recorded_at,
                       v.closed_at
                FROM item_versions v JOIN sources s ON s.id = v.source_id
                WHERE {" AND ".join(where)}
                ORDER BY v.source_id, v.key, v.version""",
            args,
        ).fetchall()
        if not rows:
            return []
        nodes: dict[tuple[str, str, int], list[str]] = {}
        for sid, key, version, node in self.conn.execute(
            f"""SELECT n.source_id, n.key, n.version, n.node_id FROM item_versions v
                JOIN item_nodes n ON n.source_id = v.source_id AND n.key = v.key
                     AND n.version = v.version
                WHERE v.key IN (SELECT value FROM {d.json_rows})
                {f"AND v.source_id = {d.p}" if source_id is not None else ""}
                ORDER BY n.source_id, n.key, n.version, n.seq""",
            [json.dumps(list(keys)), *([source_id] if source_id is not None else [])],
        ):
            nodes.setdefault((sid, key, int(version)), []).append(node)
        return [
            item_version(
                sid,
                key,
                int(version),
                action,
                bytes(body),
                int(recorded),
                None if closed is None else int(closed),
                nodes.get((sid, key, int(version)), ()),
            )
            for sid, key, version, action, body, recorded, closed in rows
        ]

    def item_node_versions(self, node_ids: Sequence[str]) -> dict[str, tuple[str, str, int]]:
        d = self.dialect
        if not node_ids:
            return {}
        gate, params = gate_sql(self.dialect, self.visible_ids(), probe=True)
        rows = self.conn.execute(
            f"""SELECT n.node_id, n.source_id, n.key, n.version, v.recorded_at
                FROM item_nodes n
                JOIN item_versions v ON v.source_id = n.source_id AND v.key = n.key
                     AND v.version = n.version
                JOIN sources s ON s.id = n.source_id
                WHERE n.node_id IN (SELECT value FROM {d.json_rows}) AND {gate}""",
            [json.dumps(list(node_ids)), *params],
        ).fetchall()
        # A chat window holds several items: the one whose version recorded it last names it.
        latest: dict[str, tuple[int, int, str, str]] = {}
        for node, sid, key, version, recorded in rows:
            ranked = (int(recorded), int(version), key, sid)
            if node not in latest or ranked > latest[node]:
                latest[node] = ranked
        return {node: (sid, key, version) for node, (_, version, key, sid) in latest.items()}

    def write_item_version(
        self,
        source_id: str,
        key: str,
        *,
        action: ItemAction,
        body: bytes,
        nodes: Sequence[str],
        at: datetime,
    ) -> int:
        d = self.dialect
        last, opened = self.conn.execute(
            f"""SELECT max(version), max(CASE WHEN closed_at IS NULL THEN recorded_at END)
               FROM item_versions WHERE source_id = {d.p} AND key = {d.p}""",
            (source_id, key),
        ).fetchone()
        stamp = to_ms(at) or 0
        if opened is not None:
            # Transaction time only moves forward, whatever the clock did meanwhile.
            stamp = max(stamp, int(opened))
            self.conn.execute(
                f"""UPDATE item_versions SET closed_at = {d.p}
                   WHERE source_id = {d.p} AND key = {d.p} AND closed_at IS NULL""",
                (stamp, source_id, key),
            )
        version = int(last or 0) + 1
        self.conn.execute(
            f"""INSERT INTO item_versions (source_id, key, version, action, body, recorded_at)
               VALUES ({d.marks(6)})""",
            (source_id, key, version, action, body, stamp),
        )
        self.conn.executemany(
            f"""INSERT INTO item_nodes (node_id, source_id, key, version, seq)
               VALUES ({d.marks(5)}) ON CONFLICT DO NOTHING""",
            [(node, source_id, key, version, seq) for seq, node in enumerate(nodes)],
        )
        return version

    def record_written_at(self, source_id: str, key: str) -> datetime | None:
        d = self.dialect
        row = self.conn.execute(
            f"SELECT updated_at FROM records WHERE source_id = {d.p} AND key = {d.p}",
            (source_id, key),
        ).fetchone()
        return None if row is None else from_ms(int(row[0]))

    def item_chunks(self, source_id: str, key: str, *, within: datetime | None = None) -> list[str]:
        d = self.dialect
        found = [
            row[0]
            for row in self.conn.execute(
                f"""SELECT id FROM chunks WHERE source_id = {d.p} AND record_key = {d.p}
                    ORDER BY seq""",
                (source_id, key),
            )
        ]
        if found or within is None:
            return found
        at = to_ms(within)
        return [
            row[0]
            for row in self.conn.execute(
                f"""SELECT id FROM chunks WHERE source_id = {d.p} AND record_key IS NOT NULL
                   AND ts_start <= {d.p} AND ts_end >= {d.p} ORDER BY seq""",
                (source_id, at, at),
            )
        ]
