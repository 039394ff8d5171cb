"""Fakes for tests, shipped with the package: a local model server and a model-free embedder.

:class:`FakeModelServer` is a real HTTP server on 127.0.0.1, on a port the system picks,
written with the standard library only. It speaks the protocols of stratamem's remote parts:

=================================  ==========================================================
``POST /v1/embeddings``            OpenAI embeddings: vectors of ``embedder`` (by default a
                                   :class:`HashingEmbedder`), in reverse index order, since
                                   the protocol does not promise order
``POST /v1/chat/completions``      OpenAI chat completions: ``reply(prompt)`` for the last
                                   message, by default the prompt behind ``SUMMARY:``
``POST /rerank``, ``/v1/rerank``   Cohere/Jina rerank: ``scores(query, documents)``, by
                                   default the share of the query's words in each document
=================================  ==========================================================

A malformed request gets the 400 answer the real protocol gives, another path a 404.
Answers queued with :meth:`FakeModelServer.queue` (a status, a body, headers) are served
first, one per request on any of these paths. Every request is recorded in
:attr:`FakeModelServer.requests`; :meth:`FakeModelServer.wait_for_requests` waits until
enough have come.

A queued answer may be held back ``delay`` seconds, to make a client time out. The server
answers after the delay or as soon as :meth:`FakeModelServer.release` is called, whichever
comes first, and :meth:`FakeModelServer.reset` and :meth:`FakeModelServer.close` release
every held answer, so no test waits a delay out and no handler thread outlives the server::

    with FakeModelServer() as server:
        server.queue(503, {"error": {"message": "loading"}})
        embedder = get_embedder("openai", base_url=server.base_url, model="m", retries=1)
        embedder.embed_batch(["hello"])
        assert len(server.requests) == 2

:class:`HashingEmbedder` is the deterministic embedder for fast tests
(:mod:`stratamem.embed.hashing`).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from stratamem.embed.base import Embedder
from stratamem.embed.hashing import HashingEmbedder

__all__ = [
    "FakeModelServer",
    "HashingEmbedder",
    "Reply",
    "Request",
    "chat_completion",
    "held_facts",
    "record_ids",
]

_WORDS = re.compile(r"\w+")
_HELD = re.compile(r"^\[(F\d+)\] (.*)$", re.MULTILINE)


def held_facts(prompt: str) -> dict[str, list[str]]:
    """The facts an extraction prompt shows the model, by label: ``{"F1": [subject,
    predicate, object, …]}`` (see :mod:`stratamem.memory.decide`), what a scripted model
    decides on."""
    return {label: line.split(" | ") for label, line in _HELD.findall(prompt)}


def record_ids(prompt: str) -> list[str]:
    """The node ids of the records an extraction prompt lists, in order (each record's label
    opens with its id: see :mod:`stratamem.memory.extract`), what a scripted model cites."""
    records = prompt.split("Records:", 1)[1]
    return [line[1:33] for line in records.splitlines() if line.startswith("[")]


@dataclass(frozen=True, slots=True)
class Reply:
    """One answer: the status, the body (bytes as they are, anything else sent as JSON), extra
    headers, and how long to hold it back (see the module docstring)."""

    status: int = 200
    body: Any = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass(frozen=True, slots=True)
class Request:
    """A request as the server received it: path, headers (names lower-cased) and the JSON
    body (None when it was not JSON)."""

    path: str
    headers: dict[str, str]
    payload: Any

    @property
    def prompt(self) -> str:
        """The last message of a chat-completions request."""
        return str(self.payload["messages"][-1]["content"])


def chat_completion(content: Any, *, model: str = "m") -> dict[str, Any]:
    """An OpenAI chat-completions answer whose one choice says ``content``."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }


def _summary_reply(prompt: str) -> str:
    """The default chat reply: the prompt behind ``SUMMARY:``, so a test sees what was sent."""
    return f"SUMMARY: {prompt}"


def _word_overlap(query: str, documents: Sequence[str]) -> list[float]:
    """The default rerank scores: the share of the query's words found in each document."""
    wanted = set(_WORDS.findall(query.lower()))
    return [
        len(wanted & set(_WORDS.findall(text.lower()))) / len(wanted) if wanted else 0.0
        for text in documents
    ]


