"""Rollups through the access gate and the lock: every source of the canary store states facts
(of a subject every source speaks of, and of subjects of its own named with its canary words),
written alike into each reader's reduced store; each store is consolidated at the same time.
A principal's rollups equal those of the store holding only what it may see (a principal
narrowed by source globs sees a part of them), and show nothing of a hidden source. A locked
source's facts never reach a rollup, whatever the sequence of locks, unlocks and passes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import security_kit as kit
from security_kit import OWNER, PASSPHRASE, T0, CanaryWorld

from stratamem.api import Memory
from stratamem.errors import LockError
from stratamem.store.rollups import Rollup
from stratamem.store.sources import source_id_for

SCOPES = tuple(s for spec in kit.SPECS for s in spec.scopes)
CANARY = {spec.scopes[0]: spec.canaries[0] for spec in kit.SPECS if spec.canaries}
NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
PASS = NOW + timedelta(days=1)
SHARED = "person:alice chen"
EXACT = [OWNER, "ann", "bea", "cat", "fay"]  # readers whose scopes take whole scopes
NARROWED = ["dan", "eve", "gil"]  # readers narrowed by source globs
LEGAL = "legal-chat"


def word(scope: str) -> str:
    return "zq" + re.sub(r"[^a-z0-9]", "", scope) + "roll"


def statements(owner: Memory) -> list[tuple[str, str, str, str, str]]:
    """(scope, subject, predicate, object, evidence): each source's facts, on one of its
    leaves."""
    out = []
    for n, scope in enumerate(SCOPES):
        _, leaves = kit.tree_nodes(owner, owner.trees.get(scope).id)
        leaf, w = leaves[0].node_id, word(scope)
        out += [
            (scope, SHARED, "role", f"{w} lead", leaf),
            (scope, SHARED, f"desk_{n}", f"{w} desk", leaf),
            (scope, f"topic:{w}", "status", f"{w} open", leaf),
            (scope, f"topic:{w}", "owner", f"{w} team", leaf),
        ]
        if scope in CANARY:
            out += [
                (scope, f"topic:{CANARY[scope]}", "mentions", f"{w} {CANARY[scope]}", leaf),
                (scope, f"topic:{CANARY[scope]}", "seen_in", scope, leaf),
            ]
    return out


def write_and_consolidate(mem: Memory, says: list[tuple[str, str, str, str, str]]) -> None:
    present = {s.scope for s in mem.sources.list()}
    for n, (scope, subject, predicate, obj, leaf) in enumerate(says):
        if scope in present:
            mem.facts.remember(subject, predicate, obj, evidence=[leaf], valid_from=T0,
                         now=NOW + timedelta(minutes=n))  # fmt: skip
    mem.facts.consolidate(now=PASS, min_facts=2, min_score=1.0)


def copy_store(places: kit.Places, source: str, name: str) -> str:
    """A copy of the store at ``source`` without its facts: those read from structure at
    ingest are recorded at the time of the ingest, so two stores built a moment apart hold
    them under different ids. The facts here are written alike into every copy."""
    target = places.copy(source, name)
    places.script(target, "DELETE FROM fact_vectors; DELETE FROM facts;")
    return target


@dataclass
class RollupStores:
    world: CanaryWorld
    places: kit.Places
    full: str = field(init=False)
    reduced: dict[str, str] = field(default_factory=dict)
    opened: dict[tuple[str, str], Memory] = field(default_factory=dict)

    def __post_init__(self) -> None:
        says = statements(self.world.owner)
        self.full = copy_store(self.places, self.world.full, "f-all")
        with kit.open_memory(self.full) as mem:
            write_and_consolidate(mem, says)
        for name in EXACT + NARROWED:
            path = copy_store(self.places, self.world.reduced(name), f"r-{name}")
            with kit.open_memory(path) as mem:
                write_and_consolidate(mem, says)
            self.reduced[name] = path

    def read(self, store: str, name: str) -> Memory:
        if (store, name) not in self.opened:
            path = self.full if store == "full" else self.reduced[name]
            who = None if name == OWNER else name
            self.opened[(store, name)] = kit.open_memory(path, principal=who)
        return self.opened[(store, name)]

    def canaries(self, name: str) -> set[str]:
        """What ``name`` must not be shown: what the suite hides from it, and the words and
        source ids of the sources it may not read."""
        out = set(self.world.hidden_from(name).canaries)
        seen = {s.scope for s in self.read("reduced", name).sources.list()}
        out |= {x for s in SCOPES if s not in seen for x in (word(s), source_id_for(s))}
        return out

    def close(self) -> None:
        for mem in self.opened.values():
            mem.close()


@pytest.fixture(scope="module")
def stores(world: CanaryWorld, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RollupStores]:
    found = RollupStores(world, world.places.within(tmp_path_factory.mktemp("rollups")))
    yield found
    found.close()


def shown(rollups: list[Rollup]) -> list[dict[str, object]]:
    return [r.to_dict() for r in rollups]


def test_the_full_store_rolls_up_every_scope(stores: RollupStores) -> None:
    # A comparison of empty lists would prove nothing.
    owner = stores.read("full", OWNER).facts.rollups(limit=1000)
    scopes = {r.scope for r in owner}
    assert {"eng", "team", "hr", "legal", "hr,team", ""} <= scopes
    assert {r.subject for r in owner} >= {SHARED, *(f"topic:{c}" for c in CANARY.values())}
    shared = [r for r in owner if r.subject == SHARED]
    assert len(shared) == len(scopes)  # one card per scope, never one across scopes


@pytest.mark.parametrize("reader", EXACT)
def test_a_reader_sees_the_rollups_of_the_store_holding_only_what_it_may_see(
    stores: RollupStores, reader: str
) -> None:
    got = stores.read("full", reader).facts.rollups(limit=1000)
    want = stores.read("reduced", reader).facts.rollups(limit=1000)
    assert got == want
    found = kit.leaked(shown(got), stores.canaries(reader))
    assert not found, f"rollups as {reader} show hidden {found}"
    for subject in {SHARED, *(f"topic:{c}" for c in CANARY.values())}:
        mine = [r for r in want if r.subject == subject]
        assert stores.read("full", reader).facts.rollups(subject) == mine


@pytest.mark.parametrize("reader", NARROWED)
def test_a_reader_narrowed_by_globs_sees_a_part_of_its_reduced_stores_rollups(
    stores: RollupStores, reader: str
) -> None:
    got = stores.read("full", reader).facts.rollups(limit=1000)
    want = stores.read("reduced", reader).facts.rollups(limit=1000)
    assert all(r in want for r in got)
    found = kit.leaked(shown(got), stores.canaries(reader))
    assert not found, f"rollups as {reader} show hidden {found}"
    allowed = {s.id for s in stores.read("full", reader).sources.list()}
    assert all(set(r.sources) <= allowed for r in got)


def test_fay_who_reads_nothing_sees_no_rollup(stores: RollupStores) -> None:
    assert stores.read("full", "fay").facts.rollups() == []
    assert stores.read("full", "fay").store.fact_scores() == {}


# -- locks -------------------------------------------------------------------------------------


def bodies(db: str) -> str:
    """Every rollup as the store holds it, and the sources it names."""
    parts = [
        f"{rid} {subject} {body}"
        for rid, subject, body in kit.read_rows(db, "SELECT id, subject, body FROM rollups")
    ]
    parts += [s for (s,) in kit.read_rows(db, "SELECT source_id FROM rollup_sources")]
    return "\n".join(parts).lower()


def scored_facts_of(db: str, source_id: str) -> int:
    ((count,),) = kit.read_rows(
        db,
        "SELECT count(*) FROM fact_scores fs JOIN facts f ON f.id = fs.fact_id "
        "WHERE f.source_id = ?",
        (source_id,),
    )
    return int(count)


def test_a_locked_sources_facts_never_reach_a_rollup(world: CanaryWorld, tmp_path: Path) -> None:
    path = copy_store(world.places.within(tmp_path), world.full, "copy")
    canary, legal = CANARY[LEGAL], source_id_for(LEGAL)
    marks = (canary, word(LEGAL), legal)

    def clean() -> None:
        text = bodies(path)
        assert not [m for m in marks if m in text]
        assert scored_facts_of(path, legal) == 0

    with kit.open_memory(path) as mem:
        write_and_consolidate(mem, statements(world.owner))
        assert all(m in bodies(path) for m in marks)  # the canary is there to lose
        for round_ in range(2):
            mem.locks.lock(LEGAL, passphrase=PASSPHRASE)
            clean()  # purged with the lock
            report = mem.facts.consolidate(now=PASS)
            assert report.rollups_written == 0
            clean()  # and not read by a pass while locked
            with kit.open_memory(path, unlock={LEGAL: PASSPHRASE}) as unlocked:
                assert unlocked.facts.recall(f"topic:{canary}")  # readable in that process
                with pytest.raises(LockError, match="without unlocking"):
                    unlocked.facts.consolidate(now=PASS)
            clean()
            mem.locks.unlock(LEGAL, passphrase=PASSPHRASE)
            clean()  # unlocking restores facts, not what was derived from them
            assert mem.facts.consolidate(now=PASS).rollups_written > 0, round_
            assert all(m in bodies(path) for m in marks)
        mem.locks.lock(LEGAL, passphrase=PASSPHRASE)
        clean()
