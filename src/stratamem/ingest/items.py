"""Single-item writes: add, update or delete one record of a source, found by every leg as
soon as the call returns.

An item is a record (:mod:`stratamem.store.records`) under a key the caller gives or one made
for it (``item_`` and 16 hex digits). Each write is one transaction: the record is merged into
its source (:mod:`stratamem.ingest.merge`), the chunks it reaches are derived again, the new
chunks are embedded when an embedder of the store's model is given (otherwise they wait for
``embed`` like any ingest's, and keyword and graph search find them meanwhile), and the
source's tree gets a seal job. A source an item is added to and that does not exist yet is
made: a record source (``kind`` ``record``) of platform ``memory``.

The key is the item's id across edits: a write that changes the item closes its version and
opens the next, and a delete opens a removal, so its history stays readable
(:mod:`stratamem.ingest.item_history`: :func:`item_history`, :func:`get_item`).

An item written for a ``user``, an ``agent`` or a ``session`` goes to the source of that
identity (:class:`~stratamem.types.Identity`): ``memory/user:maya``,
``memory/user:maya/agent:planner`` (the base is ``source``, a plain name). Such a source is
made ``private`` and readable by the principals holding ``user:<id>`` or ``agent:<id>``, and
every chunk of it names the user and agent as entities, so every gate, filter and lookup that
works on sources works on whose memory it is.

The first write to a store that holds no vectors yet and nothing waiting for one, given an
embedder, makes that embedder's model the store's (see :func:`embed_written`): the vector
leg finds what is written from the first write on.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from stratamem.access.writes import refuse_foreign
from stratamem.embed.base import Embedder
from stratamem.embed.indexing import adopt_model, embed_chunks
from stratamem.errors import NotFoundError, StratamemError
from stratamem.ingest.chunking import ChunkingConfig
from stratamem.ingest.item_history import ItemVersion, VersionWriter, get_item, item_history
from stratamem.ingest.merge import Merge, merges
from stratamem.ingest.model import clean_text
from stratamem.ingest.pipeline import queue_seal
from stratamem.memory.remember import embed_facts
from stratamem.store.access import identity_access
from stratamem.store.base import Store
from stratamem.store.items import ItemAction
from stratamem.store.names import normal_name
from stratamem.store.records import StoredRecord, keyed
from stratamem.store.sources import source_id_for
from stratamem.timeparse import as_utc
from stratamem.types import Identity, Record, SourceKind

__all__ = [
    "DEFAULT_SOURCE",
    "UNSET",
    "ItemVersion",
    "ItemWrite",
    "add_item",
    "delete_item",
    "find_item",
    "get_item",
    "item_history",
    "update_item",
]

DEFAULT_SOURCE = "memory"
# The default of an update's field that is left as it is (None clears it).
UNSET: Any = object()


@dataclass(frozen=True, slots=True)
class ItemWrite:
    """What one write did: the item's key and source, ``action`` (``added``, ``updated``,
    ``unchanged`` or ``deleted``), the chunks written and removed, how many of the written
    ones were embedded, and ``version``: the number of the item's version the write opened
    (for ``deleted``, the removal's; for ``unchanged``, the current one's)."""

    id: str
    source_id: str
    scope: str
    action: str
    chunks_added: tuple[str, ...] = ()
    chunks_removed: int = 0
    embedded: int = 0
    record: Record | None = None
    version: int | None = None

    @property
    def identity(self) -> Identity:
        """The user, agent and session whose memory the item is (from its source's scope)."""
        return Identity.parse(self.scope)

    def to_dict(self) -> dict[str, Any]:
        record = self.record
        return {
            "id": self.id,
            "source_id": self.source_id,
            "scope": self.scope,
            **self.identity.to_dict(),
            "action": self.action,
            "version": self.version,
            "chunks_added": list(self.chunks_added),
            "chunks_removed": self.chunks_removed,
            "embedded": self.embedded,
            "text": None if record is None else record.text,
            "author": None if record is None else record.author,
            "time": None if record is None or record.time is None else record.time.isoformat(),
        }


def add_item(
    store: Store,
    text: str,
    *,
    source: str = DEFAULT_SOURCE,
    kind: SourceKind | str | None = None,
    author: str | None = None,
    time: datetime | None = None,
    id: str | None = None,
    title: str | None = None,
    thread: str | None = None,
    tags: Sequence[str] = (),
    meta: Mapping[str, Any] | None = None,
    user: str | None = None,
    agent: str | None = None,
    session: str | None = None,
    embedder: Embedder | None = None,
    config: ChunkingConfig | None = None,
    join: bool = True,
) -> ItemWrite:
    """Add (or, under a key the source holds, replace) one item of ``source``. ``time``
    defaults to now; ``id`` to a new key. With ``user``, ``agent`` or ``session`` the item
    goes to that identity's source of base ``source`` (``memory/user:maya``). ``join=False``
    refuses a source a principal made (see :func:`~stratamem.access.writes.refuse_foreign`)."""
    if not isinstance(text, str) or not text.strip():
        raise StratamemError("an item needs some text")
    key = clean_text(id) if id else f"item_{uuid.uuid4().hex[:16]}"
    if not key.strip():
        raise StratamemError("an item's id cannot be blank")
    target = identity_scope(source, Identity.of(user=user, agent=agent, session=session))
    with store.transaction():
        scope, source_kind = writable_source(store, target, kind, join=join)
        record = Record(
            text=clean_text(text),
            ref=f"{scope}#{key}",
            time=_to_ms_precision(datetime.now(UTC) if time is None else time),
            author=clean_text(author) if author else None,
            id=key,
            thread=clean_text(thread) if thread else None,
            title=clean_text(title) if title else None,
            tags=tuple(clean_text(t) for t in tags),
            meta=dict(meta or {}),
        )
        return _write(store, scope, source_kind, keyed(record), embedder, config)


def update_item(
    store: Store,
    id: str,
    *,
    source: str | None = None,
    text: str | None = None,
    author: str | None = UNSET,
    time: datetime | None = UNSET,
    title: str | None = UNSET,
    tags: Sequence[str] | None = None,
    meta: Mapping[str, Any] | None = None,
    user: str | None = None,
    agent: str | None = None,
    session: str | None = None,
    embedder: Embedder | None = None,
    config: ChunkingConfig | None = None,
) -> ItemWrite:
    """Change the fields given of the item stored under ``id`` (in ``source``, or of
    ``user``, ``agent``, ``session``: needed only when several sources hold that key); the
    others stay as they are."""
    if text is not None and not text.strip():
        raise StratamemError("an item needs some text")
    with store.transaction():
        source_id, stored = find_item(
            store, id, source=source, user=user, agent=agent, session=session
        )
        record = stored.record
        changes: dict[str, Any] = {}
        if text is not None:
            changes["text"] = clean_text(text)
        if author is not UNSET:
            changes["author"] = clean_text(author) if author else None
        if time is not UNSET:
            changes["time"] = None if time is None else _to_ms_precision(time)
        if title is not UNSET:
            changes["title"] = clean_text(title) if title else None
        if tags is not None:
            changes["tags"] = tuple(clean_text(t) for t in tags)
        if meta is not None:
            changes["meta"] = dict(meta)
        found = store.resolve_source(source_id)
        new = keyed(dataclasses.replace(record, **changes))
        return _write(store, found.scope, found.kind, new, embedder, config)


def delete_item(
    store: Store,
    id: str,
    *,
    source: str | None = None,
    user: str | None = None,
    agent: str | None = None,
    session: str | None = None,
    embedder: Embedder | None = None,
    config: ChunkingConfig | None = None,
) -> ItemWrite:
    """Remove the item stored under ``id`` and the chunks derived from it (a chat window
    holding it is derived again without it)."""
    with store.transaction():
        source_id, stored = find_item(
            store, id, source=source, user=user, agent=agent, session=session
        )
        found = store.resolve_source(source_id)
        versions = VersionWriter(store, source_id, stored.key, chat=found.kind is SourceKind.CHAT)
        merge = Merge(store, source_id, scope=found.scope, kind=found.kind, config=config)
        merge.remove([stored.key])
        done = merge.finish()
        version = versions.write("removed", stored.record, [])
        queue_seal(store, source_id, found.scope)
        # A chat window that held the item is derived again without it: embed that.
        embedded = embed_written(store, embedder, merge.added_ids)
        return ItemWrite(
            id=stored.key,
            source_id=source_id,
            scope=found.scope,
            action="deleted",
            chunks_added=tuple(merge.added_ids),
            chunks_removed=done.chunks_removed,
            embedded=embedded,
            record=stored.record,
            version=version,
        )


def find_item(
    store: Store,
    id: str,
    *,
    source: str | None = None,
    user: str | None = None,
    agent: str | None = None,
    session: str | None = None,
) -> tuple[str, StoredRecord]:
    """(source id, record) of the item under ``id``; ``source`` (id or scope), and
    ``user``, ``agent`` and ``session`` (those of the item's source), pick one where several
    sources hold the key."""
    whose = Identity.of(user=user, agent=agent, session=session)
    found = store.find_records(id)
    if source is not None:
        wanted = store.resolve_source(source).id
        found = [(sid, stored) for sid, stored in found if sid == wanted]
    if whose:
        known = store.scopes()
        found = [
            (sid, stored)
            for sid, stored in found
            if Identity.parse(known.get(sid, "")).holds(whose)
        ]
    if not found:
        where = f" in source {source!r}" if source is not None else ""
        of = ", ".join(f"{kind} {value!r}" for kind, value in whose.parts())
        raise NotFoundError(f"no item with id {id!r}{where}{' of ' + of if of else ''}")
    if len(found) > 1:
        scopes = ", ".join(sorted(store.scopes().get(sid, sid) for sid, _ in found))
        raise StratamemError(f"several sources hold an item {id!r} ({scopes}): name the source")
    return found[0]


def writable_source(
    store: Store, source: str, kind: SourceKind | str | None, *, join: bool = True
) -> tuple[str, SourceKind]:
    """The scope and kind of the source (by id or scope: the name as given, else in NFC form)
    items are written to, creating it (``source`` its scope, in NFC form) when it does not
    exist; one a principal made only with ``join``."""
    existing = None
    for name in dict.fromkeys((source, normal_name(source))):
        try:
            existing = store.resolve_source(name)
            break
        except NotFoundError:
            pass
    if existing is not None:
        refuse_foreign(existing, join=join)
        if existing.locked:
            raise StratamemError(f"source {existing.scope!r} is locked: unlock it to write to it")
        if not merges(existing.kind):
            raise StratamemError(
                f"source {existing.scope!r} holds documents, which are replaced whole: write "
                "items to a chat, mail or record source"
            )
        if kind is not None and SourceKind(kind) is not existing.kind:
            raise StratamemError(
                f"source {existing.scope!r} is a {existing.kind} source, not {kind}"
            )
        return existing.scope, existing.kind
    if not source.strip():
        raise StratamemError("a source needs a name")
    scope = normal_name(source)
    new_kind = SourceKind(kind) if kind is not None else SourceKind.RECORD
    if not merges(new_kind):
        raise StratamemError("items are records, chat messages or mail, not documents")
    store.upsert_source(
        scope=scope,
        kind=new_kind,
        platform="memory",
        location=f"memory:{scope}",
        title=scope,
        access=identity_access(Identity.parse(scope)),
    )
    return scope, new_kind


def identity_scope(base: str, whose: Identity) -> str:
    """The scope ``base`` names for ``whose`` memory: ``base`` itself for nobody's."""
    base = clean_text(base)
    return whose.scope(base) if whose else base


def embed_written(store: Store, embedder: Embedder | None, ids: Sequence[str]) -> int:
    """Embed the chunks a write made, in its transaction, when ``embedder`` is of the
    store's model; how many were. A store with no model yet, where no chunk but these waits
    for a vector, takes the embedder's (its facts are embedded too): the first write to a
    store turns its vector leg on. Where others wait, these wait with them for ``embed``."""
    if embedder is None or not ids:
        return 0
    if adopt_model(store, embedder, waiting=len(ids)):
        embed_facts(store, embedder)
    return embed_chunks(store, embedder, ids)


def _to_ms_precision(value: datetime) -> datetime:
    """``value`` in UTC, to the millisecond: as the store keeps it."""
    value = as_utc(value)
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


def _write(
    store: Store,
    scope: str,
    kind: SourceKind,
    stored: StoredRecord,
    embedder: Embedder | None,
    config: ChunkingConfig | None,
) -> ItemWrite:
    source_id = source_id_for(scope)
    versions = VersionWriter(store, source_id, stored.key, chat=kind is SourceKind.CHAT)
    merge = Merge(store, source_id, scope=scope, kind=kind, config=config, watch=[stored.key])
    merge.add([stored.row()])
    done = merge.finish()
    action = "added" if done.new else "updated" if done.updated else "unchanged"
    version = versions.current
    if action != "unchanged":
        opened: ItemAction = "added" if done.new else "edited"
        version = versions.write(opened, stored.record, merge.chunks_of(stored.key))
    embedded = 0
    if merge.added_ids:
        queue_seal(store, source_id, scope)
        embedded = embed_written(store, embedder, merge.added_ids)
    return ItemWrite(
        id=stored.key,
        source_id=source_id,
        scope=scope,
        action=action,
        chunks_added=tuple(merge.added_ids),
        chunks_removed=done.chunks_removed,
        embedded=embedded,
        record=stored.record,
        version=version,
    )
