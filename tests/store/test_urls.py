"""Store locations, and opening a store by path or URL through the stores registry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stratamem import plugins
from stratamem.errors import RegistryError
from stratamem.plugins import open_store
from stratamem.store.sqlite.store import SQLiteStore
from stratamem.store.urls import sqlite_path, url_scheme


@pytest.mark.parametrize(
    ("location", "path"),
    [
        ("notes.db", "notes.db"),
        ("/data/notes.db", "/data/notes.db"),
        ("C://data/notes.db", "C://data/notes.db"),
        ("odd:name.db", "odd:name.db"),
        (":memory:", ":memory:"),
        ("sqlite://", ":memory:"),
        ("sqlite:///:memory:", ":memory:"),
        ("sqlite:///notes.db", "notes.db"),
        ("sqlite:////data/notes.db", "/data/notes.db"),
        ("SQLite:///notes.db", "notes.db"),
    ],
)
def test_sqlite_locations(location: str, path: str) -> None:
    assert sqlite_path(location) == path


@pytest.mark.parametrize("location", ["sqlite://host/notes.db", "postgresql://h/db"])
def test_not_a_sqlite_location(location: str) -> None:
    with pytest.raises(ValueError, match="sqlite"):
        sqlite_path(location)


def test_url_scheme() -> None:
    assert url_scheme("postgresql+psycopg://u:p@h/db") == "postgresql+psycopg"
    assert url_scheme("Sqlite:///x") == "sqlite"
    assert url_scheme("x.db") is None
    assert url_scheme("C://x.db") is None  # a drive letter


@pytest.mark.parametrize("form", ["path", "str", "url"])
def test_opens_the_sqlite_store(tmp_path: Path, form: str) -> None:
    target = tmp_path / "m.db"
    location: str | Path = {
        "path": target,
        "str": str(target),
        "url": "sqlite:///" + str(target),
    }[form]
    with open_store(location) as store:
        assert isinstance(store, SQLiteStore)
        assert store.path == str(target)
    assert target.is_file()


def test_in_memory() -> None:
    with open_store(":memory:") as store:
        assert isinstance(store, SQLiteStore)
        assert store.chunk_count() == 0


def test_an_unknown_scheme_names_the_known_ones() -> None:
    with pytest.raises(RegistryError) as caught:
        open_store("mysql://user:secret@db.example/memory")
    assert str(caught.value) == (
        "unknown store scheme 'mysql'; known: postgres, postgresql, sqlite"
    )


def test_a_registered_scheme_gets_the_whole_location(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    def open_fake(location: str) -> Any:
        seen.append(location)
        return open_store(":memory:")

    monkeypatch.setattr(plugins, "STORES", plugins.STORES.copy())
    plugins.STORES.register("fake", open_fake)
    with open_store("fake://somewhere/db?x=1") as store:
        assert isinstance(store, SQLiteStore)
    assert seen == ["fake://somewhere/db?x=1"]
