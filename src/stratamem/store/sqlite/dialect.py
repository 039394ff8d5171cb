"""SQLite's spelling of what :class:`~stratamem.store.dialect.Dialect` names."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from stratamem.store.dialect import Dialect


class SqliteDialect(Dialect):
    name = "sqlite"
    p = "?"
    percent = "%"
    json_rows = "json_each(?)"
    is_ = "IS"
    is_not = "IS NOT"
    strpos = "instr"
    hint = "+"
    operational_errors = (sqlite3.OperationalError,)
    errors = (sqlite3.Error,)

    def named(self, name: str) -> str:
        return f":{name}"

    def upsert(
        self,
        table: str,
        columns: Sequence[str],
        *,
        key: Sequence[str],
        values: str | None = None,
    ) -> str:
        # REPLACE deletes the old row and inserts a new one, with a new rowid: what tells the
        # in-process vector index that a vector changed.
        row = values if values is not None else f"VALUES ({self.marks(len(columns))})"
        return f"INSERT OR REPLACE INTO {table} ({', '.join(columns)}) {row}"

    def group_array(self, expr: str) -> str:
        return f"json_group_array({expr})"


SQLITE = SqliteDialect()
