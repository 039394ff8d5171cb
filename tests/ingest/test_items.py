"""Single-item writes (``mem.items``: ``add``, ``edit``, ``rm``, ``get``): every leg finds a write
as soon as the call returns, and a chat window is derived again only where a write reaches."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

import stratamem
from stratamem.errors import NotFoundError, StratamemError
from stratamem.testing import HashingEmbedder
from stratamem.types import SourceKind

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MODES = ("keyword", "vector", "graph", "hybrid")
# Named so that every leg can find it: its words for keyword and vector, its tag, address and
# author for the graph.
KESTREL = "Ping quentin.zephyr@example.org about the #kestrel rollout"
KESTREL_QUERY = "kestrel rollout"
GENERAL = "slack:#general"
# The first #general window: Alice 09:00:05, Dan 09:02:30, Bob 09:05:00.123 on 2024-03-11.
WINDOW_TIME = datetime(2024, 3, 11, 9, 3, tzinfo=UTC)
DAN_THANKS = "1710147750.000000"


def open_memory(location: str) -> stratamem.Memory:
    return stratamem.open(location, embedder=HashingEmbedder())


@pytest.fixture
def mem(store_location: str) -> Iterator[stratamem.Memory]:
    """A store that has never been embedded."""
    with open_memory(store_location) as memory:
        yield memory


@pytest.fixture
def slack(store_location: str) -> Iterator[stratamem.Memory]:
    """The Slack fixture ingested and embedded: the store's vectors are of the configured
    model, so single writes embed their chunks at once."""
    with open_memory(store_location) as memory:
        memory.ingest(FIXTURES / "slack")
        memory.indexes.embed()
        yield memory


def vector_count(memory: stratamem.Memory) -> int:
    return sum(memory.store.vector_models().values())


def chunk_ids(memory: stratamem.Memory, source: str) -> dict[str, str]:
    """id → content of a source's chunks."""
    found = memory.sources.get(source)
    return {c.id: c.content for c in memory.store.iter_chunks(found.id)}


def found_ids(memory: stratamem.Memory, query: str, mode: str) -> list[str]:
    return [hit.node_id for hit in memory.search(query, mode=mode).hits]


# -- add --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_an_added_item_is_found_at_once_in_every_mode(slack: stratamem.Memory, mode: str) -> None:
    write = slack.items.add(KESTREL, author="erin")
    assert write.action == "added"
    assert write.scope == "memory"
    assert len(write.chunks_added) == 1
    assert write.embedded == 1  # in the same transaction: no embed() call needed
    assert slack.indexes.pending() == 0

    response = slack.search(KESTREL_QUERY, mode=mode)
    assert all(state.startswith("ok") for state in response.legs.values()), response.legs
    assert response.hits, response.legs
    assert response.hits[0].node_id == write.chunks_added[0]
    assert response.hits[0].content == KESTREL


def test_the_first_item_of_a_store_turns_its_vector_leg_on(mem: stratamem.Memory) -> None:
    assert mem.search(KESTREL_QUERY, mode="vector").legs["vector"].startswith("off")
    write = mem.items.add(KESTREL, author="erin")
    assert write.embedded == 1  # the store took the configured model: no embed() needed
    assert mem.indexes.pending() == 0
    response = mem.search(KESTREL_QUERY, mode="vector")
    assert response.legs["vector"].startswith("ok"), response.legs
    assert [h.node_id for h in response.hits] == list(write.chunks_added)

    second = mem.items.add("The heron migration waits for the kestrel", author="erin")
    assert second.embedded == 1


def test_an_item_added_where_ingested_chunks_wait_for_embed_waits_with_them(
    mem: stratamem.Memory,
) -> None:
    mem.ingest(FIXTURES / "slack")
    waiting = mem.indexes.pending()
    assert waiting > 0
    write = mem.items.add(KESTREL, author="erin")
    assert write.embedded == 0
    assert vector_count(mem) == 0
    assert mem.indexes.pending() == waiting + 1
    assert found_ids(mem, KESTREL_QUERY, "keyword") == list(write.chunks_added)
    assert found_ids(mem, "kestrel", "graph") == list(write.chunks_added)

    report = mem.indexes.embed()
    assert report.embedded == waiting + 1
    assert mem.indexes.pending() == 0
    assert found_ids(mem, KESTREL_QUERY, "vector")[0] == write.chunks_added[0]


