"""Fixtures of the retrieval tests: stores on either backend, and where their index files go.

FTS5's own ranking, which the keyword tests compare with, is in ``fts5_reference.py`` beside
this file.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from stratamem.store.postgres.server import PostgresServer

sys.path.insert(0, str(Path(__file__).resolve().parent))

BACKENDS = os.environ.get("STRATAMEM_TEST_BACKENDS", "sqlite,postgresql").split(",")


@pytest.fixture(autouse=True, scope="module")
def _index_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A store on a server keeps its index files in a folder of the test run, not in the
    user's cache."""
    folder = tmp_path_factory.mktemp("indexes")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STRATAMEM_INDEX_DIR", str(folder))
        yield folder


@pytest.fixture(scope="module", params=BACKENDS)
def module_location(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> str:
    """Where a store shared by a module's tests goes, once per backend."""
    if request.param == "sqlite":
        return str(tmp_path_factory.mktemp("module") / "shared.db")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.new_database()


@pytest.fixture
def both_backends(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[str, str]:
    """A new SQLite store's location and a new PostgreSQL database's, for a test that holds
    the same documents on both and compares them."""
    if "postgresql" not in BACKENDS or "sqlite" not in BACKENDS:
        pytest.skip("compares the two backends: needs both")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return str(tmp_path / "store.db"), server.new_database()
