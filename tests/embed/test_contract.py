"""What every embedder promises: shape, dtype, unit norm, determinism, order, edge cases."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from stratamem.embed import Embedder, HashingEmbedder
from stratamem.embed.http import OpenAIEmbedder

TEXTS = [
    "Why did we drop Redis from the stack?",
    "a",
    "The deploy on Tuesday stalled the job queue for two hours, and the on-call engineer "
    "rolled it back after the error rate climbed past five percent.",
    "Postgres",
    "release date slipped",
    "café naïve 日本語 — emoji 🚀",
]


@pytest.fixture(params=["hashing", "minilm", "openai"])
def embedder(request: pytest.FixtureRequest) -> Embedder:
    if request.param == "hashing":
        return HashingEmbedder()
    if request.param == "minilm":
        embedder: Embedder = request.getfixturevalue("minilm")
        return embedder
    server: Any = request.getfixturevalue("openai_server")
    return OpenAIEmbedder(base_url=server.base_url, model="all-MiniLM-L6-v2", batch_size=4)


def test_is_an_embedder(embedder: Embedder) -> None:
    assert isinstance(embedder, Embedder)
    assert embedder.spec.dim == 384


@pytest.mark.parametrize("role", ["passage", "query"])
def test_shape_dtype_and_unit_norm(embedder: Embedder, role: Any) -> None:
    vectors = embedder.embed_batch(TEXTS, role=role)
    assert vectors.shape == (len(TEXTS), embedder.spec.dim)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.isfinite(vectors).all()


def test_deterministic(embedder: Embedder) -> None:
    np.testing.assert_array_equal(embedder.embed_batch(TEXTS), embedder.embed_batch(TEXTS))


def test_identical_texts_identical_vectors(embedder: Embedder) -> None:
    vectors = embedder.embed_batch(["same text", "other", "same text"])
    np.testing.assert_allclose(vectors[0], vectors[2], atol=1e-6)


def test_batch_equals_one_by_one(embedder: Embedder) -> None:
    together = embedder.embed_batch(TEXTS)
    alone = np.stack([embedder.embed_batch([text])[0] for text in TEXTS])
    # Padding changes float summation order in the model: equal to float32 rounding.
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_order_restored_after_length_sorting(embedder: Embedder) -> None:
    forward = embedder.embed_batch(TEXTS)
    backward = embedder.embed_batch(TEXTS[::-1])
    np.testing.assert_allclose(forward, backward[::-1], atol=1e-5)


def test_empty_list(embedder: Embedder) -> None:
    vectors = embedder.embed_batch([])
    assert vectors.shape == (0, embedder.spec.dim)
    assert vectors.dtype == np.float32


def test_empty_string(embedder: Embedder) -> None:
    vectors = embedder.embed_batch(["", "text"])
    assert vectors.shape == (2, embedder.spec.dim)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_very_long_text_is_truncated_not_an_error(embedder: Embedder) -> None:
    long_text = "lorem ipsum dolor sit amet " * 2000
    vectors = embedder.embed_batch([long_text, "short"])
    assert vectors.shape == (2, embedder.spec.dim)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_a_single_string_is_refused(embedder: Embedder) -> None:
    with pytest.raises(ValueError, match="sequence of strings"):
        embedder.embed_batch("not a list")
