"""The sources-and-chunks role: what a store holds of each source and its chunks.

Writes run inside :meth:`~stratamem.store.settings.StoreHandle.transaction`; reads return the
dataclasses of :mod:`stratamem.types`, never driver rows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple, Protocol

from stratamem.timeparse import to_ms
from stratamem.types import Chunk, Mention, Source, SourceKind


def source_id_for(scope: str) -> str:
    """A source's id: ``src_`` + the first 16 hex digits of sha256(scope)."""
    return "src_" + hashlib.sha256(scope.encode()).hexdigest()[:16]


class SourceStore(Protocol):
    """Sources: one per scope (``slack:#eng``, ``mbox:team``)."""

    def upsert_source(
        self,
        *,
        scope: str,
        kind: SourceKind,
        platform: str,
        location: str,
        title: str = "",
        meta: dict[str, Any] | None = None,
        access: Sequence[str] | None = None,
        created_by: str | None = None,
    ) -> str:
        """Create the source or refresh its descriptive fields; its lock is kept, and its
        access scopes unless ``access`` is given (a new source gets its kind's default). A
        new source records ``created_by`` (a principal's name; None: the owner) and must
        have a name a new source may take (:mod:`stratamem.store.names`), else
        :class:`~stratamem.errors.InvalidArgument`."""
        ...

    def sources(self, *, counts: bool = True) -> list[Source]:
        """The sources the reader may see (the owner: all, locked ones marked so), with their
        chunk counts unless ``counts=False``."""
        ...

    def is_locked(self, source_id: str) -> bool:
        """Whether the source exists and is locked, whoever reads."""
        ...

    def resolve_source(self, ref: str) -> Source:
        """A source by id, where ``ref`` looks like one (and then by id alone), else by exact
        scope; :class:`~stratamem.errors.NotFoundError` if none."""
        ...

    def delete_source(self, source_id: str) -> int:
        """Remove a source and everything derived from it; how many chunks went."""
        ...

    def scopes(self) -> dict[str, str]: ...

    def source_kinds(self) -> dict[str, SourceKind]:
        """Source id → kind of the sources the reader may see (no per-source counts)."""
        ...

    def stats(self) -> dict[str, Any]: ...


class ChunkHead(NamedTuple):
    """What a search needs of a candidate chunk before it shows it: its source (the chat
    turns are diversified apart), its tie key (content digest and place) and its tags (the
    tier-0 boost)."""

    source_id: str
    seq: int
    content_sha256: str
    tags: tuple[str, ...]


class ChunkPlace(NamedTuple):
    """Where a stored chunk stands in its source, and the facets of it that a document's
    front matter sets (its times in ms, tags, author, and the line its reference names):
    what may change while its text and place in its note do not."""

    seq: int
    time_start: int | None
    time_end: int | None
    tags: tuple[str, ...]
    author: str | None
    ref: str

    @classmethod
    def of(cls, chunk: Chunk) -> ChunkPlace:
        start, end = to_ms(chunk.time_start), to_ms(chunk.time_end)
        return cls(chunk.seq, start, end, chunk.tags, chunk.author, chunk.source_ref)


class ChunkStore(Protocol):
    """Chunks and their entity mentions."""

    def existing_ids(self, ids: Sequence[str]) -> set[str]: ...

    def insert_chunks(self, chunks: Iterable[Chunk]) -> None:
        """Store chunks whose ids are not stored yet (see :meth:`existing_ids`), with their
        ``meta``."""
        ...

    def insert_mentions(self, mentions: Iterable[tuple[Chunk, Iterable[Mention]]]) -> None:
        """Index the entities each chunk mentions, under the chunk's source and start time.

        A chunk's first mention of an entity is kept; a repeat, or one already stored, is
        ignored.
        """
        ...

    def chunk_places(self, source_id: str, ids: Sequence[str]) -> dict[str, ChunkPlace]:
        """The place and the facets of each of these chunks the source holds."""
        ...

    def move_chunks(self, places: Sequence[tuple[str, int]]) -> None:
        """Give chunks, as (id, place), new places in their source."""
        ...

    def chunk_ids(self, source_id: str) -> list[str]:
        """The ids of the source's chunks, in place order."""
        ...

    def chunks(self, ids: Sequence[str]) -> list[Chunk]: ...

    def chunk_heads(self, ids: Sequence[str]) -> dict[str, ChunkHead]:
        """:class:`ChunkHead` of each of these chunks the reader may see (the rest are left
        out): what :meth:`chunks` reads of them, without their text."""
        ...

    def content_keys(self, ids: Sequence[str]) -> dict[str, tuple[str, int]]:
        """(content digest, place in its source) of each of these chunks: what orders chunks
        of equal score alike in every store that holds them, whatever folder or file name
        they were read from (their ids name their source); unknown ids are left out."""
        ...

    def iter_chunks(self, source_id: str) -> Iterator[Chunk]: ...

    def mentions_of(self, node_ids: Sequence[str]) -> dict[str, list[str]]: ...

    def chunks_and_mentions(self, ids: Sequence[str]) -> tuple[list[Chunk], dict[str, list[str]]]:
        """:meth:`chunks` and :meth:`mentions_of` of these ids in one read (one round trip
        where the store is a server): what a search shows of its hits."""
        ...

    def source_chunk_count(self, source_id: str) -> int: ...

    def chunk_count(self) -> int: ...
