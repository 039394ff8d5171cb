"""Every read route of the Python API, for every principal: equal to the same read of the
store built from only what the principal may see, and free of every canary of what it may
not (see ``security_kit``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import route_probes as probes
import security_kit as kit

PRINCIPALS = [p.name for p in kit.PRINCIPALS]


@pytest.mark.parametrize("principal", PRINCIPALS)
@pytest.mark.parametrize("probe", probes.PROBES, ids=lambda p: p.id)
def test_route_equals_the_reduced_store_and_shows_no_canary(  # type: ignore[no-untyped-def]
    world, refs, probe: probes.Probe, principal: str
) -> None:
    full = world.read("full", principal)
    reduced = world.read("reduced", principal)
    got = kit.outcome(lambda: probe.call(full, refs), str(world.full))
    want = kit.outcome(lambda: probe.call(reduced, refs), str(world.reduced(principal)))
    hidden = world.hidden_from(principal)
    found = kit.leaked(got, hidden.canaries, named=probes.echoes(refs, probe.uses))
    tally = kit.counts("python routes")
    tally.routes.add(probe.route)
    tally.principals.add(principal)
    tally.compared += 1
    tally.checks += len(hidden.canaries)
    assert not found, f"{probe.id} as {principal} shows hidden {found}"
    kit.assert_same(kit.plain(got), kit.plain(want))


def test_every_probe_name_is_unique() -> None:
    ids = [p.id for p in probes.PROBES]
    assert len(ids) == len(set(ids))


def test_the_oracle_agrees_with_the_store_on_who_sees_what(world) -> None:  # type: ignore[no-untyped-def]
    for spec in kit.PRINCIPALS:
        want = sorted(s for v in kit.visible_specs(spec, kit.SPECS) for s in v.scopes)
        got = sorted(s.scope for s in world.read("full", spec.name).sources.list())
        assert got == want, spec.name


def test_the_owner_sees_every_unlocked_source_the_source_without_scopes_too(world) -> None:  # type: ignore[no-untyped-def]
    scopes = {s.scope for s in world.owner.sources.list()}
    assert scopes == {scope for spec in kit.SPECS for scope in spec.scopes}
    assert world.owner.search("xylophonic", mode="keyword").hits


def test_a_source_without_scopes_is_invisible_to_every_principal(world) -> None:  # type: ignore[no-untyped-def]
    for name in PRINCIPALS:
        mem = world.read("full", name)
        assert "orphan" not in {s.scope for s in mem.sources.list()}
        for mode in ("hybrid", "keyword", "graph", "vector"):
            found = mem.search("xylophonic orphan@canary.example", mode=mode)
            assert not {h.source_id for h in found.hits} & {kit.source_id_for("orphan")}
        assert not mem.search("xylophonic", mode="keyword").hits
        assert not mem.search_entities("orphanhandle")


def test_a_principal_store_is_read_only(world, refs) -> None:  # type: ignore[no-untyped-def]
    from stratamem.errors import AccessDenied

    mem = world.read("full", "cat")
    writes: list[Callable[[], Any]] = [
        lambda: mem.items.add("a note", source="eng"),
        lambda: mem.sources.set_access("eng", scopes="eng"),
        lambda: mem.trees.flush(),
        lambda: mem.indexes.embed(),
        lambda: mem.sources.forget("eng"),
        lambda: mem.principals.add("x", "eng"),
    ]
    for write in writes:
        with pytest.raises(AccessDenied):
            write()


def test_probes_named_ids_are_real(refs) -> None:  # type: ignore[no-untyped-def]
    # A probe naming an id that does not exist would prove nothing about hiding it.
    for name in probes.NAMED[:-1]:
        ref = refs[name]
        assert ref.top.startswith("sum_")
        assert ref.summary.startswith("sum_")
        assert len(ref.leaf) == 32
