"""Mail connectors: mbox files, Maildir folders and ``.eml`` files.

Each message becomes one :class:`Record`; its body is split into new text, quoted replies and
signature by :mod:`stratamem.ingest.connectors.mailbody`, and the headers, threading and
mailbox reading are done here.

The mbox reader splits the file on ``From `` lines itself, reading bytes line by line, because
:class:`mailbox.mbox` builds a table of contents first; a 1 GB mailbox must stream. Messages are
numbered from 1 in problems and in ``meta["index"]``; ``meta["line"]`` is the 1-based line of
the ``From `` separator and ``meta["offset"]`` its byte offset.

Threads are resolved while streaming with a map of message id to thread root, so a reply whose
References header was truncated still lands in its root's thread when an ancestor was seen.
"""

from __future__ import annotations

import hashlib
import os
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

from stratamem.errors import SourceFormatError
from stratamem.ingest.connectors.mailbody import (
    _body_parts,
    _clean,
    _header_text,
    html_to_text,
    split_body,
)
from stratamem.ingest.model import ReadContext, Record, SourceStream, to_utc
from stratamem.ingest.registry import register
from stratamem.types import SourceKind

# The body helpers moved to mailbody; callers and tests still reach them here.
__all__ = [
    "EmlConnector",
    "MaildirConnector",
    "MboxConnector",
    "detect_eml",
    "detect_maildir",
    "detect_mbox",
    "html_to_text",
    "split_body",
]

# --------------------------------------------------------------------------- headers


_MSGID = re.compile(r"<([^<>\s]+)>")


def _message_ids(value: object) -> list[str]:
    """Message ids without angle brackets; bare tokens count only when they hold an ``@``."""
    text = _header_text(value)
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


_ADDRESS = re.compile(r"[\w.!#$%&'*+/=?^`{|}~-]+@[\w-]+(?:\.[\w-]+)+")


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
    """The bytes of one message and where it came from, for refs and problem reports."""

    data: bytes
    path: str
    where: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


class _Unreadable(Exception):
    """A message that cannot be read as mail at all."""


def _parse(raw: _RawMessage, threads: _Threads) -> Record:
    if not raw.data.strip():
        raise _Unreadable("empty message")
    msg = message_from_bytes(raw.data, policy=compat32)
    if not msg.keys():
        raise _Unreadable("no mail headers")

    own_ids = _message_ids(msg.get("Message-ID"))
    message_id = own_ids[0] if own_ids else None
    record_id = message_id or "sha256:" + hashlib.sha256(raw.data).hexdigest()[:32]
    in_reply_to = next(iter(_message_ids(msg.get("In-Reply-To"))), None)
    references = [ref for value in msg.get_all("References") or [] for ref in _message_ids(value)]
    chain = references + ([in_reply_to] if in_reply_to and in_reply_to not in references else [])
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
        ts=_parse_date(msg.get("Date")),
        author=name or address or None,
        author_id=address or None,
        id=record_id,
        thread=threads.resolve(record_id, chain),
        reply_to=reply_to,
        title=_header_text(msg.get("Subject")) or None,
        recipients=tuple(dict.fromkeys(to + cc)),
        quoted=quoted,
        signature=signature,
        meta=meta,
    )


def _records(messages: Iterable[_RawMessage], ctx: ReadContext) -> Iterator[Record]:
    threads = _Threads()
    for raw in messages:
        try:
            record = _parse(raw, threads)
        except _Unreadable as exc:
            ctx.skip(raw.path, raw.where, str(exc))
            continue
        except Exception as exc:
            # One pathological message must not end a mailbox of thousands; report and go on.
            ctx.skip(raw.path, raw.where, f"cannot parse message: {type(exc).__name__}: {exc}")
            continue
        yield record


# --------------------------------------------------------------------------- mbox


