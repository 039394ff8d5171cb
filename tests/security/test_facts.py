"""Bitemporal facts through the access gate: every source of the canary store holds facts
(a subject of its own, named with its canary words, and subjects every source speaks of, with
values and times that differ from source to source), written alike into each principal's
reduced store wherever the source is there. Every ``recall`` and ``fact_history`` equals the
same read of the reduced store and shows nothing of a hidden source; a subject only hidden
sources speak of answers as one nobody speaks of; a locked source's facts leave the reads and
the files until it is unlocked; a forgotten source's facts go, and nothing else moves.

The facts are written into copies of the suite's stores, which the other tests read as built.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import security_kit as kit
from security_kit import OWNER, PASSPHRASE, T0, CanaryWorld

from stratamem.api import Memory
from stratamem.errors import AccessDenied, LockError
from stratamem.store.facts import FactWrite
from stratamem.store.rollups import Rollup
from stratamem.store.sources import source_id_for

ASSERTED = "facts:asserted"  # where a fact stated without evidence goes by default
SCOPES: tuple[str, ...] = (*(s for spec in kit.SPECS for s in spec.scopes), ASSERTED)
CANARY = {spec.scopes[0]: spec.canaries[0] for spec in kit.SPECS if spec.canaries}
READERS = [OWNER, *(p.name for p in kit.PRINCIPALS)]
# Transaction times: one minute per statement from NOW, the same in every store.
NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
SHARED = "person:alice chen"
QUEUE = "topic:queue"
NOWHERE_SUBJECT = "topic:zqnosuchsubjectfact"


def fact_word(scope: str) -> str:
    """A word found only in the facts of ``scope``: no text of the store holds it, and no
    other source's word contains it."""
    return "zq" + re.sub(r"[^a-z0-9]", "", scope) + "fact"


def own_subject(scope: str) -> str:
    return f"topic:{fact_word(scope)}"


@dataclass(frozen=True)
class Say:
    """One write: a statement (``evidence`` or ``source`` says where it goes), or with
    ``retract`` the correction of what the statement ``retract`` recorded last."""

    key: str
    scope: str
    subject: str = ""
    predicate: str = ""
    object: str = ""
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    evidence: tuple[str, ...] = ()
    source: str | None = None
    retract: str | None = None


def statements_for(owner: Memory) -> tuple[Say, ...]:
    """The writes, in order: every source states its facts, then changes some, then corrects
    some. Evidence is a leaf and a summary of the source, as the owner reads them."""
    evidence: dict[str, tuple[str, str]] = {}
    for scope in SCOPES[:-1]:
        summaries, leaves = kit.tree_nodes(owner, owner.trees.get(scope).id)
        evidence[scope] = (leaves[0].node_id, (summaries or leaves)[-1].node_id)
    first: list[Say] = []
    second: list[Say] = []
    third: list[Say] = []
    for n, scope in enumerate(SCOPES):
        word = fact_word(scope)
        leaf, summary = evidence.get(scope, ("", ""))
        # Where a statement with evidence goes, the private source takes it by name.
        home: dict[str, Any] = {"source": ASSERTED} if scope == ASSERTED else {}
        leaf_ev = {"evidence": (leaf,)} if leaf else home
        summary_ev = {"evidence": (summary,)} if summary else home
        # Without evidence, into the source by name (the private one by default).
        named: dict[str, Any] = {"source": None if scope == ASSERTED else scope}
        first += [
            Say(f"{scope}/role", scope, SHARED, "role", f"{word} lead",
                valid_from=T0 + timedelta(days=n), **leaf_ev),
            Say(f"{scope}/status", scope, own_subject(scope), "status", f"{word} open",
                valid_from=T0, **summary_ev),
            Say(f"{scope}/queue", scope, QUEUE, "owner", f"{word} team", **named),
        ]  # fmt: skip
        if scope in CANARY:
            canary = CANARY[scope]
            first.append(
                Say(f"{scope}/canary", scope, f"topic:{canary}", "mentions", f"{word} {canary}",
                    evidence=(leaf, summary))
            )  # fmt: skip
        second += [
            Say(f"{scope}/role2", scope, SHARED, "role", f"{word} owner",
                valid_from=T0 + timedelta(days=n + 10), **leaf_ev),
            Say(f"{scope}/status2", scope, own_subject(scope), "status", f"{word} closed",
                valid_from=T0 + timedelta(days=3), valid_to=T0 + timedelta(days=20), **named),
            # The same value again: changes nothing.
            Say(f"{scope}/queue2", scope, QUEUE, "owner", f"{word} team", **named),
        ]  # fmt: skip
        if n % 2 == 0:
            third.append(Say(f"{scope}/retract", scope, retract=f"{scope}/queue"))
        else:
            third.append(
                Say(f"{scope}/role0", scope, SHARED, "role", f"{word} intern",
                    valid_from=T0 - timedelta(days=30), valid_to=T0 - timedelta(days=1),
                    **named)
            )  # fmt: skip
    return (*first, *second, *third)


