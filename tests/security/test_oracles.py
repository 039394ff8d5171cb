"""Existence oracles: asking for something hidden must answer exactly as asking for something
that does not exist (the same value or the same exception class and message, the name asked
for aside), and must cost the store the same statements, so that neither the answer nor the
work behind it tells the two apart."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
import security_kit as kit
from security_kit import NOWHERE, Refs

from stratamem.api import Memory
from stratamem.types import Filters

# (principal, the source hidden from it): every principal but one cannot see hr-secret, and
# none can see the source without scopes.
CASES = [(p.name, "hr-secret") for p in kit.PRINCIPALS if p.name != "cat"] + [
    (p.name, "orphan") for p in kit.PRINCIPALS
]

Ask = Callable[[Memory, Refs], Any]

ASKS: dict[str, Ask] = {
    "get-leaf": lambda m, r: m.get(r.leaf),
    "get-summary": lambda m, r: m.get(r.top),
    "nodes": lambda m, r: m.nodes([r.top, r.summary, r.leaf]),
    "fetch_leaves": lambda m, r: m.fetch_leaves([r.leaf, r.summary]),
    "drill_down": lambda m, r: m.drill_down(r.top, max_depth=8),
    "drill_down-query": lambda m, r: m.drill_down(r.summary, query="queue"),
    "source-scope": lambda m, r: m.sources.get(r.scope),
    "source-id": lambda m, r: m.sources.get(r.source_id),
    "tree": lambda m, r: m.trees.get(r.scope),
    "tree_stats": lambda m, r: m.trees.stats(r.tree_id),
    "tree_tops": lambda m, r: m.trees.tops(r.tree_id),
    "unsealed_leaves": lambda m, r: m.trees.unsealed(r.tree_id),
    "item": lambda m, r: m.items.get(r.item or ""),
    "item-in-source": lambda m, r: m.items.get("eng0", source=r.scope),
    "query_source-scope": lambda m, r: m.query_source(r.scope),
    "query_source-id": lambda m, r: m.query_source(r.source_id, query="queue"),
    "query_topic": lambda m, r: [m.query_topic(e) for e in r.entities],
    "related": lambda m, r: [m.related(e) for e in r.entities],
    "entity_mentions": lambda m, r: [m.entities.mentions(e) for e in r.entities],
    "facts_about": lambda m, r: [m.facts.about(e) for e in r.entities],
    "ancestors-leaf": lambda m, r: m.trees.ancestors(r.leaf),
    "ancestors-summary": lambda m, r: m.trees.ancestors(r.summary),
    "search-source-filter": lambda m, r: m.search("queue", sources=[r.scope]),
    "keyword-source-filter": lambda m, r: m.search("queue", sources=[r.scope], mode="keyword"),
    "cover_window-filter": lambda m, r: m.cover_window(
        since=kit.T0, until=kit.T0 + timedelta(days=9), filters=Filters(sources=(r.scope,))
    ),
}


def _names(ref: Refs) -> list[str]:
    names = [ref.scope, ref.source_id, ref.tree_id, ref.top, ref.summary, ref.leaf, ref.item or ""]
    return [n for n in (*names, *ref.entities) if n]


def _as_nothing(text: str, ref: Refs) -> str:
    """``text`` with every id of ``ref`` put as ``<ref>``."""
    for name in sorted(_names(ref), key=len, reverse=True):
        text = text.replace(repr(name)[1:-1], "<ref>")
    return text


def _nowhere_like(ref: Refs) -> Refs:
    """Ids that name nothing, one for each of ``ref``'s entities too; where ``ref``'s top
    summary is its one summary, so is this one's."""
    entities = tuple(f"{e.partition(':')[0]}:no-such-{n}" for n, e in enumerate(ref.entities))
    summary = NOWHERE.top if ref.summary == ref.top else NOWHERE.summary
    return replace(NOWHERE, entities=entities, summary=summary)


def _only_hidden(world, ref: Refs, principal: str) -> Refs:  # type: ignore[no-untyped-def]
    """``ref`` with only the entities no source the principal sees mentions."""
    hidden = world.hidden_from(principal).source_ids
    only = tuple(
        e
        for e in ref.entities
        if all(h.source_id in hidden for h in world.owner.query_topic(e, limit=1000).hits)
    )
    assert only, f"{ref.scope} names no entity of its own"
    return replace(ref, entities=only)


