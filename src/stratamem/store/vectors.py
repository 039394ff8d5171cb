"""The vectors role: chunk embeddings per model signature, and the integer row keys the
in-process vector index is addressed by.

A chunk's row key (``rowid``) is a stable integer the backend assigns on insert; it may be
reused only after the chunk is deleted, which bumps the store's generation.

A vector is stored as ``dim`` float32 values, little-endian, L2-normalised (``4·dim`` bytes).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from stratamem.types import Filters


@dataclass(frozen=True, slots=True)
class PendingChunk:
    """A chunk that has no vector of a model yet: what embedding it needs."""

    rowid: int
    id: str
    source_id: str
    title: str
    content: str
    content_sha256: str


class ChunkVector(NamedTuple):
    """One chunk's vector of one model, as stored."""

    node_id: str
    model: str
    source_id: str
    dim: int
    vector: bytes  # float32 little-endian
    content_sha256: str


class VectorStore(Protocol):
    def pending_embeddings(self, model: str, limit: int, *, after: int = 0) -> list[PendingChunk]:
        """Up to ``limit`` chunks of unlocked sources with no vector of ``model``, oldest
        first, from the row key after ``after`` on (the last one a previous call returned)."""
        ...

    def count_pending_embeddings(self, model: str) -> int: ...

    def cached_vectors(self, model: str, hashes: Sequence[str]) -> dict[str, bytes]:
        """Vectors ``model`` already made for these content hashes (of any chunk)."""
        ...

    def insert_vectors(self, rows: Iterable[ChunkVector]) -> None:
        """Store vectors, replacing a chunk's earlier one of the same model."""
        ...

    def delete_vectors(self, *, keep_model: str | None = None) -> int: ...

    def vector_models(self) -> dict[str, int]: ...

    def iter_vectors(
        self, model: str, batch: int = 10_000
    ) -> Iterator[tuple[list[int], bytes]]: ...

    def vector_keys(self, model: str) -> list[tuple[int, str]]: ...

    def vectors_by_rowid(self, model: str, rowids: Sequence[int]) -> dict[int, bytes]: ...

    def vectors_of(self, model: str, node_ids: Sequence[str]) -> dict[str, bytes]: ...

    def rowids_to_ids(self, rowids: Sequence[int]) -> dict[int, str]: ...

    def ids_to_rowids(self, node_ids: Sequence[str]) -> dict[str, int]: ...

    def allowed_rowids(self, filters: Filters) -> list[int] | None:
        """The row keys the filters admit, or None when they admit every chunk."""
        ...
