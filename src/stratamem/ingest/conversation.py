"""Conversation turns written as they happen: :func:`add_messages`.

An agent hands over the turns of a conversation in the chat-completions shape (``role``,
``content``, optional ``name``, ``time`` and ``id``; a mapping or an object with those
attributes). They become records of the session's chat source, whose scope names whose
conversation it is (:class:`~stratamem.types.Identity`): ``chat/user:maya/session:s-42``
(``chat/user:maya`` without a session, ``chat`` for nobody's). The source is made on first
use ``private`` and readable by the principals holding ``user:maya`` (or the agent's label),
so every gate and filter on sources applies.

Each turn is a record: its author the ``name`` given, else the role; its time the one given,
else the call's time, or a millisecond after the latest turn before it in the call where
that is later (so the turns of one call keep their order); its key the ``id`` given, else
``turn_`` and a digest of the session, the turn's place in the call, its role, name, text
and given time. A call made again with the same turns (a retry) therefore changes nothing:
a turn already stored keeps its stored time. The chunks are chat windows
(:mod:`stratamem.ingest.chunking`), found by keyword and graph search when the call returns.

Everything is written in one transaction through the merge items use
(:mod:`stratamem.ingest.merge`), the source's tree gets a seal job, and, given an embedder of
the store's model (or any, for the store's first write: see
:func:`~stratamem.ingest.items.embed_written`), the new chunks are embedded after the commit,
a batch at a time (an embedder that fails leaves them for ``embed`` and the report says so).
A turn that cannot be written (no text, an unknown role, a bad name, time or id, an id used
twice) is skipped and the report says why; a call whose every turn is bad writes nothing and
raises a ``ValueError``, as does one of more than :data:`MAX_MESSAGES` turns.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from stratamem.embed.base import Embedder
from stratamem.embed.indexing import ACTIVE_MODEL, adopt_model, embed_committed
from stratamem.errors import StoreError
from stratamem.ingest.chunking import ChunkingConfig
from stratamem.ingest.items import identity_scope, writable_source
from stratamem.ingest.merge import Merge
from stratamem.ingest.model import clean_text
from stratamem.ingest.pipeline import queue_seal
from stratamem.memory.remember import embed_facts
from stratamem.store.base import Store
from stratamem.store.records import keyed
from stratamem.store.sources import source_id_for
from stratamem.timeparse import as_utc, from_ms, to_ms
from stratamem.types import Identity, Record, SourceKind

__all__ = ["CHAT_BASE", "MAX_MESSAGES", "ROLES", "MessagesWrite", "Skipped", "add_messages"]

log = logging.getLogger(__name__)

CHAT_BASE = "chat"
ROLES = ("user", "assistant", "system", "tool")
MAX_MESSAGES = 10_000
MAX_NAME_CHARS = 200
MAX_ID_CHARS = 200
_STEP = timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class Skipped:
    """A message left out: its place in the call and why."""

    index: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class MessagesWrite:
    """What :func:`add_messages` did: the session's source, how many turns were added,
    updated (an ``id`` given again with new content) or unchanged, those skipped and why,
    the key of each turn written (in the order given), the chunks added and removed, and
    how many chunks were embedded (``notes`` says why not, where an embedder failed)."""

    source_id: str
    scope: str
    identity: Identity
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    skipped: tuple[Skipped, ...] = ()
    ids: tuple[str, ...] = ()
    chunks_added: tuple[str, ...] = ()
    chunks_removed: int = 0
    embedded: int = 0
    notes: tuple[str, ...] = ()
    # The report of the extraction run on the session's source after the write, as JSON
    # (``extract=True``; see :mod:`stratamem.memory.extract`), else None.
    extracted: Mapping[str, Any] | None = None

    @property
    def user(self) -> str | None:
        return self.identity.user

    @property
    def agent(self) -> str | None:
        return self.identity.agent

    @property
    def session(self) -> str | None:
        return self.identity.session

    def to_dict(self) -> dict[str, Any]:
        return {
            "source_id": self.source_id,
            "scope": self.scope,
            **self.identity.to_dict(),
            "added": self.added,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "skipped": [s.to_dict() for s in self.skipped],
            "ids": list(self.ids),
            "chunks_added": list(self.chunks_added),
            "chunks_removed": self.chunks_removed,
            "embedded": self.embedded,
            "notes": list(self.notes),
        } | ({} if self.extracted is None else {"extracted": dict(self.extracted)})


@dataclass(frozen=True, slots=True)
class _Turn:
    index: int
    role: str
    text: str
    name: str | None
    time: datetime | None
    id: str | None
    key: str = ""


def add_messages(
    store: Store,
    messages: Sequence[Any],
    *,
    user: str | None = None,
    agent: str | None = None,
    session: str | None = None,
    embedder: Embedder | None = None,
    config: ChunkingConfig | None = None,
    now: datetime | None = None,
) -> MessagesWrite:
    """Write the turns ``messages`` to the chat source of ``user``, ``agent`` and
    ``session`` (see the module's docstring); ``now`` is the time of the turns given none
    (default: the clock)."""
    whose = Identity.of(user=user, agent=agent, session=session)
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
        raise ValueError("messages is a list of {role, content} messages")
    if len(messages) > MAX_MESSAGES:
        raise ValueError(
            f"at most {MAX_MESSAGES:,} messages are written in one call; this one has "
            f"{len(messages):,}: split it"
        )
    scope = identity_scope(CHAT_BASE, whose)
    source_id = source_id_for(scope)
    turns, skipped = _read(messages, whose)
    if not turns:
        if not messages:
            return MessagesWrite(source_id=source_id, scope=scope, identity=whose)
        reasons = "; ".join(f"message {s.index}: {s.reason}" for s in skipped[:3])
        more = f" (and {len(skipped) - 3} more)" if len(skipped) > 3 else ""
        raise ValueError(f"no message could be written: {reasons}{more}")
    start = _ms(datetime.now(UTC) if now is None else as_utc(now, name="now"))
    adopted = False
    with store.transaction():
        writable_source(store, scope, SourceKind.CHAT)
        held = store.record_states(source_id, [t.key for t in turns])
        records = []
        last: datetime | None = None
        for turn in turns:
            key = turn.key
            state = held.get(key)
            when = turn.time
            if when is None and state is not None and state.time_ms is not None:
                when = from_ms(state.time_ms)  # a turn written before keeps its time
            if when is None:
                when = start if last is None or start > last else last + _STEP
            last = when if last is None else max(last, when)
            records.append(
                keyed(
                    Record(
                        text=turn.text,
                        ref=f"{scope}#{key}",
                        time=when,
                        author=turn.name or turn.role,
                        id=key,
                        meta={"role": turn.role},
                    )
                )
            )
        merge = Merge(store, source_id, scope=scope, kind=SourceKind.CHAT, config=config)
        merge.add([r.row() for r in records])
        done = merge.finish()
        if merge.added_ids:
            queue_seal(store, source_id, scope)
            if embedder is not None and adopt_model(store, embedder, waiting=len(merge.added_ids)):
                adopted = True
    report = MessagesWrite(
        source_id=source_id,
        scope=scope,
        identity=whose,
        added=done.new,
        updated=done.updated,
        unchanged=done.unchanged,
        skipped=tuple(skipped),
        ids=tuple(t.key for t in turns),
        chunks_added=tuple(merge.added_ids),
        chunks_removed=done.chunks_removed,
    )
    return _embedded(store, embedder, report, adopted)


def _embedded(
    store: Store, embedder: Embedder | None, report: MessagesWrite, adopted: bool
) -> MessagesWrite:
    """``report`` with the new chunks embedded, after the commit (see
    :func:`~stratamem.embed.indexing.embed_committed`); an embedder that fails leaves them
    waiting for ``embed``, and a note says so."""
    if embedder is None or not report.chunks_added:
        return report
    if store.get_setting(ACTIVE_MODEL) != embedder.spec.signature:
        return report
    try:
        if adopted:
            with store.transaction():
                embed_facts(store, embedder)
        embedded = embed_committed(store, embedder, report.chunks_added)
    except StoreError:
        raise
    except Exception as exc:  # an embedder's failure never fails a write that committed
        log.warning("the turns are written; embedding them failed: %s", exc)
        note = f"not embedded ({exc}): run embed"
        return dataclasses.replace(report, notes=(*report.notes, note))
    return dataclasses.replace(report, embedded=embedded)


# -- reading the messages ----------------------------------------------------------------------


def _read(messages: Sequence[Any], whose: Identity) -> tuple[list[_Turn], list[Skipped]]:
    turns: list[_Turn] = []
    skipped: list[Skipped] = []
    first_of: dict[str, int] = {}
    for index, message in enumerate(messages):
        try:
            turn = _turn(index, message)
        except ValueError as exc:
            skipped.append(Skipped(index, str(exc)))
            continue
        turn = dataclasses.replace(turn, key=_key(turn, whose))
        if turn.key in first_of:
            skipped.append(Skipped(index, f"the same id as message {first_of[turn.key]}"))
            continue
        first_of[turn.key] = index
        turns.append(turn)
    return turns, skipped


def _field(message: Any, name: str) -> Any:
    if isinstance(message, Mapping):
        return message.get(name)
    return getattr(message, name, None)


def _turn(index: int, message: Any) -> _Turn:
    """One message as a turn; a ``ValueError`` saying why it cannot be one."""
    if message is None or isinstance(message, str | bytes):
        raise ValueError("not a message (a mapping or an object with role and content)")
    role = _field(message, "role")
    if not isinstance(role, str) or role.strip().lower() not in ROLES:
        raise ValueError(f"unknown role {role!r} (one of {', '.join(ROLES)})")
    text = _text(_field(message, "content"))
    if not text.strip():
        raise ValueError("no text")
    name = _field(message, "name")
    if name is not None:
        if not isinstance(name, str) or len(name) > MAX_NAME_CHARS or "\n" in name:
            raise ValueError(f"a name is one line of at most {MAX_NAME_CHARS} characters")
        name = clean_text(name.strip()) or None
    ident = _field(message, "id")
    if ident is not None:
        if isinstance(ident, bool) or not isinstance(ident, str | int):
            raise ValueError(f"an id is a string or an integer, not {type(ident).__name__}")
        ident = clean_text(str(ident).strip())
        if not ident or len(ident) > MAX_ID_CHARS:
            raise ValueError(f"an id has 1 to {MAX_ID_CHARS} characters")
    return _Turn(
        index=index,
        role=role.strip().lower(),
        text=clean_text(text),
        name=name,
        time=_time(_field(message, "time")),
        id=ident,
    )


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts
    (``{"type": "text", "text": …}``) joined by blank lines."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and not isinstance(content, bytes):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n\n".join(p for p in parts if p.strip())
    return ""


def _time(value: Any) -> datetime | None:
    """A turn's time: a datetime (a naive one is UTC), an ISO 8601 string or seconds since
    1970; None for none."""
    if value is None:
        return None
    try:
        if isinstance(value, datetime):
            return _ms(as_utc(value))
        if isinstance(value, str):
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            return _ms(as_utc(parsed))
        if isinstance(value, int | float) and not isinstance(value, bool):
            return _ms(datetime.fromtimestamp(value, UTC))
    except (ValueError, OverflowError, OSError):
        pass
    raise ValueError(f"cannot read {str(value)[:40]!r} as a time (a datetime, ISO 8601 or epoch)")


def _ms(value: datetime) -> datetime:
    """``value`` to the millisecond: as the store keeps it."""
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


def _key(turn: _Turn, whose: Identity) -> str:
    """The turn's record key: its ``id``, else a digest of the session, its place in the
    call and what it says (so a retried call writes the same keys)."""
    if turn.id is not None:
        return turn.id
    shown = [
        whose.session or "",
        turn.index,
        turn.role,
        turn.name,
        turn.text,
        None if turn.time is None else to_ms(turn.time),
    ]
    digest = hashlib.sha256(json.dumps(shown, ensure_ascii=False).encode()).hexdigest()
    return f"turn_{digest[:24]}"