def test_an_item_keeps_every_field_it_was_given(mem: stratamem.Memory) -> None:
    when = datetime(2024, 3, 12, 9, 30, 15, 123456, tzinfo=UTC)
    meta = {"origin": "agent", "weights": [1, 2], "nested": {"a": True}}
    write = mem.items.add(
        "The release moves to April 5",
        id="decision-7",
        author="dan",
        time=when,
        title="Release date",
        tags=["release", "decision"],
        meta=meta,
    )
    assert write.id == "decision-7"

    item = mem.items.get("decision-7")
    assert item.id == "decision-7"
    assert item.text == "The release moves to April 5"
    assert item.author == "dan"
    assert item.time == when.replace(microsecond=123000)  # kept to the millisecond
    assert item.title == "Release date"
    assert item.tags == ("release", "decision")
    assert dict(item.meta) == meta
    assert item.ref == "memory#decision-7"

    source = mem.sources.get("memory")
    assert source.kind is SourceKind.RECORD
    assert source.platform == "memory"


def test_time_defaults_to_now_in_utc_to_the_millisecond(mem: stratamem.Memory) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    write = mem.items.add("a note with no time")
    after = datetime.now(UTC)
    assert write.id.startswith("item_")
    stored = mem.items.get(write.id).time
    assert stored is not None
    assert stored.tzinfo is UTC
    assert before <= stored <= after
    assert stored.microsecond % 1000 == 0
    assert write.record is not None
    assert write.record.time == stored


def test_an_id_the_source_holds_is_replaced_by_add(mem: stratamem.Memory) -> None:
    first = mem.items.add("first words", id="k")
    again = mem.items.add("first words", id="k", time=first.record.time if first.record else None)
    assert again.action == "unchanged"
    replaced = mem.items.add("second words", id="k")
    assert replaced.action == "updated"
    assert mem.items.get("k").text == "second words"
    assert mem.store.source_chunk_count(mem.sources.get("memory").id) == 1


def test_an_item_in_a_chat_window_derives_that_window_again(slack: stratamem.Memory) -> None:
    before = chunk_ids(slack, GENERAL)
    eng_before = chunk_ids(slack, "slack:#eng")
    vectors_before = vector_count(slack)

    write = slack.items.add(
        "Frank here, glad to join", source=GENERAL, author="Frank Ortiz", time=WINDOW_TIME
    )
    assert write.scope == GENERAL
    assert write.chunks_removed == 1
    assert write.embedded == 1

    after = chunk_ids(slack, GENERAL)
    (old_window,) = [c for c in before.values() if c.startswith("Alice Chen: Welcome")]
    (window,) = [after[i] for i in write.chunks_added]
    lines = old_window.splitlines()
    assert lines[1].startswith("Dan Okafor:")
    assert lines[2].startswith("Bob Martins:")
    assert window.splitlines() == [*lines[:2], "Frank Ortiz: Frank here, glad to join", *lines[2:]]
    # The other windows of the source, and the other source, keep their ids and vectors.
    assert [before[i] for i in set(before) - set(after)] == [old_window]
    assert set(after) - set(before) == set(write.chunks_added)
    assert chunk_ids(slack, "slack:#eng") == eng_before
    assert vector_count(slack) == vectors_before  # one vector out, one in: no re-embedding
    assert slack.indexes.pending() == 0
    assert found_ids(slack, "Frank glad to join", "keyword")[0] == write.chunks_added[0]


def test_add_names_an_existing_source_by_id_as_well_as_by_scope(slack: stratamem.Memory) -> None:
    # update, delete and item take a source's id or scope; add resolves it the same way.
    general = slack.sources.get(GENERAL)
    write = slack.items.add("Frank here, glad to join", source=general.id, time=WINDOW_TIME, id="f")
    assert (write.source_id, write.scope) == (general.id, GENERAL)
    assert slack.items.get("f", source=GENERAL).text == "Frank here, glad to join"
    assert [s.scope for s in slack.sources.list()] == ["slack:#eng", GENERAL]


# -- update -----------------------------------------------------------------------------------


def test_update_changes_the_text_and_keeps_the_fields_not_given(slack: stratamem.Memory) -> None:
    added = slack.items.add(
        "the kestrel rollout starts Monday", id="u1", author="erin", title="Plan", tags=["ops"]
    )
    vectors = vector_count(slack)

    write = slack.items.edit("u1", text="the falcon rollout starts Tuesday")
    assert write.action == "updated"
    assert write.chunks_removed == 1
    assert write.embedded == 1
    assert vector_count(slack) == vectors

    assert added.chunks_added[0] not in found_ids(slack, "kestrel", "keyword")
    assert found_ids(slack, "kestrel", "graph") == []  # tag and topic left with the text
    for mode in ("keyword", "vector", "hybrid"):
        assert found_ids(slack, "falcon Tuesday", mode)[0] == write.chunks_added[0], mode

    item = slack.items.get("u1")
    assert item.text == "the falcon rollout starts Tuesday"
    assert (item.author, item.title, item.tags) == ("erin", "Plan", ("ops",))
    assert added.record is not None
    assert item.time == added.record.time


