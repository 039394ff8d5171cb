"""What the two SQL engines spell differently, for the table classes that write their SQL once.

The tables (:mod:`stratamem.store.tables`) build each statement from ``self.dialect`` where the
engines differ, and from plain SQL everywhere else: SQLite (3.35 or later) and PostgreSQL
share ``ON CONFLICT … DO NOTHING`` / ``DO UPDATE``, ``RETURNING``, ``excluded.col`` and the rest.
Nothing rewrites a statement after it is built.

==========================  =========================  ==========================================
what                        SQLite                     PostgreSQL
==========================  =========================  ==========================================
:attr:`~Dialect.p`          ``?``                      ``%s`` (psycopg's; a literal ``%`` is
                                                       :attr:`~Dialect.percent`, ``%%``)
:meth:`~Dialect.named`      ``:name``                  ``%(name)s``
:attr:`~Dialect.json_rows`  ``json_each(?)``           ``json_array_elements_text(CAST(%s AS
                                                       json))``: one row per item, as ``value``
:attr:`~Dialect.is_`        ``IS``                     ``IS NOT DISTINCT FROM`` (null-safe ``=``)
:attr:`~Dialect.is_not`     ``IS NOT``                 ``IS DISTINCT FROM``
:attr:`~Dialect.strpos`     ``instr``                  ``strpos`` (``(text, part)``, 1-based)
:meth:`~Dialect.group_ar…` ``json_group_array(x)``    ``coalesce(CAST(json_agg(x) AS TEXT),
                                                       '[]')`` (:meth:`~Dialect.group_array`)
:attr:`~Dialect.hint`       ``+`` (keeps an index      nothing
                            from driving a read)
:meth:`~Dialect.upsert`     ``INSERT OR REPLACE``      ``ON CONFLICT (key) DO UPDATE SET …``
                            (a new rowid)              (the row keeps its key)
==========================  =========================  ==========================================

A dialect also names its driver's errors (:attr:`~Dialect.errors`, and the
:attr:`~Dialect.operational_errors` a scrub retries later), and :class:`Connection` is what the
tables use of either backend's connection. The concrete dialects are
:class:`~stratamem.store.sqlite.dialect.SqliteDialect` and
:class:`~stratamem.store.postgres.dialect.PostgresDialect`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, ClassVar, Protocol, TypeVar

T = TypeVar("T")
# Ids bound in one ``IN (…)`` list at most: under SQLite's limit on bound parameters.
BATCH = 500


class Row(Protocol):
    """A row read by position or by column name (``sqlite3.Row``, or the PostgreSQL
    connection's ``Row``)."""

    def __getitem__(self, key: Any, /) -> Any: ...

    def __len__(self) -> int: ...


class Cursor(Protocol):
    """What the tables read of a statement run."""

    @property
    def rowcount(self) -> int: ...

    @property
    def description(self) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def fetchmany(self, size: int = ..., /) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """What the tables use of a connection: SQLite's, or the PostgreSQL connection."""

    @property
    def in_transaction(self) -> bool: ...

    @property
    def total_changes(self) -> int: ...

    def execute(self, sql: str, parameters: Any = (), /) -> Cursor: ...

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> Cursor: ...


class Dialect:
    """The pieces of SQL that differ between the engines; everything else is written once."""

    name: ClassVar[str]
    # One positional parameter.
    p: ClassVar[str]
    # A literal ``%`` in a statement.
    percent: ClassVar[str]
    # A table of the items of one parameter holding a JSON array (text), in a column ``value``.
    json_rows: ClassVar[str]
    # Null-safe comparison operators.
    is_: ClassVar[str]
    is_not: ClassVar[str]
    # The function giving the 1-based place of ``part`` in ``text`` (0 where absent).
    strpos: ClassVar[str]
    # Put before a column so that no index on it drives the read (SQLite's planner hint).
    hint: ClassVar[str]
    # What the driver raises where the database cannot do something now (a file that is
    # read-only, locked by another process, a server gone): a scrub that meets one is retried.
    operational_errors: ClassVar[tuple[type[Exception], ...]]
    # Every error the driver raises.
    errors: ClassVar[tuple[type[Exception], ...]]

    def marks(self, n: int) -> str:
        """``n`` positional parameters, comma-separated."""
        return ", ".join([self.p] * n)

    def named(self, name: str) -> str:
        """The parameter ``name``, bound from a dict."""
        raise NotImplementedError

    def group_array(self, expr: str) -> str:
        """The values of ``expr`` over a group, as a JSON array's text (``'[]'`` for none)."""
        raise NotImplementedError

    def upsert(
        self,
        table: str,
        columns: Sequence[str],
        *,
        key: Sequence[str],
        values: str | None = None,
    ) -> str:
        """Insert a row of ``columns`` into ``table`` (``values``: the row's ``VALUES (…)`` or
        ``SELECT …``; by default one parameter per column), or replace the row that has the
        same ``key`` (the table's primary key)."""
        raise NotImplementedError

    def batches(self, values: Sequence[T]) -> Iterator[tuple[list[T], str]]:
        """``values`` in slices of :data:`BATCH`, each with its list of placeholders, so an
        ``IN (…)`` query never passes SQLite's limit on bound parameters."""
        for start in range(0, len(values), BATCH):
            part = list(values[start : start + BATCH])
            yield part, self.marks(len(part))
