"""An embedder for any OpenAI-compatible ``/v1/embeddings`` server: Ollama, vLLM, llama.cpp,
OpenAI. Needs the ``llm`` extra (httpx, through :mod:`stratamem.remote`).

Wire format (OpenAI's "Create embeddings"): ``POST {base}/embeddings`` with
``{"model": ..., "input": [texts]}``; the answer is ``{"data": [{"index": i, "embedding":
[floats]}, ...]}``, in any order (sorted here by ``index``); an ``embedding`` given as a base64
string of little-endian float32 is accepted too. Vectors are L2-normalised on receipt.

Connection errors, timeouts, 408, 409, 429 and 5xx are retried (:mod:`stratamem.remote`);
other statuses and malformed answers fail at once with an
:class:`~stratamem.embed.base.EmbeddingServerError` naming the URL and the status.

Servers truncate over-long input themselves (OpenAI rejects it instead), so no truncation is done
here. Empty texts are sent as a single space, because OpenAI rejects empty strings.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from stratamem.embed.base import (
    EmbeddingServerError,
    MissingDependencyError,
    ModelSpec,
    Role,
    Vectors,
    with_prefix,
)
from stratamem.embed.registry import known_model, model_spec
from stratamem.extras import require
from stratamem.remote import JSONClient, RequestFailed, openai_url


def embeddings_url(base_url: str) -> str:
    """``http://host:11434`` → ``…/v1/embeddings``; ``…/v1`` → ``…/v1/embeddings``; a URL that
    already ends in ``/embeddings`` is kept."""
    return openai_url(base_url, "/embeddings")


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
        # An EmbeddingError when httpx is missing, as every failure of an embedder is.
        require("httpx", "llm", "the OpenAI-compatible embedder", error=MissingDependencyError)
        self.url = embeddings_url(base_url)
        self.model = model
        self.batch_size = batch_size
        self._client = JSONClient(
            self.url,
            api_key=api_key,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            max_backoff=max_backoff,
            extra="llm",
            what="the OpenAI-compatible embedder",
        )
        self._prefixes = (query_prefix, passage_prefix)
        self._max_tokens = max_tokens
        self._lock = threading.Lock()
        if dim is None:
            known = known_model(model)
            dim = known.dim if known is not None else None
        self._spec = self._make_spec(dim) if dim is not None else None

    def close(self) -> None:
        """Close the connections to the server."""
        self._client.close()

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
        try:
            status, raw = self._client.post({"model": self.model, "input": texts})
        except RequestFailed as failure:
            raise self._server_error(failure) from failure
        return self._parse(raw, status, len(texts))

    def _server_error(self, failure: RequestFailed) -> EmbeddingServerError:
        status, reason = failure.status, failure.detail or failure.reason
        if status in (401, 403):
            reason = f"not authorised, check the API key: {reason}"
        elif status == 404:
            reason = f"not found, check base_url and model {self.model!r}: {reason}"
        return EmbeddingServerError(self.url, status, reason)

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
