"""Store locations: a path, or a URL whose scheme names the backend, and the SQLite opener.

:func:`stratamem.plugins.open_store` picks the backend by :func:`url_scheme`; a location
without ``scheme://`` is a path to a SQLite file. SQLite URLs are written as SQLAlchemy
writes them: ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db``, and
``sqlite://`` or ``sqlite:///:memory:`` for a database in memory, as is the plain location
``:memory:``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from stratamem.store.base import Store

# A scheme of one letter is a Windows drive (C://data), not a URL.
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]+)://")


def url_scheme(location: str) -> str | None:
    """``postgresql`` for ``postgresql://host/db``, lower-cased; None for a plain path."""
    match = _URL.match(location)
    return match.group(1).lower() if match else None


def shown_location(location: str) -> str:
    """``location`` fit for messages and logs: a ``postgresql://`` URL without its password."""
    if url_scheme(location) in ("postgresql", "postgres"):
        from stratamem.store.postgres.connection import redact

        return redact(location)
    return location


def sqlite_path(location: str) -> str:
    """The file (or ``:memory:``) a path or ``sqlite://`` URL names."""
    if url_scheme(location) is None:
        return location
    scheme, rest = location.split("://", 1)
    if scheme.lower() != "sqlite":
        raise ValueError(f"not a sqlite URL: {location!r}")
    if not rest:
        return ":memory:"
    if not rest.startswith("/"):
        raise ValueError(
            f"a sqlite URL has no host, so its path follows three slashes "
            f"(sqlite:///relative.db, sqlite:////absolute.db), got {location!r}"
        )
    return rest[1:] or ":memory:"


def open_sqlite(location: str) -> Store:
    """The ``sqlite`` backend: :class:`~stratamem.store.sqlite.store.SQLiteStore` on the file a
    path or ``sqlite://`` URL names."""
    from stratamem.store.sqlite.store import SQLiteStore

    return SQLiteStore(sqlite_path(location))


def open_postgres(location: str) -> Store:
    """The ``postgresql`` backend: :class:`~stratamem.store.postgres.store.PostgresStore` on
    the database a ``postgresql://`` (or ``postgres://``) URL names, as libpq reads it."""
    require_driver()
    from stratamem.store.postgres.store import open_postgres as opener

    return cast("Store", opener(location))


def open_per_thread(location: str) -> Store:
    """The ``sqlite`` backend with a connection for every thread that calls it, the in-memory
    indexes shared (:class:`~stratamem.store.sqlite.threads.PerThreadStore`)."""
    from stratamem.store.sqlite.threads import PerThreadStore

    return cast("Store", PerThreadStore(sqlite_path(location)))


def open_postgres_per_thread(location: str) -> Store:
    """The ``postgresql`` backend with a connection for every thread that calls it, the
    in-memory indexes shared
    (:class:`~stratamem.store.postgres.threads.PerThreadPostgresStore`)."""
    require_driver()
    from stratamem.store.postgres.threads import PerThreadPostgresStore

    return cast("Store", PerThreadPostgresStore(location))


def require_driver() -> None:
    """psycopg, the PostgreSQL driver, is installed; else a
    :class:`~stratamem.errors.MissingExtraError` naming the ``postgres`` extra."""
    from stratamem.extras import require

    require("psycopg", "postgres", "a postgresql:// store")
