"""What ``store/copy.py`` needs of a SQLite store beyond its tables: rows written as they
are (and the chunks indexed in FTS5), the schema version, and the row key counters
(``AUTOINCREMENT``'s ``sqlite_sequence``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from stratamem.store.sqlite.migrations import SCHEMA_VERSION, SqliteSchema
from stratamem.store.sqlite.written import chunks_written


class SqliteCopyRows:
    conn: sqlite3.Connection

    def schema_versions(self) -> tuple[int, int]:
        """(the version the file is at, the one this code writes)."""
        return SqliteSchema(self.conn).version(), SCHEMA_VERSION

    def derived_columns(self, table: str) -> tuple[str, ...]:
        """Columns of ``table`` the store computes from others as it writes a row: none (the
        FTS5 index and the sources' counts are kept beside the rows)."""
        return ()

    def with_derived(
        self, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Rows of ``table`` as the store writes them: as they are."""
        return list(columns), [tuple(r) for r in rows]

    def row_writer(
        self, table: str, columns: Sequence[str]
    ) -> Callable[[list[tuple[Any, ...]]], None]:
        """Inserts rows of ``columns`` into ``table``, one prepared statement each (new chunks
        are then indexed in FTS5 and counted, as every write of chunks is)."""
        sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"

        def write(rows: list[tuple[Any, ...]]) -> None:
            self.conn.executemany(sql, rows)
            if table == "chunks":  # indexed in FTS5 by the statement that writes them
                at = list(columns).index("rowid")
                chunks_written(
                    self.conn,
                    "rowid IN (SELECT value FROM json_each(?))",
                    (json.dumps([row[at] for row in rows]),),
                )

        return write

    def row_key_high_water(self, table: str, column: str) -> int:
        """The highest key the table's ``AUTOINCREMENT`` counter has handed out (0 where it
        keeps none)."""
        found = self.conn.execute(
            "SELECT seq FROM sqlite_sequence WHERE name = ?", (table,)
        ).fetchone()
        return int(found[0] or 0) if found else 0

    def move_row_key(self, table: str, column: str, high: int) -> None:
        """Keep the table's counter at ``high`` at least, so that keys handed out once (a
        locked source's sealed rows hold some) are not handed out again. Explicit keys move
        it themselves."""
        autoincrement = self.conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ? "
            "AND sql LIKE '%AUTOINCREMENT%'",
            (table,),
        ).fetchone()
        if autoincrement is None or not high:
            return
        row = self.conn.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (table,))
        found = row.fetchone()
        if found is None:
            self.conn.execute(
                "INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (table, high)
            )
        elif int(found[0]) < high:
            self.conn.execute("UPDATE sqlite_sequence SET seq = ? WHERE name = ?", (high, table))
