from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratamem.embed import HashingEmbedder, ModelSpec


def test_spec_names_the_scheme() -> None:
    assert HashingEmbedder().spec == ModelSpec(name="hashing-v1", dim=384)
    assert HashingEmbedder(64).spec.dim == 64


def test_dimension_is_respected() -> None:
    assert HashingEmbedder(dim=16).embed_batch(["a b c"]).shape == (1, 16)


def test_bad_dimension() -> None:
    with pytest.raises(ValueError, match="dim"):
        HashingEmbedder(dim=0)


def test_shared_words_are_closer_than_no_shared_words() -> None:
    a, b, c = HashingEmbedder().embed_batch(
        ["the redis cache was dropped", "we dropped the redis cache", "quarterly sales figures"]
    )
    assert a @ b > 0.5
    assert abs(a @ c) < a @ b


def test_case_and_punctuation_do_not_matter() -> None:
    a, b = HashingEmbedder().embed_batch(["Hello, World!", "hello world"])
    np.testing.assert_allclose(a, b)


def test_word_order_matters_through_bigrams() -> None:
    a, b = HashingEmbedder().embed_batch(["dog bites man", "man bites dog"])
    assert a @ b < 0.999


def test_stable_across_processes() -> None:
    # blake2b, not Python's salted hash(): these values hold in every process and release.
    np.testing.assert_array_equal(
        HashingEmbedder(dim=8).embed_batch(["stable"])[0], [0, 0, 0, 0, 0, 1, 0, 0]
    )
    third = 1 / np.sqrt(3)  # "two", "words" and "two words"
    np.testing.assert_allclose(
        HashingEmbedder(dim=8).embed_batch(["two words"])[0],
        [-third, 0, third, 0, third, 0, 0, 0],
        rtol=1e-6,
    )


@pytest.mark.parametrize(
    ("query_prefix", "passage_prefix"), [("query: ", "passage: "), ("Represent this: ", "")]
)
def test_prefixes_reach_the_model(query_prefix: str, passage_prefix: str) -> None:
    plain = HashingEmbedder()
    prefixed = HashingEmbedder(
        spec=ModelSpec("hashing-v1", 384, query_prefix=query_prefix, passage_prefix=passage_prefix)
    )
    text = "how do refunds work"
    np.testing.assert_array_equal(
        prefixed.embed_batch([text], role="query"),
        plain.embed_batch([query_prefix + text], role="query"),
    )
    np.testing.assert_array_equal(
        prefixed.embed_batch([text], role="passage"),
        plain.embed_batch([passage_prefix + text], role="passage"),
    )
    assert not np.array_equal(
        prefixed.embed_batch([text], role="query"), plain.embed_batch([text], role="query")
    )


@settings(deadline=None)
@given(st.lists(st.text(max_size=60), max_size=8))
def test_always_unit_norm(texts: list[str]) -> None:
    vectors = HashingEmbedder(dim=32).embed_batch(texts)
    assert vectors.shape == (len(texts), 32)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