def write(
    mem: Memory, says: tuple[Say, ...], present: Callable[[str], bool]
) -> dict[str, FactWrite]:
    """Make ``says`` on ``mem`` for the sources ``present``; statement ``n`` at ``NOW`` + n
    minutes whichever are made, so that every store records the same times."""
    done: dict[str, FactWrite] = {}
    for n, say in enumerate(says):
        if not present(say.scope):
            continue
        now = NOW + timedelta(minutes=n)
        if say.retract is not None:
            done[say.key] = mem.facts.retract(done[say.retract].recorded[-1].id, now=now)
            continue
        done[say.key] = mem.facts.remember(
            say.subject,
            say.predicate,
            say.object,
            valid_from=say.valid_from,
            valid_to=say.valid_to,
            evidence=say.evidence,
            source=say.source,
            now=now,
        )
        homes = {f.source_id for f in done[say.key].recorded}
        if homes - {source_id_for(say.scope)}:
            raise AssertionError(f"{say.key} went to {homes}, not to {say.scope}")
    return done


def rollups_for() -> list[Rollup]:
    """A rollup of each source's own subject, and of the shared subject over each pair of
    neighbouring sources (readable only by a reader of both), as consolidation writes them."""
    out = []
    for n, scope in enumerate(SCOPES):
        word = fact_word(scope)
        out.append(
            Rollup(f"rollup_{word}", own_subject(scope), scope, f"h{n}", NOW, 1 - n / 100,
                   {"summary": f"{word} {CANARY.get(scope, '')}"}, (source_id_for(scope),))
        )  # fmt: skip
        other = SCOPES[(n + 1) % len(SCOPES)]
        out.append(
            Rollup(f"rollup_pair_{word}", SHARED, f"{scope},{other}", f"p{n}", NOW, 0.5 - n / 100,
                   {"summary": f"{word} {fact_word(other)}"},
                   (source_id_for(scope), source_id_for(other)))
        )  # fmt: skip
    return out


def write_rollups(mem: Memory, present: Callable[[str], bool]) -> None:
    """The rollups of :func:`rollups_for` whose sources are all ``present``."""
    with mem.store.transaction():
        for rollup in rollups_for():
            scopes = [s for s in SCOPES if source_id_for(s) in rollup.sources]
            if all(present(s) for s in scopes):
                mem.store.write_rollup(rollup)


def boundaries(says: tuple[Say, ...]) -> dict[str, datetime]:
    """Transaction times before the writes, after each round of them, and after all."""
    second = min(n for n, s in enumerate(says) if s.key.endswith("/role2"))
    third = min(n for n, s in enumerate(says) if s.key.endswith(("/retract", "/role0")))
    at = {"none": 0, "round1": second, "round2": third, "all": len(says)}
    return {label: NOW + timedelta(minutes=n, seconds=-30) for label, n in at.items()}


def present_in(world: CanaryWorld, name: str) -> Callable[[str], bool]:
    """Whether a source is in ``name``'s reduced store (the owner's holds every one)."""
    spec = world.principal(name)
    scopes = {s for v in world.visible(name) for s in v.scopes}
    if spec is None or kit.sees(spec, ("private",), ASSERTED):
        scopes.add(ASSERTED)
    return scopes.__contains__


