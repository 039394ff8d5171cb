"""A user's memory behind the gate: a principal given ``user:maya`` reads maya's items, turns
and facts and nothing of bob's, exactly as it would read a store that never held bob's; a
write principal writes only for the users it holds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import security_kit as kit

from stratamem.access.writes import admit_source, check_identity
from stratamem.api import Memory
from stratamem.errors import AccessDenied
from stratamem.store.access import identity_access, may_read, parse_scopes
from stratamem.types import Identity, Principal, Source, SourceKind

T0 = datetime(2024, 6, 3, 9, 0, tzinfo=UTC)
READER = "maya-reader"
BOB_WORDS = ("zanzibarquux", "quimbyvale", "zorbfeeder")


@dataclass(frozen=True)
class Write:
    """One write of the plan: whose it is, and what it does to a memory."""

    whose: str
    run: Callable[[Memory], object]


def _talk(who: str, words: str, n: int) -> list[dict[str, Any]]:
    return [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"{who} asks about the osprey nest and {words} number {i}",
        }
        for i in range(n)
    ]


# Bob writes first: in the full store his first write gives the store its model, in maya's
# store hers does, and what each holds must not tell.
PLAN: tuple[Write, ...] = (
    Write(
        "bob",
        lambda m: m.items.add(
            "Zanzibarquux osprey feeder faces west", user="bob", id="b1", time=T0
        ),
    ),
    Write(
        "maya", lambda m: m.facts.remember("user:maya", "prefers", "dark mode", user="maya", now=T0)
    ),
    Write(
        "bob",
        lambda m: m.facts.remember(
            "user:bob", "prefers", "quimbyvale light mode", user="bob", now=T0
        ),
    ),
    Write(
        "maya",
        lambda m: m.items.add(
            "The osprey feeder faces east", user="maya", id="m1", time=T0 + timedelta(hours=1)
        ),
    ),
    Write(
        "maya",
        lambda m: m.items.add(
            "Planner: book the osprey survey", user="maya", agent="planner", id="m2", time=T0
        ),
    ),
    Write(
        "bob",
        lambda m: m.items.add_messages(
            _talk("bob", "zorbfeeder", 9), user="bob", session="b-1", now=T0
        ),
    ),
    Write(
        "maya",
        lambda m: m.items.add_messages(
            _talk("maya", "the camera battery", 9), user="maya", session="m-1", now=T0
        ),
    ),
    Write(
        "bob",
        lambda m: m.items.add(
            "Shared key, bob's osprey zanzibarquux", user="bob", id="shared", time=T0
        ),
    ),
    Write(
        "maya",
        lambda m: m.items.add("Shared key, maya's osprey", user="maya", id="shared", time=T0),
    ),
    Write(
        "maya",
        lambda m: m.facts.remember(
            "topic:osprey", "nests_in", "the north tower", user="maya", now=T0
        ),
    ),
    Write(
        "bob",
        lambda m: m.facts.remember(
            "topic:osprey", "nests_in", "the zorbfeeder barn", user="bob", now=T0
        ),
    ),
)


def build(location: str, writers: set[str]) -> None:
    with kit.open_memory(location) as mem:
        for write in PLAN:
            if write.whose in writers:
                write.run(mem)
        mem.indexes.embed()
        mem.trees.flush()
        mem.principals.add(READER, ["user:maya"])


def every_read(mem: Memory) -> dict[str, Any]:
    reads: dict[str, Any] = {}
    for query in ("osprey feeder", "camera battery", "zanzibarquux", "dark mode"):
        reads.update({f"{query}:{k}": v for k, v in kit.reads(mem, query, "user:maya", "").items()})
    calls: dict[str, Callable[[], object]] = {
        "search-user": lambda: mem.search("osprey", user="maya", limit=50),
        "search-bob": lambda: mem.search("osprey", user="bob", limit=50),
        "search-session": lambda: mem.search("osprey", session="m-1", limit=50),
        "keyword-user": lambda: mem.search("osprey", user="maya", mode="keyword", limit=50),
        "query_source-user": lambda: mem.query_source(user="maya", query="osprey"),
        "query_topic-user": lambda: mem.query_topic("user:maya", limit=100),
        "recall": lambda: mem.facts.recall(),
        "recall-user": lambda: mem.facts.recall(user="maya"),
        "recall-bob": lambda: mem.facts.recall(user="bob"),
        "search_facts": lambda: mem.facts.search("osprey nests mode", limit=50),
        "query_facts": lambda: mem.facts.query("osprey nests mode", limit=50),
        "query_facts-dark": lambda: mem.facts.query("dark mode", limit=50),
        "search_facts-dark": lambda: mem.facts.search("dark mode preference", limit=50),
        "fact_history": lambda: mem.facts.history("topic:osprey", "nests_in"),
        "item": lambda: mem.items.get("shared"),
        "item-user": lambda: mem.items.get("shared", user="maya"),
        "item-bob": lambda: mem.items.get("b1"),
        "entities": lambda: mem.search_entities("maya", limit=50),
        "entities-bob": lambda: mem.search_entities("bob", limit=50),
    }
    reads.update({name: kit.plain(kit.outcome(call, mem.path)) for name, call in calls.items()})
    return reads


def test_a_user_scoped_principal_reads_as_if_only_that_users_memory_existed(
    tmp_path: Path, store_location: str, locations: Any
) -> None:
    full, reduced = store_location, locations.new(store_location, tmp_path, "maya")
    build(full, {"maya", "bob"})
    build(reduced, {"maya"})
    with (
        kit.open_memory(full, principal=READER) as a,
        kit.open_memory(reduced, principal=READER) as b,
    ):
        seen_full, seen_reduced = every_read(a), every_read(b)
        assert {s.scope for s in a.sources.list()} == {
            "memory/user:maya",
            "memory/user:maya/agent:planner",
            "chat/user:maya/session:m-1",
            "facts/user:maya",
        }
    for name in seen_full:
        kit.assert_same(seen_full[name], seen_reduced[name], name)
        assert kit.leaked(seen_full[name], BOB_WORDS) == [], name
    # The reads found something: the comparison is not of two empty answers.
    assert seen_full["search-user"]["hits"]
    assert seen_full["recall-user"]
    assert seen_full["item"]["text"] == "Shared key, maya's osprey"
    assert seen_full["item-bob"]["type"] == "NotFoundError"


# -- the write rule ------------------------------------------------------------------------------


def reader(*scopes: str, write: bool = True) -> Principal:
    return Principal(name="agent-1", scopes=tuple(scopes), write=write)


def test_a_write_principal_writes_only_for_the_users_it_holds() -> None:
    maya = Identity.of(user="maya")
    check_identity(None, maya)  # the owner writes for anyone
    check_identity(reader("user:maya"), maya)
    check_identity(reader("*"), Identity.of(user="bob", agent="planner"))
    # A session is no reader's scope: alone it names no one the principal holds (its sources
    # carry only private, as the owner's memory does); with its user, the user's rule holds.
    with pytest.raises(AccessDenied, match="only for a user or an agent it holds"):
        check_identity(reader("team"), Identity.of(session="s1"))
    check_identity(reader("user:maya"), Identity.of(user="maya", session="s1"))
    check_identity(reader("*"), Identity.of(session="s1"))
    with pytest.raises(AccessDenied, match="may not write the memory of user:maya"):
        check_identity(reader("private", "team"), maya)
    with pytest.raises(AccessDenied, match="of agent:planner: it holds no such scope"):
        check_identity(reader("user:maya"), Identity.of(user="maya", agent="planner"))


def test_a_users_source_is_readable_by_that_users_scope_and_the_owner() -> None:
    whose = Identity.of(user="maya", agent="planner")
    access = identity_access(whose)
    assert access == ("agent:planner", "private", "user:maya")
    assert identity_access(Identity()) is None
    source = Source(
        id="src_1",
        scope=whose.scope("memory"),
        kind=SourceKind.RECORD,
        platform="memory",
        location="",
        access=access or (),
    )
    assert may_read(None, source)
    assert may_read(reader("user:maya"), source)
    assert may_read(reader("agent:planner"), source)
    assert not may_read(reader("user:bob"), source)
    # The source rule still holds beside it: a principal writes what it reads after.
    both = reader("user:maya", "agent:planner")
    assert admit_source(both, source, source, named=True) is None
    with pytest.raises(AccessDenied):
        admit_source(reader("user:bob"), source, source, named=True)
    # Only a write for the user makes the source: an ingest named like it is refused.
    with pytest.raises(AccessDenied, match="made only by a write for it"):
        admit_source(both, None, source, named=True)


def test_user_scopes_take_addresses() -> None:
    assert parse_scopes("user:maya@example.com, agent:planner") == (
        "agent:planner",
        "user:maya@example.com",
    )
    whose = Identity.of(user="Maya@Example.com")
    assert whose.labels == ("user:maya@example.com",)
    assert parse_scopes(whose.labels) == whose.labels
