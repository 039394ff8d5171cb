"""The storage contract every backend fulfils (SQLite now, PostgreSQL later).

Ingest and retrieval speak only to this protocol; SQL lives in the backend. Row shapes for
writes are plain tuples (:data:`ChunkRow`, :data:`MentionRow`) so they cross process
boundaries cheaply and go to the driver as they are.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from stratamem.types import Chunk, EntityMatch, Filters, RetrievalHit, Source, SourceKind

if TYPE_CHECKING:
    from stratamem.store.sqlite.jobs import JobQueue
    from stratamem.store.sqlite.trees import TreeTables

ChunkRow = tuple[Any, ...]
MentionRow = tuple[str, str, str, str, str, int | None]


def source_id_for(scope: str) -> str:
    return "src_" + hashlib.sha256(scope.encode()).hexdigest()[:16]


def to_ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def from_ms(value: int | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value / 1000, tz=UTC)


def chunk_row(c: Chunk, meta: dict[str, Any] | None = None) -> ChunkRow:
    """The ``chunks`` insert tuple of a chunk (column order of :meth:`insert_chunks`)."""
    return (
        c.id,
        c.source_id,
        c.seq,
        c.content,
        c.title,
        c.token_count,
        c.author,
        to_ms(c.time_start),
        to_ms(c.time_end),
        json.dumps(list(c.tags)),
        c.source_ref,
        c.thread,
        c.doc_id,
        c.version,
        c.content_sha256,
        json.dumps(meta, default=str) if meta else "{}",
    )


@runtime_checkable
class Store(Protocol):
    path: str
    trees: TreeTables
    jobs: JobQueue

    def close(self) -> None: ...

    def transaction(self) -> AbstractContextManager[Any]: ...

    def rebuildable_writes(self) -> AbstractContextManager[None]: ...

    # sources
    def upsert_source(
        self,
        *,
        scope: str,
        kind: SourceKind,
        platform: str,
        location: str,
        title: str = "",
        meta: dict[str, Any] | None = None,
    ) -> str: ...

    def sources(self) -> list[Source]: ...

    def resolve_source(self, ref: str) -> Source: ...

    def delete_source(self, source_id: str) -> int: ...

    # writes, inside a transaction
    def existing_ids(self, ids: Sequence[str]) -> set[str]: ...

    def insert_chunks(self, rows: Iterable[ChunkRow]) -> None: ...

    def insert_mentions(self, rows: Iterable[MentionRow]) -> None: ...

    def replace_seqs(self, source_id: str, seqs: Sequence[int]) -> int: ...

    def truncate_source(self, source_id: str, length: int) -> int: ...

    def add_edges(self, source_id: str, node_ids: Sequence[str], *, sign: int = 1) -> None: ...

    def rebuild_edges(self, source_id: str) -> None: ...

    # reads
    def chunks(self, ids: Sequence[str]) -> list[Chunk]: ...

    def iter_chunks(self, source_id: str) -> Iterator[Chunk]: ...

    def mentions_of(self, node_ids: Sequence[str]) -> dict[str, list[str]]: ...

    def fts_search(
        self,
        expression: str,
        filters: Filters,
        limit: int,
        *,
        snippets: bool = True,
        count: bool = True,
    ) -> tuple[list[RetrievalHit], int]: ...

    def keyword_hits(
        self, expression: str, ranked: Sequence[tuple[int, float]], *, snippets: bool = True
    ) -> list[RetrievalHit]: ...

    def search_entities(
        self, needle: str, kinds: Sequence[str], limit: int
    ) -> list[EntityMatch]: ...

    def neighbours(self, entity_id: str, limit: int) -> list[tuple[str, float]]: ...

    def stats(self) -> dict[str, Any]: ...

    def scopes(self) -> dict[str, str]: ...

    def chunk_count(self) -> int: ...

    # settings and vectors
    def get_setting(self, key: str) -> str | None: ...

    def set_setting(self, key: str, value: str) -> None: ...

    def generation(self) -> int: ...

    def store_id(self) -> str: ...

    def pending_embeddings(self, model: str, limit: int) -> list[Any]: ...

    def count_pending_embeddings(self, model: str) -> int: ...

    def cached_vectors(self, model: str, hashes: Sequence[str]) -> dict[str, bytes]: ...

    def insert_vectors(self, rows: Iterable[tuple[str, str, str, int, bytes, str]]) -> None: ...

    def delete_vectors(self, *, keep_model: str | None = None) -> int: ...

    def iter_vectors(
        self, model: str, batch: int = 10_000
    ) -> Iterator[tuple[list[int], bytes]]: ...

    def vector_keys(self, model: str) -> list[tuple[int, str]]: ...

    def vectors_by_rowid(self, model: str, rowids: Sequence[int]) -> dict[int, bytes]: ...

    def vectors_of(self, model: str, node_ids: Sequence[str]) -> dict[str, bytes]: ...

    def rowids_to_ids(self, rowids: Sequence[int]) -> dict[int, str]: ...

    def ids_to_rowids(self, node_ids: Sequence[str]) -> dict[str, int]: ...

    def allowed_rowids(self, filters: Filters) -> list[int] | None: ...

    # graph
    def entity_frequencies(self, entity_ids: Sequence[str]) -> dict[str, int]: ...

    def nodes_by_entities(
        self,
        weights: dict[str, float],
        filters: Filters,
        limit: int,
        *,
        exclude: Sequence[str] = (),
    ) -> dict[str, float]: ...

    def neighbour_chunks(
        self, node_ids: Sequence[str], filters: Filters, *, window: int = 1
    ) -> dict[str, list[tuple[str, int]]]: ...
