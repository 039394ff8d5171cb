"""The item versions role: every version an item had, with the transaction time it held.

An item is a record written through the items API (:mod:`stratamem.ingest.items`), under a
key that stays its id across edits. Each write that changes it closes the version open so far
(``closed_at``) and opens the next (``recorded_at``), as facts close their rows: the versions
of one item are numbered from 1 and their spans of transaction time follow each other without
a gap. ``action`` says what opened a version: ``added``, ``edited`` or ``removed``; a removal
is a version of its own, holding what was removed, open for as long as the item stays removed
(an item added again under the key closes it). ``nodes`` are the ids of the chunks derived
from a version when it was written: what a chunk id cited before an edit is read back through.

Versions belong to the item's source: read through its gate, sealed when it is locked and
removed (every version) when it is forgotten.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from stratamem.store.records import decode_record
from stratamem.timeparse import from_ms
from stratamem.types import Record, rfc3339

ItemAction = Literal["added", "edited", "removed"]
ITEM_ACTIONS: tuple[ItemAction, ...] = ("added", "edited", "removed")


@dataclass(frozen=True, slots=True)
class ItemVersion:
    """One version of an item: its fields as they were, and the span of transaction time
    (``recorded_at`` to ``closed_at``, None while it is the current one) the store held them.
    A version opened by ``removed`` holds what was removed."""

    id: str
    source_id: str
    version: int
    action: ItemAction
    text: str
    recorded_at: datetime
    closed_at: datetime | None = None
    author: str | None = None
    time: datetime | None = None
    title: str | None = None
    thread: str | None = None
    tags: tuple[str, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)
    ref: str = ""
    nodes: tuple[str, ...] = ()

    @property
    def current(self) -> bool:
        return self.closed_at is None

    @property
    def removed(self) -> bool:
        return self.action == "removed"

    def held_at(self, when: datetime) -> bool:
        """Whether this was the item's version at transaction time ``when``."""
        return self.recorded_at <= when and (self.closed_at is None or when < self.closed_at)

    def record(self) -> Record:
        """The version as the record it held."""
        return Record(
            text=self.text,
            ref=self.ref,
            time=self.time,
            author=self.author,
            id=self.id,
            thread=self.thread,
            title=self.title,
            tags=self.tags,
            meta=dict(self.meta),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "source_id": self.source_id,
            "version": self.version,
            "action": self.action,
            "text": self.text,
            "author": self.author,
            "time": rfc3339(self.time),
            "title": self.title,
            "thread": self.thread,
            "tags": list(self.tags),
            "meta": dict(self.meta),
            "ref": self.ref,
            "recorded_at": rfc3339(self.recorded_at),
            "closed_at": rfc3339(self.closed_at),
            "nodes": list(self.nodes),
        }


def item_version(
    source_id: str,
    key: str,
    version: int,
    action: str,
    body: bytes,
    recorded_at: int,
    closed_at: int | None,
    nodes: Sequence[str] = (),
) -> ItemVersion:
    """A version from its stored row (``body`` as :func:`~stratamem.store.records.encode_record`
    wrote it, the times in milliseconds)."""
    return version_of(
        decode_record(body),
        source_id=source_id,
        key=key,
        version=version,
        action=action,
        recorded_at=from_ms(recorded_at),
        closed_at=from_ms(closed_at),
        nodes=nodes,
    )


def version_of(
    record: Record,
    *,
    source_id: str,
    key: str,
    version: int,
    action: str,
    recorded_at: datetime | None,
    closed_at: datetime | None = None,
    nodes: Sequence[str] = (),
) -> ItemVersion:
    if action not in ITEM_ACTIONS:
        raise ValueError(f"an item version's action is one of {', '.join(ITEM_ACTIONS)}")
    if recorded_at is None:
        raise ValueError("an item version needs the time it was recorded")
    return ItemVersion(
        id=key,
        source_id=source_id,
        version=version,
        action=action,
        text=record.text,
        recorded_at=recorded_at,
        closed_at=closed_at,
        author=record.author,
        time=record.time,
        title=record.title,
        thread=record.thread,
        tags=tuple(record.tags),
        meta=dict(record.meta),
        ref=record.ref,
        nodes=tuple(nodes),
    )


class ItemVersionStore(Protocol):
    """The versions of items, by (source, key, version). Writes run inside
    :meth:`~stratamem.store.settings.StoreHandle.transaction`; reads pass the reader's gate
    (the sources it may read, unlocked)."""

    def item_versions(
        self, keys: Sequence[str], *, source_id: str | None = None
    ) -> list[ItemVersion]:
        """Every version of the items under ``keys`` (of ``source_id`` only, when given) in
        the sources the reader may read, by source, key and version."""
        ...

    def item_node_versions(self, node_ids: Sequence[str]) -> dict[str, tuple[str, str, int]]:
        """For each of ``node_ids`` that a version of an item was derived into, in a source
        the reader may read: (source id, key, version) of the latest such version."""
        ...

    def write_item_version(
        self,
        source_id: str,
        key: str,
        *,
        action: ItemAction,
        body: bytes,
        nodes: Sequence[str],
        at: datetime,
    ) -> int:
        """Close the item's open version at ``at`` (if it has one) and open the next,
        recorded at ``at``; returns its number."""
        ...

    def record_written_at(self, source_id: str, key: str) -> datetime | None:
        """When the record under ``key`` took the content it holds (None: no such record):
        where the history of an item written before it kept versions begins."""
        ...

    def item_chunks(self, source_id: str, key: str, *, within: datetime | None = None) -> list[str]:
        """The ids of the source's chunks derived from the record under ``key``, in order:
        those whose first record it is; else, given ``within`` (a chat message's time: its
        window may begin with an earlier message), those whose time range holds it."""
        ...
