"""The trees role: summary trees, their sealed summaries, level buffers and summary vectors.

A tree's level-L buffer is the set of its level-L items without a parent. Sealing a summary
sets the parents of exactly the items it covers, only if they are still unparented, so a seal
that raced with another writer changes nothing (:class:`SealRaced`) and is planned again.
Summaries are read latest-wins: a deleted summary, or a document version a newer live one
superseded, is never returned.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from stratamem.errors import StoreError
from stratamem.types import SummaryNode, Tree, TreeKind


def tree_id_for(scope: str, kind: TreeKind = TreeKind.SOURCE) -> str:
    """``tree_`` + the first 16 hex digits of sha256(kind + ":" + scope)."""
    return "tree_" + hashlib.sha256(f"{kind.value}:{scope}".encode()).hexdigest()[:16]


def summary_id_for(tree_id: str, level: int, version: int, child_ids: Sequence[str]) -> str:
    """``sum_`` + the first 32 hex digits of sha256(tree id, level, version, child ids)."""
    digest = hashlib.sha256(f"{tree_id}\x1f{level}\x1f{version}\x1f".encode())
    digest.update("\x1f".join(child_ids).encode())
    return "sum_" + digest.hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class BufferItem:
    """What planning a seal needs to know of one buffered item (no text)."""

    id: str
    tokens: int
    time_start: datetime | None
    time_end: datetime | None
    doc_id: str | None


class SealRaced(StoreError):
    """Another writer sealed some of the items first; plan again."""


class TreeStore(Protocol):
    def ensure(self, source_id: str, scope: str) -> str: ...

    def get(self, tree_id: str) -> Tree | None: ...

    def of_source(self, source_id: str) -> Tree | None: ...

    def all(self) -> list[Tree]: ...

    def raise_root(self, tree_id: str, summary_id: str, level: int) -> None: ...

    def refresh_root(self, tree_id: str) -> None: ...

    def leaf_buffer(self, source_id: str) -> list[BufferItem]: ...

    def summary_buffer(self, tree_id: str, level: int) -> list[BufferItem]: ...

    def highest_open_level(self, tree_id: str) -> int: ...

    def newest_leaf_time(self, source_id: str) -> datetime | None: ...

    def next_version(self, tree_id: str, doc_id: str) -> int: ...

    def grown_document_summaries(self, tree_id: str, source_id: str) -> list[str]: ...

    def insert(
        self, node: SummaryNode, *, vector: tuple[str, int, bytes] | None = None
    ) -> None: ...

    def summaries(self, ids: Sequence[str], *, live_only: bool = True) -> list[SummaryNode]: ...

    def vectors(self, model: str, ids: Sequence[str]) -> dict[str, bytes]: ...

    def insert_vectors(self, rows: Iterable[tuple[str, str, int, bytes]]) -> None: ...

    def delete_vectors(self, *, keep_model: str | None = None) -> None: ...

    def invalidate_chunks(self, chunk_ids: Sequence[str]) -> set[str]: ...

    def invalidate(self, summary_ids: Sequence[str]) -> set[str]: ...

    def parents_of_chunks(self, chunk_ids: Sequence[str]) -> dict[str, str]: ...

    def parents_of_summaries(self, summary_ids: Sequence[str]) -> dict[str, str]: ...

    def top_ids(self, tree_id: str) -> list[str]: ...

    def stats(self, tree_id: str) -> dict[int, tuple[int, int]]: ...
