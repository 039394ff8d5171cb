"""An embedder for any OpenAI-compatible ``/v1/embeddings`` server: Ollama, vLLM, llama.cpp,
OpenAI. Standard library only (``urllib.request``, ``json``).

Wire format (OpenAI's "Create embeddings"): ``POST {base}/embeddings`` with
``{"model": ..., "input": [texts]}``; the answer is ``{"data": [{"index": i, "embedding":
[floats]}, ...]}``, in any order (sorted here by ``index``); an ``embedding`` given as a base64
string of little-endian float32 is accepted too. Vectors are L2-normalised on receipt.

Connection errors, timeouts, 429 and 5xx are retried ``retries`` times with exponential backoff
(``backoff · 2^attempt`` seconds, or the server's longer ``Retry-After``, at most
``max_backoff``), as the OpenAI client does; other statuses and malformed answers fail at once
with an :class:`~stratamem.embed.base.EmbeddingServerError` naming the URL and the status.

Servers truncate over-long input themselves (OpenAI rejects it instead), so no truncation is done
here. Empty texts are sent as a single space, because OpenAI rejects empty strings.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

import numpy as np

from stratamem.embed.base import (
    EmbeddingServerError,
    ModelSpec,
    Role,
    Vectors,
    with_prefix,
)
from stratamem.embed.registry import known_model, model_spec

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
_LOCAL_HOSTS = frozenset({"localhost", "localhost.localdomain"})


def embeddings_url(base_url: str) -> str:
    """``http://host:11434`` → ``…/v1/embeddings``; ``…/v1`` → ``…/v1/embeddings``; a URL that
    already ends in ``/embeddings`` is kept."""
    return openai_url(base_url, "/embeddings")


def openai_url(base_url: str, endpoint: str) -> str:
    """``endpoint`` (``/embeddings``, ``/chat/completions``) of an OpenAI-compatible server:
    appended to the base's path, ``/v1`` when it has none, kept when already there."""
    parts = urllib.parse.urlsplit(base_url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"base_url must be an http(s) URL, got {base_url!r}")
    path = parts.path.rstrip("/")
    if not path:
        path = "/v1" + endpoint
    elif not path.endswith(endpoint):
        path += endpoint
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host.lower() in _LOCAL_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _Retry(Exception):
    def __init__(self, error: EmbeddingServerError, delay: float | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.delay = delay


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible server.

    ``dim`` is, when not given, the known model table's, else learnt from the first answer
    (reading :attr:`spec` before any call then asks the server once). Prefixes default to the
    table's for known models. ``api_key`` is sent as a bearer token; this class never reads the
    environment (the CLI and server do, and pass the key in).
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        dim: int | None = None,
        api_key: str | None = None,
        query_prefix: str | None = None,
        passage_prefix: str | None = None,
        max_tokens: int | None = None,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        batch_size: int = 64,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {timeout}")
        self.url = embeddings_url(base_url)
        self.model = model
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.batch_size = batch_size
        self._api_key = api_key
        self._prefixes = (query_prefix, passage_prefix)
        self._max_tokens = max_tokens
        self._lock = threading.Lock()
        if dim is None:
            known = known_model(model)
            dim = known.dim if known is not None else None
        self._spec = self._make_spec(dim) if dim is not None else None
        host = urllib.parse.urlsplit(self.url).hostname
        # A proxy from the environment must not swallow requests to a server on this machine.
        handlers = [urllib.request.ProxyHandler({})] if is_loopback(host) else []
        self._opener = urllib.request.build_opener(*handlers)

    def _make_spec(self, dim: int) -> ModelSpec:
        query_prefix, passage_prefix = self._prefixes
        return model_spec(
            self.model,
            dim=dim,
            query_prefix=query_prefix,
            passage_prefix=passage_prefix,
            max_tokens=self._max_tokens,
        )

    @property
    def spec(self) -> ModelSpec:
        """The model's spec; when its dimension is not known yet, the server is asked once."""
        return self._spec or self._learn_dim(self._request([" "]).shape[1])

    @spec.setter
    def spec(self, value: ModelSpec) -> None:
        self._spec = value

    def _learn_dim(self, dim: int) -> ModelSpec:
        with self._lock:
            if self._spec is None:
                self._spec = self._make_spec(dim)
            return self._spec

    def embed_batch(self, texts: Sequence[str], *, role: Role = "passage") -> Vectors:
        # Prefixes do not depend on the dimension: a spec with a placeholder one gives them.
        prefixes = self._spec or self._make_spec(1)
        prepared = [text or " " for text in with_prefix(prefixes, texts, role)]
        if not prepared:
            return np.zeros((0, self.spec.dim), dtype=np.float32)
        parts = [
            self._request(prepared[start : start + self.batch_size])
            for start in range(0, len(prepared), self.batch_size)
        ]
        dim = (self._spec or self._learn_dim(parts[0].shape[1])).dim
        for part in parts:
            if part.shape[1] != dim:
                raise EmbeddingServerError(
                    self.url,
                    200,
                    f"model {self.model!r} returned {part.shape[1]}-d vectors, expected {dim}",
                )
        out = np.concatenate(parts)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        result: Vectors = (out / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)
        return result

    def _request(self, texts: list[str]) -> Vectors:
        body = json.dumps({"model": self.model, "input": texts}).encode("utf-8")
        attempt = 0
        while True:
            try:
                return self._post(body, len(texts))
            except _Retry as retry:
                if attempt >= self.retries:
                    raise retry.error from retry
                delay = max(self.backoff * 2**attempt, retry.delay or 0.0)
                delay = min(delay, self.max_backoff)
                time.sleep(delay)
                attempt += 1

    def _post(self, body: bytes, count: int) -> Vectors:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                status = int(response.status)
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise self._status_error(exc) from exc
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            if isinstance(reason, TimeoutError):
                message = f"no answer within {self.timeout:g} s"
            else:
                message = f"cannot connect ({reason})"
            raise _Retry(EmbeddingServerError(self.url, None, message)) from exc
        except OSError as exc:  # e.g. a connection reset while reading
            raise _Retry(
                EmbeddingServerError(self.url, None, f"connection failed ({exc})")
            ) from exc
        return self._parse(raw, status, count)

    def _status_error(self, exc: urllib.error.HTTPError) -> Exception:
        try:
            detail = error_message(exc.read())
        except OSError:
            detail = ""
        status = exc.code
        reason = detail or str(exc.reason or "request failed")
        if status in (401, 403):
            reason = f"not authorised, check the API key: {reason}"
        elif status == 404:
            reason = f"not found, check base_url and model {self.model!r}: {reason}"
        error = EmbeddingServerError(self.url, status, reason)
        if status in RETRY_STATUSES or status >= 500:
            return _Retry(error, retry_after(exc.headers.get("Retry-After")))
        return error

    def _parse(self, raw: bytes, status: int, count: int) -> Vectors:
        def bad(reason: str) -> EmbeddingServerError:
            return EmbeddingServerError(self.url, status, f"malformed embeddings answer: {reason}")

        try:
            answer = json.loads(raw)
        except ValueError as exc:
            snippet = raw[:80].decode("utf-8", "replace")
            raise bad(f"not JSON ({exc}): {snippet!r}") from exc
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list):
            raise bad("no 'data' list")
        if len(data) != count:
            raise bad(f"{len(data)} embeddings for {count} inputs")
        rows: list[tuple[int, Any]] = []
        for position, item in enumerate(data):
            if not isinstance(item, dict) or "embedding" not in item:
                raise bad(f"item {position} has no 'embedding'")
            index = item.get("index", position)
            rows.append((index if isinstance(index, int) else position, item["embedding"]))
        rows.sort(key=lambda row: row[0])
        if [index for index, _ in rows] != list(range(count)):
            raise bad("the indices are not 0..n-1")
        try:
            vectors = [_vector(embedding) for _, embedding in rows]
            out = np.asarray(vectors, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise bad(f"an embedding is not a list of numbers ({exc})") from exc
        if out.ndim != 2 or out.shape[1] == 0:
            raise bad("embeddings of different or zero lengths")
        if not np.isfinite(out).all():
            raise bad("non-finite numbers")
        return out


def _vector(embedding: Any) -> Any:
    if isinstance(embedding, str):  # encoding_format="base64"
        return np.frombuffer(base64.b64decode(embedding, validate=True), dtype="<f4")
    if not isinstance(embedding, list):
        raise TypeError(type(embedding).__name__)
    return embedding


def error_message(raw: bytes) -> str:
    """The server's own message: OpenAI's ``{"error": {"message"}}``, Ollama's ``{"error"}``."""
    text = raw.decode("utf-8", "replace").strip()
    try:
        answer = json.loads(text)
    except ValueError:
        return text[:200]
    if isinstance(answer, dict):
        error = answer.get("error", answer.get("detail", answer.get("message")))
        if isinstance(error, dict):
            error = error.get("message", error)
        if error is not None:
            return str(error)[:200]
    return text[:200]


def retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None  # an HTTP date: fall back to the backoff
