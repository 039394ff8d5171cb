"""A principal's store kept open while the owner changes access, writes and forgets: what it
reads next equals a fresh read of the store built from what it may see now. Its caches (the
visible sources, the gate's masks over the in-memory indexes, the entity postings) must not
let a source it just lost shape anything, nor hide one it just gained."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import security_kit as kit
from security_kit import ENG, HR, TEAM, PrincipalSpec, SourceSpec

BEA = PrincipalSpec("bea", ("eng", "team"))
QUERIES = ["queue", "zanzibarquux queue @alice", "Alice Chen release", "gallimaufry"]
ENTITIES = ["handle:alice", "handle:zorbhandle", "person:alice chen", "handle:carol"]


def _reads(mem: Any) -> dict[str, Any]:
    return {
        f"{query}|{entity}": kit.reads(mem, query, entity, "eng")
        for query in QUERIES
        for entity in ENTITIES
    }


def _same_as_built(
    mem: Any,
    specs: list[SourceSpec],
    places: kit.Places,
    name: str,
    *,
    sees: list[str] | None = None,
) -> None:
    """``mem`` reads as a store built from ``specs`` (at ``name`` of ``places``) does, read by
    ``bea`` with the scopes ``sees`` (its own when None)."""
    location = places.new(name)
    reader = BEA if sees is None else PrincipalSpec(BEA.name, tuple(sees))
    kit.build(location, specs, [reader], quick_principals=True)
    with kit.open_memory(location, principal=BEA.name) as fresh:
        want = _reads(fresh)
    got = _reads(mem)
    for key in got:
        kit.assert_same(got[key], want[key], key)


@pytest.mark.slow
def test_an_open_principal_follows_every_change_at_once(places: kit.Places, tmp_path: Path) -> None:
    places = places.within(tmp_path)
    full = places.new("full")
    kit.build(full, [ENG, TEAM, HR], [BEA], quick_principals=True)
    with kit.open_memory(full, principal=BEA.name) as mem, kit.open_memory(full) as owner:
        _same_as_built(mem, [ENG, TEAM], places, "start")
        # A scope taken away: team-notes leaves at once.
        owner.sources.set_access("team-notes", scopes="hr")
        _same_as_built(mem, [ENG], places, "lost")
        # A scope given: hr-secret comes in at once, with its statistics.
        owner.sources.set_access("hr-secret", add="team")
        _same_as_built(mem, [ENG, _with_access(HR, ("hr", "team"))], places, "gained")
        # A write to a source it cannot see changes nothing it reads.
        owner.items.add("Gallimaufry queue @alice in the dark", source="team-notes", id="late")
        _same_as_built(mem, [ENG, _with_access(HR, ("hr", "team"))], places, "dark-write")
        # Its scopes dropped to none: the source is gone for every principal.
        owner.sources.set_access("hr-secret", scopes="")
        _same_as_built(mem, [ENG], places, "no-scopes")
        # The principal made again with other scopes: they apply at once.
        owner.principals.remove(BEA.name)
        owner.principals.add(BEA.name, ["eng"], sources=["e*"])
        _same_as_built(mem, [ENG], places, "remade", sees=["eng"])
        # The principal removed: it reads nothing.
        owner.principals.remove(BEA.name)
        _same_as_built(mem, [], places, "removed", sees=["nothing"])


def test_an_open_principal_follows_a_forget(places: kit.Places, tmp_path: Path) -> None:
    places = places.within(tmp_path)
    full = places.new("full")
    visible_hr = _with_access(HR, ("team",))
    kit.build(full, [ENG, visible_hr, TEAM], [BEA], quick_principals=True)
    with kit.open_memory(full, principal=BEA.name) as mem, kit.open_memory(full) as owner:
        _same_as_built(mem, [ENG, visible_hr, TEAM], places, "start")
        owner.sources.forget("hr-secret")
        _same_as_built(mem, [ENG, TEAM], places, "forgot")


def _with_access(spec: SourceSpec, access: tuple[str, ...]) -> SourceSpec:
    return kit.dataclasses.replace(spec, access=access)


def test_pending_embeddings_counts_only_what_the_principal_may_see(
    places: kit.Places, tmp_path: Path
) -> None:
    places = places.within(tmp_path)
    full, reduced = places.new("full"), places.new("reduced")
    kit.build(full, [ENG, HR], [BEA], quick_principals=True)
    kit.build(reduced, [ENG], [BEA], quick_principals=True)
    for path in (full, reduced):
        # A chunk of hr-secret written with no embedder: it waits for `embed`.
        with kit.stratamem.open(path, embedder=None) as writer:
            writer.items.add("Zanzibarquux note", source="hr-secret" if path == full else "eng")
    with (
        kit.open_memory(full, principal=BEA.name) as a,
        kit.open_memory(reduced, principal=BEA.name) as b,
    ):
        # The reduced store's pending chunk is one bea sees; the full store's is hidden.
        assert b.indexes.pending() == 1
        assert a.indexes.pending() == 0
