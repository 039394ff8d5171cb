"""Fixtures of the memory tests: stores a module's tests share, on either backend, and where
stores on a server keep their index files.

Reading a store past it, on either backend, is in ``memory_kit`` beside this file (a plain
module, so that the tests can import it).
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
    """Where a store a module's tests share (or copy) goes, once per backend."""
    if request.param == "sqlite":
        return str(tmp_path_factory.mktemp("module") / "shared.db")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.new_database()