_FROM_LINE = re.compile(rb"^From \S+.*\b\d{1,2}:\d\d.*\b\d{4}\b")
_HEADER_LINE = re.compile(rb"^[A-Za-z][A-Za-z0-9-]*:")
# Headers a saved message plausibly starts with when it lacks the mbox "From " line.
_FIRST_HEADER = re.compile(
    rb"^(return-path|received|delivered-to|from|to|date|subject|message-id|mime-version"
    rb"|reply-to|sender|envelope-to|dkim-signature|arc-[a-z-]+|authentication-results|x-[a-z0-9-]+):",
    re.IGNORECASE,
)
_ESCAPED_FROM = re.compile(rb"^>+From ")
# Envelope lines are short; looking further only costs time on long body lines.
_FROM_LINE_LIMIT = 256


@dataclass(slots=True)
class _MboxMessage:
    index: int
    line: int
    offset: int
    lines: list[bytes] = field(default_factory=list)

    def raw(self, path: Path) -> _RawMessage:
        return _RawMessage(
            b"".join(self.lines),
            str(path),
            f"message {self.index} (line {self.line})",
            {"index": self.index, "line": self.line, "offset": self.offset},
        )


def _mbox_messages(path: Path) -> Iterator[_RawMessage]:
    """Messages of an mbox file, one at a time; only the current message is held in memory.

    A separator is a ``From `` line carrying a time and a year, as mutt requires, so an
    unescaped "From the start..." in a body does not split a message. ``>From `` lines are
    unescaped (mboxrd).
    """
    current: _MboxMessage | None = None
    offset = 0
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if current is None:
                current = _first_message(path, line, number, offset)
            elif line.startswith(b"From ") and _FROM_LINE.match(line, 0, _FROM_LINE_LIMIT):
                yield current.raw(path)
                current = _MboxMessage(current.index + 1, number, offset)
            elif line[:1] == b">" and _ESCAPED_FROM.match(line):
                current.lines.append(line[1:])
            else:
                current.lines.append(line)
            offset += len(line)
    if current is not None:
        yield current.raw(path)


def _first_message(path: Path, line: bytes, number: int, offset: int) -> _MboxMessage | None:
    """The message the first non-blank line opens, or a :class:`SourceFormatError`."""
    if not line.strip():
        return None
    if line.startswith(b"From "):
        return _MboxMessage(1, number, offset)
    if _FIRST_HEADER.match(line):
        # A single message saved without the mbox envelope line: still mail.
        return _MboxMessage(1, number, offset, [line])
    raise SourceFormatError(str(path), f"line {number}", "not an mbox file (no 'From ' line)")


def _mbox_records(path: Path, ctx: ReadContext) -> Iterator[Record]:
    if not path.is_file():
        raise SourceFormatError(str(path), "", "not a file")
    yield from _records(_mbox_messages(path), ctx)


# --------------------------------------------------------------------------- files


_MAILDIR_META = frozenset({"maildirfolder", "subscriptions", "courierimapuiddb"})
_HEADER_SIZE_LIMIT = 256 * 1024


def _is_maildir(path: Path) -> bool:
    return (path / "cur").is_dir() or (path / "new").is_dir()


