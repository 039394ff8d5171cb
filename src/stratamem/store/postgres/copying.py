"""What ``store/copy.py`` needs of a PostgreSQL store beyond its tables: rows written a batch
per ``COPY`` (so its statement triggers run once a batch) with the columns the store derives
computed again, the schema version, and the identity sequences."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from stratamem.store.postgres import derived
from stratamem.store.postgres.connection import PgConnection
from stratamem.store.postgres.migrations import SCHEMA_VERSION, PostgresSchema


class PgCopyRows:
    conn: PgConnection

    def schema_versions(self) -> tuple[int, int]:
        """(the version the database is at, the one this code writes)."""
        return PostgresSchema(self.conn).version(), SCHEMA_VERSION

    def derived_columns(self, table: str) -> tuple[str, ...]:
        """Columns of ``table`` the store computes from others as it writes a row (see
        ``derived.py``)."""
        return derived.derived_columns(table)

    def with_derived(
        self, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]
    ) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Rows of ``table`` as the store writes them, the derived columns computed now."""
        names, _, kept = derived.with_derived(self, table, columns, rows)
        return names, kept

    def row_writer(
        self, table: str, columns: Sequence[str]
    ) -> Callable[[list[tuple[Any, ...]]], None]:
        """Inserts rows of ``columns`` into ``table``, a batch per ``COPY``. PostgreSQL's text
        cannot hold NUL: U+0001 takes its place, as in every write of the store."""

        def write(rows: list[tuple[Any, ...]]) -> None:
            self.conn.copy_rows(table, columns, rows)

        return write

    def row_key_high_water(self, table: str, column: str) -> int:
        """The last value the column's identity sequence handed out (0 where it keeps none)."""
        found = self.conn.execute(
            "SELECT pg_sequence_last_value(CAST(pg_get_serial_sequence(%s, %s) AS regclass))",
            (table, column),
        ).fetchone()
        return int(found[0] or 0) if found else 0

    def move_row_key(self, table: str, column: str, high: int) -> None:
        """Move the column's identity sequence past the highest key the table holds and
        ``high``: called at the highest key (the next is one above), or not yet called at 1."""
        self.conn.execute(
            f"""SELECT setval(pg_get_serial_sequence(%s, %s), greatest(top, 1), top > 0)
                FROM (SELECT greatest(coalesce(max({column}), 0), %s) AS top FROM {table}) t""",
            (table, column, high),
        )
