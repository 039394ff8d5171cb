from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from stratamem.embed import MissingDependencyError, get_embedder
from stratamem.embed.sentence_transformers import SentenceTransformerEmbedder

INSTALLED = importlib.util.find_spec("sentence_transformers") is not None


@pytest.mark.skipif(INSTALLED, reason="sentence-transformers is installed here")
@pytest.mark.parametrize("model", ["BAAI/bge-small-en-v1.5", "acme/unknown-model"])
def test_missing_extra_names_it(model: str) -> None:
    with pytest.raises(MissingDependencyError) as caught:
        get_embedder("sentence-transformers", model=model)
    message = str(caught.value)
    assert "pip install 'stratamem[sentence-transformers]'" in message
    assert model in message
    assert caught.value.install == "pip install 'stratamem[sentence-transformers]'"


def test_bad_batch_size() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        SentenceTransformerEmbedder(batch_size=0)


@pytest.mark.skipif(not INSTALLED, reason="needs the sentence-transformers extra (torch)")
def test_real_model_matches_the_onnx_default() -> None:
    from stratamem.embed.onnx_minilm import MiniLMEmbedder

    texts = ["Why did we drop Redis?", "The cat sat on the mat."]
    embedder = SentenceTransformerEmbedder("sentence-transformers/all-MiniLM-L6-v2")
    assert embedder.spec.dim == 384
    vectors = embedder.embed_batch(texts)
    assert vectors.dtype == np.float32
    assert ((vectors * MiniLMEmbedder().embed_batch(texts)).sum(axis=1) > 0.99).all()
