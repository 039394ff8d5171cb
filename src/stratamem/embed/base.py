"""The embedder contract: one required batch method, and the identity of the vectors it makes.

A vector is only ever compared with vectors of the same :attr:`Embedder.signature` (model name,
dimension and prefixes), which the store records with every vector.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

# The embed layer's errors (defined in the one tree of stratamem.errors), importable here.
from stratamem.errors import EmbeddingError as EmbeddingError
from stratamem.errors import EmbeddingServerError as EmbeddingServerError
from stratamem.errors import MissingDependencyError as MissingDependencyError
from stratamem.errors import ModelFileError as ModelFileError

Vectors = npt.NDArray[np.float32]
Role = Literal["query", "passage"]


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """What identifies a model's vectors: name, dimension and the prefixes put before texts.

    e5 models want ``query: `` and ``passage: ``; bge wants an instruction before queries;
    MiniLM wants none. Changing any of these changes the vectors, hence the signature.
    """

    name: str
    dim: int
    query_prefix: str = ""
    passage_prefix: str = ""
    max_tokens: int = 256

    @property
    def signature(self) -> str:
        return f"{self.name}|{self.dim}|q={self.query_prefix!r}|p={self.passage_prefix!r}"


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of shape (len(texts), spec.dim)."""

    spec: ModelSpec

    def embed_batch(self, texts: Sequence[str], *, role: Role = "passage") -> Vectors: ...


def with_prefix(spec: ModelSpec, texts: Sequence[str], role: Role) -> list[str]:
    """The texts as the model must see them: the spec's query or passage prefix put before each."""
    if isinstance(texts, str):
        raise ValueError("embed_batch takes a sequence of strings, not one string")
    prefix = spec.query_prefix if role == "query" else spec.passage_prefix
    return [prefix + text for text in texts] if prefix else list(texts)