@dataclass
class FactStores:
    """The full store and each reader's reduced store, copied and given the same facts."""

    world: CanaryWorld
    places: kit.Places
    says: tuple[Say, ...]
    full: str = field(init=False)
    reduced: dict[str, str] = field(default_factory=dict)
    ids: dict[str, set[str]] = field(default_factory=dict)  # scope → its fact ids
    opened: dict[tuple[str, str], Memory] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.full = self.places.copy(self.world.full, "f-all")
        with self.writer(self.full) as mem:
            done = write(mem, self.says, lambda scope: True)
            write_rollups(mem, lambda scope: True)
        self.places.keep(self.full)
        for key, wrote in done.items():
            scope = next(s.scope for s in self.says if s.key == key)
            self.ids.setdefault(scope, set()).update(
                {f.id for f in wrote.recorded} | set(wrote.expired)
            )
        for name in READERS:
            path = self.places.copy(self.world.reduced(name), f"r-{name[:3]}")
            with self.writer(path) as mem:
                write(mem, self.says, present_in(self.world, name))
                write_rollups(mem, present_in(self.world, name))
            self.reduced[name] = path

    @contextmanager
    def writer(self, path: str) -> Iterator[Memory]:
        with kit.open_memory(path) as mem:
            kit.fast_writes(mem)  # as the suite's builder does
            yield mem

    def read(self, store: str, name: str) -> Memory:
        key = (store, name)
        if key not in self.opened:
            who = None if name == OWNER else name
            path = self.full if store == "full" else self.reduced[name]
            self.opened[key] = kit.open_memory(path, principal=who)
        return self.opened[key]

    def canaries(self, name: str) -> set[str]:
        """What ``name`` must not be shown: what the suite hides from it, and the words,
        source ids and fact ids of the sources whose facts are hidden from it."""
        out = set(self.world.hidden_from(name).canaries)
        present = present_in(self.world, name)
        for scope in SCOPES:
            if not present(scope):
                out |= {fact_word(scope), source_id_for(scope), *self.ids[scope]}
        return out

    def close(self) -> None:
        for mem in self.opened.values():
            mem.close()


@pytest.fixture(scope="module")
def facts(world: CanaryWorld, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FactStores]:
    places = world.places.within(tmp_path_factory.mktemp("facts"))
    found = FactStores(world, places, statements_for(world.owner))
    yield found
    found.close()


# -- the reads ---------------------------------------------------------------------------------


Known = dict[str, datetime]


@dataclass(frozen=True)
class Probe:
    route: str
    name: str
    call: Callable[[Memory, Known], Any]  # with the transaction times of ``boundaries``
    names: tuple[str, ...] = ()  # what the call names (an error may echo it)

    @property
    def id(self) -> str:
        return f"{self.route}:{self.name}"


VALID_TIMES: dict[str, datetime] = {
    "before": T0 - timedelta(days=10),
    "day2": T0 + timedelta(days=2, hours=12),
    "day6": T0 + timedelta(days=6, hours=1),
    "day15": T0 + timedelta(days=15),
    "day40": T0 + timedelta(days=40),
}
KNOWN = ("none", "round1", "round2", "all")