class FakeModelServer:
    """An embeddings, chat-completions and rerank server on 127.0.0.1 (see the module
    docstring). Use as a context manager, or call :meth:`start` and :meth:`close`.

    ``url`` is the server's root (a rerank client's base URL), ``base_url`` the OpenAI-style
    base URL under it (``…/v1``).
    """

    def __init__(
        self,
        *,
        embedder: Embedder | None = None,
        reply: Callable[[str], str] = _summary_reply,
        scores: Callable[[str, Sequence[str]], list[float]] = _word_overlap,
    ) -> None:
        self.embedder: Embedder = embedder if embedder is not None else HashingEmbedder()
        self.reply = reply
        self.scores = scores
        self._script: list[Reply] = []
        self._requests: list[Request] = []
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._release = threading.Event()
        self._holding = 0
        self._httpd = _HTTPServer(self)
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self.base_url = self.url + "/v1"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fake-model-server:{self._httpd.server_address[1]}",
        )

    def start(self) -> FakeModelServer:
        self._thread.start()
        return self

    def close(self) -> None:
        """Release held answers, stop serving, wait for every handler thread, free the port."""
        self.release()
        if self._thread.is_alive():
            self._httpd.shutdown()
            self._thread.join()
        self._httpd.server_close()  # joins the handler threads

    def __enter__(self) -> FakeModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def requests(self) -> list[Request]:
        """The requests received since the start or the last :meth:`reset`, oldest first."""
        with self._lock:
            return list(self._requests)

    def queue(
        self,
        status: int = 200,
        body: Any = b"",
        *,
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
    ) -> None:
        """Serve this answer to the next request that has none queued before it."""
        with self._lock:
            self._script.append(Reply(status, body, dict(headers or {}), delay))

    def release(self) -> None:
        """Send every held answer now; later ones are held again."""
        with self._lock:
            released, self._release = self._release, threading.Event()
        released.set()

    def reset(self) -> None:
        """Forget queued answers and recorded requests, and release held answers."""
        with self._lock:
            self._script.clear()
            self._requests.clear()
        self.release()

    @property
    def held(self) -> int:
        """How many answers are being held back right now (a client that timed out leaves
        its answer held until the delay ends or :meth:`release`)."""
        with self._lock:
            return self._holding

    def wait_for_requests(self, count: int, *, timeout: float = 10.0) -> bool:
        """Wait until ``count`` requests have come (False if ``timeout`` seconds pass first)."""
        with self._arrived:
            return self._arrived.wait_for(lambda: len(self._requests) >= count, timeout)

    # ------------------------------------------------------------------ serving

    def _receive(self, request: Request) -> tuple[Reply, threading.Event]:
        """Record the request; its answer and the event that releases a held answer."""
        with self._arrived:
            self._requests.append(request)
            self._arrived.notify_all()
            release = self._release
            scripted = self._script.pop(0) if self._script and _route(request.path) else None
        return scripted or self._answer(request), release

    def _hold(self, release: threading.Event, delay: float) -> None:
        with self._lock:
            self._holding += 1
        try:
            release.wait(delay)
        finally:
            with self._lock:
                self._holding -= 1

    def _answer(self, request: Request) -> Reply:
        route, payload = _route(request.path), request.payload
        if route is None:
            return _error(404, f"no route {request.path}")
        if route == "embeddings":
            return self._embeddings(payload)
        if route == "chat":
            return self._chat(payload)
        return self._rerank(payload)

    def _embeddings(self, payload: Any) -> Reply:
        if not isinstance(payload, dict) or "input" not in payload:
            return _error(400, "'input' is required")
        texts = payload["input"]
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
            return _error(400, "'input' must be a string or a list of strings")
        if any(text == "" for text in texts):
            return _error(400, "'$.input' is invalid: empty string")
        vectors = self.embedder.embed_batch(texts)
        data = [
            {"object": "embedding", "index": i, "embedding": vector.tolist()}
            for i, vector in enumerate(vectors)
        ]
        data.reverse()  # the protocol does not promise order; clients must sort by index
        tokens = sum(len(text.split()) for text in texts)
        body = {
            "object": "list",
            "data": data,
            "model": payload.get("model"),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        return Reply(200, body)

    def _chat(self, payload: Any) -> Reply:
        problem = _chat_problem(payload)
        if problem is not None:
            return _error(400, problem)
        content = self.reply(str(payload["messages"][-1]["content"]))
        return Reply(200, chat_completion(content, model=payload["model"]))

    def _rerank(self, payload: Any) -> Reply:
        if not isinstance(payload, dict) or not isinstance(payload.get("query"), str):
            return _error(400, "'query' is required")
        documents = payload.get("documents")
        if not isinstance(documents, list) or not all(isinstance(d, str) for d in documents):
            return _error(400, "'documents' must be a list of strings")
        scores = self.scores(payload["query"], documents)
        results = [{"index": i, "relevance_score": score} for i, score in enumerate(scores)]
        results.sort(key=lambda result: -float(result["relevance_score"]))
        return Reply(200, {"model": payload.get("model", ""), "results": results})


def _route(path: str) -> str | None:
    return {
        "/v1/embeddings": "embeddings",
        "/v1/chat/completions": "chat",
        "/rerank": "rerank",
        "/v1/rerank": "rerank",
    }.get(path)


def _error(status: int, message: str) -> Reply:
    return Reply(status, {"error": {"message": message}})


def _chat_problem(payload: Any) -> str | None:
    """What is wrong with a chat-completions request body, as OpenAI would say it."""
    if not isinstance(payload, dict):
        return "the body is not a JSON object"
    if not isinstance(payload.get("model"), str) or not payload["model"]:
        return "'model' is required"
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty list"
    for message in messages:
        if not isinstance(message, dict) or message.get("role") not in ("system", "user"):
            return f"bad message {message!r}"
        if not isinstance(message.get("content"), str):
            return "a message has no text 'content'"
    max_tokens = payload.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        return "'max_tokens' must be a positive integer"
    return None


class _HTTPServer(ThreadingHTTPServer):
    # Handler threads are joined on close (no thread outlives the server).
    daemon_threads = False
    block_on_close = True

    def __init__(self, fake: FakeModelServer) -> None:
        self.fake = fake
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            payload = json.loads(raw)
        except ValueError:
            payload = None
        headers = {name.lower(): value for name, value in self.headers.items()}
        reply, release = self.server.fake._receive(Request(self.path, headers, payload))
        if reply.delay:
            self.server.fake._hold(release, reply.delay)
        body = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client gave up waiting

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a test's output is not the place for an access log
