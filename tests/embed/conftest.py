from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from stratamem.embed.onnx_minilm import MiniLMEmbedder


@pytest.fixture(scope="session")
def minilm() -> MiniLMEmbedder:
    """The real default model, loaded once for the whole run."""
    embedder = MiniLMEmbedder()
    embedder.embed_batch(["warm up"])
    return embedder


@dataclass
class Scripted:
    """One canned answer: status, body (bytes, or an object sent as JSON), headers, delay."""

    status: int = 200
    body: Any = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    payload: Any


class EmbeddingsServer:
    """An OpenAI-compatible ``/v1/embeddings`` server on 127.0.0.1 serving real MiniLM vectors.

    Answers queued in ``script`` are served first, one per request; then real embeddings. Every
    request is recorded in ``seen``.
    """

    def __init__(self, embedder: MiniLMEmbedder) -> None:
        self.embedder = embedder
        self.script: list[Scripted] = []
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def queue(
        self,
        status: int,
        body: Any,
        *,
        headers: dict[str, str] | None = None,
        delay: float = 0.0,
    ) -> None:
        """Serve this answer to the next request instead of real embeddings."""
        with self.lock:
            self.script.append(Scripted(status, body, headers or {}, delay))

    def answer(self, path: str, payload: Any) -> Scripted:
        if path != "/v1/embeddings":
            return Scripted(404, {"error": {"message": f"no route {path}"}})
        with self.lock:
            if self.script:
                return self.script.pop(0)
        if not isinstance(payload, dict) or "input" not in payload:
            return Scripted(400, {"error": {"message": "'input' is required"}})
        texts = payload["input"]
        texts = [texts] if isinstance(texts, str) else texts
        if any(text == "" for text in texts):
            return Scripted(400, {"error": {"message": "'$.input' is invalid: empty string"}})
        vectors = self.embedder.embed_batch(texts)
        data = [
            {"object": "embedding", "index": i, "embedding": vector.tolist()}
            for i, vector in enumerate(vectors)
        ]
        data.reverse()  # the protocol does not promise order; clients must sort by index
        tokens = sum(len(text.split()) for text in texts)
        return Scripted(
            200,
            {
                "object": "list",
                "data": data,
                "model": payload.get("model"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            },
        )

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                try:
                    payload = json.loads(raw)
                except ValueError:
                    payload = None
                with server.lock:
                    server.seen.append(Seen(self.path, dict(self.headers.items()), payload))
                reply = server.answer(self.path, payload)
                if reply.delay:
                    time.sleep(reply.delay)
                body = reply.body
                if not isinstance(body, bytes):
                    body = json.dumps(body).encode("utf-8")
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up (the timeout test)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def __enter__(self) -> EmbeddingsServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture(scope="session")
def _shared_openai_server(minilm: MiniLMEmbedder) -> Iterator[EmbeddingsServer]:
    with EmbeddingsServer(minilm) as server:
        yield server


@pytest.fixture
def openai_server(_shared_openai_server: EmbeddingsServer) -> EmbeddingsServer:
    """The server with an empty script and request log."""
    server = _shared_openai_server
    with server.lock:
        server.script.clear()
        server.seen.clear()
    return server
