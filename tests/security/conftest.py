"""The leak suite's stores: one store with canaries in sources each principal may not see,
and for each principal the store built from only what it may see.

Builders and comparisons live in ``security_kit`` beside this file (a plain module, so that
the property test can build stores inside an example); this folder is put on the path for it,
as the fuzz suite does for its driver.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import security_kit as kit


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On PostgreSQL, the tests made once per reader run for :data:`kit.POSTGRES_READERS`
    alone (unless ``STRATAMEM_TEST_FULL_MATRIX`` is set); the others are deselected."""
    if kit.FULL_MATRIX:
        return
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        params = getattr(item, "callspec", None)
        found = {} if params is None else params.params
        reader = found.get("principal", found.get("reader"))
        on_server = found.get("places") == "postgresql"
        skip = on_server and reader is not None and reader not in kit.POSTGRES_READERS
        (dropped if skip else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not kit.COUNTS:
        return
    terminalreporter.section("leak probes")
    for group, found in sorted(kit.COUNTS.items()):
        terminalreporter.write_line(f"{group}: {json.dumps(found.to_dict())}")


@pytest.fixture(autouse=True, scope="session")
def _index_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A store on a server keeps its index files in a folder of the test run, not in the
    user's cache."""
    folder = tmp_path_factory.mktemp("indexes")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STRATAMEM_INDEX_DIR", str(folder))
        yield folder


@pytest.fixture(scope="session", params=kit.BACKENDS)
def places(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> kit.Places:
    """Where the suite's stores go, once per backend."""
    folder = tmp_path_factory.mktemp(request.param)
    if request.param == "sqlite":
        return kit.Places(folder)
    return kit.Places(folder, request.getfixturevalue("postgres_server"))


@pytest.fixture(scope="session")
def world(places: kit.Places) -> Iterator[kit.CanaryWorld]:
    found = kit.CanaryWorld(places.within(places.folder / "canary"), kit.SPECS)
    yield found
    found.close()


@pytest.fixture(scope="session")
def refs(world: kit.CanaryWorld) -> dict[str, kit.Refs]:
    """Ids of the sources the probes name, as the owner sees them."""
    return kit.named_refs(world.owner, ("hr-secret", "legal-chat", "orphan", "eng"))
