"""Users, agents and sessions as filters: every read keeps the memory of those asked for, and
nothing else, as a filter by their sources would."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

import stratamem
from stratamem.config import TreeConfig
from stratamem.retrieval import primitives
from stratamem.retrieval.scope import identity_sources, resolve
from stratamem.testing import HashingEmbedder
from stratamem.types import Filters, Identity

T0 = datetime(2024, 4, 1, 9, 0, tzinfo=UTC)
WINDOW = {"since": T0 - timedelta(days=1), "until": T0 + timedelta(days=30)}
WORD = "osprey"
SMALL = TreeConfig(input_token_budget=40, summary_fanout=2)

MAYA = "memory/user:maya"
MAYA_PLANNER = "memory/user:maya/agent:planner"
BOB = "memory/user:bob"
MAYA_S1 = "chat/user:maya/session:s1"
MAYA_S3 = "chat/user:maya/session:s3"
BOB_S2 = "chat/user:bob/session:s2"
MAYA_FACTS = "facts/user:maya"
BOB_FACTS = "facts/user:bob"


def _talk(who: str, n: int) -> list[dict[str, str]]:
    return [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"{who} turn {i}: the {WORD} nest camera needs a new battery pack {i}",
        }
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def mem(module_location: str) -> Iterator[stratamem.Memory]:
    """Items, turns and facts of maya (one item with the agent planner), of bob, and of
    nobody; trees sealed. Shared by the module: the tests only read."""
    with stratamem.open(module_location, embedder=HashingEmbedder(), tree_config=SMALL) as m:
        for n in range(4):
            when = T0 + timedelta(hours=n)
            m.items.add(f"maya note {n}: the {WORD} feeder faces east", user="maya", time=when)
            m.items.add(f"bob note {n}: the {WORD} feeder faces west", user="bob", time=when)
        m.items.add(f"planner: book the {WORD} survey", user="maya", agent="planner", time=T0)
        m.items.add(f"a note of nobody's about the {WORD}", time=T0)
        m.items.add_messages(_talk("maya", 12), user="maya", session="s1", now=T0)
        m.items.add_messages(_talk("bob", 12), user="bob", session="s2", now=T0)
        m.items.add_messages(
            _talk("maya", 6), user="maya", session="s3", now=T0 + timedelta(days=2)
        )
        m.facts.remember(f"topic:{WORD}", "nests_in", "the north tower", user="maya")
        m.facts.remember(f"topic:{WORD}", "nests_in", "the south barn", user="bob")
        m.facts.remember(f"topic:{WORD}", "nests_in", "the old mill")
        m.facts.remember("user:maya", "prefers", "dark mode", user="maya")
        m.trees.flush()
        yield m


def scopes_of(hits: object) -> set[str]:
    return {h.tree_scope for h in hits}  # type: ignore[attr-defined]


# -- search ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["hybrid", "keyword", "vector"])
def test_search_keeps_the_memory_of_the_users_asked_for(mem: stratamem.Memory, mode: str) -> None:
    everything = scopes_of(mem.search(WORD, mode=mode, limit=200).hits)
    assert {MAYA, BOB, MAYA_S1, BOB_S2, "memory"} <= everything
    found = mem.search(WORD, mode=mode, limit=200, user="maya")
    assert scopes_of(found.hits) == {MAYA, MAYA_PLANNER, MAYA_S1, MAYA_S3}
    assert {h.user for h in found.hits} == {"maya"}
    both = mem.search(WORD, mode=mode, limit=200, user=["maya", "Bob"])
    assert scopes_of(both.hits) == everything - {"memory"}


def test_search_by_session_agent_and_with_other_filters(mem: stratamem.Memory) -> None:
    assert scopes_of(mem.search(WORD, session="s1", limit=200).hits) == {MAYA_S1}
    assert scopes_of(mem.search(WORD, agent="planner", limit=200).hits) == {MAYA_PLANNER}
    assert scopes_of(mem.search(WORD, user="bob", session="s1", limit=200).hits) == set()
    chats = mem.search(WORD, user="maya", sources=["chat/*"], limit=200)
    assert scopes_of(chats.hits) == {MAYA_S1, MAYA_S3}
    records = mem.search(WORD, user="maya", kinds=["record"], limit=200)
    assert scopes_of(records.hits) == {MAYA, MAYA_PLANNER}
    late = mem.search(WORD, user="maya", since=T0 + timedelta(days=1), limit=200)
    assert scopes_of(late.hits) == {MAYA_S3}


def test_a_user_nobody_has_written_for_finds_nothing(mem: stratamem.Memory) -> None:
    found = mem.search(WORD, user="carol")
    assert found.hits == ()
    assert found.total == 0
    assert found.notes == ("no source holds the memory of those users, agents or sessions",)
    assert mem.search(WORD, user="carol", mode="keyword").hits == ()


def test_the_filtered_ranking_equals_the_one_by_the_users_sources(mem: stratamem.Memory) -> None:
    by_user = mem.search(WORD, user="bob", limit=50)
    by_source = mem.search(WORD, sources=[BOB, BOB_S2], limit=50)
    assert [(h.node_id, h.score) for h in by_user.hits] == [
        (h.node_id, h.score) for h in by_source.hits
    ]
    assert by_user.total == by_source.total


# -- primitives --------------------------------------------------------------------------------


def test_query_source_and_query_global_keep_the_users_summaries(mem: stratamem.Memory) -> None:
    found = mem.query_source(user="bob", limit=100)
    assert found.hits
    assert scopes_of(found.hits) <= {BOB, BOB_S2}
    assert mem.query_source(MAYA_S1, user="bob").hits == ()  # a source outside the filter
    window = mem.query_global(**WINDOW, user="maya", limit=100)
    assert window.hits
    assert scopes_of(window.hits) <= {MAYA, MAYA_PLANNER, MAYA_S1, MAYA_S3}
    ranked = mem.query_source(user="maya", query=f"{WORD} camera", limit=100)
    assert scopes_of(ranked.hits) <= {MAYA, MAYA_PLANNER, MAYA_S1, MAYA_S3}


def test_query_topic_of_a_user_finds_that_users_memory(mem: stratamem.Memory) -> None:
    found = mem.query_topic("user:maya", limit=200)
    assert scopes_of(found.hits) == {MAYA, MAYA_PLANNER, MAYA_S1, MAYA_S3}
    assert scopes_of(mem.query_topic("user:maya", session="s3", limit=200).hits) == {MAYA_S3}
    assert mem.query_topic("user:maya", user="bob").hits == ()
    assert scopes_of(mem.query_topic("agent:planner").hits) == {MAYA_PLANNER}


def test_cover_window_fetch_leaves_and_drill_down_honour_users(mem: stratamem.Memory) -> None:
    cover = mem.cover_window(**WINDOW, user="bob")
    assert cover.hits
    assert scopes_of(cover.hits) <= {BOB, BOB_S2}
    bobs = [h.node_id for h in mem.search(WORD, user="bob", mode="keyword", limit=20).hits]
    assert mem.fetch_leaves(bobs, user="maya") == []
    assert [h.node_id for h in mem.fetch_leaves(bobs, user="bob")] == bobs[:20]
    top = mem.trees.tops(mem.trees.get(BOB_S2).id)[0]
    assert mem.drill_down(top.node_id, user="maya") == []
    assert mem.drill_down(top.node_id, user="bob")


def test_filters_given_and_users_asked_for_both_apply(mem: stratamem.Memory) -> None:
    chats = Filters(sources=("chat/*",))
    found = mem.query_source(filters=chats, user="maya", limit=100)
    assert found.hits
    assert scopes_of(found.hits) <= {MAYA_S1, MAYA_S3}
    bob_only = Filters(users=("bob",))
    assert mem.query_source(filters=bob_only, user="maya").hits == ()
    module = primitives.query_source(mem.store, filters=Filters(users=("bob",)), limit=100)
    assert module.hits
    assert scopes_of(module.hits) <= {BOB, BOB_S2}


# -- facts -------------------------------------------------------------------------------------


def test_fact_reads_keep_the_users_facts(mem: stratamem.Memory) -> None:
    everyone = {f.object for f in mem.facts.recall(f"topic:{WORD}")}
    assert everyone == {"the north tower", "the south barn", "the old mill"}
    assert [f.object for f in mem.facts.recall(f"topic:{WORD}", user="maya")] == ["the north tower"]
    assert [f.object for f in mem.facts.recall(user="Bob")] == ["the south barn"]
    assert mem.facts.recall(user="maya", session="s1") == []
    assert [h.fact.object for h in mem.facts.search(WORD, user="bob")] == ["the south barn"]
    hits = mem.facts.query("nests", user="maya").hits
    assert hits
    assert {(h.tree_scope, h.user) for h in hits} == {(MAYA_FACTS, "maya")}
    history = mem.facts.history(f"topic:{WORD}", "nests_in", user="bob")
    assert [f.object for f in history] == ["the south barn"]
    assert [f.object for f in mem.facts.recall("user:maya", user="maya")] == ["dark mode"]


# -- the filter type and its resolution ---------------------------------------------------------


def test_filters_hold_checked_lower_cased_ids() -> None:
    found = Filters(users=("Maya", "maya"), agents=("Planner",), sessions=("S1",))
    assert (found.users, found.agents, found.sessions) == (("maya",), ("planner",), ("S1",))
    assert Filters(users="maya").users == ("maya",)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bad user id 'a/b'"):
        Filters(users=("a/b",))
    assert Filters() == Filters(users=())


def test_resolve_turns_identities_into_the_ids_of_their_sources(mem: stratamem.Memory) -> None:
    ids = {s.scope: s.id for s in mem.sources.list()}
    found = resolve(mem.store, Filters(users=("maya",), sources=("memory*",), since=T0))
    assert found == Filters(sources=tuple(sorted([ids[MAYA], ids[MAYA_PLANNER]])), since=T0)
    assert resolve(mem.store, Filters(users=("nobody",))) is None
    plain = Filters(sources=("chat/*",))
    assert resolve(mem.store, plain) is plain
    assert identity_sources(mem.store) is None
    assert identity_sources(mem.store, users="bob") == {ids[BOB], ids[BOB_S2], ids[BOB_FACTS]}
    assert identity_sources(mem.store, sessions=["s1", "s3"]) == {ids[MAYA_S1], ids[MAYA_S3]}


def test_a_store_refuses_filters_left_unresolved(mem: stratamem.Memory) -> None:
    with pytest.raises(ValueError, match="resolved to sources before a store reads them"):
        mem.store.allowed_rowids(Filters(users=("maya",)))


def test_a_hit_shows_whose_memory_it_is(mem: stratamem.Memory) -> None:
    hit = mem.search(WORD, session="s3", limit=1).hits[0]
    assert hit.identity == Identity(user="maya", session="s3")
    shown = hit.to_dict()
    assert (shown["user"], shown["agent"], shown["session"]) == ("maya", None, "s3")
    plain = mem.search(WORD, sources=["memory"], limit=1).hits[0]
    assert (plain.user, plain.agent, plain.session) == (None, None, None)
