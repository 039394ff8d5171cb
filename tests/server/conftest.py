"""Servers under test: ``serving`` beside this file (a plain module) starts them; this
folder is put on the path for it, as the security suite does for its kit.

``served_location`` is where a module's served store goes, once per backend (a SQLite file,
then a database on the session's PostgreSQL server): the modules build one store each, so
their tests run on both backends with one build per backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from suite import BACKENDS, scratch_database


@pytest.fixture(scope="module", params=BACKENDS)
def served_location(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> str:
    """Where a module's store goes: a SQLite file, then a new PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path_factory.mktemp("served") / "served.db")
    return scratch_database(request)


@pytest.fixture
def another_location(request: pytest.FixtureRequest, served_location: str, tmp_path: Path) -> str:
    """A new, empty store beside the module's, on the same backend."""
    if "://" not in served_location:
        return str(tmp_path / "another.db")
    return scratch_database(request)
