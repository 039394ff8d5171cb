"""The reranker registry and the HTTP reranker against the fake model server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stratamem.errors import RegistryError, RerankError
from stratamem.retrieval import rerank
from stratamem.retrieval.rerank import HTTPReranker, get_reranker, known_rerankers
from stratamem.testing import FakeModelServer


@pytest.fixture(scope="module")
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as fake:
        yield fake


def test_the_built_ins() -> None:
    assert known_rerankers() == ["cross-encoder", "http"]
    reranker = get_reranker("http", base_url="http://localhost:8080/", model="bge")
    assert isinstance(reranker, HTTPReranker)
    assert reranker.url == "http://localhost:8080/rerank"


def test_unknown_name() -> None:
    with pytest.raises(RegistryError, match="unknown reranker 'x'; known: cross-encoder, http"):
        get_reranker("x")


def test_register(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rerank, "RERANKERS", rerank.RERANKERS.copy())

    class Constant:
        name = "constant"

        def rerank(self, query: str, texts: list[str]) -> list[float]:
            return [1.0] * len(texts)

    rerank.register_reranker("constant", Constant)
    assert get_reranker("constant").rerank("q", ["a", "b"]) == [1.0, 1.0]


def test_http_reranker_on_the_fake_server(server: FakeModelServer) -> None:
    server.reset()
    reranker = get_reranker("http", base_url=server.url, model="m")
    scores = reranker.rerank("redis queue", ["the redis queue", "lunch", "a queue"])
    assert scores == [1.0, 0.0, 0.5]
    (seen,) = server.requests
    assert seen.path == "/rerank"
    assert seen.payload == {
        "model": "m",
        "query": "redis queue",
        "documents": ["the redis queue", "lunch", "a queue"],
    }
    server.queue(200, {"results": [{"index": 0, "relevance_score": 1.0}]})
    with pytest.raises(RerankError, match="scored 1 of 2 documents"):
        reranker.rerank("q", ["a", "b"])