def test_an_updated_time_is_kept_to_the_millisecond(mem: stratamem.Memory) -> None:
    mem.items.add("a note", id="k")
    write = mem.items.edit("k", time=datetime(2024, 3, 12, 9, 30, 15, 123456, tzinfo=UTC))
    assert mem.items.get("k").time == datetime(2024, 3, 12, 9, 30, 15, 123000, tzinfo=UTC)
    # What the write reports is what the store keeps, as for add.
    assert write.record == mem.items.get("k")


def test_update_to_the_same_content_writes_nothing(mem: stratamem.Memory) -> None:
    added = mem.items.add("nothing new here", id="same", author="dan", tags=["x"])
    chunks = chunk_ids(mem, "memory")
    jobs = mem.store.jobs.counts()

    write = mem.items.edit("same", text="nothing new here", author="dan", tags=["x"])
    assert write.action == "unchanged"
    assert write.chunks_added == ()
    assert write.chunks_removed == 0
    assert write.embedded == 0
    assert chunk_ids(mem, "memory") == chunks
    assert mem.store.jobs.counts() == jobs
    assert mem.items.get("same") == added.record


def test_an_unknown_id_is_not_found(mem: stratamem.Memory) -> None:
    mem.items.add("something", id="known")
    with pytest.raises(NotFoundError, match="no item with id 'nope'"):
        mem.items.edit("nope", text="new text")
    with pytest.raises(NotFoundError, match="no item with id 'nope'"):
        mem.items.get("nope")
    mem.items.add("elsewhere", source="other")
    with pytest.raises(NotFoundError, match="no item with id 'known' in source 'other'"):
        mem.items.edit("known", source="other", text="x")


def test_an_id_two_sources_hold_needs_the_source(mem: stratamem.Memory) -> None:
    mem.items.add("kept in memory", id="dup")
    notes = mem.items.add("kept in notes", id="dup", source="notes")

    with pytest.raises(
        StratamemError, match=r"several sources hold an item 'dup' \(memory, notes\)"
    ):
        mem.items.edit("dup", text="changed")
    with pytest.raises(StratamemError, match="name the source"):
        mem.items.rm("dup")

    write = mem.items.edit("dup", source="notes", text="changed in notes")
    assert (write.action, write.scope) == ("updated", "notes")
    assert mem.items.get("dup", source="notes").text == "changed in notes"
    assert mem.items.get("dup", source=notes.source_id).text == "changed in notes"
    assert mem.items.get("dup", source="memory").text == "kept in memory"


# -- delete -----------------------------------------------------------------------------------


def test_delete_removes_the_item_from_every_leg(slack: stratamem.Memory) -> None:
    vectors = vector_count(slack)
    added = slack.items.add(KESTREL, author="erin", id="gone")
    (chunk,) = added.chunks_added
    assert all(chunk in found_ids(slack, KESTREL_QUERY, mode) for mode in MODES)

    write = slack.items.rm("gone")
    assert (write.action, write.id, write.chunks_removed) == ("deleted", "gone", 1)
    assert vector_count(slack) == vectors

    for mode in MODES:
        hits = slack.search(f"{KESTREL_QUERY} quentin.zephyr@example.org", mode=mode).hits
        assert chunk not in [h.node_id for h in hits], mode
        assert not any("kestrel" in h.content for h in hits), mode
    assert slack.search_entities("kestrel") == []
    assert slack.search_entities("quentin.zephyr@example.org") == []
    assert slack.nodes(["gone"]) == []
    # The chunk id reads as the version the removal closed, which its history keeps.
    (closed,) = slack.nodes([chunk])
    assert (closed.node_id, closed.content) == (chunk, KESTREL)
    assert closed.explain["item"]["removed_at"] is not None

    with pytest.raises(NotFoundError, match="no item with id 'gone'"):
        slack.items.get("gone")
    with pytest.raises(NotFoundError, match="no item with id 'gone'"):
        slack.items.rm("gone")


