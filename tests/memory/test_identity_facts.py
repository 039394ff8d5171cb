"""Facts of a user's, an agent's or a session's memory: where ``remember`` puts them, the
``user:`` and ``agent:`` subjects, and the vectors of facts stated before a store had a
model."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

import stratamem
from stratamem.errors import LockError
from stratamem.memory.remember import entity_id
from stratamem.testing import HashingEmbedder

NOW = datetime(2024, 5, 2, 12, 0, tzinfo=UTC)


@pytest.fixture
def mem(store_location: str) -> Iterator[stratamem.Memory]:
    with stratamem.open(store_location, embedder=HashingEmbedder()) as memory:
        yield memory


def test_users_and_agents_are_entity_kinds() -> None:
    assert entity_id("user:Maya") == "user:maya"
    assert entity_id("agent:Planner Bot") == "agent:planner bot"
    with pytest.raises(ValueError, match="one of agent, channel, email, handle, person, tag"):
        entity_id("robot:x")


def test_a_fact_about_a_user_is_remembered(mem: stratamem.Memory) -> None:
    write = mem.facts.remember("user:maya", "prefers", "dark mode", now=NOW)
    (fact,) = write.recorded
    assert (fact.subject, fact.predicate, fact.object) == ("user:maya", "prefers", "dark mode")
    assert mem.sources.get(fact.source_id).scope == "facts:asserted"
    assert [f.object for f in mem.facts.recall("user:Maya")] == ["dark mode"]


def test_a_fact_of_a_users_memory_goes_to_that_users_facts(mem: stratamem.Memory) -> None:
    write = mem.facts.remember("user:maya", "prefers", "dark mode", user="Maya", now=NOW)
    source = mem.sources.get(write.recorded[0].source_id)
    assert source.scope == "facts/user:maya"
    assert source.access == ("private", "user:maya")
    agent = mem.facts.remember("topic:osprey", "seen_at", "dawn", agent="planner", session="s1")
    assert mem.sources.get(agent.recorded[0].source_id).scope == "facts/agent:planner/session:s1"
    # A value stated again for the same user changes nothing; another user's is their own.
    assert mem.facts.remember("user:maya", "prefers", "dark mode", user="maya").recorded == ()
    bob = mem.facts.remember("user:maya", "prefers", "light mode", user="bob", now=NOW)
    assert mem.sources.get(bob.recorded[0].source_id).scope == "facts/user:bob"
    assert [f.object for f in mem.facts.recall("user:maya", user="maya")] == ["dark mode"]


def test_evidence_of_a_users_fact_lies_in_that_users_memory(mem: stratamem.Memory) -> None:
    turns = mem.items.add_messages(
        [{"role": "user", "content": "I moved to the osprey team"}], user="maya", session="s1"
    )
    evidence = list(turns.chunks_added)
    write = mem.facts.remember("user:maya", "team", "osprey", evidence=evidence, user="maya")
    assert mem.sources.get(write.recorded[0].source_id).scope == "chat/user:maya/session:s1"
    with pytest.raises(ValueError, match=r"^the evidence is not in the memory of user 'bob'$"):
        mem.facts.remember("user:maya", "team", "heron", evidence=evidence, user="bob")
    mem.facts.remember("user:maya", "prefers", "tea", user="maya")  # makes facts/user:maya
    with pytest.raises(ValueError, match="the evidence is not in source 'facts/user:maya'"):
        mem.facts.remember(
            "user:maya", "team", "heron", evidence=evidence, user="maya", source="facts/user:maya"
        )


def test_a_bad_user_or_base_is_refused_and_writes_nothing(mem: stratamem.Memory) -> None:
    with pytest.raises(ValueError, match="bad user id 'a b'"):
        mem.facts.remember("user:maya", "prefers", "tea", user="a b")
    with pytest.raises(ValueError, match="bad base name 'facts:x'"):
        mem.facts.remember("user:maya", "prefers", "tea", user="maya", source="facts:x")
    assert mem.sources.list() == []
    assert mem.facts.recall() == []


def test_a_locked_users_facts_source_takes_no_facts(mem: stratamem.Memory) -> None:
    mem.facts.remember("user:maya", "prefers", "tea", user="maya", now=NOW)
    mem.locks.lock("facts/user:maya", passphrase="correct horse battery")
    with pytest.raises(LockError, match="is locked"):
        mem.facts.remember("user:maya", "prefers", "coffee", user="maya")


def test_facts_stated_before_the_first_write_get_vectors_with_it(
    mem: stratamem.Memory, store_location: str
) -> None:
    mem.facts.remember("user:maya", "prefers", "dark mode", user="maya", now=NOW)
    assert mem.store.get_setting("embed.model") is None
    assert mem.store.fact_vectors(HashingEmbedder().spec.signature, _fact_ids(mem)) == {}
    mem.items.add("maya's first note", user="maya")  # the store takes the model
    held = mem.store.fact_vectors(HashingEmbedder().spec.signature, _fact_ids(mem))
    assert set(held) == set(_fact_ids(mem))
    # Facts stated after it are embedded as they are written.
    mem.facts.remember("user:maya", "prefers", "large fonts", user="maya", many=True, now=NOW)
    assert len(mem.store.fact_vectors(HashingEmbedder().spec.signature, _fact_ids(mem))) == 2


def _fact_ids(mem: stratamem.Memory) -> list[str]:
    return [f.id for f in mem.store.facts(believed_only=False)]
