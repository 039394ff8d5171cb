"""``mem.indexes``: embed, reindex, build, pending, the keyword tokenizer, tuned weights."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import stratamem
from stratamem.errors import AccessDenied
from stratamem.testing import HashingEmbedder

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
def unembedded(store_location: str) -> Iterator[stratamem.Memory]:
    with stratamem.open(store_location, embedder=HashingEmbedder()) as memory:
        memory.ingest(FIXTURES / "slack", trees=False)
        yield memory


def test_chunks_are_embedded_and_reindexed(
    unembedded: stratamem.Memory, store_location: str
) -> None:
    pending = unembedded.indexes.pending()
    assert pending == unembedded.stats()["chunks"] > 0
    assert unembedded.indexes.embed().embedded == pending
    assert unembedded.indexes.pending() == 0
    assert set(unembedded.indexes.build()) == {"keyword", "vectors"}
    with stratamem.open(store_location, embedder=HashingEmbedder(dim=64)) as smaller:
        assert smaller.indexes.pending() == pending  # none of its model yet
        assert smaller.indexes.reindex().embedded == pending
        assert smaller.indexes.pending() == 0


def test_the_keyword_tokenizer_is_chosen(unembedded: stratamem.Memory) -> None:
    assert unembedded.indexes.keyword_tokenizer() == "stemmed"
    assert unembedded.indexes.set_keyword_tokenizer("plain") is True
    assert unembedded.indexes.set_keyword_tokenizer("plain") is False
    assert unembedded.indexes.keyword_tokenizer() == "plain"


def test_tuned_weights_are_kept_and_used(unembedded: stratamem.Memory, store_location: str) -> None:
    weights = {"keyword": 0.7, "vector": 0.2, "graph": 0.1}
    unembedded.indexes.save_tuned_weights({"weights": weights, "dataset": "test"})
    assert unembedded.config.weights == weights
    with stratamem.open(store_location, embedder=None) as again:
        assert again.config.weights == weights
    with pytest.raises(ValueError, match="'weights' mapping"):
        unembedded.indexes.save_tuned_weights({"dataset": "test"})


def test_a_memory_without_an_embedder_has_nothing_pending(
    shared: stratamem.Memory, module_location: str
) -> None:
    with stratamem.open(module_location, embedder=None) as plain:
        assert plain.indexes.pending() == 0


def test_a_principal_may_not_embed(unembedded: stratamem.Memory) -> None:
    unembedded.principals.add("reader", "*")
    with unembedded.as_principal("reader") as reader:
        with pytest.raises(AccessDenied, match="may not embed"):
            reader.indexes.embed()
        with pytest.raises(AccessDenied, match="may not build indexes"):
            reader.indexes.build()
