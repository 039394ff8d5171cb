"""A summarizer over any OpenAI-compatible chat-completions server: Ollama, vLLM, llama.cpp,
OpenAI. Needs the ``llm`` extra (httpx, through :mod:`stratamem.remote`).

Wire format (OpenAI's "Create chat completion"): ``POST {base}/chat/completions`` with
``{"model", "messages": [system, user], "max_tokens", "temperature"}``; the summary is
``choices[0].message.content``, stripped (and rid of a reasoning model's ``<think>…</think>``
block) and cut to the budget at a word boundary.

The user message lists the items one per line, oldest first, each behind a ``[when who]``
label; it holds whole items up to ``max_input_tokens`` and says how many did not fit.

Connection errors, timeouts, 408, 409, 429 and 5xx are retried ``retries`` times with
exponential backoff (:mod:`stratamem.remote`). Any failure — the server unreachable, an error
status, an answer that is not a completion, an empty one — falls back to the ``fallback``
summarizer (the extractive one unless given), so a summary is always written; the reason is
logged as a warning and kept in :attr:`LLMSummarizer.last_fallback`.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from typing import Any

from stratamem.embed.tokens import estimate_tokens
from stratamem.remote import JSONClient, RequestFailed, openai_url
from stratamem.tree.extractive import (
    ExtractiveSummarizer,
    cut_to_budget,
    speaker_labelled,
    when_label,
)
from stratamem.tree.summarizer import Summarizer, SummaryItem

log = logging.getLogger(__name__)

_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)
# Prose runs about four words to five estimated tokens.
_WORDS_PER_TOKEN = 0.75

SYSTEM_PROMPT = (
    "You summarise records for a long-term memory. Write one concise, factual summary of the "
    "records below in at most {words} words. Keep the names of people and things, dates, "
    "decisions, numbers and open questions; say who said or decided what. Do not invent "
    "anything, do not address the reader, and start directly with the summary."
)


def chat_completions_url(base_url: str) -> str:
    """``http://host:11434`` → ``…/v1/chat/completions``; ``…/v1`` → ``…/v1/chat/completions``;
    a URL that already ends in ``/chat/completions`` is kept."""
    return openai_url(base_url, "/chat/completions")


class _Failure(Exception):
    """Why no summary came from the server."""


class LLMSummarizer:
    """Summaries written by a model behind an OpenAI-compatible server.

    ``api_key`` is sent as a bearer token when given; this class never reads the environment.
    ``fallback`` (default :class:`~stratamem.tree.extractive.ExtractiveSummarizer`) writes the
    summary whenever the server does not; :attr:`last_fallback` holds the reason of the last
    call's fallback, ``None`` after a call the model answered.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 30.0,
        retries: int = 2,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        fallback: Summarizer | None = None,
        max_input_tokens: int = 6000,
        temperature: float = 0.0,
    ) -> None:
        if not model:
            raise ValueError("model must be given")
        if max_input_tokens < 1:
            raise ValueError(f"max_input_tokens must be >= 1, got {max_input_tokens}")
        self.url = chat_completions_url(base_url)
        self.model = model
        self.name = f"llm:{model}"
        self._client = JSONClient(
            self.url,
            api_key=api_key,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            max_backoff=max_backoff,
            extra="llm",
            what="the LLM summarizer",
        )
        self.fallback: Summarizer = fallback if fallback is not None else ExtractiveSummarizer()
        self.max_input_tokens = max_input_tokens
        self.temperature = temperature
        self.last_fallback: str | None = None

    def close(self) -> None:
        """Close the connections to the server."""
        self._client.close()

    def summarize(self, items: Sequence[SummaryItem], *, budget: int) -> str:
        if not items:
            raise ValueError("nothing to summarise: items is empty")
        if budget < 1:
            raise ValueError(f"budget must be >= 1, got {budget}")
        try:
            if not any(item.text.strip() for item in items):
                raise _Failure("the items hold no text")
            summary = self._complete(self.messages(items, budget=budget), budget)
        except _Failure as failure:
            reason = str(failure)
            self.last_fallback = reason
            log.warning("%s: %s; summarising with %s", self.url, reason, self.fallback.name)
            return self.fallback.summarize(items, budget=budget)
        self.last_fallback = None
        return summary

    def messages(self, items: Sequence[SummaryItem], *, budget: int) -> list[dict[str, str]]:
        """The chat messages sent for ``items``: the instructions, then the items."""
        words = max(1, int(budget * _WORDS_PER_TOKEN))
        return [
            {"role": "system", "content": SYSTEM_PROMPT.format(words=words)},
            {"role": "user", "content": self._prompt(items)},
        ]

    def _prompt(self, items: Sequence[SummaryItem]) -> str:
        lines: list[str] = []
        used = 0
        for item in items:
            line = _item_line(item)
            if not line:
                continue
            cost = estimate_tokens(line)
            if used + cost > self.max_input_tokens:
                if not lines:  # one item larger than the whole input budget
                    lines.append(cut_to_budget(line, self.max_input_tokens))
                break
            lines.append(line)
            used += cost
        listed = sum(1 for item in items if item.text.strip())
        if len(lines) < listed:
            lines.append(f"({listed - len(lines)} later records left out for length)")
        return "Records:\n" + "\n".join(lines)

    def _complete(self, messages: list[dict[str, str]], budget: int) -> str:
        payload = {
            "model": self.model,
            "messages": messages,
            # Room past the budget so the model ends its sentence; the cut below enforces it.
            "max_tokens": budget + budget // 4 + 8,
            "temperature": self.temperature,
            "stream": False,
        }
        try:
            _, raw = self._client.post(payload)
        except RequestFailed as failure:
            raise _Failure(str(failure)) from failure
        content = _content(raw)
        summary = cut_to_budget(_THINK.sub("", content), budget)
        if not summary:
            raise _Failure("the model returned an empty summary")
        return summary


def _item_line(item: SummaryItem) -> str:
    text = " / ".join(line.strip() for line in item.text.splitlines() if line.strip())
    if not text:
        return ""
    who = item.author if item.level == 0 and not speaker_labelled(item) else None
    label = " ".join(part for part in (when_label(item), who) if part)
    return f"[{label}] {text}" if label else text


def _content(raw: bytes) -> str:
    def bad(reason: str) -> _Failure:
        return _Failure(f"malformed chat completion: {reason}")

    try:
        answer = json.loads(raw)
    except ValueError as exc:
        snippet = raw[:80].decode("utf-8", "replace")
        raise bad(f"not JSON ({exc}): {snippet!r}") from exc
    choices = answer.get("choices") if isinstance(answer, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise bad("no 'choices'")
    message = choices[0].get("message")
    content: Any = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):  # content parts: [{"type": "text", "text": …}]
        texts = [part.get("text") for part in content if isinstance(part, dict)]
        content = "".join(text for text in texts if isinstance(text, str))
    if content is None:
        raise bad("no 'choices[0].message.content'")
    if not isinstance(content, str):
        raise bad(f"the content is a {type(content).__name__}, not text")
    return content
