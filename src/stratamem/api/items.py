"""``mem.items``: single items an agent writes (a memory, a message, a note), one at a time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from stratamem.api._core import Facet, When, when
from stratamem.ingest import items
from stratamem.ingest.conversation import MessagesWrite, add_messages
from stratamem.ingest.items import ItemVersion, ItemWrite
from stratamem.types import Identity, Record, SourceKind

__all__ = ["Items"]


class Items(Facet):
    """Write, correct, remove and read single items: ``mem.items.add("…")``."""

    def add(
        self,
        text: str,
        *,
        source: str = items.DEFAULT_SOURCE,
        kind: SourceKind | str | None = None,
        author: str | None = None,
        time: When | None = None,
        id: str | None = None,
        title: str | None = None,
        thread: str | None = None,
        tags: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
        user: str | None = None,
        agent: str | None = None,
        session: str | None = None,
        join: bool = False,
    ) -> ItemWrite:
        """Write one item (a memory, a message, a note) to ``source`` and return its id.

        The item is found by keyword and graph search as soon as this returns, and by the
        vector leg too when the store's vectors are of the configured embedder's model, or
        the store holds nothing yet (it is embedded in the same transaction; otherwise it
        waits for ``mem.indexes.embed``). ``time`` defaults to now, ``id`` to a new key; an
        ``id`` the source holds already is replaced. A new ``source`` is made as a record
        source (or ``kind``). ``user``, ``agent`` and ``session`` put the item in that
        identity's source of base ``source`` (``memory/user:maya``: see
        ``docs/memory.md``). The source's summary tree is queued to be sealed (see
        ``mem.trees.build``). A source a principal made (``bob/notes``: see
        ``Source.created_by``) is refused unless ``join=True``: its scopes are that
        principal's choice.
        """
        self._owner_only("write items")
        return items.add_item(
            self._store,
            text,
            source=source,
            kind=kind,
            author=author,
            time=when(time, "time"),
            id=id,
            title=title,
            thread=thread,
            tags=tags,
            meta=meta,
            user=user,
            agent=agent,
            session=session,
            embedder=self._memory._first_write_embedder(),
            join=join,
        )

    def add_messages(
        self,
        messages: Sequence[Any],
        *,
        user: str | None = None,
        agent: str | None = None,
        session: str | None = None,
        now: When | None = None,
        extract: bool = False,
    ) -> MessagesWrite:
        """Write the turns of a conversation (``{"role", "content"}`` messages, with an
        optional ``name``, ``time`` and ``id``) to the chat source of ``user``, ``agent`` and
        ``session`` (``chat/user:maya/session:s1``), in one transaction: found by keyword and
        graph search at once, by the vector leg once embedded (right after the write, where
        the store's vectors are of the configured embedder's model or it holds nothing yet).
        A retried call changes nothing; a bad message is skipped and the report says why.
        ``now`` is the time of turns given none (default: the clock). ``extract``: then have
        the configured model read the new turns and bring the facts up to date (see
        :meth:`Facts.extract`; its report is ``extracted``). See ``docs/memory.md``."""
        self._owner_only("write messages")
        if extract:
            self._memory.facts.extraction_required()
        done = add_messages(
            self._store,
            messages,
            user=user,
            agent=agent,
            session=session,
            now=when(now, "now"),
            embedder=self._memory._first_write_embedder(),
        )
        if not extract:
            return done
        report = self._memory.facts.extract([done.source_id])
        return replace(done, extracted=report.to_dict())

    def edit(
        self,
        id: str,
        *,
        source: str | None = None,
        text: str | None = None,
        author: str | None = items.UNSET,
        time: When | None = items.UNSET,
        title: str | None = items.UNSET,
        tags: Sequence[str] | None = None,
        meta: Mapping[str, Any] | None = None,
        user: str | None = None,
        agent: str | None = None,
        session: str | None = None,
    ) -> ItemWrite:
        """Correct the item stored under ``id``: the fields given change, the others stay,
        and the earlier version is kept (see :meth:`history`). ``source`` (id or scope), or
        ``user``, ``agent`` and ``session``, are needed only when several sources hold that
        id."""
        self._owner_only("write items")
        return items.update_item(
            self._store,
            id,
            source=source,
            text=text,
            author=author,
            time=time if time is items.UNSET else when(time, "time"),
            title=title,
            tags=tags,
            meta=meta,
            user=user,
            agent=agent,
            session=session,
            embedder=self._memory._write_embedder(),
        )

    def rm(
        self,
        id: str,
        *,
        source: str | None = None,
        user: str | None = None,
        agent: str | None = None,
        session: str | None = None,
    ) -> ItemWrite:
        """Remove the item stored under ``id`` from every index at once. Its history stays:
        the removal is a version of its own (see :meth:`history`)."""
        self._owner_only("write items")
        return items.delete_item(
            self._store,
            id,
            source=source,
            user=user,
            agent=agent,
            session=session,
            embedder=self._memory._write_embedder(),
        )

    def get(
        self,
        id: str,
        *,
        source: str | None = None,
        as_of: When | None = None,
        user: str | None = None,
        agent: str | None = None,
        session: str | None = None,
    ) -> Record:
        """The item (record) stored under ``id`` (of ``user``, ``agent``, ``session`` where
        given; its source's scope says whose it is); with ``as_of``, the one it was at that
        time (:class:`~stratamem.errors.NotFoundError` before its first version or while it
        was removed)."""
        at = when(as_of, "as_of")
        if at is not None:
            whose = Identity.of(user=user, agent=agent, session=session)
            if source is None and whose:
                source = items.identity_scope(items.DEFAULT_SOURCE, whose)
            return items.get_item(self._store, id, source=source, as_of=at).record()
        found = items.find_item(
            self._store, id, source=source, user=user, agent=agent, session=session
        )
        return found[1].record

    def history(
        self,
        id: str,
        *,
        source: str | None = None,
        user: str | None = None,
        agent: str | None = None,
        session: str | None = None,
    ) -> list[ItemVersion]:
        """Every version of the item under ``id``, oldest first: each with its fields, what
        opened it (``added``, ``edited``, ``removed``) and when the store held it
        (``recorded_at`` to ``closed_at``). See ``docs/memory.md``."""
        whose = Identity.of(user=user, agent=agent, session=session)
        if source is None and whose:
            source = items.identity_scope(items.DEFAULT_SOURCE, whose)
        return items.item_history(self._store, id, source=source)
