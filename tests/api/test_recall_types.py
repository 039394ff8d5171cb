"""``types`` narrows the chunk leg's search to the source kinds those types come from, so a
rare type is not crowded out of the leg's cut by a common one."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

import stratamem
from stratamem.memory.recall import TYPE_KINDS, chunk_kinds
from stratamem.testing import HashingEmbedder
from stratamem.types import SourceKind

QUESTION = "atlas deadline"
T = datetime(2024, 4, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def memory(
    module_location: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[stratamem.Memory]:
    folder = tmp_path_factory.mktemp("notes")
    # Many documents that match the question better than the one turn does.
    for n in range(80):
        (folder / f"atlas-{n}.md").write_text(
            f"# Atlas deadline {n}\n\nThe atlas deadline, atlas deadline note {n}.\n"
        )
    with stratamem.open(module_location, embedder=HashingEmbedder()) as mem:
        mem.ingest(folder)
        mem.items.add_messages(
            [{"role": "user", "content": "finance asked when atlas ships", "time": T}],
            user="maya",
            session="s1",
        )
        mem.indexes.embed()
        yield mem


def test_chunk_kinds_narrow_to_the_kinds_the_types_come_from() -> None:
    every = set(TYPE_KINDS) | {"fact"}
    assert chunk_kinds(every, []) == ()
    assert chunk_kinds(every, [SourceKind.CHAT]) == (SourceKind.CHAT,)
    assert chunk_kinds({"document"}, []) == (SourceKind.DOCUMENT,)
    assert chunk_kinds({"turn", "fact"}, []) == (SourceKind.CHAT,)
    assert chunk_kinds({"item"}, []) == (SourceKind.EMAIL, SourceKind.DOCUMENT, SourceKind.RECORD)
    assert chunk_kinds({"document"}, [SourceKind.CHAT]) is None
    assert chunk_kinds({"fact"}, []) is None


def test_a_rare_type_is_found_beyond_the_common_ones(memory: stratamem.Memory) -> None:
    searched = memory.search(QUESTION, limit=50)
    assert {h.tree_scope.partition(":")[0] for h in searched.hits} == {"notes"}
    turns = memory.recall(QUESTION, types=["turn"], limit=3)
    assert [h.explain["type"] for h in turns.hits] == ["turn"]
    assert "atlas ships" in turns.hits[0].content
    # Asked with a kind no wanted type comes from: no chunk, and no error.
    assert memory.recall(QUESTION, types=["turn"], kinds=["document"]).hits == ()
    docs = memory.recall(QUESTION, types=["document"], limit=5)
    assert [h.explain["type"] for h in docs.hits] == ["document"] * 5
