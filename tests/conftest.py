from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from stratamem.testing import PostgresServer

# CI draws the same examples every run, so an example no local run drew cannot turn it red.
settings.register_profile(
    "ci", derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# `stratamem ingest` embeds with the bundled model by default. Tests of other things run it
# (in process and as subprocesses, which inherit this) without, as `--no-embed` would; the
# tests of the default remove this variable.
os.environ["STRATAMEM_INGEST_EMBED"] = "off"

# Every store test runs on both backends; STRATAMEM_TEST_BACKENDS=sqlite narrows a local run.
BACKENDS = os.environ.get("STRATAMEM_TEST_BACKENDS", "sqlite,postgresql").split(",")
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
    server = PostgresServer.start()
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A new, empty database on the session's server."""
    return postgres_server.new_database()


@pytest.fixture(params=BACKENDS)
def store_location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a new store goes, once per backend: a SQLite file, then a PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "test.db")
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.new_database()


@pytest.fixture
def tmp_memory(store_location: str):  # type: ignore[no-untyped-def]
    import stratamem

    with stratamem.open(store_location) as memory:
        yield memory
