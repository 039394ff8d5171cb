"""Mail messages as records: what the mail connectors share.

The connectors are :mod:`~stratamem.ingest.connectors.mbox` (mbox files and folders of them),
:mod:`~stratamem.ingest.connectors.maildir` (Maildir and Maildir++) and
:mod:`~stratamem.ingest.connectors.eml` (``.eml`` files). Each message becomes one
:class:`Record`; its body is split into new text, quoted replies and signature by
:mod:`stratamem.ingest.connectors.mailbody`, and the headers and threading are done here, as is
the reading of mailboxes that hold one message per file (Maildir, ``.eml``), in Date order.

Threads are resolved while streaming with a map of message id to thread root, so a reply whose
References header was truncated still lands in its root's thread when an ancestor was seen.

Bounds. A message that fails in any way is reported with its place (``message 3 (line 120)`` in
an mbox, ``file`` for one message per file, with ``<message-id>`` when known) and the rest go
on. A message file larger than ``ReadContext.max_item_bytes`` is reported and skipped without
being held; multiparts nested too deep, or too many of them, are refused before parsing.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email import message_from_bytes
from email.message import Message
from email.parser import BytesHeaderParser
from email.policy import compat32
from email.utils import getaddresses, parsedate_to_datetime
from pathlib import Path
from typing import Any

from stratamem.ingest.connectors.mailbody import _body_parts, _clean, _header_text
from stratamem.ingest.model import (
    ReadContext,
    Record,
    clean_text,
    describe_failure,
    open_regular,
    read_item,
    to_utc,
)

# --------------------------------------------------------------------------- headers


_MSGID = re.compile(r"<([^<>\s]+)>")


def _message_ids(value: object) -> list[str]:
    """Message ids without angle brackets; bare tokens count only when they hold an ``@``.

    Ids are never encoded words, so the header is read raw: a References header of a long
    thread may exceed the length other headers are decoded to.
    """
    text = _clean(value) if isinstance(value, str) else _header_text(value)
    found = _MSGID.findall(text)
    if found:
        return found
    return [token for token in text.split() if "@" in token]


def _addresses(msg: Message, name: str) -> list[tuple[str, str]]:
    """(display name, lowercased address) pairs of an address header, empty ones dropped."""
    values = msg.get_all(name) or []
    # Split on the raw value first: a decoded name may hold a comma ("Diaz, Carol").
    raw = [value if isinstance(value, str) else _header_text(value) for value in values]
    pairs: list[tuple[str, str]] = []
    for display, address in getaddresses([_clean(text) for text in raw]):
        address = address.strip().lower()
        display = _header_text(display).strip("\"' ")
        if address or display:
            pairs.append((display, address))
    return pairs


# An address starts where a run of address characters starts, so a long run without "@" is
# tried once, not once per character.
_ADDRESS = re.compile(r"(?<![\w.!#$%&'*+/=?^`{|}~-])[\w.!#$%&'*+/=?^`{|}~-]+@[\w-]+(?:\.[\w-]+)+")


def _address_list(msg: Message, name: str) -> list[str]:
    """The lowercased addresses of a recipient header, in order, without repeats.

    Only the addresses are needed here, and a regex over the raw value is some twenty times
    faster than ``getaddresses`` on the long Cc lines of mailing lists.
    """
    found: dict[str, None] = {}
    for value in msg.get_all(name) or []:
        text = value if isinstance(value, str) else _header_text(value)
        for address in _ADDRESS.findall(text):
            found.setdefault(address.lower())
    return list(found)


def _parse_date(value: object) -> datetime | None:
    if value is None:
        return None
    try:
        return to_utc(parsedate_to_datetime(_header_text(value)))
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


# --------------------------------------------------------------------------- records


class _Threads:
    """Message id → thread root id, filled as messages stream by."""

    def __init__(self) -> None:
        self._root: dict[str, str] = {}

    def resolve(self, own: str, chain: list[str]) -> str:
        """The root of ``own`` given its ancestors, oldest first (References + In-Reply-To).

        An ancestor already seen decides; else the oldest ancestor named is the root. Ids
        without ``@`` (like the ``<yes>`` some clients write) are only trusted when seen.
        """
        chain = [ref for ref in chain if ref != own and ("@" in ref or ref in self._root)]
        root = next((self._root[ref] for ref in chain if ref in self._root), None)
        if root is None:
            root = chain[0] if chain else self._root.get(own, own)
        for ref in chain:
            self._root.setdefault(ref, root)
        self._root[own] = root
        return root


@dataclass(frozen=True, slots=True)
class _RawMessage:
    """The bytes of one message and where it came from, for refs and problem reports.

    ``path`` is the file as problems and refs name it; ``where`` the place of the message in
    it (``message 3 (line 120)``), or ``file`` for a file that holds one message. ``thread``
    is the thread root when it was resolved before the message was read (a Maildir++ tree).
    """

    data: bytes
    path: str
    where: str = "file"
    meta: dict[str, Any] = field(default_factory=dict)
    thread: str | None = None


class _Unreadable(Exception):
    """A message that cannot be read as mail at all."""


def _read_message(raw: _RawMessage, threads: _Threads, ctx: ReadContext) -> Record | None:
    """The record of one message, or None after reporting why it was skipped."""
    where = raw.where
    try:
        if not raw.data.strip():
            raise _Unreadable("empty message")
        _check_mime_shape(raw.data)
        msg = message_from_bytes(raw.data, policy=compat32)
        if not msg.keys():
            raise _Unreadable("no mail headers")
        own_ids = _message_ids(msg.get("Message-ID"))
        if own_ids:
            where = f"{where} <{own_ids[0]}>" if raw.where != "file" else f"<{own_ids[0]}>"
        return _parse(raw, msg, own_ids, threads)
    except _Unreadable as exc:
        ctx.skip(raw.path, where, str(exc))
    except Exception as exc:  # one pathological message must not end a mailbox of thousands
        ctx.skip(raw.path, where, describe_failure(exc))
    return None


# The stdlib parser checks every line against every open boundary and compiles a pattern per
# multipart: past these bounds a message costs seconds. Real mail nests a handful deep.
_MAX_MIME_DEPTH = 64
_MAX_MIME_BOUNDARIES = 2000
_BOUNDARY = re.compile(rb'boundary\s*=\s*"?([^"\s;]+)', re.IGNORECASE)


def _check_mime_shape(data: bytes) -> None:
    """Refuse a message whose multiparts nest deeper than :data:`_MAX_MIME_DEPTH` or number
    more than :data:`_MAX_MIME_BOUNDARIES`, in one pass over its lines before it is parsed."""
    declared = {match[1] for match in _BOUNDARY.finditer(data)}
    if len(declared) > _MAX_MIME_BOUNDARIES:
        raise _Unreadable(f"more than {_MAX_MIME_BOUNDARIES:,} MIME boundaries")
    if len(declared) <= _MAX_MIME_DEPTH:
        return
    open_parts: list[bytes] = []
    for line in data.split(b"\n"):
        if not line.startswith(b"--"):
            continue
        token = line[2:].rstrip()
        closing = token.endswith(b"--")
        name = token[:-2] if closing else token
        if name not in declared:
            continue
        if name in open_parts:
            # The next part of an open multipart closes every part opened inside it.
            del open_parts[open_parts.index(name) + (0 if closing else 1) :]
        elif not closing:
            open_parts.append(name)
            if len(open_parts) > _MAX_MIME_DEPTH:
                raise _Unreadable(f"MIME parts nested more than {_MAX_MIME_DEPTH} deep")


def _ancestors(msg: Message) -> tuple[list[str], str | None, list[str]]:
    """The References ids, the In-Reply-To id and the chain of both, oldest first, that
    :meth:`_Threads.resolve` takes."""
    in_reply_to = next(iter(_message_ids(msg.get("In-Reply-To"))), None)
    references = [ref for value in msg.get_all("References") or [] for ref in _message_ids(value)]
    chain = references + ([in_reply_to] if in_reply_to and in_reply_to not in references else [])
    return references, in_reply_to, chain


def _parse(raw: _RawMessage, msg: Message, own_ids: list[str], threads: _Threads) -> Record:
    message_id = own_ids[0] if own_ids else None
    record_id = message_id or "sha256:" + hashlib.sha256(raw.data).hexdigest()[:32]
    references, in_reply_to, chain = _ancestors(msg)
    reply_to = in_reply_to or (references[-1] if references else None)

    senders = _addresses(msg, "From")
    to = _address_list(msg, "To")
    cc = _address_list(msg, "Cc")
    name, address = senders[0] if senders else ("", "")
    text, quoted, signature, attachments = _body_parts(msg)

    meta: dict[str, Any] = dict(raw.meta)
    meta.update(
        {
            "from": f"{name} <{address}>" if name and address else (address or name or None),
            "to": to,
            "cc": cc,
            "message_id": message_id,
            "in_reply_to": in_reply_to,
            "references": references,
            "attachments": attachments,
        }
    )
    return Record(
        text=text,
        ref=f"{raw.path}#{record_id}",
        time=_parse_date(msg.get("Date")),
        author=name or address or None,
        author_id=address or None,
        id=record_id,
        thread=raw.thread if raw.thread is not None else threads.resolve(record_id, chain),
        reply_to=reply_to,
        title=_header_text(msg.get("Subject")) or None,
        recipients=tuple(dict.fromkeys(to + cc)),
        quoted=quoted,
        signature=signature,
        meta=meta,
    )


def _records(
    messages: Iterable[_RawMessage], ctx: ReadContext, threads: _Threads | None = None
) -> Iterator[Record]:
    if threads is None:
        threads = _Threads()
    for raw in messages:
        record = _read_message(raw, threads, ctx)
        if record is not None:
            yield record


# --------------------------------------------------------------------------- message files


_HEADER_SIZE_LIMIT = 256 * 1024


def _headers(path: Path) -> Message | None:
    """The header block of a message file, read alone; None where it cannot be read."""
    head = bytearray()
    try:
        with open_regular(path) as handle:
            # Bounded reads: a binary file in cur/ may have no line breaks at all.
            while len(head) < _HEADER_SIZE_LIMIT:
                line = handle.readline(_HEADER_SIZE_LIMIT)
                if not line.strip():
                    break
                head += line
        return BytesHeaderParser(policy=compat32).parsebytes(bytes(head))
    except Exception:  # only the reading order depends on it; the message reports itself
        return None


def _header_date(path: Path) -> datetime | None:
    """The Date of a message file, reading only its header block."""
    headers = _headers(path)
    try:
        return None if headers is None else _parse_date(headers.get("Date"))
    except Exception:  # as above
        return None


_EPOCH = datetime(1, 1, 1, tzinfo=UTC)


def _by_date(files: list[Path], root: Path) -> list[Path]:
    """Files ordered by Date, then by path; undated messages last."""

    def key(file: Path) -> tuple[bool, datetime, str]:
        date = _header_date(file)
        return (date is None, date or _EPOCH, _relative(file, root))

    return sorted(files, key=key)


def _relative(file: Path, root: Path) -> str:
    return file.relative_to(root).as_posix() if root != file else file.name


def _file_messages(
    files: list[Path], root: Path, ctx: ReadContext, *, folders: bool = False
) -> Iterator[_RawMessage]:
    for file in _by_date(files, root):
        raw = _file_message(file, root, ctx, folders=folders)
        if raw is not None:
            yield raw


def _file_message(
    file: Path, root: Path, ctx: ReadContext, *, folders: bool = False, thread: str | None = None
) -> _RawMessage | None:
    """The message of one file, with ``meta["file"]`` (and ``meta["folder"]``) relative to
    ``root``; None after reporting a file too large to read."""
    relative = clean_text(_relative(file, root))
    shown = clean_text(str(file))
    data = read_item(file, ctx, shown=shown)
    if data is None:
        return None
    meta: dict[str, Any] = {"file": relative}
    if folders:
        folder = Path(relative).parent
        if folder.name in ("cur", "new"):
            folder = folder.parent
        meta["folder"] = "" if folder == Path(".") else folder.as_posix()
    return _RawMessage(data, shown, "file", meta, thread)


def _folder_name(path: Path) -> str:
    return path.resolve().name or str(path)
