"""PostgreSQL's spelling (through psycopg) of what :class:`~stratamem.store.dialect.Dialect`
names."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg

from stratamem.store.dialect import Dialect


class PostgresDialect(Dialect):
    name = "postgresql"
    p = "%s"
    percent = "%%"
    json_rows = "json_array_elements_text(CAST(%s AS json))"
    is_ = "IS NOT DISTINCT FROM"
    is_not = "IS DISTINCT FROM"
    strpos = "strpos"
    hint = ""
    operational_errors = (psycopg.OperationalError,)
    errors = (psycopg.Error,)

    def named(self, name: str) -> str:
        return f"%({name})s"

    def upsert(
        self,
        table: str,
        columns: Sequence[str],
        *,
        key: Sequence[str],
        values: str | None = None,
    ) -> str:
        row = values if values is not None else f"VALUES ({self.marks(len(columns))})"
        rest = [c for c in columns if c not in key]
        action = (
            "DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in rest)
            if rest
            else "DO NOTHING"
        )
        return (
            f"INSERT INTO {table} ({', '.join(columns)}) {row} "
            f"ON CONFLICT ({', '.join(key)}) {action}"
        )

    def group_array(self, expr: str) -> str:
        return f"coalesce(CAST(json_agg({expr}) AS TEXT), '[]')"


POSTGRES = PostgresDialect()