def test_delete_in_a_chat_window_derives_it_again_without_the_message(
    slack: stratamem.Memory,
) -> None:
    before = chunk_ids(slack, GENERAL)
    write = slack.items.rm(DAN_THANKS, source=GENERAL)
    assert write.chunks_removed == 1
    assert write.record is not None
    assert write.record.author == "Dan Okafor"

    after = chunk_ids(slack, GENERAL)
    (window,) = [after[i] for i in write.chunks_added]
    assert window.startswith("Alice Chen: Welcome")
    assert "happy to be here" not in window
    assert "Bob Martins: @Alice Chen status page" in window
    # The source's other windows keep their ids.
    assert len(set(before) & set(after)) == len(before) - 1
    assert not any(
        "happy to be here" in h.content for h in slack.search("happy", mode="keyword").hits
    )


def test_a_window_derived_again_by_a_delete_keeps_a_vector(slack: stratamem.Memory) -> None:
    # What is left of the window must stay findable by the vector leg, as after an add or an
    # update, without waiting for embed().
    write = slack.items.rm(DAN_THANKS, source=GENERAL)
    model = HashingEmbedder().spec.signature
    assert set(slack.store.vectors_of(model, list(write.chunks_added))) == set(write.chunks_added)
    assert slack.indexes.pending() == 0


# -- refused writes ---------------------------------------------------------------------------


def test_a_document_source_takes_no_items(mem: stratamem.Memory) -> None:
    mem.ingest(FIXTURES / "markdown" / "vault", trees=False)
    (vault,) = [s for s in mem.sources.list() if s.kind is SourceKind.DOCUMENT]
    with pytest.raises(StratamemError, match="holds documents"):
        mem.items.add("a note", source=vault.scope)
    with pytest.raises(StratamemError, match="not documents"):
        mem.items.add("a note", source="fresh", kind="document")
    assert [s.scope for s in mem.sources.list()] == [vault.scope]


@pytest.mark.parametrize("text", ["", "   ", "\n\t "])
def test_blank_text_is_refused(mem: stratamem.Memory, text: str) -> None:
    with pytest.raises(StratamemError, match="needs some text"):
        mem.items.add(text)
    mem.items.add("real text", id="k")
    with pytest.raises(StratamemError, match="needs some text"):
        mem.items.edit("k", text=text)
    assert mem.items.get("k").text == "real text"


# -- trees and other connections --------------------------------------------------------------


def test_an_add_queues_a_seal_that_flush_runs(mem: stratamem.Memory) -> None:
    first = mem.items.add("the first memory", author="dan")
    second = mem.items.add("the second memory", author="erin")
    tree = mem.trees.get("memory")
    assert mem.store.jobs.counts() == {"pending": 1}  # one job per tree, however many writes

    report = mem.trees.flush()
    assert report.summaries >= 1
    assert "pending" not in mem.store.jobs.counts()
    covered = {child for top in mem.trees.tops(tree.id) for child in top.child_ids}
    assert {*first.chunks_added, *second.chunks_added} <= covered
    assert mem.trees.unsealed(tree.id) == 0


def test_a_second_memory_on_the_store_sees_writes_without_reopening(store_location: str) -> None:
    path = store_location
    with open_memory(path) as writer:
        writer.ingest(FIXTURES / "slack", trees=False)
        writer.indexes.embed()
        with open_memory(path) as reader:
            for mode in MODES:  # load every index the reader keeps before the write
                reader.search("runbooks queue", mode=mode)

            added = writer.items.add(KESTREL, author="erin", id="seen")
            for mode in MODES:
                assert found_ids(reader, KESTREL_QUERY, mode)[:1] == list(added.chunks_added)
            assert reader.items.get("seen").text == KESTREL

            reader.items.rm("seen")
            for mode in MODES:
                assert added.chunks_added[0] not in found_ids(writer, KESTREL_QUERY, mode)


def test_an_item_of_a_locked_source_is_not_found(store_location: str) -> None:
    with stratamem.open(store_location, embedder=None) as memory:
        written = memory.items.add("the vault code is 4711", source="private", id="secret")
        with memory.store.transaction():
            memory.store.conn.execute(
                f"UPDATE sources SET locked = 1 WHERE id = {memory.store.dialect.p}",
                (written.source_id,),
            )
        with pytest.raises(NotFoundError):
            memory.items.get("secret")
        with pytest.raises(NotFoundError):
            memory.items.edit("secret", text="changed")
        with pytest.raises(NotFoundError):
            memory.items.rm("secret")
        with pytest.raises(StratamemError, match="locked"):
            memory.items.add("another secret", source="private")
