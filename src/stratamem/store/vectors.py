"""The vectors role: chunk embeddings per model signature, and the integer row keys the
in-process vector index is addressed by.

A chunk's row key (``rowid``) is a stable integer the backend assigns on insert; it may be
reused only after the chunk is deleted, which bumps the store's generation.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

from stratamem.types import Filters


class VectorStore(Protocol):
    def pending_embeddings(self, model: str, limit: int) -> list[Any]: ...

    def count_pending_embeddings(self, model: str) -> int: ...

    def cached_vectors(self, model: str, hashes: Sequence[str]) -> dict[str, bytes]: ...

    def insert_vectors(self, rows: Iterable[tuple[str, str, str, int, bytes, str]]) -> None: ...

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
