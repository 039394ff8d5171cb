"""Rerankers: an optional last opinion on the top of the fused list.

A reranker scores (query, text) pairs; it never gates retrieval. :func:`apply_rerank` runs it
with a timeout, and on any failure or timeout returns ``None`` with the reason, so the caller
keeps the fused order and says so in the response.

Implementations: :class:`HTTPReranker` for Cohere/Jina-style ``POST /rerank`` endpoints (also
served by vLLM, Infinity and llama.cpp's server; the ``rerank`` extra), and
:class:`CrossEncoderReranker` over a sentence-transformers cross-encoder (the
``sentence-transformers`` extra), registered as ``http`` and ``cross-encoder`` in
:data:`stratamem.plugins.RERANKERS`; third-party rerankers register through its
``stratamem.rerankers`` entry-point group (see ``docs/plugins.md``).
"""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from stratamem import plugins
from stratamem.errors import RequestFailed
from stratamem.errors import RerankError as RerankError  # importable here too
from stratamem.extras import require
from stratamem.plugins import Registry
from stratamem.remote import JSONClient


@runtime_checkable
class Reranker(Protocol):
    name: str

    def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        """A relevance score per text, higher is better."""
        ...


RerankerFactory = Callable[..., Reranker]

RERANKERS: Registry[RerankerFactory] = plugins.RERANKERS


def register_reranker(name: str, factory: RerankerFactory) -> None:
    """Make ``factory(**options)`` available as ``get_reranker(name, **options)``."""
    RERANKERS.register(name, factory)


def known_rerankers() -> list[str]:
    """The names :func:`get_reranker` accepts, sorted."""
    return RERANKERS.known()


def get_reranker(name: str, **options: Any) -> Reranker:
    """A new reranker of the given registry name, built with ``options`` (keyword arguments of
    its class, e.g. ``get_reranker("http", base_url=..., model=...)``)."""
    return RERANKERS.create(name, **options)


class HTTPReranker:
    """``POST {base_url}/rerank`` with ``{"model", "query", "documents"}``; reads
    ``results: [{"index", "relevance_score"}]``."""

    def __init__(
        self, base_url: str, *, model: str = "", api_key: str | None = None, timeout: float = 10.0
    ) -> None:
        self.url = base_url.rstrip("/") + "/rerank"
        self.model = model
        self.name = f"http:{model or self.url}"
        # No retries: the search gives the reranker one timeout in all, then moves on.
        self._client = JSONClient(
            self.url, api_key=api_key, timeout=timeout, extra="rerank", what="the HTTP reranker"
        )

    def close(self) -> None:
        """Close the connections to the server."""
        self._client.close()

    def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        payload = {"model": self.model, "query": query, "documents": list(texts)}
        try:
            _, raw = self._client.post(payload)
            data: Any = json.loads(raw)
        except RequestFailed as exc:
            raise RerankError(f"{self.url}: {exc}") from exc
        except ValueError as exc:
            raise RerankError(f"{self.url}: the response is not JSON ({exc})") from exc
        try:
            scores = [0.0] * len(texts)
            seen = set()
            for item in data["results"]:
                index = int(item["index"])
                scores[index] = float(item["relevance_score"])
                seen.add(index)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise RerankError(f"{self.url}: unexpected response shape ({exc!r})") from exc
        if len(seen) != len(texts):
            raise RerankError(f"{self.url}: scored {len(seen)} of {len(texts)} documents")
        return scores


class CrossEncoderReranker:
    """A sentence-transformers cross-encoder by name or path (needs the extra)."""

    def __init__(self, model: str) -> None:
        require("sentence_transformers", "sentence-transformers", "the cross-encoder reranker")
        from sentence_transformers import CrossEncoder

        self._model = CrossEncoder(model)
        self.name = f"cross-encoder:{model}"

    def rerank(self, query: str, texts: Sequence[str]) -> list[float]:
        scores = self._model.predict([(query, text) for text in texts])
        return [float(s) for s in scores]


_pool = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="rerank")


def apply_rerank(
    reranker: Reranker, query: str, texts: Sequence[str], *, timeout: float
) -> tuple[list[float] | None, str]:
    """(scores, note). Scores are None when the reranker failed or ran out of time."""
    future = _pool.submit(reranker.rerank, query, list(texts))
    try:
        scores = future.result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        return None, f"rerank by {reranker.name} timed out after {timeout:g}s; fused order kept"
    except Exception as exc:  # a reranker never breaks retrieval, whatever it raised
        return None, f"rerank by {reranker.name} failed ({exc}); fused order kept"
    if len(scores) != len(texts):
        return (
            None,
            f"rerank by {reranker.name} returned {len(scores)} scores for "
            f"{len(texts)} texts; fused order kept",
        )
    return scores, f"reranked the top {len(texts)} with {reranker.name}"
