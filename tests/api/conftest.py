"""Stores for the tests of the Python API's facets: the Slack fixture ingested with the
hashing embedder, embedded, its trees flushed; one for a module's reads, a fresh one for a
test that writes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import stratamem
from stratamem.testing import HashingEmbedder

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def build(location: str) -> stratamem.Memory:
    """The Slack fixture in a store at ``location``, embedded, every tree flushed."""
    memory = stratamem.open(location, embedder=HashingEmbedder())
    try:
        memory.ingest(FIXTURES / "slack")
        memory.indexes.embed()
        memory.trees.flush()
    except BaseException:
        memory.close()
        raise
    return memory


@pytest.fixture(scope="module")
def shared(module_location: str) -> Iterator[stratamem.Memory]:
    """A store a module's tests only read."""
    with build(module_location) as memory:
        yield memory


@pytest.fixture
def small(store_location: str) -> Iterator[stratamem.Memory]:
    """A store of the test's own, to write to."""
    with build(store_location) as memory:
        yield memory