def _probes() -> list[Probe]:
    out = [
        Probe("recall", "all", lambda m, k: m.facts.recall()),
        Probe("recall", "limit", lambda m, k: m.facts.recall(limit=5)),
        Probe("recall", "predicate", lambda m, k: m.facts.recall(predicate="role")),
        Probe("recall", "shared", lambda m, k: m.facts.recall(SHARED)),
        Probe("recall", "queue", lambda m, k: m.facts.recall(QUEUE, predicate="owner")),
        Probe("fact_history", "shared", lambda m, k: m.facts.history(SHARED, "role")),
        Probe("fact_history", "queue", lambda m, k: m.facts.history(QUEUE, "owner")),
    ]
    for label, when in VALID_TIMES.items():
        out += [
            Probe("recall-as_of", f"all-{label}", lambda m, k, w=when: m.facts.recall(as_of=w)),
            Probe(
                "recall-as_of",
                f"shared-{label}",
                lambda m, k, w=when: m.facts.recall(SHARED, as_of=w),
            ),
            Probe(
                "recall-as_of+known_at",
                f"{label}-round1",
                lambda m, k, w=when: m.facts.recall(as_of=w, known_at=k["round1"]),
            ),
        ]
    for label in KNOWN:
        out += [
            Probe(
                "recall-known_at",
                f"all-{label}",
                lambda m, k, t=label: m.facts.recall(known_at=k[t]),
            ),
            Probe(
                "recall-known_at",
                f"shared-{label}",
                lambda m, k, t=label: m.facts.recall(SHARED, known_at=k[t]),
            ),
            Probe(
                "fact_history-known_at",
                f"shared-{label}",
                lambda m, k, t=label: m.facts.history(SHARED, "role", known_at=k[t]),
            ),
            Probe(
                "fact_history-known_at",
                f"queue-{label}",
                lambda m, k, t=label: m.facts.history(QUEUE, "owner", known_at=k[t]),
            ),
        ]
    subjects = {scope: (own_subject(scope), "status") for scope in SCOPES}
    subjects |= {f"{scope}-canary": (f"topic:{c}", "mentions") for scope, c in CANARY.items()}
    for label, (subject, predicate) in subjects.items():
        out += [
            Probe("recall", f"own-{label}", lambda m, k, s=subject: m.facts.recall(s), (subject,)),
            Probe(
                "recall-as_of",
                f"own-{label}",
                lambda m, k, s=subject: m.facts.recall(s, as_of=VALID_TIMES["day6"]),
                (subject,),
            ),
            Probe(
                "fact_history",
                f"own-{label}",
                lambda m, k, s=subject, p=predicate: m.facts.history(s, p),
                (subject,),
            ),
        ]
    # The facts that match a query, ranked among those the reader may see: the same ids,
    # order, scores and totals as the reduced store's, at every time asked.
    queries = ("lead owner", "team open closed", "intern", *(fact_word(s) for s in SCOPES))
    queries += (*CANARY.values(), f"{fact_word('eng')} {fact_word('hr-secret')} lead")
    for query in queries:
        out.append(Probe("query_facts", query, lambda m, k, q=query: m.facts.query(q, limit=50)))
        out.append(
            Probe(
                "query_facts-floor",
                query,
                lambda m, k, q=query: m.facts.query(q, limit=50, min_relevance=0.2),
            )
        )
    for label, when in VALID_TIMES.items():
        out.append(
            Probe("query_facts-as_of", label, lambda m, k, w=when: m.facts.query(
                "lead owner open closed intern", as_of=w, limit=50))
        )  # fmt: skip
    for label in KNOWN:
        out += [
            Probe("query_facts-known_at", label, lambda m, k, t=label: m.facts.query(
                "lead owner team open", known_at=k[t], limit=50)),
            Probe("query_facts-as_of+known_at", label, lambda m, k, t=label: m.facts.query(
                "lead owner intern", as_of=VALID_TIMES["day2"], known_at=k[t], limit=3)),
        ]  # fmt: skip
    # recall: the facts beside the chunks, in one list, at every time asked.
    for query in queries:
        out.append(Probe("recall-one-list", query, lambda m, k, q=query: m.recall(q, limit=50)))
    for label, when in VALID_TIMES.items():
        out.append(
            Probe("recall-one-list-as_of", label, lambda m, k, w=when: m.recall(
                "lead owner open closed intern", as_of=w, limit=50))
        )  # fmt: skip
    for scope in SCOPES:
        out.append(
            Probe("recall-one-list", f"source-{scope}", lambda m, k, s=scope: m.recall(
                "lead owner team", sources=[s], limit=50), (scope, source_id_for(scope)))
        )  # fmt: skip
    out += [
        Probe("query_facts", "shared-subject", lambda m, k: m.facts.query(
            "lead owner", subject=SHARED, limit=50)),
        Probe("query_facts", "limit-1", lambda m, k: m.facts.query("lead team open", limit=1)),
        Probe("query_facts", "empty", lambda m, k: m.facts.query("?!", limit=5)),
    ]  # fmt: skip
    for scope in SCOPES:
        subject = own_subject(scope)
        out += [
            Probe("query_facts", f"own-{scope}", lambda m, k, s=subject: m.facts.query(
                "open closed", subject=s), (subject,)),
            Probe("query_facts", f"source-{scope}", lambda m, k, s=scope: m.facts.query(
                "lead owner team", sources=[s], limit=50), (scope, source_id_for(scope))),
        ]  # fmt: skip
    # Rollups: those built from sources the reader reads every one of.
    out += [
        Probe("rollups", "all", lambda m, k: m.facts.rollups()),
        Probe("rollups", "shared", lambda m, k: m.facts.rollups(SHARED)),
        Probe("rollups", "limit-2", lambda m, k: m.facts.rollups(limit=2)),
    ]
    for scope in SCOPES:
        subject = own_subject(scope)
        out.append(
            Probe("rollups", f"own-{scope}", lambda m, k, s=subject: m.facts.rollups(s), (subject,))
        )
    return out


PROBES = _probes()


