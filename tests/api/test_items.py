"""``mem.items``: add, edit, rm, get (the behaviour in depth: tests/ingest/test_items.py)."""

from __future__ import annotations

import pytest

import stratamem
from stratamem.errors import AccessDenied, NotFoundError


def test_an_item_is_added_edited_read_and_removed(small: stratamem.Memory) -> None:
    write = small.items.add("Carol leads on-call until Friday", author="dan", tags=["oncall"])
    assert write.action == "added"
    assert [h.node_id for h in small.search("on-call Friday", mode="keyword").hits][:1] == list(
        write.chunks_added
    )
    item = small.items.get(write.id)
    assert (item.text, item.author, item.tags) == (
        "Carol leads on-call until Friday",
        "dan",
        ("oncall",),
    )

    edited = small.items.edit(write.id, text="Dan leads on-call until Friday")
    assert edited.id == write.id
    assert small.items.get(write.id).text == "Dan leads on-call until Friday"
    assert small.items.get(write.id).author == "dan"  # a field not given stays

    removed = small.items.rm(write.id)
    assert removed.chunks_removed
    with pytest.raises(NotFoundError):
        small.items.get(write.id)
    found = {h.node_id for h in small.search("Dan leads on-call", mode="keyword").hits}
    assert edited.chunks_added
    assert not found & set(edited.chunks_added)


def test_a_principal_may_not_write_items(small: stratamem.Memory) -> None:
    small.principals.add("reader", "*")
    with small.as_principal("reader") as reader:
        for write in (
            lambda: reader.items.add("x"),
            lambda: reader.items.edit("x", text="y"),
            lambda: reader.items.rm("x"),
        ):
            with pytest.raises(AccessDenied, match="principal 'reader' may not write items"):
                write()


@pytest.mark.parametrize("round_", range(4))
def test_an_edit_racing_a_removal_leaves_one_whole_history(
    small: stratamem.Memory, store_location: str, round_: int
) -> None:
    """Two writers, each with its own connection, edit and remove one item at once: the
    writes take turns, and whichever goes first, the history is whole — the edit then the
    removal, or the removal with the edit refused as a missing item — and nothing is
    half-written."""
    import threading

    write = small.items.add("Carol leads on-call until Friday", id=f"race{round_}")
    outcomes: dict[str, str] = {}
    start = threading.Barrier(2)

    def edit() -> None:
        with stratamem.open(store_location, embedder=None) as mine:
            start.wait()
            try:
                mine.items.edit(write.id, text="Dan leads on-call until Friday")
                outcomes["edit"] = "done"
            except NotFoundError:
                outcomes["edit"] = "missing"

    def remove() -> None:
        with stratamem.open(store_location, embedder=None) as mine:
            start.wait()
            mine.items.rm(write.id)
            outcomes["rm"] = "done"

    threads = [threading.Thread(target=edit), threading.Thread(target=remove)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    actions = [v.action for v in small.items.history(write.id)]
    assert outcomes["rm"] == "done"
    if outcomes["edit"] == "done":
        assert actions == ["added", "edited", "removed"]
    else:
        assert actions == ["added", "removed"]
    with pytest.raises(NotFoundError):
        small.items.get(write.id)
    assert small.search("leads on-call Friday", mode="keyword").hits == ()
