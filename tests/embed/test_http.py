"""The OpenAI-compatible embedder against a real local server serving real MiniLM vectors."""

from __future__ import annotations

import base64
import socket
from typing import Any

import numpy as np
import pytest

from stratamem.embed import EmbeddingServerError, get_embedder
from stratamem.embed.http import OpenAIEmbedder, embeddings_url
from stratamem.embed.onnx_minilm import MiniLMEmbedder
from stratamem.testing import FakeModelServer

TEXTS = [
    "Why did we drop Redis?",
    "The queue stalled after the deploy.",
    "",
    "Alice moved the release to March 18 because the migration was not ready.",
    "ok",
]


def client(server: FakeModelServer, **options: Any) -> OpenAIEmbedder:
    options.setdefault("model", "all-MiniLM-L6-v2")
    options.setdefault("backoff", 0.01)
    return OpenAIEmbedder(base_url=server.base_url, **options)


def test_vectors_equal_the_local_model(
    openai_server: FakeModelServer, minilm: MiniLMEmbedder
) -> None:
    remote = client(openai_server, batch_size=2).embed_batch(TEXTS)
    # The server embeds "" as " " (OpenAI rejects empty input), which MiniLM reads the same.
    local = minilm.embed_batch(TEXTS)
    assert remote.dtype == np.float32
    assert remote.shape == (len(TEXTS), 384)
    assert ((remote * local).sum(axis=1) > 0.9999).all()
    assert len(openai_server.requests) == 3  # batches of 2, 2 and 1


def test_wire_format(openai_server: FakeModelServer) -> None:
    client(openai_server, model="my-model", dim=384, api_key="sk-test").embed_batch(["a", "b"])
    (seen,) = openai_server.requests
    assert seen.path == "/v1/embeddings"
    assert seen.payload == {"model": "my-model", "input": ["a", "b"]}
    assert seen.headers["authorization"] == "Bearer sk-test"
    assert seen.headers["content-type"] == "application/json"


def test_no_key_no_authorization_header(openai_server: FakeModelServer) -> None:
    client(openai_server).embed_batch(["a"])
    assert "authorization" not in openai_server.requests[0].headers


def test_dimension_learnt_from_the_first_answer(openai_server: FakeModelServer) -> None:
    embedder = client(openai_server, model="some-unknown-model")
    assert embedder.embed_batch(["hello"]).shape == (1, 384)
    assert embedder.spec.dim == 384
    assert embedder.spec.name == "some-unknown-model"
    assert len(openai_server.requests) == 1


def test_reading_the_spec_first_asks_the_server_once(openai_server: FakeModelServer) -> None:
    embedder = client(openai_server, model="some-unknown-model")
    assert embedder.spec.dim == 384
    assert embedder.spec.dim == 384
    assert len(openai_server.requests) == 1


def test_known_model_prefixes_are_sent(openai_server: FakeModelServer) -> None:
    embedder = client(openai_server, model="intfloat/e5-small-v2")
    assert embedder.spec.dim == 384  # from the table: no request
    assert not openai_server.requests
    embedder.embed_batch(["refunds"], role="query")
    embedder.embed_batch(["refunds are processed in 5 days"], role="passage")
    inputs = [seen.payload["input"] for seen in openai_server.requests]
    assert inputs == [["query: refunds"], ["passage: refunds are processed in 5 days"]]


def test_caller_prefixes_win(openai_server: FakeModelServer) -> None:
    embedder = client(openai_server, model="BAAI/bge-small-en-v1.5", query_prefix="")
    embedder.embed_batch(["q"], role="query")
    assert openai_server.requests[0].payload["input"] == ["q"]


def test_retry_on_503_then_success(openai_server: FakeModelServer, minilm: MiniLMEmbedder) -> None:
    openai_server.queue(503, {"error": {"message": "loading model"}})
    vectors = client(openai_server, retries=3).embed_batch(["retry me"])
    np.testing.assert_allclose(vectors, minilm.embed_batch(["retry me"]), atol=1e-6)
    assert len(openai_server.requests) == 2


def test_retry_on_429_honours_retry_after(openai_server: FakeModelServer) -> None:
    openai_server.queue(429, {"error": "slow down"}, headers={"Retry-After": "0"})
    assert client(openai_server).embed_batch(["x"]).shape == (1, 384)
    assert len(openai_server.requests) == 2


def test_retries_exhausted(openai_server: FakeModelServer) -> None:
    for _ in range(3):
        openai_server.queue(502, b"bad gateway")
    with pytest.raises(EmbeddingServerError) as caught:
        client(openai_server, retries=2).embed_batch(["x"])
    assert caught.value.status == 502
    assert caught.value.url == openai_server.base_url + "/embeddings"
    assert "HTTP 502" in str(caught.value)
    assert openai_server.base_url in str(caught.value)
    assert len(openai_server.requests) == 3


