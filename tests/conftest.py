from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from stratamem.store.postgres.server import PostgresServer

# The tiers, the run's header and the leak-suite sample (the kits beside the tests, this one
# included, import by name: the folders are on ``pythonpath`` in pyproject.toml).
from suite import (
    BACKENDS,
    is_postgres,
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_report_header,
    pytest_runtest_protocol,
    pytest_sessionfinish,
    pytest_sessionstart,
    scratch_database,
)

__all__ = [
    "pytest_addoption",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_report_header",
    "pytest_runtest_protocol",
    "pytest_sessionfinish",
    "pytest_sessionstart",
]

# CI draws the same examples every run, so an example no local run drew cannot turn it red.
# No example has a deadline: a loaded machine makes an example slow, not wrong.
_SLOW_IS_FINE = [HealthCheck.too_slow]
settings.register_profile(
    "ci", derandomize=True, database=None, deadline=None, suppress_health_check=_SLOW_IS_FINE
)
settings.register_profile("dev", deadline=None, suppress_health_check=_SLOW_IS_FINE)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# pytest-xdist starts its workers with COLUMNS=80 and LINES=24, which the CLI's console would
# take for good as the size of a terminal the tests do not have.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)

# `stratamem ingest` embeds with the bundled model by default. Tests of other things run it
# (in process and as subprocesses, which inherit this) without, as `--no-embed` would; the
# tests of the default remove this variable.
os.environ["STRATAMEM_INGEST_EMBED"] = "off"

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
EXAMPLES = ROOT / "examples" / "workspace"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def shared_data() -> Path:
    """The real evaluation data beside the repository; tests using it skip where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not present")
    return SHARED_DATA


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL server with pgvector, started for the session on a unix socket."""
    server = PostgresServer.start(durable=False)
    yield server
    server.stop(wait=False)


@pytest.fixture
def postgres_url(request: pytest.FixtureRequest) -> str:
    """A new, empty database on the session's server."""
    return scratch_database(request)


@pytest.fixture(params=BACKENDS)
def store_location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a new store goes, once per backend: a SQLite file, then a PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "test.db")
    return scratch_database(request)


@pytest.fixture(scope="module", params=BACKENDS)
def module_location(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> str:
    """Where a store shared by a module's tests goes, once per backend."""
    if request.param == "sqlite":
        return str(tmp_path_factory.mktemp("module") / "shared.db")
    return scratch_database(request)


@pytest.fixture(autouse=True, scope="session")
def _index_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A store on a server keeps its index files in a folder of the test run, not in the
    user's cache (a folder's conftest may give its modules one each)."""
    folder = tmp_path_factory.mktemp("indexes")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STRATAMEM_INDEX_DIR", str(folder))
        yield folder


@pytest.fixture
def tmp_memory(store_location: str):  # type: ignore[no-untyped-def]
    import stratamem

    with stratamem.open(store_location) as memory:
        yield memory


class Locations:
    """More stores for a test that needs several, on the backend of one it has (``like``): a
    file in ``folder`` named after ``name``, or a database on the session's server."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request
        self._pristine: str | None = None

    is_postgres = staticmethod(is_postgres)

    def _server(self) -> PostgresServer:
        server: PostgresServer = self._request.getfixturevalue("postgres_server")
        return server

    def new(self, like: str | Path, folder: Path, name: str) -> str:
        """Where a new, empty store goes (on PostgreSQL, a database that holds the schema)."""
        if not self.is_postgres(like):
            return str(folder / f"{name}.db")
        if self._pristine is None:
            import stratamem

            self._pristine = self._server().new_database()
            stratamem.open(self._pristine, embedder=None).close()
        return self._server().copy_database(self._pristine)

    def copy(self, source: str | Path, folder: Path, name: str) -> str:
        """A copy of the store at ``source``, which nobody may have open."""
        if self.is_postgres(source):
            return self._server().copy_database(str(source))
        target = folder / f"{name}.db"
        with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
            src.backup(dst)
        src.close()
        dst.close()
        return str(target)

    def drop(self, location: str | Path) -> None:
        """Remove the store at ``location``, which nobody may have open."""
        if self.is_postgres(location):
            self._server().drop_database(str(location))
        else:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{location}{suffix}").unlink(missing_ok=True)


@pytest.fixture(scope="session")
def locations(request: pytest.FixtureRequest) -> Locations:
    return Locations(request)
