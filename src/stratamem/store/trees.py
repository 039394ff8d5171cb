"""The trees role: summary trees, their sealed summaries, level buffers and summary vectors.

A tree's level-L buffer is the set of its level-L items without a parent. Sealing a summary
sets the parents of exactly the items it covers, only if they are still unparented, so a seal
that raced with another writer changes nothing (:class:`SealRaced`) and is planned again.
Summaries are read latest-wins: a deleted summary, or a document version a newer live one
superseded, is never returned.

The reads behind the tree primitives (:class:`TreeSearch`) join each node's source and apply
the caller's :class:`~stratamem.types.Filters` (locked sources never match) and time window
before any cap, so a cap never hides a match the filters admit.

Ids: a tree id is ``tree_`` + the first 16 hex digits of sha256(kind + ":" + scope); a summary
id is ``sum_`` + the first 32 hex digits of sha256(tree id, level, version, child ids), so a
resumed seal writes the summary an uninterrupted one would have.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from stratamem.errors import SealRaced as SealRaced
from stratamem.types import Chunk, Filters, SummaryNode, Tree, TreeKind


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


@dataclass(frozen=True, slots=True)
class TreeLeaf:
    """A chunk as the tree reads return it: with its source's scope, and the id of its tree
    once a summary covers it (empty while it waits in the buffer)."""

    chunk: Chunk
    scope: str
    tree_id: str


@dataclass(frozen=True, slots=True)
class TreeSummary:
    """A summary as the tree reads return it: with its tree's scope and kind."""

    node: SummaryNode
    scope: str
    tree_kind: TreeKind


class TreeSearch(Protocol):
    """The reads behind the tree primitives. Each applies ``filters`` (sources, kinds, the
    access gate and, where the method says so, the time window) before any cap, and reads
    summaries latest-wins."""

    def summaries_matching(
        self, filters: Filters, *, platforms: Sequence[str] = (), limit: int
    ) -> tuple[list[TreeSummary], int]:
        """Live summaries whose time range overlaps the filters' window, of sources on one of
        ``platforms`` when any are given; newest end first (unknown ends last, then by id),
        at most ``limit``, and the count before that cap."""
        ...

    def summaries_by_id(self, ids: Sequence[str], filters: Filters) -> dict[str, TreeSummary]:
        """Live summaries by id that the filters admit; unknown ids are left out."""
        ...

    def leaves_by_id(self, ids: Sequence[str], filters: Filters) -> dict[str, TreeLeaf]:
        """Chunks by id that the filters admit; unknown ids are left out."""
        ...

    def topic_nodes(
        self, entity_id: str | Sequence[str], filters: Filters, cap: int
    ) -> tuple[list[str], int]:
        """Ids of the leaves and live summaries indexed under ``entity_id`` (or any of
        several ids) in the window,
        newest end first (unknown ends last, then by id), at most ``cap``; and the count
        before that cap."""
        ...

    def window_cover(
        self, since: datetime, until: datetime, filters: Filters, max_leaves: int
    ) -> tuple[list[TreeSummary], list[TreeLeaf], int]:
        """The maximal summaries inside [since, until] (their parent is not inside it),
        ordered by scope, start and id; the in-window leaves no such summary covers (at most
        ``max_leaves``, by scope, start and position); and the count of such leaves before
        that cap. The filters' own window is not applied."""
        ...


class TreeStore(TreeSearch, Protocol):
    """Trees, their buffers and summaries (``store.trees``). Writes run inside the store's
    transaction."""

    def ensure(self, source_id: str, scope: str) -> str:
        """The id of the source's tree, created when missing."""
        ...

    def get(self, tree_id: str) -> Tree | None: ...

    def of_source(self, source_id: str) -> Tree | None: ...

    def all(self) -> list[Tree]: ...

    def raise_root(self, tree_id: str, summary_id: str, level: int) -> None:
        """A summary just sealed at ``level`` is the root when no level above it exists yet."""
        ...

    def refresh_root(self, tree_id: str) -> None:
        """Point the tree at its highest live summary."""
        ...

    def leaf_buffer(self, source_id: str) -> list[BufferItem]:
        """The source's unsealed chunks, in source order."""
        ...

    def summary_buffer(self, tree_id: str, level: int) -> list[BufferItem]:
        """The tree's unparented live summaries at ``level``, in the order they were sealed."""
        ...

    def highest_open_level(self, tree_id: str) -> int:
        """The highest level holding an unparented live summary (0 when there is none)."""
        ...

    def newest_leaf_time(self, source_id: str) -> datetime | None:
        """The latest end (or start, where a chunk has no end) of the source's chunks."""
        ...

    def next_version(self, tree_id: str, doc_id: str) -> int:
        """One more than the highest version of the document's summaries (1 for none)."""
        ...

    def grown_document_summaries(self, tree_id: str, source_id: str) -> list[str]:
        """The live level-1 summaries of documents that also have unsealed leaves."""
        ...

    def insert(self, node: SummaryNode, *, vector: tuple[str, int, bytes] | None = None) -> None:
        """Write a sealed summary and claim its children; :class:`SealRaced` when a child is
        gone or already has a parent."""
        ...

    def summaries(self, ids: Sequence[str], *, live_only: bool = True) -> list[SummaryNode]:
        """Summaries by id, in the order asked; unknown (and, with ``live_only``, deleted)
        ids are left out."""
        ...

    def vectors(self, model: str, ids: Sequence[str]) -> dict[str, bytes]:
        """Summary id → its vector of ``model``, for the ids that have one."""
        ...

    def unembedded(self, model: str, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` live summaries without a vector of ``model``, oldest first:
        (summary id, content)."""
        ...

    def insert_vectors(self, rows: Iterable[tuple[str, str, int, bytes]]) -> None:
        """Write (summary id, model, dim, vector) rows, replacing any there."""
        ...

    def delete_vectors(self, *, keep_model: str | None = None) -> None:
        """Drop every summary vector not of ``keep_model``."""
        ...

    def invalidate_chunks(self, chunk_ids: Sequence[str]) -> set[str]:
        """Retire every live summary above these chunks; the trees touched."""
        ...

    def invalidate(self, summary_ids: Sequence[str]) -> set[str]:
        """Retire these summaries and their ancestors; the trees touched."""
        ...

    def parents_of_chunks(self, chunk_ids: Sequence[str]) -> dict[str, str]:
        """chunk id → its level-1 summary, for the sealed ones."""
        ...

    def parents_of_summaries(self, summary_ids: Sequence[str]) -> dict[str, str]:
        """summary id → its parent, for the live summaries that have one."""
        ...

    def top_ids(self, tree_id: str) -> list[str]:
        """The tree's unparented live summaries: highest level first, then newest first."""
        ...

    def stats(self, tree_id: str) -> dict[int, tuple[int, int]]:
        """Per level: (live summaries, of which still unparented)."""
        ...
