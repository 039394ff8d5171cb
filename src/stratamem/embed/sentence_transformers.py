"""Any sentence-transformers model, by hub id or local path (the ``sentence-transformers`` extra).

sentence-transformers pulls torch (gigabytes), so it is imported only when the model is first
used. Dimension and prefixes come from the caller, else from the table of known models
(:data:`stratamem.embed.registry.KNOWN_MODELS`), else the dimension from the model itself.
Prefixes are put before the texts here, not through the library's prompts, so that the spec
recorded with the vectors says exactly what the model saw.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from stratamem.embed.base import (
    EmbeddingError,
    MissingDependencyError,
    ModelSpec,
    Role,
    Vectors,
    with_prefix,
)
from stratamem.embed.registry import known_model, model_spec
from stratamem.extras import check, require

EXTRA = "sentence-transformers"


class SentenceTransformerEmbedder:
    """A sentence-transformers model; ``device`` as the library takes it (None: its choice)."""

    def __init__(
        self,
        model: str = "sentence-transformers/all-MiniLM-L6-v2",
        *,
        dim: int | None = None,
        query_prefix: str | None = None,
        passage_prefix: str | None = None,
        max_tokens: int | None = None,
        batch_size: int = 32,
        device: str | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.batch_size = batch_size
        self.device = device
        self.max_tokens = max_tokens
        self._lock = threading.Lock()
        self._model: Any = None
        # Found, not imported: torch loads with the model, on first use.
        check("sentence_transformers", EXTRA, self._what(), error=MissingDependencyError)
        if dim is None:
            known = known_model(model)
            # An unknown model's dimension is read from the model, which loads it now.
            dim = known.dim if known is not None else self._model_dim()
        self.spec: ModelSpec = model_spec(
            model,
            dim=dim,
            query_prefix=query_prefix,
            passage_prefix=passage_prefix,
            max_tokens=max_tokens,
        )

    def _what(self) -> str:
        return f"the sentence-transformers embedder ({self.model})"

    def _model_dim(self) -> int:
        dim = self._load().get_sentence_embedding_dimension()
        if not isinstance(dim, int):
            raise EmbeddingError(f"{self.model}: the model does not say its dimension; pass dim=")
        return dim

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                require("sentence_transformers", EXTRA, self._what(), error=MissingDependencyError)
                from sentence_transformers import SentenceTransformer

                try:
                    self._model = SentenceTransformer(self.model, device=self.device)
                except Exception as exc:  # hub, file and torch errors of every kind
                    raise EmbeddingError(f"{self.model}: cannot load the model: {exc}") from exc
                if self.max_tokens is not None:
                    self._model.max_seq_length = self.max_tokens
            return self._model

    def embed_batch(self, texts: Sequence[str], *, role: Role = "passage") -> Vectors:
        prepared = with_prefix(self.spec, texts, role)
        if not prepared:
            return np.zeros((0, self.spec.dim), dtype=np.float32)
        model = self._load()
        try:
            vectors = model.encode(
                prepared,
                batch_size=self.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
        except Exception as exc:  # torch errors of every kind
            raise EmbeddingError(f"{self.model}: encoding failed: {exc}") from exc
        out = np.asarray(vectors, dtype=np.float32)
        if out.shape != (len(prepared), self.spec.dim):
            raise EmbeddingError(
                f"{self.model}: the model returned shape {out.shape}, "
                f"expected ({len(prepared)}, {self.spec.dim})"
            )
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        result: Vectors = out / np.maximum(norms, 1e-12)
        return result
