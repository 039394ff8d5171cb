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
