"""Fixtures of the lock tests. Every test here runs with a cheap key derivation (the default
costs half a second a key) and with no passphrase in the environment or the OS keyring
unless it puts one there."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from stratamem.access import crypto
from stratamem.access.locks import PASSPHRASE_ENV

# Helpers shared with the child processes of the crash test live beside this file.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from locked_store import FAST_KDF, FIXTURES, build_store


@pytest.fixture(autouse=True)
def _fast_and_no_ambient_passphrase(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(crypto, "DEFAULT_KDF", FAST_KDF)
    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "keyring", None)  # `import keyring` fails


@pytest.fixture(scope="session")
def built_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The store, built once and closed (so checkpointed: the .db file is all of it)."""
    db = tmp_path_factory.mktemp("built") / "mem.db"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(crypto, "DEFAULT_KDF", FAST_KDF)
        build_store(db, FIXTURES)
    return db


@pytest.fixture
def store_copy(tmp_path: Path, built_store: Path) -> Callable[[], Path]:
    """A fresh copy of the built store, alone in a folder of this test's."""

    def copy() -> Path:
        target = tmp_path / "home" / "mem.db"
        target.parent.mkdir(exist_ok=True)
        target.write_bytes(built_store.read_bytes())
        return target

    return copy


@pytest.fixture
def open_db() -> Iterator[Callable[[Path], sqlite3.Connection]]:
    """Plain SQLite connections to a store file, closed after the test."""
    opened: list[sqlite3.Connection] = []

    def connect(db: Path) -> sqlite3.Connection:
        conn = sqlite3.connect(db)
        opened.append(conn)
        return conn

    yield connect
    for conn in opened:
        conn.close()
