"""The LLM summarizer against a real local chat-completions server."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import stratamem
from stratamem.config import TreeConfig
from stratamem.embed.tokens import estimate_tokens
from stratamem.testing import FakeModelServer, chat_completion
from stratamem.tree.extractive import ExtractiveSummarizer
from stratamem.tree.llm import LLMSummarizer, chat_completions_url
from stratamem.tree.summarizer import Summarizer, SummaryItem


@pytest.fixture(scope="module")
def _shared_chat_server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as server:
        yield server


@pytest.fixture
def chat_server(_shared_chat_server: FakeModelServer) -> Iterator[FakeModelServer]:
    """The chat-completions server (answers echo the prompt behind ``SUMMARY:``) with no
    queued answers and no recorded requests."""
    _shared_chat_server.reset()
    yield _shared_chat_server
    _shared_chat_server.reset()


ITEMS = [
    SummaryItem(
        "a",
        "Alice Chen: the release moves to March 18\nBob: because the migration is not ready",
        author="Alice Chen",
        time_start=datetime(2024, 3, 4, 9, 30, tzinfo=UTC),
        time_end=datetime(2024, 3, 4, 9, 41, tzinfo=UTC),
    ),
    SummaryItem(
        "b",
        "Budget approved: 40k for the queue rewrite.",
        author="carol@acme.io",
        time_start=datetime(2024, 3, 5, 14, 0, tzinfo=UTC),
    ),
    SummaryItem("c", "Runbook notes without author or time."),
]


def summarizer(server: FakeModelServer, **options: Any) -> LLMSummarizer:
    options.setdefault("model", "llama3.2")
    options.setdefault("backoff", 0.01)
    options.setdefault("timeout", 2.0)
    return LLMSummarizer(base_url=server.base_url, **options)


def test_success_sends_the_items_and_returns_the_completion(
    chat_server: FakeModelServer,
) -> None:
    llm = summarizer(chat_server, temperature=0.2)
    out = llm.summarize(ITEMS, budget=300)
    assert llm.last_fallback is None
    assert llm.name == "llm:llama3.2"
    (seen,) = chat_server.requests
    assert seen.path == "/v1/chat/completions"
    payload = seen.payload
    assert payload["model"] == "llama3.2"
    assert payload["temperature"] == 0.2
    assert payload["max_tokens"] >= 300
    system, user = payload["messages"]
    assert system["role"] == "system"
    assert "names" in system["content"]
    assert "decisions" in system["content"]
    assert user["role"] == "user"
    lines = seen.prompt.splitlines()
    # One item per line, with its time and (unless the lines name their speakers) its author.
    assert lines[1:] == [
        "[2024-03-04] Alice Chen: the release moves to March 18 / Bob: because the migration "
        "is not ready",
        "[2024-03-05 carol@acme.io] Budget approved: 40k for the queue rewrite.",
        "Runbook notes without author or time.",
    ]
    assert out.startswith("SUMMARY: Records:")
    assert "40k for the queue rewrite" in out


def test_summary_level_items_carry_their_day_range(chat_server: FakeModelServer) -> None:
    item = SummaryItem(
        "s",
        "[2024-03-04 Alice] moved the release",
        level=1,
        time_start=datetime(2024, 3, 4, tzinfo=UTC),
        time_end=datetime(2024, 3, 9, tzinfo=UTC),
    )
    summarizer(chat_server).summarize([item], budget=100)
    assert "[2024-03-04..09] [2024-03-04 Alice] moved the release" in chat_server.requests[0].prompt


def test_output_is_cut_to_the_budget_at_a_word_boundary(chat_server: FakeModelServer) -> None:
    words = " ".join(f"word{i}" for i in range(500))
    chat_server.queue(200, chat_completion(f"  {words}  "))
    out = summarizer(chat_server).summarize(ITEMS, budget=20)
    assert estimate_tokens(out) <= 20
    assert words.startswith(out)
    assert out.endswith("word19")


def test_reasoning_is_dropped(chat_server: FakeModelServer) -> None:
    chat_server.queue(200, chat_completion("<think>\nlet me see\n</think>\n\nThe gist."))
    assert summarizer(chat_server).summarize(ITEMS, budget=50) == "The gist."


def test_content_parts_are_joined(chat_server: FakeModelServer) -> None:
    parts = [{"type": "text", "text": "Part one, "}, {"type": "text", "text": "part two."}]
    chat_server.queue(200, chat_completion(parts))
    assert summarizer(chat_server).summarize(ITEMS, budget=50) == "Part one, part two."


def test_authorization_header_only_with_a_key(chat_server: FakeModelServer) -> None:
    summarizer(chat_server).summarize(ITEMS, budget=50)
    summarizer(chat_server, api_key="sk-test").summarize(ITEMS, budget=50)
    without, with_key = (seen.headers for seen in chat_server.requests)
    assert "authorization" not in without
    assert with_key["authorization"] == "Bearer sk-test"
    assert with_key["content-type"] == "application/json"


def test_input_is_cut_to_whole_items(chat_server: FakeModelServer) -> None:
    items = [SummaryItem(str(i), f"item {i} " + "detail " * 40) for i in range(10)]
    summarizer(chat_server, max_input_tokens=130).summarize(items, budget=50)
    prompt = chat_server.requests[0].prompt
    assert "item 2 " in prompt
    assert "item 3 " not in prompt
    assert "(7 later records left out for length)" in prompt
    for line in prompt.splitlines()[1:4]:
        assert line.rstrip().endswith("detail")  # no item is cut short


def test_one_oversized_item_is_cut_to_the_input_budget(chat_server: FakeModelServer) -> None:
    item = SummaryItem("big", "word " * 1000)
    summarizer(chat_server, max_input_tokens=100).summarize([item], budget=50)
    (line,) = chat_server.requests[0].prompt.splitlines()[1:]
    assert estimate_tokens(line) == 100


def test_500_then_success_is_retried(chat_server: FakeModelServer) -> None:
    chat_server.queue(500, {"error": {"message": "model is loading"}})
    chat_server.queue(429, {"error": "slow down"}, headers={"Retry-After": "0"})
    llm = summarizer(chat_server, retries=2)
    assert llm.summarize(ITEMS, budget=100).startswith("SUMMARY:")
    assert llm.last_fallback is None
    assert len(chat_server.requests) == 3


def test_retries_exhausted_fall_back(
    chat_server: FakeModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    for _ in range(2):
        chat_server.queue(503, b"unavailable")
    llm = summarizer(chat_server, retries=1)
    with caplog.at_level(logging.WARNING, logger="stratamem.tree.llm"):
        out = llm.summarize(ITEMS, budget=100)
    assert out == ExtractiveSummarizer().summarize(ITEMS, budget=100)
    assert llm.last_fallback == "HTTP 503: unavailable"
    assert len(chat_server.requests) == 2
    (record,) = caplog.records
    assert "HTTP 503" in record.getMessage()
    assert "extractive" in record.getMessage()


def test_400_falls_back_without_retry(chat_server: FakeModelServer) -> None:
    chat_server.queue(400, {"error": {"message": "context length exceeded"}})
    llm = summarizer(chat_server, retries=3)
    out = llm.summarize(ITEMS, budget=100)
    assert out == ExtractiveSummarizer().summarize(ITEMS, budget=100)
    assert llm.last_fallback == "HTTP 400: context length exceeded"
    assert len(chat_server.requests) == 1


def test_timeout_falls_back(chat_server: FakeModelServer) -> None:
    chat_server.queue(200, chat_completion("too late"), delay=30.0)  # held until released
    llm = summarizer(chat_server, timeout=0.2, retries=0)
    out = llm.summarize(ITEMS, budget=100)
    assert chat_server.held == 1  # it did not wait for the answer
    assert out == ExtractiveSummarizer().summarize(ITEMS, budget=100)
    assert llm.last_fallback == "no answer within 0.2 s"


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"this is not json", "not JSON"),
        (b'{"choices": [{"message": {"content": "cut', "not JSON"),
        ({"object": "chat.completion"}, "no 'choices'"),
        ({"choices": []}, "no 'choices'"),
        ({"choices": [{"message": {"role": "assistant"}}]}, "no 'choices[0].message.content'"),
        ({"choices": [{"message": {"content": 42}}]}, "is a int, not text"),
        (["not", "an", "object"], "no 'choices'"),
    ],
)
def test_malformed_answers_fall_back(chat_server: FakeModelServer, body: Any, reason: str) -> None:
    chat_server.queue(200, body)
    llm = summarizer(chat_server)
    assert llm.summarize(ITEMS, budget=100) == ExtractiveSummarizer().summarize(ITEMS, budget=100)
    assert llm.last_fallback is not None
    assert llm.last_fallback.startswith("malformed chat completion")
    assert reason in llm.last_fallback
    assert len(chat_server.requests) == 1  # a broken answer is not retried


@pytest.mark.parametrize("content", ["", "   \n ", "<think>only thinking</think>"])
def test_empty_content_falls_back(chat_server: FakeModelServer, content: str) -> None:
    chat_server.queue(200, chat_completion(content))
    llm = summarizer(chat_server)
    assert llm.summarize(ITEMS, budget=100) == ExtractiveSummarizer().summarize(ITEMS, budget=100)
    assert llm.last_fallback == "the model returned an empty summary"


def test_connection_refused_falls_back() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    llm = LLMSummarizer(base_url=f"http://127.0.0.1:{port}", model="m", retries=1, backoff=0.01)
    assert llm.summarize(ITEMS, budget=100) == ExtractiveSummarizer().summarize(ITEMS, budget=100)
    assert llm.last_fallback is not None
    assert llm.last_fallback.startswith("cannot connect")


def test_last_fallback_is_cleared_by_a_success(chat_server: FakeModelServer) -> None:
    chat_server.queue(400, {"error": "bad"})
    llm = summarizer(chat_server)
    llm.summarize(ITEMS, budget=100)
    assert llm.last_fallback == "HTTP 400: bad"
    llm.summarize(ITEMS, budget=100)
    assert llm.last_fallback is None


class Fixed:
    name = "fixed"

    def summarize(self, items: Any, *, budget: int) -> str:
        return "fixed summary"


def test_a_given_fallback_is_used(chat_server: FakeModelServer) -> None:
    chat_server.queue(500, b"")
    fixed: Summarizer = Fixed()
    llm = summarizer(chat_server, retries=0, fallback=fixed)
    assert llm.summarize(ITEMS, budget=100) == "fixed summary"
    assert isinstance(llm, Summarizer)


def test_items_without_text_are_not_sent(chat_server: FakeModelServer) -> None:
    llm = summarizer(chat_server)
    assert llm.summarize([SummaryItem("x", "  \n")], budget=10) == "…"
    assert llm.last_fallback == "the items hold no text"
    assert not chat_server.requests


def test_bad_arguments() -> None:
    llm = LLMSummarizer(base_url="http://localhost:11434", model="m")
    with pytest.raises(ValueError, match="empty"):
        llm.summarize([], budget=10)
    with pytest.raises(ValueError, match="budget"):
        llm.summarize(ITEMS, budget=0)


@pytest.mark.parametrize(
    "options",
    [{"retries": -1}, {"timeout": 0}, {"max_input_tokens": 0}, {"model": ""}],
    ids=lambda o: next(iter(o)),
)
def test_bad_options(options: dict[str, Any]) -> None:
    options = {"model": "m", **options}
    with pytest.raises(ValueError, match="must be"):
        LLMSummarizer(base_url="http://localhost", **options)


@pytest.mark.parametrize(
    ("base", "url"),
    [
        ("http://localhost:11434", "http://localhost:11434/v1/chat/completions"),
        ("http://localhost:11434/", "http://localhost:11434/v1/chat/completions"),
        ("http://localhost:8000/v1", "http://localhost:8000/v1/chat/completions"),
        ("https://api.openai.com/v1/", "https://api.openai.com/v1/chat/completions"),
        ("http://h/v1/chat/completions", "http://h/v1/chat/completions"),
    ],
)
def test_chat_completions_url(base: str, url: str) -> None:
    assert chat_completions_url(base) == url


@pytest.mark.parametrize("base", ["localhost:11434", "file:///etc/passwd", ""])
def test_bad_base_url(base: str) -> None:
    with pytest.raises(ValueError, match="http"):
        LLMSummarizer(base_url=base, model="m")


def test_a_tree_built_through_the_llm_summarizer(
    chat_server: FakeModelServer, store_location: str
) -> None:
    """End to end: ingest seals with the LLM; an answer that fails mid-build still leaves a
    summary (the extractive one) and the tree complete."""
    chat_server.queue(200, chat_completion("   "))  # the first seal gets an empty answer
    llm = summarizer(chat_server)
    config = TreeConfig(input_token_budget=40, summary_fanout=2, flush_age_days=1.0)
    slack = Path(__file__).parents[1] / "fixtures" / "slack"
    with stratamem.open(store_location, embedder=None, summarizer=llm, tree_config=config) as mem:
        mem.ingest(slack)
        mem.trees.flush()
        rows = mem.store.conn.execute(
            "SELECT content, summarizer FROM summaries WHERE deleted = 0 ORDER BY rowid"
        ).fetchall()
    assert len(rows) >= 2
    assert {r["summarizer"] for r in rows} == {"llm:llama3.2"}
    assert not rows[0]["content"].startswith("SUMMARY:")  # the fallback wrote it
    assert rows[0]["content"].strip()
    assert all(r["content"].startswith("SUMMARY:") for r in rows[1:])
    assert len(chat_server.requests) == len(rows)
