from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

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


@pytest.fixture
def tmp_memory(tmp_path: Path):  # type: ignore[no-untyped-def]
    import stratamem

    with stratamem.open(tmp_path / "test.db") as memory:
        yield memory
