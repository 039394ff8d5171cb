"""Items keep their history: every write that changes an item closes its version and opens
the next, a delete opens a removal, and each version reads back as it was, at the time it
was held; an item's id reads as the item now wherever a node id is read."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import stratamem
from stratamem.errors import NotFoundError, StratamemError
from stratamem.ingest import item_history as history_module
from stratamem.ingest.items import get_item, item_history
from stratamem.store.copy import copy_store
from stratamem.testing import HashingEmbedder
from suite import is_postgres

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GENERAL = "slack:#general"
DAN_THANKS = "1710147750.000000"  # Dan's message in the first #general window
T0 = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)


class Clock:
    """The transaction time of item writes: ``T0``, moved on by hand."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def tick(self, minutes: int = 1) -> datetime:
        self.now += timedelta(minutes=minutes)
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    found = Clock()
    monkeypatch.setattr(history_module, "_clock", found)
    return found


@pytest.fixture
def mem(store_location: str) -> Iterator[stratamem.Memory]:
    with stratamem.open(store_location, embedder=HashingEmbedder()) as memory:
        yield memory


def test_an_edit_closes_the_version_and_opens_the_next(mem: stratamem.Memory, clock: Clock) -> None:
    added = mem.items.add("Carol leads on-call", author="dan", id="oncall")
    assert (added.action, added.version) == ("added", 1)
    assert added.to_dict()["version"] == 1
    clock.tick()
    edited = mem.items.edit("oncall", text="Dan leads on-call")
    assert (edited.action, edited.version) == ("updated", 2)

    first, second = mem.items.history("oncall")
    assert (first.version, first.action, first.text, first.author) == (
        1,
        "added",
        "Carol leads on-call",
        "dan",
    )
    assert (second.version, second.action, second.text, second.author) == (
        2,
        "edited",
        "Dan leads on-call",
        "dan",
    )
    assert (first.recorded_at, first.closed_at) == (T0, T0 + timedelta(minutes=1))
    assert (second.recorded_at, second.closed_at) == (T0 + timedelta(minutes=1), None)
    assert (first.nodes, second.nodes) == (added.chunks_added, edited.chunks_added)
    assert first.source_id == second.source_id == added.source_id
    assert second.to_dict()["recorded_at"] == "2024-06-01T12:01:00Z"
    assert item_history(mem.store, "oncall", source="memory") == [first, second]


def test_as_of_reads_the_version_held_then(mem: stratamem.Memory, clock: Clock) -> None:
    mem.items.add("v1 text", id="note")
    clock.tick(10)
    mem.items.edit("note", text="v2 text")
    clock.tick(10)
    mem.items.edit("note", text="v3 text")

    def text_at(minutes: float) -> str:
        return get_item(mem.store, "note", as_of=T0 + timedelta(minutes=minutes)).text

    assert [text_at(m) for m in (0, 5, 9.99, 10, 15, 20, 60)] == [
        "v1 text",
        "v1 text",
        "v1 text",
        "v2 text",
        "v2 text",
        "v3 text",
        "v3 text",
    ]
    assert get_item(mem.store, "note").text == "v3 text"
    assert mem.items.get("note", as_of=T0 + timedelta(minutes=5)).text == "v1 text"
    assert mem.items.get("note").text == "v3 text"
    # A naive time is UTC.
    assert get_item(mem.store, "note", as_of=datetime(2024, 6, 1, 12, 12)).version == 2
    with pytest.raises(NotFoundError, match="no item with id 'note' at 2024-06-01T11:59:00Z"):
        get_item(mem.store, "note", as_of=T0 - timedelta(minutes=1))


def test_rm_closes_the_version_and_keeps_the_history(mem: stratamem.Memory, clock: Clock) -> None:
    mem.items.add("first words", id="gone")
    clock.tick()
    mem.items.edit("gone", text="last words")
    clock.tick()
    removed = mem.items.rm("gone")
    assert (removed.action, removed.version) == ("deleted", 3)

    versions = mem.items.history("gone")
    assert [(v.version, v.action, v.text, v.closed_at) for v in versions] == [
        (1, "added", "first words", T0 + timedelta(minutes=1)),
        (2, "edited", "last words", T0 + timedelta(minutes=2)),
        (3, "removed", "last words", None),
    ]
    with pytest.raises(NotFoundError, match="removed at 2024-06-01T12:02:00Z"):
        get_item(mem.store, "gone")
    with pytest.raises(NotFoundError, match="removed at"):
        get_item(mem.store, "gone", as_of=T0 + timedelta(minutes=5))
    assert get_item(mem.store, "gone", as_of=T0 + timedelta(minutes=1)).text == "last words"
    with pytest.raises(NotFoundError, match="no item with id 'gone'"):
        mem.items.get("gone")
    with pytest.raises(NotFoundError, match="no node with id 'gone'"):
        mem.get("gone")

    # Added again under its id: the removal closes, the item reads again.
    clock.tick()
    again = mem.items.add("back again", id="gone")
    assert (again.action, again.version) == ("added", 4)
    assert [v.action for v in mem.items.history("gone")] == ["added", "edited", "removed", "added"]
    assert mem.items.history("gone")[2].closed_at == T0 + timedelta(minutes=3)
    assert mem.get("gone").content == "back again"


