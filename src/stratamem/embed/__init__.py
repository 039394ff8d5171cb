"""Embedders: text → L2-normalised float32 vectors, behind one protocol and a name registry.

``get_embedder("minilm")`` is the default (all-MiniLM-L6-v2 on onnxruntime, shipped with the
core); ``minilm-fast``, ``openai``, ``sentence-transformers`` and ``hashing`` are the others
(see :mod:`stratamem.embed.registry`). Heavy modules are imported when an embedder is made.
"""

from stratamem.embed.base import Embedder, ModelSpec, Role, Vectors, with_prefix
from stratamem.embed.hashing import HashingEmbedder
from stratamem.embed.registry import (
    get_embedder,
    known,
    known_model,
    model_spec,
    register,
)
from stratamem.embed.tokens import count_tokens, count_tokens_batch, truncate_to_tokens
from stratamem.errors import (
    EmbeddingError,
    EmbeddingServerError,
    MissingDependencyError,
    ModelFileError,
)

__all__ = [
    "Embedder",
    "EmbeddingError",
    "EmbeddingServerError",
    "HashingEmbedder",
    "MissingDependencyError",
    "ModelFileError",
    "ModelSpec",
    "Role",
    "Vectors",
    "count_tokens",
    "count_tokens_batch",
    "get_embedder",
    "known",
    "known_model",
    "model_spec",
    "register",
    "truncate_to_tokens",
    "with_prefix",
]
