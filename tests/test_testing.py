"""The fakes shipped for tests: the local model server and the hashing embedder."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from stratamem.embed.hashing import HashingEmbedder as Hashing
from stratamem.errors import RequestFailed
from stratamem.remote import JSONClient
from stratamem.testing import (
    FakeModelServer,
    HashingEmbedder,
    chat_completion,
    held_facts,
    record_ids,
)
from suite import PATIENCE_S


@pytest.fixture(scope="module")
def _shared() -> Iterator[FakeModelServer]:
    with FakeModelServer() as server:
        yield server


@pytest.fixture
def server(_shared: FakeModelServer) -> Iterator[FakeModelServer]:
    _shared.reset()
    yield _shared
    _shared.reset()


def post(url: str, payload: Any, **options: Any) -> Any:
    with JSONClient(url, **options) as client:
        status, body = client.post(payload)
    assert status == 200
    return json.loads(body)


def test_the_hashing_embedder_is_the_package_one() -> None:
    assert HashingEmbedder is Hashing


def test_embeddings_are_the_embedders_in_any_order(server: FakeModelServer) -> None:
    answer = post(server.base_url + "/embeddings", {"model": "m", "input": ["a b", "c"]})
    assert [item["index"] for item in answer["data"]] == [1, 0]
    vectors = [item["embedding"] for item in sorted(answer["data"], key=lambda d: d["index"])]
    np.testing.assert_allclose(vectors, HashingEmbedder().embed_batch(["a b", "c"]), atol=1e-6)
    assert answer["model"] == "m"
    assert answer["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    (seen,) = server.requests
    assert seen.path == "/v1/embeddings"
    assert seen.headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    ("path", "payload", "status", "message"),
    [
        ("/v1/embeddings", {"model": "m"}, 400, "'input' is required"),
        ("/v1/embeddings", {"input": ["a", ""]}, 400, "empty string"),
        ("/v1/chat/completions", {"model": "m", "messages": []}, 400, "non-empty list"),
        ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user"}]}, 400, "content"),
        ("/rerank", {"documents": ["a"]}, 400, "'query' is required"),
        ("/v1/other", {}, 404, "no route /v1/other"),
    ],
)
def test_malformed_requests_are_refused_as_the_protocol_does(
    server: FakeModelServer, path: str, payload: Any, status: int, message: str
) -> None:
    with pytest.raises(RequestFailed) as caught:
        post(server.url + path, payload)
    assert caught.value.status == status
    assert message in caught.value.detail


def test_chat_echoes_the_prompt(server: FakeModelServer) -> None:
    payload = {"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}]}
    answer = post(server.base_url + "/chat/completions", payload)
    assert answer == chat_completion("SUMMARY: hi", model="m")
    assert server.requests[0].prompt == "hi"


def test_queued_answers_come_first_and_unknown_paths_do_not_take_them(
    server: FakeModelServer,
) -> None:
    server.queue(503, {"error": {"message": "loading"}}, headers={"Retry-After": "0"})
    server.queue(200, {"results": []})
    with pytest.raises(RequestFailed):
        post(server.url + "/nowhere", {})
    with pytest.raises(RequestFailed) as caught:
        post(server.url + "/rerank", {"query": "q", "documents": []})
    assert (caught.value.status, caught.value.detail, caught.value.delay) == (503, "loading", 0)
    assert post(server.url + "/rerank", {"query": "q", "documents": ["q"]}) == {"results": []}
    assert post(server.url + "/rerank", {"query": "q", "documents": ["q"]})["results"] == [
        {"index": 0, "relevance_score": 1.0}
    ]


def test_a_held_answer_goes_when_released(server: FakeModelServer) -> None:
    server.queue(200, {"results": []}, delay=60.0)
    answers: list[Any] = []
    client = threading.Thread(
        target=lambda: answers.append(
            post(server.url + "/rerank", {"query": "q"}, timeout=PATIENCE_S)
        )
    )
    client.start()
    assert server.wait_for_requests(1)
    assert not answers
    server.release()
    client.join()
    assert answers == [{"results": []}]


def test_wait_for_requests_gives_up() -> None:
    with FakeModelServer() as server:
        assert not server.wait_for_requests(1, timeout=0.01)


def test_closing_releases_held_answers_and_leaves_no_thread() -> None:
    before = set(threading.enumerate())
    server = FakeModelServer().start()
    server.queue(200, b"late", delay=60.0)
    answers: list[bytes] = []
    client = threading.Thread(
        target=lambda: answers.append(
            JSONClient(server.url + "/rerank", timeout=PATIENCE_S).post({})[1]
        )
    )
    client.start()
    assert server.wait_for_requests(1)
    server.close()
    client.join()
    assert answers == [b"late"]
    # No thread of its own is left; one another test's server had then may have ended since.
    assert set(threading.enumerate()) <= before


def test_held_facts_reads_the_facts_an_extraction_prompt_shows() -> None:
    from datetime import UTC, datetime

    from stratamem.memory.decide import Held
    from stratamem.store.facts import Fact

    when = datetime(2024, 3, 1, tzinfo=UTC)
    fact = Fact("fact_1", "handle:carol", "leads", "on-call", when, None, when, single=False)
    prompt = f"Facts held now:\n\n{Held({'F1': fact}).lines()}\n\nRecords:\n\n[{'a' * 32}]\nx"
    assert held_facts(prompt) == {
        "F1": ["handle:carol", "leads", "on-call", "from 2024-03-01", "one of many"]
    }
    assert held_facts("Records:\n\n[F1 is not a label here]") == {}
    assert record_ids(prompt) == ["a" * 32]
    assert record_ids(f"[{'b' * 32}]\nRecords:\n[{'c' * 32} | time]\nnot a label") == ["c" * 32]
