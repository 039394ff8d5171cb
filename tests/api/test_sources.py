"""``mem.sources``: list, get, set_access, forget."""

from __future__ import annotations

import pytest

import stratamem
from stratamem.errors import NotFoundError

ENG = "slack:#eng"


def test_sources_are_listed_and_found_by_scope_or_id(shared: stratamem.Memory) -> None:
    listed = shared.sources.list()
    assert [s.scope for s in listed] == ["slack:#eng", "slack:#general"]
    eng = shared.sources.get(ENG)
    assert shared.sources.get(eng.id).scope == ENG
    assert eng.id in [s.id for s in listed]
    with pytest.raises(NotFoundError, match="no source with id or scope 'slack:#nope'"):
        shared.sources.get("slack:#nope")


def test_access_is_set_added_and_removed(small: stratamem.Memory) -> None:
    assert small.sources.get(ENG).access == ("team",)
    assert small.sources.set_access(ENG, scopes="eng,ops").access == ("eng", "ops")
    assert small.sources.set_access(ENG, add="team", remove="ops").access == ("eng", "team")
    assert small.sources.get(ENG).access == ("eng", "team")


def test_a_forgotten_source_is_gone(small: stratamem.Memory) -> None:
    (listed,) = [s for s in small.sources.list() if s.scope == ENG]
    assert small.sources.forget(ENG) == listed.chunk_count > 0
    assert [s.scope for s in small.sources.list()] == ["slack:#general"]
    with pytest.raises(NotFoundError):
        small.sources.forget(ENG)