def test_a_failed_or_empty_edit_leaves_the_versions_as_they_were(
    mem: stratamem.Memory, clock: Clock
) -> None:
    mem.items.add("stays as it is", id="kept", tags=["x"])
    before = mem.items.history("kept")
    clock.tick()
    with pytest.raises(StratamemError, match="an item needs some text"):
        mem.items.edit("kept", text="   ")
    with pytest.raises(NotFoundError):
        mem.items.edit("kept", source="no-such-source", text="other words")
    same = mem.items.edit("kept", text="stays as it is")
    assert (same.action, same.version) == ("unchanged", 1)
    assert mem.items.history("kept") == before


def test_an_item_id_reads_as_the_item_now_and_an_old_chunk_id_as_its_version(
    mem: stratamem.Memory, clock: Clock
) -> None:
    added = mem.items.add("Ship the kestrel rollout on Monday", author="erin")
    (old_chunk,) = added.chunks_added
    hit = mem.get(added.id)
    assert (hit.node_id, hit.content, hit.source_id) == (
        added.id,
        "Ship the kestrel rollout on Monday",
        added.source_id,
    )
    assert hit.explain["item"]["current"] == {"version": 1, "nodes": [old_chunk]}
    assert hit.source_ref == mem.get(old_chunk).source_ref

    clock.tick()
    edited = mem.items.edit(added.id, text="Ship the kestrel rollout on Tuesday")
    (new_chunk,) = edited.chunks_added
    assert mem.get(added.id).content == "Ship the kestrel rollout on Tuesday"
    assert mem.get(new_chunk).content == "Ship the kestrel rollout on Tuesday"

    closed = mem.get(old_chunk)
    assert (closed.node_id, closed.content) == (old_chunk, "Ship the kestrel rollout on Monday")
    assert closed.explain["item"] == {
        "id": added.id,
        "version": 1,
        "action": "added",
        "recorded_at": "2024-06-01T12:00:00Z",
        "closed_at": "2024-06-01T12:01:00Z",
        "nodes": [old_chunk],
        "current": {"version": 2, "nodes": [new_chunk]},
    }
    found = mem.nodes([old_chunk, "no-such-id", added.id, new_chunk])
    assert [h.node_id for h in found] == [old_chunk, added.id, new_chunk]
    with pytest.raises(NotFoundError, match="no node with id 'no-such-id'"):
        mem.get("no-such-id")


def test_a_chat_item_reads_as_its_message_after_a_message_beside_it(
    mem: stratamem.Memory, clock: Clock
) -> None:
    at = datetime(2024, 5, 2, 9, 0, tzinfo=UTC)
    first = mem.items.add("deploy starts", source="chat:ops", kind="chat", author="ann", time=at)
    # A message a minute later joins the first one's window, which is derived again.
    mem.items.add("deploy done", source="chat:ops", author="bo", time=at + timedelta(minutes=1))
    hit = mem.get(first.id)
    assert hit.content == "deploy starts"
    (window,) = hit.explain["item"]["current"]["nodes"]
    assert mem.get(window).content == "ann: deploy starts\nbo: deploy done"
    # The window the first message had alone reads as its version, which is still current.
    (alone,) = first.chunks_added
    assert mem.get(alone).explain["item"]["closed_at"] is None