def _check(facts: FactStores, probe: Probe, reader: str, group: str) -> tuple[Any, Any]:
    """The probe's answer from the full store and from the reduced one, as plain data, once
    the full store's is scanned for what the reader must not be shown."""
    full = facts.read("full", reader)
    reduced = facts.read("reduced", reader)
    known = boundaries(facts.says)
    got = kit.plain(kit.outcome(lambda: probe.call(full, known), str(facts.full)))
    want = kit.plain(kit.outcome(lambda: probe.call(reduced, known), str(facts.reduced[reader])))
    canaries = facts.canaries(reader)
    tally = kit.counts(group)
    tally.routes.add(probe.route)
    tally.principals.add(reader)
    tally.compared += 1
    tally.checks += len(canaries)
    found = kit.leaked(got, canaries, named=probe.names)
    assert not found, f"{probe.id} as {reader} shows hidden {found}"
    return got, want


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.id)
def test_fact_reads_equal_the_reduced_store_and_show_no_canary(
    facts: FactStores, probe: Probe, reader: str
) -> None:
    got, want = _check(facts, probe, reader, "facts")
    kit.assert_same(got, want)


def test_the_stores_hold_the_facts_the_probes_look_for(facts: FactStores) -> None:
    # A read that finds nothing anywhere would prove nothing about hiding.
    owner = facts.read("full", OWNER)
    assert {f.source_id for f in owner.facts.recall()} == {source_id_for(s) for s in SCOPES}
    assert owner.sources.get(ASSERTED).access == ("private",)
    history = owner.facts.history(SHARED, "role")
    assert {f.source_id for f in history} == {source_id_for(s) for s in SCOPES}
    assert any(not f.believed for f in history)
    assert any(not f.believed for f in owner.facts.history(QUEUE, "owner"))
    for scope, words in CANARY.items():
        assert owner.facts.recall(f"topic:{words}"), scope
    # Every principal but one misses some source's facts, and sees what its store holds.
    for spec in kit.PRINCIPALS:
        mem = facts.read("full", spec.name)
        present = present_in(facts.world, spec.name)
        want = {source_id_for(s) for s in SCOPES if present(s)}
        assert {f.source_id for f in mem.facts.history(SHARED, "role")} == want, spec.name
    assert facts.canaries("fay") > {fact_word(s) for s in SCOPES}


def test_the_stores_hold_the_rollups_and_matches_the_probes_look_for(facts: FactStores) -> None:
    owner = facts.read("full", OWNER)
    assert len(owner.facts.rollups()) == 2 * len(SCOPES)
    found = {
        name: facts.read("full", name).facts.query("lead owner", limit=50).total for name in READERS
    }
    assert found[OWNER] > max(v for k, v in found.items() if k != OWNER) > 0, found
    # Somebody reads some rollups and not others: the probes compare something.
    seen = {name: len(facts.read("full", name).facts.rollups()) for name in READERS}
    assert len(set(seen.values())) > 1, seen


def test_fact_ids_are_the_same_in_both_stores(facts: FactStores) -> None:
    # The comparisons above rest on this: a fact's id is made of what it says and when.
    for name in READERS:
        full = {f.id for f in facts.read("full", name).facts.history(SHARED, "role")}
        reduced = {f.id for f in facts.read("reduced", name).facts.history(SHARED, "role")}
        assert full == reduced, name


# -- a subject only hidden sources speak of ------------------------------------------------------


def _hidden_cases() -> list[tuple[str, str]]:
    return [
        (p.name, scope) for p in kit.PRINCIPALS for scope in SCOPES if not _sees_scope(p, scope)
    ]


def _sees_scope(principal: kit.PrincipalSpec, scope: str) -> bool:
    if scope == ASSERTED:
        return kit.sees(principal, ("private",), scope)
    spec = next(s for s in kit.SPECS if scope in s.scopes)
    return kit.sees(principal, spec.access, scope)


Ask = Callable[[Memory, str, str], Any]

ASKS: dict[str, Ask] = {
    "recall": lambda m, s, p: m.facts.recall(s),
    "recall-predicate": lambda m, s, p: m.facts.recall(s, predicate=p),
    "recall-as_of": lambda m, s, p: m.facts.recall(s, as_of=VALID_TIMES["day2"]),
    "recall-known_at": lambda m, s, p: m.facts.recall(s, known_at=NOW + timedelta(days=1)),
    "recall-both": lambda m, s, p: m.facts.recall(s, as_of=T0, known_at=NOW + timedelta(days=1)),
    "fact_history": lambda m, s, p: m.facts.history(s, p),
    "fact_history-known_at": lambda m, s, p: m.facts.history(
        s, p, known_at=NOW + timedelta(days=1)
    ),
}


