"""The history of items: every version an item had, and the one it had at a given time.

An item keeps its id (its key) across edits; each write that changes it closes the version
open so far and opens the next (see :mod:`stratamem.store.items`): ``add`` opens version 1
(``added``), ``update`` the next (``edited``), ``delete`` a removal (``removed``), which
holds what was removed and stays open while the item is gone. Versions are read through the
reader's gate: an item of a source it may not read answers as one that does not exist.

An item written before versions were kept, or a record an ingest wrote and no item write
touched since, has no stored version: its history is its record, as version 1 recorded when
the record took its content. Its first item write stores that version, then its own.
"""

from __future__ import annotations

from datetime import UTC, datetime

from stratamem.errors import NotFoundError, StratamemError
from stratamem.store.base import Store
from stratamem.store.items import ItemAction, ItemVersion, version_of
from stratamem.store.records import encode_record
from stratamem.timeparse import as_utc
from stratamem.types import Record, SourceKind, rfc3339

__all__ = ["ItemVersion", "VersionWriter", "get_item", "item_history"]


def item_history(store: Store, id: str, *, source: str | None = None) -> list[ItemVersion]:
    """Every version of the item under ``id``, oldest first; ``source`` (id or scope) picks
    one where several sources hold the id. :class:`~stratamem.errors.NotFoundError` for an
    id no source the reader may read has held."""
    return _history(store, id, source)


def get_item(
    store: Store, id: str, *, source: str | None = None, as_of: datetime | None = None
) -> ItemVersion:
    """The version of the item under ``id`` current at transaction time ``as_of`` (None:
    now). :class:`~stratamem.errors.NotFoundError` when there was none then: ``as_of``
    before its first version, or while it was removed."""
    versions = _history(store, id, source)
    if as_of is None:
        found = versions[-1]
        if found.removed:
            raise NotFoundError(f"no item with id {id!r}: removed at {rfc3339(found.recorded_at)}")
        return found
    when = as_utc(as_of, name="as_of")
    held = [v for v in versions if v.held_at(when)]
    if not held:
        raise NotFoundError(
            f"no item with id {id!r} at {rfc3339(when)}: its history begins at "
            f"{rfc3339(versions[0].recorded_at)}"
        )
    if held[-1].removed:
        raise NotFoundError(
            f"no item with id {id!r} at {rfc3339(when)}: removed at {rfc3339(held[-1].recorded_at)}"
        )
    return held[-1]


def _history(store: Store, id: str, source: str | None) -> list[ItemVersion]:
    wanted: str | None = None
    where = f" in source {source!r}" if source is not None else ""
    if source is not None:
        try:
            wanted = store.resolve_source(source).id
        except NotFoundError:
            # A source hidden from the reader answers as one without the item.
            raise NotFoundError(f"no item with id {id!r}{where}") from None
    by_source: dict[str, list[ItemVersion]] = {}
    for version in store.item_versions([id], source_id=wanted):
        by_source.setdefault(version.source_id, []).append(version)
    if not by_source:
        for source_id, stored in store.find_records(id):
            if wanted is None or source_id == wanted:
                by_source[source_id] = [_unversioned(store, source_id, id, stored.record)]
    if not by_source:
        raise NotFoundError(f"no item with id {id!r}{where}")
    if len(by_source) > 1:
        scopes = ", ".join(sorted(store.scopes().get(sid, sid) for sid in by_source))
        raise StratamemError(f"several sources hold an item {id!r} ({scopes}): name the source")
    return next(iter(by_source.values()))


def _unversioned(store: Store, source_id: str, key: str, record: Record) -> ItemVersion:
    """The one version of a record no item write has versioned: as it is, recorded when it
    took that content."""
    chat = store.source_kinds().get(source_id) is SourceKind.CHAT
    return version_of(
        record,
        source_id=source_id,
        key=key,
        version=1,
        action="added",
        recorded_at=store.record_written_at(source_id, key) or datetime.now(UTC),
        nodes=store.item_chunks(source_id, key, within=record.time if chat else None),
    )


def _clock() -> datetime:
    """The transaction time of an item write: now."""
    return datetime.now(UTC)


class VersionWriter:
    """The versions one item write records, in the caller's transaction. Made before the
    record changes: an item that has no stored version yet (written before versions were
    kept, or ingested) gets its record as it stands as its first version, recorded when the
    record took that content, before the write's own version."""

    def __init__(self, store: Store, source_id: str, key: str, *, chat: bool) -> None:
        self.store = store
        self.source_id = source_id
        self.key = key
        history = store.item_versions([key], source_id=source_id)
        self._current = history[-1].version if history else None
        self._first: ItemVersion | None = None
        if not history:
            found = store.records_by_key(source_id, [key])
            if found:
                record = found[0].record
                self._first = _unversioned(store, source_id, key, record)
                self._first_body = encode_record(record)
                self._current = 1

    @property
    def current(self) -> int | None:
        """The number of the item's version before this write (None: it had none)."""
        return self._current

    def write(self, action: ItemAction, record: Record, nodes: list[str]) -> int:
        """Open the item's next version (closing the one open), holding ``record`` and
        derived into ``nodes``; returns its number."""
        first = self._first
        if first is not None:
            self.store.write_item_version(
                self.source_id,
                self.key,
                action="added",
                body=self._first_body,
                nodes=first.nodes,
                at=first.recorded_at,
            )
            self._first = None
        self._current = self.store.write_item_version(
            self.source_id,
            self.key,
            action=action,
            body=encode_record(record),
            nodes=nodes,
            at=_clock(),
        )
        return self._current