def test_an_ingested_record_begins_its_history_at_its_first_item_write(
    store_location: str, clock: Clock
) -> None:
    with stratamem.open(store_location, embedder=None) as mem:
        mem.ingest(FIXTURES / "slack")
        (only,) = mem.items.history(DAN_THANKS, source=GENERAL)
        assert (only.version, only.action, only.closed_at, only.author) == (
            1,
            "added",
            None,
            "Dan Okafor",
        )
        assert only.nodes  # the window holding the message
        clock.now = only.recorded_at + timedelta(days=1)
        edited = mem.items.edit(DAN_THANKS, source=GENERAL, text="Thanks, merged!")
        assert edited.version == 2
        first, second = mem.items.history(DAN_THANKS, source=GENERAL)
        assert first == dataclasses.replace(only, closed_at=clock.now)
        assert (second.action, second.text, second.recorded_at) == (
            "edited",
            "Thanks, merged!",
            clock.now,
        )
        # Not an item until an item write touched it: a record's key is no node id.
        assert mem.nodes(["1710147605.000200"]) == []


def test_an_id_held_nowhere_or_in_two_sources(mem: stratamem.Memory) -> None:
    with pytest.raises(NotFoundError, match=r"no item with id 'nope'$"):
        mem.items.history("nope")
    with pytest.raises(NotFoundError, match="no item with id 'nope' in source 'elsewhere'"):
        mem.items.history("nope", source="elsewhere")
    mem.items.add("in a", id="twice", source="notes:a")
    mem.items.add("in b", id="twice", source="notes:b")
    with pytest.raises(StratamemError, match="several sources hold an item 'twice'"):
        mem.items.history("twice")
    assert [v.text for v in mem.items.history("twice", source="notes:b")] == ["in b"]
    # As a node id, the item of every source that holds it.
    assert sorted(h.content for h in mem.nodes(["twice"])) == ["in a", "in b"]


def test_a_principal_reads_no_history_of_a_hidden_source(mem: stratamem.Memory) -> None:
    mem.items.add("team note", id="shared", source="notes:team")
    mem.sources.set_access("notes:team", scopes=["team"])
    mem.items.add("owner's secret", id="private-note", source="notes:mine")
    mem.items.edit("private-note", text="owner's secret, edited")
    mem.principals.add("bot", scopes=["team"])
    with mem.as_principal("bot") as bot:
        assert [v.text for v in bot.items.history("shared")] == ["team note"]
        missing = "no item with id 'absent'"
        with pytest.raises(NotFoundError) as hidden:
            bot.items.history("private-note")
        with pytest.raises(NotFoundError) as absent:
            bot.items.history("absent")
        assert str(hidden.value).replace("private-note", "absent") == str(absent.value) == missing
        with pytest.raises(NotFoundError, match="no item with id 'private-note' in source"):
            bot.items.history("private-note", source="notes:mine")
        with pytest.raises(NotFoundError):
            bot.items.get("private-note", as_of=datetime.now(UTC))
        (old_chunk,) = mem.items.history("private-note")[0].nodes
        assert bot.nodes(["private-note", old_chunk]) == []
    assert [h.content for h in mem.nodes([old_chunk])] == ["owner's secret"]


def test_forget_removes_every_version(store_location: str, clock: Clock) -> None:
    with stratamem.open(store_location, embedder=None) as mem:
        mem.items.add("zqxcanaryalpha was here", id="canary", source="notes:secret")
        clock.tick()
        mem.items.edit("canary", text="nothing to see")
        clock.tick()
        mem.items.add("kept elsewhere", id="other", source="notes:kept")
        # The first text is the closed version's alone now.
        assert mem.items.history("canary")[0].text == "zqxcanaryalpha was here"
        mem.sources.forget("notes:secret")
        with pytest.raises(NotFoundError):
            mem.items.history("canary")
        assert [v.text for v in mem.items.history("other")] == ["kept elsewhere"]
        counts = mem.store.conn.execute(  # type: ignore[attr-defined]
            "SELECT (SELECT count(*) FROM item_versions), (SELECT count(*) FROM item_nodes)"
        ).fetchone()
        assert tuple(counts) == (1, 1)
    if not is_postgres(store_location):
        for path in Path(store_location).parent.iterdir():
            if path.is_file():
                assert b"zqxcanaryalpha" not in path.read_bytes().lower(), path.name


def test_a_copy_carries_the_versions(store_location: str, tmp_path: Path, clock: Clock) -> None:
    with stratamem.open(store_location, embedder=None) as mem:
        mem.items.add("copied v1", id="c")
        clock.tick()
        mem.items.edit("c", text="copied v2")
        clock.tick()
        mem.items.rm("c")
        before = mem.items.history("c")
    target = tmp_path / "copy.db"
    report = copy_store(store_location, target)
    assert (report.tables["item_versions"], report.tables["item_nodes"]) == (3, 2)
    with stratamem.open(target, embedder=None) as copied:
        assert copied.items.history("c") == before
