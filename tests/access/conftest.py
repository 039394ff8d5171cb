"""Fixtures of the lock tests. Every test here runs with a cheap key derivation (the default
costs half a second a key) and with no passphrase in the environment or the OS keyring
unless it puts one there."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from locked_store import FAST_KDF, FIXTURES, Db, build_store, copy_db

from stratamem.access import crypto
from stratamem.access.locks import PASSPHRASE_ENV
from stratamem.store.postgres.server import PostgresServer
from suite import BACKENDS


@pytest.fixture(autouse=True)
def _fast_and_no_ambient_passphrase(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(crypto, "DEFAULT_KDF", FAST_KDF)
    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "keyring", None)  # `import keyring` fails


@pytest.fixture(scope="session", params=BACKENDS)
def server(request: pytest.FixtureRequest) -> PostgresServer | None:
    """The backend of the tests of stores built once: None for SQLite, else the session's
    PostgreSQL server."""
    if request.param == "sqlite":
        return None
    found: PostgresServer = request.getfixturevalue("postgres_server")
    return found


@pytest.fixture(scope="session")
def built_store(tmp_path_factory: pytest.TempPathFactory, server: PostgresServer | None) -> str:
    """The store, built once and closed (so, on SQLite, checkpointed: the .db file is all
    of it)."""
    folder = tmp_path_factory.mktemp("built")
    db = str(folder / "mem.db") if server is None else server.new_database()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(crypto, "DEFAULT_KDF", FAST_KDF)
        build_store(db, FIXTURES, folder=folder)
    return db


@pytest.fixture
def store_copy(
    tmp_path: Path, built_store: str, server: PostgresServer | None
) -> Callable[[], str]:
    """A fresh copy of the built store: a file alone in a folder of this test's, or a
    database."""

    def copy() -> str:
        return copy_db(built_store, tmp_path / "home" / "mem.db", server)

    return copy


@pytest.fixture
def open_db() -> Iterator[Callable[[str | Path], Db]]:
    """Connections of their own to a store's database, closed after the test."""
    opened: list[Db] = []

    def connect(db: str | Path) -> Db:
        conn = Db(db)
        opened.append(conn)
        return conn

    yield connect
    for conn in opened:
        conn.close()