@pytest.mark.parametrize("ask", sorted(ASKS))
@pytest.mark.parametrize(("principal", "scope"), _hidden_cases())
def test_a_subject_of_hidden_sources_answers_as_one_of_none(
    facts: FactStores, principal: str, scope: str, ask: str
) -> None:
    mem = facts.read("full", principal)
    call = ASKS[ask]
    subjects = [(own_subject(scope), "status")]
    if scope in CANARY:
        subjects.append((f"topic:{CANARY[scope]}", "mentions"))
    path = str(facts.full)
    canaries = facts.canaries(principal)
    for subject, predicate in subjects:
        (got, hidden_sql), (want, nowhere_sql) = kit.traced_pair(
            mem,
            # Warm what both share.
            lambda s=subject, p=predicate: [
                kit.outcome(lambda x=x: call(mem, x, p), path) for x in (s, NOWHERE_SUBJECT) * 2
            ],
            lambda s=subject, p=predicate: kit.plain(kit.outcome(lambda: call(mem, s, p), path)),
            lambda p=predicate: kit.plain(kit.outcome(lambda: call(mem, NOWHERE_SUBJECT, p), path)),
        )
        tally = kit.counts("facts, hidden subjects")
        tally.routes.add(ask)
        tally.principals.add(principal)
        tally.compared += 1
        tally.checks += len(canaries)
        assert not kit.leaked(got, canaries, named=[subject])
        assert got == want == []
        assert [q.replace(subject, "<subject>") for q in hidden_sql] == [
            q.replace(NOWHERE_SUBJECT, "<subject>") for q in nowhere_sql
        ]


def test_a_principal_cannot_write_facts(facts: FactStores) -> None:
    mem = facts.read("full", "cat")
    fact = facts.read("full", OWNER).facts.recall(SHARED)[0]
    with pytest.raises(AccessDenied):
        mem.facts.remember(SHARED, "role", "someone else", source="eng")
    with pytest.raises(AccessDenied):
        mem.facts.retract(fact.id)
    assert facts.read("full", OWNER).facts.recall(SHARED)[0] == fact


# -- locking and forgetting ----------------------------------------------------------------------


def _views(mem: Memory, says: tuple[Say, ...]) -> dict[str, Any]:
    """The reads a lock or a forget changes, as plain data."""
    known = boundaries(says)
    out: dict[str, Any] = {
        "recall": mem.facts.recall(),
        "recall-known": mem.facts.recall(known_at=known["round2"]),
        "recall-as_of": mem.facts.recall(as_of=VALID_TIMES["day6"]),
        "shared": mem.facts.history(SHARED, "role"),
        "shared-known": mem.facts.history(SHARED, "role", known_at=known["round1"]),
        "queue": mem.facts.history(QUEUE, "owner"),
    }
    for scope in SCOPES:
        out[scope] = mem.facts.history(own_subject(scope), "status")
    return out


def _without(views: dict[str, Any], source_id: str) -> dict[str, Any]:
    """``views`` less the facts of ``source_id``."""
    return {k: [f for f in v if f.source_id != source_id] for k, v in views.items()}


def _compare(
    facts: FactStores, mem: Memory, who: str, want: dict[str, Any], hidden: set[str], group: str
) -> None:
    """``mem``'s views equal ``want`` and show nothing of ``hidden``."""
    got = kit.plain(_views(mem, facts.says))
    tally = kit.counts(group)
    tally.routes.update(f"{group.rpartition(' ')[2]}:{k}" for k in got)
    tally.principals.add(who)
    tally.compared += 1
    tally.checks += len(hidden)
    assert not kit.leaked(got, hidden), who
    kit.assert_same(got, kit.plain(want))


