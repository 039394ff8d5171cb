"""The JSON client every remote part posts through: proxies, and the extra each part names when
httpx is missing."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from stratamem.embed.http import OpenAIEmbedder
from stratamem.errors import EmbeddingError, MissingExtraError, RequestFailed
from stratamem.remote import JSONClient
from stratamem.retrieval.rerank import HTTPReranker
from stratamem.testing import FakeModelServer
from stratamem.tree.llm import LLMSummarizer


@pytest.fixture(scope="module")
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as fake:
        yield fake


@pytest.fixture(autouse=True)
def _no_proxy_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)


def test_a_server_on_this_machine_is_reached_past_a_proxy(
    server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # nothing listens there
    with JSONClient(server.url + "/rerank") as client:
        status, body = client.post({"query": "a", "documents": ["a"]})
    assert status == 200
    assert json.loads(body)["results"] == [{"index": 0, "relevance_score": 1.0}]


def test_another_host_is_reached_through_the_proxy(
    server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.reset()
    monkeypatch.setenv("http_proxy", server.url)
    with JSONClient("http://models.example/rerank") as client, pytest.raises(RequestFailed):
        client.post({})  # the fake server answers a proxied request 404
    assert [request.path for request in server.requests] == ["http://models.example/rerank"]


def test_the_client_keeps_one_connection_and_closes_it(server: FakeModelServer) -> None:
    client = JSONClient(server.url + "/rerank")
    with client:
        assert client.post({"query": "a", "documents": []})[0] == 200
    client.close()  # a second close does nothing


@pytest.mark.parametrize(
    ("make", "error", "extra"),
    [
        (lambda: HTTPReranker("http://127.0.0.1:1"), MissingExtraError, "rerank"),
        (lambda: LLMSummarizer(base_url="http://127.0.0.1:1", model="m"), MissingExtraError, "llm"),
        # An embedder's failure is an EmbeddingError, which searches degrade on.
        (lambda: OpenAIEmbedder(base_url="http://127.0.0.1:1", model="m"), EmbeddingError, "llm"),
    ],
    ids=["reranker", "summarizer", "embedder"],
)
def test_without_httpx_each_part_names_its_extra(
    monkeypatch: pytest.MonkeyPatch, make: Callable[[], Any], error: type[Exception], extra: str
) -> None:
    monkeypatch.setitem(sys.modules, "httpx", None)  # makes `import httpx` fail
    with pytest.raises(error) as caught:
        make()
    assert isinstance(caught.value, MissingExtraError)
    assert caught.value.extra == extra
    assert str(caught.value).endswith(
        f"needs the '{extra}' extra: pip install 'stratamem[{extra}]'"
    )