def test_401_is_not_retried_and_says_so(openai_server: FakeModelServer) -> None:
    body = {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}}
    openai_server.queue(401, body)
    with pytest.raises(EmbeddingServerError) as caught:
        client(openai_server, api_key="wrong").embed_batch(["x"])
    message = str(caught.value)
    assert caught.value.status == 401
    assert "HTTP 401" in message
    assert "API key" in message
    assert "Incorrect API key provided" in message
    assert len(openai_server.requests) == 1


def test_404_names_base_url_and_model(openai_server: FakeModelServer) -> None:
    embedder = OpenAIEmbedder(base_url=openai_server.base_url + "/wrong", model="m", dim=384)
    with pytest.raises(EmbeddingServerError, match=r"HTTP 404.*check base_url and model 'm'"):
        embedder.embed_batch(["x"])


def test_timeout(openai_server: FakeModelServer) -> None:
    openai_server.queue(200, b"{}", delay=30.0)  # held until the fixture releases it
    with pytest.raises(EmbeddingServerError, match=r"no answer within 0\.2 s") as caught:
        client(openai_server, timeout=0.2, retries=0).embed_batch(["x"])
    assert caught.value.status is None
    assert openai_server.held == 1  # it did not wait for the answer


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"this is not json", "not JSON"),
        (b'{"data": [{"embedding": [0.1, 0.2]', "not JSON"),
        ({"object": "list"}, "no 'data' list"),
        ({"data": []}, "0 embeddings for 1 inputs"),
        ({"data": [{"index": 0}]}, "no 'embedding'"),
        ({"data": [{"index": 0, "embedding": "%%%"}]}, "not a list of numbers"),
        ({"data": [{"index": 0, "embedding": ["a", "b"]}]}, "not a list of numbers"),
        ({"data": [{"index": 3, "embedding": [1.0]}]}, "indices"),
    ],
)
def test_malformed_answers(openai_server: FakeModelServer, body: Any, reason: str) -> None:
    openai_server.queue(200, body)
    with pytest.raises(EmbeddingServerError, match="malformed embeddings answer") as caught:
        client(openai_server, model="unknown-model").embed_batch(["x"])
    assert reason in str(caught.value)
    assert caught.value.status == 200
    assert len(openai_server.requests) == 1  # a broken answer is not retried


def test_wrong_dimension(openai_server: FakeModelServer) -> None:
    openai_server.queue(200, {"data": [{"index": 0, "embedding": [1.0, 0.0]}]})
    with pytest.raises(EmbeddingServerError, match="returned 2-d vectors, expected 384"):
        client(openai_server).embed_batch(["x"])


def test_base64_embeddings_are_accepted(openai_server: FakeModelServer) -> None:
    vector = np.array([3.0, 4.0], dtype="<f4")
    encoded = base64.b64encode(vector.tobytes()).decode("ascii")
    openai_server.queue(200, {"data": [{"index": 0, "embedding": encoded}]})
    out = client(openai_server, model="tiny").embed_batch(["x"])
    np.testing.assert_allclose(out, [[0.6, 0.8]], rtol=1e-6)  # normalised on receipt


def test_connection_refused() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    embedder = OpenAIEmbedder(
        base_url=f"http://127.0.0.1:{port}/v1", model="m", dim=384, retries=1, backoff=0.01
    )
    with pytest.raises(EmbeddingServerError, match="cannot connect") as caught:
        embedder.embed_batch(["x"])
    assert f"127.0.0.1:{port}" in str(caught.value)


def test_through_the_registry(openai_server: FakeModelServer) -> None:
    embedder = get_embedder("openai", base_url=openai_server.base_url, model="all-minilm:latest")
    assert embedder.spec.dim == 384
    assert embedder.embed_batch(["x"]).shape == (1, 384)


@pytest.mark.parametrize(
    ("base", "url"),
    [
        ("http://localhost:11434", "http://localhost:11434/v1/embeddings"),
        ("http://localhost:11434/", "http://localhost:11434/v1/embeddings"),
        ("http://localhost:8000/v1", "http://localhost:8000/v1/embeddings"),
        ("https://api.openai.com/v1/", "https://api.openai.com/v1/embeddings"),
        ("http://h/v1/embeddings", "http://h/v1/embeddings"),
        ("http://h/proxy/openai/v1", "http://h/proxy/openai/v1/embeddings"),
    ],
)
def test_embeddings_url(base: str, url: str) -> None:
    assert embeddings_url(base) == url


@pytest.mark.parametrize("base", ["localhost:11434", "file:///etc/passwd", "ftp://h/v1", ""])
def test_bad_base_url(base: str) -> None:
    with pytest.raises(ValueError, match="http"):
        OpenAIEmbedder(base_url=base, model="m")


@pytest.mark.parametrize(
    "options", [{"batch_size": 0}, {"retries": -1}, {"timeout": 0}], ids=lambda o: next(iter(o))
)
def test_bad_options(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="must be"):
        OpenAIEmbedder(base_url="http://localhost", model="m", **options)
