from __future__ import annotations

from collections.abc import Iterator

import pytest

from stratamem.embed.onnx_minilm import MiniLMEmbedder
from stratamem.testing import FakeModelServer


@pytest.fixture(scope="session")
def minilm() -> MiniLMEmbedder:
    """The real default model, loaded once for the whole run."""
    embedder = MiniLMEmbedder()
    embedder.embed_batch(["warm up"])
    return embedder


@pytest.fixture(scope="session")
def _shared_openai_server(minilm: MiniLMEmbedder) -> Iterator[FakeModelServer]:
    with FakeModelServer(embedder=minilm) as server:
        yield server


@pytest.fixture
def openai_server(_shared_openai_server: FakeModelServer) -> Iterator[FakeModelServer]:
    """An OpenAI-compatible server serving real MiniLM vectors, with no queued answers and
    no recorded requests."""
    _shared_openai_server.reset()
    yield _shared_openai_server
    _shared_openai_server.reset()