def _looks_like_mail(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return bool(_HEADER_LINE.match(handle.readline(1024)))
    except OSError:
        return False


def _maildir_files(root: Path) -> list[Path]:
    """Every message under a Maildir and its sub-folders (``foo/``, Maildir++ ``.Sent/``).

    Files in ``cur/`` and ``new/`` are messages; loose files elsewhere count only when they
    start like mail, since some archives (notmuch's test corpus) keep messages there too.
    """
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        is_box = _is_maildir(here)
        dirnames[:] = sorted(
            name
            for name in dirnames
            if not (is_box and name == "tmp")
            and (not name.startswith(".") or _is_maildir(here / name))
        )
        in_box = here.name in ("cur", "new") and _is_maildir(here.parent)
        for name in sorted(filenames):
            if name.startswith(".") or name.startswith("dovecot") or name in _MAILDIR_META:
                continue
            file = here / name
            if in_box or _looks_like_mail(file):
                found.append(file)
    return found


def _header_date(path: Path) -> datetime | None:
    """The Date of a message file, reading only its header block."""
    head = bytearray()
    try:
        with path.open("rb") as handle:
            # Bounded reads: a binary file in cur/ may have no line breaks at all.
            while len(head) < _HEADER_SIZE_LIMIT:
                line = handle.readline(_HEADER_SIZE_LIMIT)
                if not line.strip():
                    break
                head += line
    except OSError:
        return None
    headers = BytesHeaderParser(policy=compat32).parsebytes(bytes(head))
    return _parse_date(headers.get("Date"))


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
        relative = _relative(file, root)
        try:
            data = file.read_bytes()
        except OSError as exc:
            ctx.skip(file, "", f"cannot read: {exc.strerror or exc}")
            continue
        meta: dict[str, Any] = {"file": relative}
        if folders:
            folder = Path(relative).parent
            if folder.name in ("cur", "new"):
                folder = folder.parent
            meta["folder"] = "" if folder == Path(".") else folder.as_posix()
        yield _RawMessage(data, str(file), "", meta)


def _maildir_records(path: Path, ctx: ReadContext) -> Iterator[Record]:
    if not path.is_dir():
        raise SourceFormatError(str(path), "", "not a Maildir folder")
    yield from _records(_file_messages(_maildir_files(path), path, ctx, folders=True), ctx)


def _eml_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return [p for p in path.iterdir() if p.is_file() and p.suffix.lower() == ".eml"]


def _eml_records(path: Path, ctx: ReadContext) -> Iterator[Record]:
    if not path.exists():
        raise SourceFormatError(str(path), "", "no such file or directory")
    yield from _records(_file_messages(_eml_files(path), path, ctx), ctx)


# --------------------------------------------------------------------------- connectors


def _folder_name(path: Path) -> str:
    return path.resolve().name or str(path)


class MboxConnector:
    name = "mbox"

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]:
        yield SourceStream(
            scope=ctx.scope_for(f"mbox:{path.stem}"),
            kind=SourceKind.EMAIL,
            platform="mbox",
            location=str(path),
            records=_mbox_records(path, ctx),
            title=path.name,
        )


class MaildirConnector:
    name = "maildir"

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]:
        folder = _folder_name(path)
        yield SourceStream(
            scope=ctx.scope_for(f"maildir:{folder}"),
            kind=SourceKind.EMAIL,
            platform="maildir",
            location=str(path),
            records=_maildir_records(path, ctx),
            title=folder,
        )


class EmlConnector:
    name = "eml"

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]:
        name = path.stem if path.is_file() else _folder_name(path)
        yield SourceStream(
            scope=ctx.scope_for(f"email:{name}"),
            kind=SourceKind.EMAIL,
            platform="eml",
            location=str(path),
            records=_eml_records(path, ctx),
            title=name,
        )


# --------------------------------------------------------------------------- detection


def detect_mbox(path: Path) -> int:
    try:
        if not path.is_file():
            return 0
        with path.open("rb") as handle:
            first = handle.readline(1024)
    except OSError:
        return 0
    if path.suffix.lower() == ".mbox" or _FROM_LINE.match(first, 0, _FROM_LINE_LIMIT):
        return 80
    # "From " without a date may still be mail, but a text note can start that way too.
    return 40 if first.startswith(b"From ") else 0


def detect_maildir(path: Path) -> int:
    try:
        if not path.is_dir():
            return 0
        if _is_maildir(path):
            return 90
        folders = [child for child in path.iterdir() if child.is_dir()]
        folders = [child for child in folders if not child.name.startswith(".")]
        mailboxes = all(_is_maildir(child) for child in folders)
    except OSError:
        return 0
    # Only a folder holding nothing but Maildirs: a workspace with one inside is not one.
    return 70 if folders and mailboxes else 0


def detect_eml(path: Path) -> int:
    try:
        if path.is_file():
            return 90 if path.suffix.lower() == ".eml" else 0
        if not path.is_dir():
            return 0
        names = [entry.name for entry in os.scandir(path) if entry.is_file()]
    except OSError:
        return 0
    names = [name for name in names if not name.startswith(".")]
    emls = sum(1 for name in names if name.lower().endswith(".eml"))
    return 70 if emls and emls * 2 > len(names) else 0


register("mbox", MboxConnector, detect_mbox, "an mbox mailbox file (one file, many messages)")
register("maildir", MaildirConnector, detect_maildir, "a Maildir folder (cur/, new/, sub-folders)")
register("eml", EmlConnector, detect_eml, "a .eml message file, or a folder of them")
