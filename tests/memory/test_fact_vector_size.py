"""A fact vector of another size than the query's (written by another version of a model, or
damaged) leaves that fact to BM25 alone, with a note, instead of failing the fact search."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import stratamem
from stratamem.memory.facts import fact_text
from stratamem.memory.search import match_facts
from stratamem.testing import HashingEmbedder

QUESTION = "when is the atlas deadline"


@pytest.fixture(scope="module")
def memory(
    module_location: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[stratamem.Memory]:
    folder = tmp_path_factory.mktemp("notes")
    (folder / "atlas.md").write_text("# Atlas\n\nThe atlas deadline is set by finance.\n")
    with stratamem.open(module_location, embedder=HashingEmbedder()) as mem:
        mem.ingest(folder)
        mem.indexes.embed()
        mem.facts.remember("topic:atlas", "deadline", "June 3 for atlas", evidence=[])
        mem.facts.remember("topic:atlas", "owner", "the billing team", evidence=[])
        yield mem


def test_a_vector_of_another_size_falls_back_to_bm25_with_a_note(
    memory: stratamem.Memory,
) -> None:
    embedder = memory.embedder
    assert embedder is not None
    rows = memory.store.facts(limit=10)
    facts = {f.predicate: f.id for f in rows}
    vectors = embedder.embed_batch([fact_text(f) for f in rows])
    with memory.store.transaction():
        memory.store.write_fact_vectors(
            embedder.spec.signature,
            [
                (f.id, np.asarray(v, dtype="<f4").tobytes())
                for f, v in zip(rows, vectors, strict=True)
            ],
        )
    before = match_facts(memory.store, QUESTION, embedder=embedder)
    assert before.notes == ()
    assert all(h.cosine is not None for h in before.hits)
    wrong = np.ones(embedder.spec.dim + 3, dtype="<f4").tobytes()
    with memory.store.transaction():
        memory.store.write_fact_vectors(embedder.spec.signature, [(facts["deadline"], wrong)])
    found = match_facts(memory.store, QUESTION, embedder=embedder)
    by_id = {h.fact.id: h for h in found.hits}
    assert by_id[facts["deadline"]].cosine is None  # BM25 alone for that one
    assert by_id[facts["deadline"]].bm25 > 0
    assert by_id[facts["owner"]].cosine is not None  # the others keep their cosine
    assert len(found.notes) == 1
    assert "1 fact vector(s)" in found.notes[0]
    assert "BM25 alone" in found.notes[0]
    assert memory.facts.query(QUESTION).hits  # no error through the door either
    recalled = memory.recall(QUESTION, types=["fact"])
    assert facts["deadline"] in {h.node_id for h in recalled.hits}
    assert any("BM25 alone" in note for note in recalled.notes)
