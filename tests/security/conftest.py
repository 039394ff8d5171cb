"""The leak suite's stores: one store with canaries in sources each principal may not see,
and for each principal the store built from only what it may see.

Builders and comparisons live in ``security_kit`` beside this file (a plain module, so that
the property test can build stores inside an example). In the quick tier the matrices here
are sampled (see ``tests/suite.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import security_kit as kit

from suite import BACKENDS


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not kit.COUNTS:
        return
    terminalreporter.section("leak probes")
    for group, found in sorted(kit.COUNTS.items()):
        terminalreporter.write_line(f"{group}: {json.dumps(found.to_dict())}")


@pytest.fixture(scope="session", params=BACKENDS)
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