@pytest.mark.parametrize("scope", ["legal-chat", ASSERTED])
def test_a_locked_source_s_facts_leave_reads_and_files_until_unlocked(
    facts: FactStores, tmp_path: Path, scope: str
) -> None:
    path = facts.places.within(tmp_path).copy(facts.full, "copy")
    sid = source_id_for(scope)
    # Only that source's facts hold these: no text of the store, no other source's facts.
    needles = {fact_word(scope), *facts.ids[scope]}
    locked = needles | {sid}
    group = "facts, locked"
    before = {name: _views(facts.read("full", name), facts.says) for name in (OWNER, "cat")}
    assert _without(before[OWNER], sid) != before[OWNER]
    assert _without(before["cat"], sid) != before["cat"]
    assert kit.residue(path, needles), "the copy holds the facts before the lock"
    with kit.open_memory(path) as owner:
        owner.locks.lock(scope, passphrase=PASSPHRASE)
        _compare(facts, owner, OWNER, _without(before[OWNER], sid), locked, group)
        assert kit.residue(path, needles) == {}
        with pytest.raises(LockError):
            owner.facts.remember(own_subject(scope), "status", "again", source=scope)
        with kit.open_memory(path, principal="cat") as cat:
            _compare(facts, cat, "cat", _without(before["cat"], sid), locked, group)
        # Unlocked in this process only: readable as before, as far as the scopes reach.
        unlock = {scope: PASSPHRASE}
        with kit.open_memory(path, unlock=unlock) as mem:
            _compare(facts, mem, OWNER, before[OWNER], set(), group)
        with kit.open_memory(path, principal="cat", unlock=unlock) as cat:
            _compare(facts, cat, "cat", before["cat"], facts.canaries("cat"), group)
        with kit.open_memory(path, principal="dan", unlock=unlock) as dan:
            want = _views(facts.read("full", "dan"), facts.says)
            _compare(facts, dan, "dan", want, facts.canaries("dan"), group)
        # The file stays locked.
        _compare(facts, owner, OWNER, _without(before[OWNER], sid), locked, group)
        assert kit.residue(path, needles) == {}
        owner.locks.unlock(scope, passphrase=PASSPHRASE)
        _compare(facts, owner, OWNER, before[OWNER], set(), group)
    with kit.open_memory(path, principal="cat") as cat:
        _compare(facts, cat, "cat", before["cat"], facts.canaries("cat"), group)


@pytest.mark.parametrize("scope", ["hr-secret", ASSERTED])
def test_forgetting_a_source_removes_its_facts_and_moves_no_other(
    facts: FactStores, tmp_path: Path, scope: str
) -> None:
    path = facts.places.within(tmp_path).copy(facts.full, "copy")
    sid = source_id_for(scope)
    gone = {fact_word(scope), *facts.ids[scope]}
    group = "facts, forgotten"
    before = {name: _views(facts.read("full", name), facts.says) for name in READERS}
    assert _without(before[OWNER], sid) != before[OWNER]
    with kit.open_memory(path) as owner:
        owner.sources.forget(scope)
        _compare(facts, owner, OWNER, _without(before[OWNER], sid), gone | {sid}, group)
    assert kit.residue(path, gone) == {}
    for name in READERS:
        with kit.open_memory(path, principal=None if name == OWNER else name) as mem:
            hidden = facts.canaries(name) | gone | {sid}
            _compare(facts, mem, name, _without(before[name], sid), hidden, group)


# -- the command line ----------------------------------------------------------------------------


CLI_SEARCHES = (
    ["lead owner team"],
    ["open closed", "--as-of", "2024-01-04"],
    ["lead owner", "--known-at", "2024-06-01T12:30:00Z", "--limit", "3"],
    *([word] for word in CANARY.values()),
    *([fact_word(scope)] for scope in SCOPES),
)


@pytest.mark.parametrize("reader", [name for name in READERS if name != OWNER])
def test_fact_search_as_a_principal_equals_the_reduced_store(
    facts: FactStores, reader: str
) -> None:
    from click.testing import CliRunner

    from stratamem.cli import main

    def run(path: str, args: list[str]) -> tuple[int, str]:
        result = CliRunner().invoke(
            main,
            ["--db", path, "--as", reader, "fact", "search", *args],
            env={"STRATAMEM_AS": None, "STRATAMEM_PASSPHRASE": None},
            catch_exceptions=False,
        )
        return result.exit_code, kit.masked(result.output, path)

    canaries = facts.canaries(reader)
    for args in CLI_SEARCHES:
        for shape in ([], ["--json"]):
            got = run(facts.full, [*args, *shape])
            want = run(facts.reduced[reader], [*args, *shape])
            tally = kit.counts("facts, command line")
            tally.routes.add("fact search" + (" --json" if shape else ""))
            tally.principals.add(reader)
            tally.compared += 1
            tally.checks += len(canaries)
            assert not kit.leaked(got[1], canaries), (args, reader)
            assert got == want, (args, reader)
