"""Conversation turns (``add_messages``): found by every leg when the call returns, written once
however often a call is retried, in one transaction whatever its size, with the messages that
cannot be written skipped and said why."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import stratamem
from stratamem.embed.base import ModelSpec, Role, Vectors
from stratamem.ingest import conversation
from stratamem.ingest.conversation import MAX_MESSAGES, add_messages
from stratamem.store.sources import source_id_for
from stratamem.testing import HashingEmbedder

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)
TALK = [
    {"role": "system", "content": "You are a helpful planning assistant."},
    {"role": "user", "content": "I prefer the heron dashboard in dark mode"},
    {"role": "assistant", "content": "Noted: the heron dashboard stays dark."},
]


@pytest.fixture
def mem(store_location: str) -> Iterator[stratamem.Memory]:
    with stratamem.open(store_location, embedder=HashingEmbedder()) as memory:
        yield memory


def turns(n: int, *, word: str = "queue") -> list[dict[str, Any]]:
    return [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"turn {i} on the {word} topic{i % 37} with marker{i}",
        }
        for i in range(n)
    ]


def stored_records(memory: stratamem.Memory, scope: str) -> dict[str, Any]:
    found = memory.sources.get(scope)
    keys = memory.store.record_keys(found.id)
    return {s.key: s.record for s in memory.store.records_by_key(found.id, list(keys))}


# -- found at once ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["keyword", "vector", "graph", "hybrid"])
def test_turns_are_found_when_the_call_returns(mem: stratamem.Memory, mode: str) -> None:
    write = mem.items.add_messages(TALK, user="maya", session="s1", now=T0)
    assert write.scope == "chat/user:maya/session:s1"
    assert (write.user, write.agent, write.session) == ("maya", None, "s1")
    assert write.added == 3
    assert write.unchanged == 0
    assert not write.skipped
    assert write.chunks_added
    assert write.embedded == len(write.chunks_added)

    query = "user:maya" if mode == "graph" else "heron dashboard dark mode"
    response = mem.search(query, mode=mode)
    assert all(state.startswith("ok") for state in response.legs.values()), response.legs
    assert [h.node_id for h in response.hits] == list(write.chunks_added)
    hit = response.hits[0]
    assert (hit.user, hit.agent, hit.session) == ("maya", None, "s1")
    assert hit.to_dict()["user"] == "maya"
    assert hit.to_dict()["session"] == "s1"
    assert "user: I prefer the heron dashboard in dark mode" in hit.content


def test_a_session_source_is_a_private_chat_source_of_its_user(mem: stratamem.Memory) -> None:
    write = mem.items.add_messages(TALK, user="Maya", agent="planner", session="s-1", now=T0)
    source = mem.sources.get(write.scope)
    assert source.scope == "chat/user:maya/agent:planner/session:s-1"
    assert source.kind is stratamem.SourceKind.CHAT
    assert source.access == ("agent:planner", "private", "user:maya")
    assert mem.store.trees.of_source(source.id) is not None  # the seal is queued
    assert mem.items.add_messages(TALK[:1], now=T0).scope == "chat"
    assert mem.items.add_messages(TALK[:1], user="maya", now=T0).scope == "chat/user:maya"


def test_turns_keep_their_order_author_role_id_and_time(mem: stratamem.Memory) -> None:
    given = T0 - timedelta(days=1)
    messages = [
        {"role": "user", "content": "first", "name": "Maya Lin"},
        {"role": "assistant", "content": "second"},
        {"role": "user", "content": "third", "id": "msg-3", "time": given.isoformat()},
        {"role": "tool", "content": [{"type": "text", "text": "fourth"}, {"type": "image"}]},
    ]
    write = mem.items.add_messages(messages, session="s1", now=T0)
    assert write.ids[2] == "msg-3"
    records = stored_records(mem, write.scope)
    first, second, third, fourth = (records[key] for key in write.ids)
    assert (first.author, first.meta["role"], first.time) == ("Maya Lin", "user", T0)
    assert (second.author, second.time) == ("assistant", T0 + timedelta(milliseconds=1))
    assert (third.author, third.time, third.id) == ("user", given, "msg-3")
    assert fourth.text == "fourth"
    assert fourth.meta["role"] == "tool"
    assert fourth.time == T0 + timedelta(milliseconds=2)  # after every turn before it


def test_the_user_and_agent_of_a_conversation_are_entities(mem: stratamem.Memory) -> None:
    write = mem.items.add_messages(TALK, user="maya", agent="planner", session="s1", now=T0)
    found = {m.canonical_id for m in mem.search_entities("maya", limit=20)}
    assert "user:maya" in found
    assert {m.canonical_id for m in mem.search_entities("planner")} >= {"agent:planner"}
    topic = mem.query_topic("user:maya")
    assert [h.node_id for h in topic.hits] == list(write.chunks_added)
    assert mem.query_topic("user:bob").hits == ()


def test_objects_with_role_and_content_are_messages(mem: stratamem.Memory) -> None:
    @dataclass
    class Message:
        role: str
        content: str

    write = mem.items.add_messages([Message("user", "kestrel migration plan")], user="maya", now=T0)
    assert write.added == 1
    assert mem.search("kestrel migration", mode="keyword").hits


# -- retries and edits -------------------------------------------------------------------------


def test_a_retried_call_changes_nothing(mem: stratamem.Memory) -> None:
    first = mem.items.add_messages(TALK, user="maya", session="s1")
    chunks = mem.store.chunk_count()
    again = mem.items.add_messages(TALK, user="maya", session="s1")  # later: another clock time
    assert (again.added, again.updated, again.unchanged) == (0, 0, 3)
    assert again.ids == first.ids
    assert again.chunks_added == ()
    assert again.chunks_removed == 0
    assert mem.store.chunk_count() == chunks
    # The same turns in another session are other turns.
    other = mem.items.add_messages(TALK, user="maya", session="s2")
    assert other.added == 3
    assert set(other.ids).isdisjoint(first.ids)


def test_a_retry_that_brings_new_turns_adds_only_those(mem: stratamem.Memory) -> None:
    mem.items.add_messages(TALK[:2], user="maya", session="s1", now=T0)
    write = mem.items.add_messages(TALK, user="maya", session="s1", now=T0 + timedelta(minutes=5))
    assert (write.added, write.unchanged) == (1, 2)
    records = stored_records(mem, write.scope)
    assert records[write.ids[2]].time == T0 + timedelta(minutes=5)


def test_a_turn_given_again_under_its_id_with_new_text_is_updated(mem: stratamem.Memory) -> None:
    mem.items.add_messages([{"role": "user", "content": "the old plan", "id": "m1"}], user="maya")
    write = mem.items.add_messages(
        [{"role": "user", "content": "the new plan", "id": "m1"}], user="maya"
    )
    assert (write.added, write.updated) == (0, 1)
    assert [h.content for h in mem.search("plan", mode="keyword").hits] == ["user: the new plan"]


# -- bad input ---------------------------------------------------------------------------------


def test_messages_that_cannot_be_written_are_skipped_with_their_reasons(
    mem: stratamem.Memory,
) -> None:
    messages: list[Any] = [
        {"role": "user", "content": "a good turn about the osprey"},
        {"role": "robot", "content": "unknown role"},
        {"role": "assistant", "content": "   "},
        {"role": "assistant", "content": None, "tool_calls": []},
        "just a string",
        {"role": "user", "content": "bad time", "time": "yesterday-ish"},
        {"role": "user", "content": "bad name", "name": 42},
        {"role": "user", "content": "an id twice", "id": "x"},
        {"role": "user", "content": "an id twice, again", "id": "x"},
    ]
    write = mem.items.add_messages(messages, user="maya")
    assert write.added == 2
    reasons = {s.index: s.reason for s in write.skipped}
    assert reasons == {
        1: "unknown role 'robot' (one of user, assistant, system, tool)",
        2: "no text",
        3: "no text",
        4: "not a message (a mapping or an object with role and content)",
        5: "cannot read 'yesterday-ish' as a time (a datetime, ISO 8601 or epoch)",
        6: "a name is one line of at most 200 characters",
        8: "the same id as message 7",
    }
    assert write.to_dict()["skipped"][0] == {"index": 1, "reason": reasons[1]}


def test_a_call_whose_every_message_is_bad_writes_nothing(mem: stratamem.Memory) -> None:
    bad = [{"role": "robot", "content": "x"}, {"role": "user", "content": ""}]
    with pytest.raises(ValueError, match=r"^no message could be written: message 0: unknown role"):
        mem.items.add_messages(bad, user="maya")
    assert mem.sources.list() == []
    empty = mem.items.add_messages([], user="maya")
    assert (empty.added, empty.scope) == (0, "chat/user:maya")
    assert mem.sources.list() == []


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({"user": "maya/bob"}, "bad user id 'maya/bob'"),
        ({"user": ""}, "a user id cannot be blank"),
        ({"agent": "x" * 59}, "agent id 'x+' is longer than 58 characters"),
        ({"session": "s 1"}, "bad session id 's 1'"),
        ({"session": "s*"}, "bad session id 's\\*'"),
    ],
)
def test_bad_user_agent_and_session_ids_are_refused(
    mem: stratamem.Memory, given: dict[str, str], error: str
) -> None:
    with pytest.raises(ValueError, match=error) as raised:
        mem.items.add_messages(TALK, **given)
    assert "\n" not in str(raised.value)
    assert mem.sources.list() == []


def test_too_many_messages_or_not_a_list_are_refused(mem: stratamem.Memory) -> None:
    with pytest.raises(ValueError, match=r"at most 10,000 messages .* this one has 10,001"):
        mem.items.add_messages(turns(MAX_MESSAGES + 1))
    with pytest.raises(ValueError, match="a list of"):
        mem.items.add_messages({"role": "user", "content": "x"})  # type: ignore[arg-type]
    assert mem.sources.list() == []


# -- a long session, one transaction -----------------------------------------------------------


def test_a_ten_thousand_turn_session_is_written_whole(mem: stratamem.Memory) -> None:
    write = mem.items.add_messages(turns(MAX_MESSAGES), user="bob", session="long", now=T0)
    assert write.added == MAX_MESSAGES
    assert not write.skipped
    assert len(stored_records(mem, write.scope)) == MAX_MESSAGES
    assert write.embedded == len(write.chunks_added) == mem.store.chunk_count()
    hits = mem.search("marker7777", mode="keyword").hits
    assert [h.session for h in hits] == ["long"]
    assert "marker7777" in hits[0].content


def test_a_write_that_fails_midway_leaves_nothing(
    mem: stratamem.Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    mem.items.add_messages(TALK, user="maya", session="kept", now=T0)
    before = (mem.store.chunk_count(), [s.scope for s in mem.sources.list()])
    calls = 0
    real = mem.store.add_new_edges

    def failing(source_id: str, mentions: Iterable[Collection[str]]) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:  # after two batches of chunks were written
            raise RuntimeError("the disk went away")
        real(source_id, mentions)

    monkeypatch.setattr(mem.store, "add_new_edges", failing)
    with pytest.raises(RuntimeError, match="the disk went away"):
        mem.items.add_messages(turns(MAX_MESSAGES), user="bob", session="long", now=T0)
    monkeypatch.undo()
    assert calls == 3
    assert (mem.store.chunk_count(), [s.scope for s in mem.sources.list()]) == before
    assert mem.search("marker7777", mode="keyword").hits == ()
    assert list(mem.store.record_keys(source_id_for("chat/user:bob/session:long"))) == []


def test_an_embedder_that_fails_leaves_the_turns_written_and_waiting(
    store_location: str,
) -> None:
    class Failing(HashingEmbedder):
        fail = False

        def embed_batch(self, texts: Any, *, role: Role = "passage") -> Vectors:
            if self.fail:
                raise RuntimeError("the model server is down")
            return super().embed_batch(texts, role=role)

    embedder = Failing()
    with stratamem.open(store_location, embedder=embedder) as memory:
        memory.items.add_messages(TALK[:1], user="maya", now=T0)  # the store takes the model
        embedder.fail = True
        write = conversation.add_messages(
            memory.store, TALK[1:], user="maya", now=T0, embedder=embedder
        )
        assert write.added == 2
        assert write.embedded == 0
        assert write.notes == ("not embedded (the model server is down): run embed",)
        assert memory.indexes.pending() == len(write.chunks_added)
        assert memory.search("heron dashboard", mode="keyword").hits
        embedder.fail = False
        assert memory.indexes.embed().embedded == len(write.chunks_added)


def test_a_module_caller_without_an_embedder_leaves_the_chunks_to_embed(
    mem: stratamem.Memory,
) -> None:
    write = add_messages(mem.store, TALK, user="maya", now=T0)
    assert write.embedded == 0
    assert mem.indexes.pending() == len(write.chunks_added)
    assert write.to_dict()["scope"] == "chat/user:maya"


def test_the_hashing_spec_is_what_the_store_records(mem: stratamem.Memory) -> None:
    mem.items.add_messages(TALK, user="maya", now=T0)
    spec: ModelSpec = HashingEmbedder().spec
    assert mem.store.get_setting("embed.model") == spec.signature
    assert mem.store.get_setting("embed.dim") == str(spec.dim)