@pytest.mark.parametrize("ask", sorted(ASKS))
@pytest.mark.parametrize(("principal", "source"), CASES)
def test_hidden_answers_as_nonexistent(  # type: ignore[no-untyped-def]
    world, refs, principal: str, source: str, ask: str
) -> None:
    mem = world.read("full", principal)
    hidden = _only_hidden(world, refs[source], principal)
    nowhere = _nowhere_like(hidden)
    call = ASKS[ask]
    path = str(world.full)
    (got, hidden_sql), (want, nowhere_sql) = kit.traced_pair(
        mem,
        # Warm what both calls share.
        lambda: [kit.outcome(lambda r=r: call(mem, r), path) for r in (hidden, nowhere) * 2],
        lambda: kit.outcome(lambda: call(mem, hidden), path),
        lambda: kit.outcome(lambda: call(mem, nowhere), path),
    )
    canaries = world.hidden_from(principal).canaries
    tally = kit.counts("existence oracles")
    tally.routes.add(ask)
    tally.principals.add(principal)
    tally.compared += 1
    tally.checks += len(canaries)
    assert not kit.leaked(got, canaries, named=_names(hidden))
    assert _as_nothing(repr(kit.plain(got)), hidden) == _as_nothing(repr(kit.plain(want)), nowhere)
    # The same statements, the name asked for aside: the same work, the same time.
    assert [_as_nothing(sql, hidden) for sql in hidden_sql] == [
        _as_nothing(sql, nowhere) for sql in nowhere_sql
    ]


# What a query naming an entity of a hidden source, or a word only it holds, is answered with:
# the same legs and notes as for one that names nothing known.
LEG_QUERIES = [
    ("@zorbhandle", "@nosuchhandle"),
    ("#zorbtag", "#nosuchtag"),
    ("zorblat@canary-mail.example", "nobody@nowhere-mail.example"),
    ("https://canary.example/zx-ledger", "https://nowhere.example/zz-nothing"),
    ("Zorblat Quimby", "Nobody Knownhere"),
    ("zanzibarquux", "qwertyzzzquux"),
    ("QuuxinatorBoard", "NothingBoardzz"),
]


@pytest.mark.parametrize("mode", ["hybrid", "graph", "keyword", "vector"])
@pytest.mark.parametrize(("hidden", "unknown"), LEG_QUERIES)
@pytest.mark.parametrize("principal", [p.name for p in kit.PRINCIPALS if p.name != "cat"])
def test_leg_status_does_not_tell_hidden_from_unknown(  # type: ignore[no-untyped-def]
    world, principal: str, hidden: str, unknown: str, mode: str
) -> None:
    mem = world.read("full", principal)
    got = mem.search(hidden, mode=mode)
    want = mem.search(unknown, mode=mode)
    assert dict(got.legs) == dict(want.legs)
    assert got.notes == want.notes
    assert not any(h.source_id == kit.source_id_for("hr-secret") for h in got.hits)
    if mode == "graph":
        assert (got.total, got.hits) == (0, ())


def test_graph_status_names_an_entity_only_where_it_is_visible(world) -> None:  # type: ignore[no-untyped-def]
    # The oracle that was: "ok: 0 nodes via handle:…" for a hidden entity, "no known entity"
    # for one that does not exist. The owner, who sees it, is told which entity matched.
    owner = world.owner.search("@zorbhandle", mode="graph").legs["graph"]
    assert "handle:zorbhandle" in owner
    for name in ("ann", "bea", "dan", "eve", "gil", "fay"):
        status = world.read("full", name).search("@zorbhandle", mode="graph").legs["graph"]
        assert status == "ok: no known entity in the query"


def test_entity_search_gives_nothing_for_hidden_and_unknown_needles(world) -> None:  # type: ignore[no-untyped-def]
    for name in ("ann", "bea", "dan", "eve", "gil", "fay"):
        mem = world.read("full", name)
        for needle in ("zorbhandle", "zorblat", "canary-mail", "quuxinator", "xylophonic"):
            assert mem.search_entities(needle) == []
            assert mem.search_entities(needle) == mem.search_entities(needle + "-nothing")
