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

Folders of mbox files. Mailing-list archives come as one mbox per month (``2001-November.txt``,
any extension or none), so a folder is read as mbox when most of its visible files start with
an mbox ``From `` line (or end in ``.mbox``) and it holds no Maildir or ``.eml`` file. Sub-folders
are walked; hidden files and folders are passed over, and so is a Maildir inside (reported).
Each file is one source, scoped ``mbox:<folder>/<path in it without suffix>``
(``mbox:lkml/2001-November``, ``mbox:lkml/old/2000-May``): the folder's name keeps the same
month of two lists apart; where two files would share a scope (``a.txt`` and ``a.mbox``) both
keep their suffix. A single file keeps its scope ``mbox:<stem>``. With a scope override
(``--scope``) the whole folder is one source, its files read in sorted path order. Every
message of a folder carries ``meta["file"]``, its file's path in the folder, and the sources of
one folder share one thread map, so a thread that crosses a month boundary stays one thread.
Files that are not mbox are reported and skipped; a folder without any mbox file (a Maildir
given as ``--format mbox``, a folder of notes) fails with one line naming it.

Maildir++. A Maildir whose hidden sub-folders are Maildirs (``.Sent``, ``.Lists.dev``, each
with ``cur/`` or ``new/``, usually a ``maildirfolder`` file) is one source per folder:
``maildir:<name>`` for the root's own messages (with any plain sub-folder such as ``foo/``),
``maildir:<name>/Sent`` and ``maildir:<name>/Lists.dev`` for the others. The scope is the
folder's name without its leading dot; Maildir++ writes the hierarchy with dots, and
``.Lists.dev`` stays ``Lists.dev``, not ``Lists/dev``. With ``--scope`` the tree is one source.
Either way records are the same: ``meta["file"]`` and ``meta["folder"]`` are relative to the
tree's root (``""`` for the root, ``.Sent`` for the others), and threads are resolved over the
whole tree in Date order before any source is read, so a reply in ``.Sent`` joins a thread
whose root is in the inbox. A plain Maildir, and a folder of Maildirs, is one source
``maildir:<name>``; each record's ``meta["folder"]`` names its sub-folder.

Bounds. A message larger than ``ReadContext.max_item_bytes`` is reported and skipped without
being held (an mbox is read line by line, an over-long line never held whole); FIFOs, devices
and sockets in a Maildir or folder of ``.eml`` files are reported, never opened for reading. A
message that fails in any way is reported with its place (``message 3 (line 120)`` in an mbox,
``file`` for one message per file, with ``<message-id>`` when known) and the rest go on.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
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
from stratamem.ingest.model import (
    ReadContext,
    Record,
    SourceStream,
    capped_lines,
    clean_text,
    describe_failure,
    irregular,
    open_failure,
    open_regular,
    read_item,
    to_utc,
)
from stratamem.ingest.registry import ConnectorSpec
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
    size: int = 0

    def add(self, line: bytes | int, limit: int) -> None:
        """Keep ``line`` while the message stays within ``limit`` bytes; past it, only count."""
        self.size += line if isinstance(line, int) else len(line)
        if self.size > limit:
            self.lines.clear()
        elif isinstance(line, bytes):
            self.lines.append(line)

    @property
    def where(self) -> str:
        return f"message {self.index} (line {self.line})"

    def raw(self, shown: str) -> _RawMessage:
        return _RawMessage(
            b"".join(self.lines),
            shown,
            self.where,
            {"index": self.index, "line": self.line, "offset": self.offset},
        )


def _mbox_messages(path: Path, ctx: ReadContext) -> Iterator[_RawMessage]:
    """Messages of an mbox file, one at a time; only the current message is held in memory.

    A separator is a ``From `` line carrying a time and a year, as mutt requires, so an
    unescaped "From the start..." in a body does not split a message. ``>From `` lines are
    unescaped (mboxrd). A message over ``ctx.max_item_bytes`` is reported, not yielded.
    """
    shown = clean_text(str(path))
    limit = ctx.max_item_bytes
    current: _MboxMessage | None = None
    offset = 0
    try:
        handle = open_regular(path)
    except OSError as exc:
        raise SourceFormatError(shown, "file", open_failure(path, exc)) from None
    with handle:
        for number, line in enumerate(capped_lines(handle, limit), start=1):
            if current is None:
                current = _first_message(shown, line, number, offset)
            elif isinstance(line, int):
                current.add(line, limit)
            elif line.startswith(b"From ") and _FROM_LINE.match(line, 0, _FROM_LINE_LIMIT):
                yield from _finished(current, shown, ctx)
                current = _MboxMessage(current.index + 1, number, offset)
            elif line[:1] == b">" and _ESCAPED_FROM.match(line):
                current.add(line[1:], limit)
            else:
                current.add(line, limit)
            offset += line if isinstance(line, int) else len(line)
    if current is not None:
        yield from _finished(current, shown, ctx)


def _finished(message: _MboxMessage, shown: str, ctx: ReadContext) -> Iterator[_RawMessage]:
    if ctx.too_large(message.size):
        ctx.skip(shown, message.where, ctx.size_reason(message.size))
    else:
        yield message.raw(shown)


def _first_message(shown: str, line: bytes | int, number: int, offset: int) -> _MboxMessage | None:
    """The message the first non-blank line opens, or a :class:`SourceFormatError`."""
    if isinstance(line, int):
        raise SourceFormatError(shown, f"line {number}", "not an mbox file (no 'From ' line)")
    if not line.strip():
        return None
    if line.startswith(b"From "):
        return _MboxMessage(1, number, offset)
    if _FIRST_HEADER.match(line):
        # A single message saved without the mbox envelope line: still mail.
        return _MboxMessage(1, number, offset, [line])
    raise SourceFormatError(shown, f"line {number}", "not an mbox file (no 'From ' line)")


def _mbox_records(path: Path, ctx: ReadContext) -> Iterator[Record]:
    if not path.is_file():
        reason = irregular(path) if path.exists() else None
        raise SourceFormatError(clean_text(str(path)), "file", reason or "not a file")
    yield from _records(_mbox_messages(path, ctx), ctx)


# --------------------------------------------------------------------------- mbox folders


# Folders are detected from the first files of a sorted walk; each costs one open and read.
_FOLDER_SAMPLE = 50
# Blank lines read past before a file's first line is taken as its first line.
_SNIFF_LINES = 16
_GZIP_MAGIC = b"\x1f\x8b"
_GZIPPED = "compressed with gzip; decompress it to read it as mbox"


def _first_line(path: Path) -> bytes:
    """The first non-blank line of a regular file (at most :data:`_FROM_LINE_LIMIT` bytes,
    within its first :data:`_SNIFF_LINES` lines), or ``b""`` for an empty or unreadable one."""
    try:
        with open_regular(path) as handle:
            for _ in range(_SNIFF_LINES):
                line = handle.readline(_FROM_LINE_LIMIT)
                if line.strip() or not line:
                    return line
    except OSError:
        pass
    return b""


def _is_mbox_file(path: Path) -> bool:
    """An ``.mbox`` file, or one whose first line is an mbox ``From `` separator."""
    return path.suffix.lower() == ".mbox" or bool(_FROM_LINE.match(_first_line(path)))


def _not_mbox_reason(path: Path) -> str:
    if _first_line(path).startswith(_GZIP_MAGIC):
        return _GZIPPED
    return "not an mbox file (no 'From ' line); skipped"


def _mbox_folder_walk(
    root: Path, unreadable: list[OSError] | None = None
) -> Iterator[tuple[Path, bool]]:
    """(path, is a Maildir) of the folder's visible files and of the Maildirs in it, in sorted
    order; a Maildir is not entered (``root`` itself may be one), nor a hidden folder. Raises
    ``OSError`` when ``root`` cannot be listed; a sub-folder that cannot be is passed over and
    its error added to ``unreadable``."""
    if _is_maildir(root):
        yield root, True
        return

    def failed(exc: OSError) -> None:
        if exc.filename is not None and Path(exc.filename) == root:
            raise exc
        if unreadable is not None:
            unreadable.append(exc)

    for dirpath, dirnames, filenames in os.walk(root, onerror=failed):
        here = Path(dirpath)
        boxes = sorted(name for name in dirnames if _is_maildir(here / name))
        dirnames[:] = sorted(
            name for name in dirnames if not name.startswith(".") and name not in boxes
        )
        for name in boxes:
            if not name.startswith("."):
                yield here / name, True
        for name in sorted(filenames):
            if not name.startswith("."):
                yield here / name, False


def _detect_mbox_folder(path: Path) -> int:
    """65 for a folder whose sampled files are mostly mbox files and that holds no Maildir or
    ``.eml`` file: above a folder of ``.txt`` notes (60), below a Maildir (70, 90), a folder
    of ``.eml`` files (70) and a Markdown vault (75)."""
    mailboxes = others = 0
    for file, is_maildir in _mbox_folder_walk(path):
        if is_maildir or file.suffix.lower() == ".eml":
            return 0
        if _is_mbox_file(file):
            mailboxes += 1
        else:
            others += 1
        if mailboxes + others >= _FOLDER_SAMPLE:
            break
    return 65 if mailboxes > others else 0


_Skipped = tuple[str, str, str]  # path as shown, place, reason: the arguments of ReadContext.skip


def _mbox_folder_files(root: Path) -> tuple[list[Path], list[_Skipped]]:
    """The mbox files under ``root`` in sorted path order, and what else is there."""
    found: list[Path] = []
    skipped: list[_Skipped] = []
    unreadable: list[OSError] = []
    try:
        for path, is_maildir in _mbox_folder_walk(root, unreadable):
            shown = clean_text(str(path))
            if is_maildir:
                skipped.append((shown, "folder", "a Maildir; ingest it with --format maildir"))
                continue
            not_regular = irregular(path)
            if not_regular is not None:
                skipped.append((shown, "file", not_regular))
            elif _is_mbox_file(path):
                found.append(path)
            else:
                skipped.append((shown, "file", _not_mbox_reason(path)))
    except OSError as exc:
        raise SourceFormatError(clean_text(str(root)), "", open_failure(root, exc)) from None
    for error in unreadable:
        folder = error.filename if error.filename is not None else root
        skipped.append((clean_text(str(folder)), "folder", open_failure(folder, error)))
    return sorted(found, key=lambda file: file.relative_to(root).parts), skipped


def _no_mailbox_reason(root: Path, skipped: list[_Skipped]) -> str:
    """Why a folder without an mbox file cannot be read, in one line."""
    if _is_maildir(root):
        return "a Maildir, not a folder of mbox files; ingest it with --format maildir"
    reason = "no mbox file in this folder (none of its visible files starts with a 'From ' line)"
    compressed = sum(1 for _, _, why in skipped if why == _GZIPPED)
    if compressed:
        reason += f"; {compressed} gzip-compressed file(s): decompress them to read them"
    return reason


def _no_mailbox(root: Path, reason: str) -> Iterator[Record]:
    """Records that fail at once, so that the folder's source fails as a file that is not mbox
    does: with one line naming it."""
    raise SourceFormatError(clean_text(str(root)), "", reason)
    yield  # a generator: the error comes when the records are read


def _mbox_folder_keys(root: Path, files: list[Path]) -> list[str]:
    """Each file's part of its scope: its path in ``root`` without the suffix, or with it
    where two files would otherwise share a scope."""
    names = [file.relative_to(root).as_posix() for file in files]
    stems = [file.relative_to(root).with_suffix("").as_posix() for file in files]
    counts = Counter(stems)
    taken = set(names)
    return [
        stem if counts[stem] == 1 and (stem == name or stem not in taken) else name
        for name, stem in zip(names, stems, strict=True)
    ]


def _mbox_folder_records(
    root: Path, files: list[Path], threads: _Threads, ctx: ReadContext
) -> Iterator[Record]:
    """The messages of ``files`` (all under ``root``), in order, as one stream."""
    messages = (raw for file in files for raw in _mbox_folder_messages(root, file, ctx))
    yield from _records(messages, ctx, threads)


def _mbox_folder_messages(root: Path, file: Path, ctx: ReadContext) -> Iterator[_RawMessage]:
    """The messages of one mbox file of a folder, each with ``meta["file"]``; a file that turns
    out not to be mbox (an ``.mbox`` name on other content) is reported, not fatal."""
    relative = clean_text(file.relative_to(root).as_posix())
    try:
        for raw in _mbox_messages(file, ctx):
            yield replace(raw, meta={**raw.meta, "file": relative})
    except SourceFormatError as exc:
        ctx.skip(exc.path, exc.where, exc.reason)


def _mbox_folder_streams(root: Path, ctx: ReadContext) -> Iterator[SourceStream]:
    folder = _folder_name(root)
    files, skipped = _mbox_folder_files(root)
    if files:
        # Without any mbox file the source's one-line failure says it all, not a line a file.
        for shown, where, reason in skipped:
            ctx.skip(shown, where, reason)
    threads = _Threads()
    if ctx.scope is not None or not files:
        yield SourceStream(
            scope=ctx.scope_for(f"mbox:{folder}"),
            kind=SourceKind.EMAIL,
            platform="mbox",
            location=str(root),
            records=(
                _mbox_folder_records(root, files, threads, ctx)
                if files
                else _no_mailbox(root, _no_mailbox_reason(root, skipped))
            ),
            title=folder,
            meta={"files": len(files)},
        )
    else:
        for file, key in zip(files, _mbox_folder_keys(root, files), strict=True):
            yield SourceStream(
                scope=f"mbox:{folder}/{key}",
                kind=SourceKind.EMAIL,
                platform="mbox",
                location=str(file),
                records=_mbox_folder_records(root, [file], threads, ctx),
                title=file.relative_to(root).as_posix(),
            )


# --------------------------------------------------------------------------- files


_MAILDIR_META = frozenset({"maildirfolder", "subscriptions", "courierimapuiddb"})
_HEADER_SIZE_LIMIT = 256 * 1024


def _is_maildir(path: Path) -> bool:
    return (path / "cur").is_dir() or (path / "new").is_dir()


def _looks_like_mail(path: Path) -> bool:
    try:
        with open_regular(path) as handle:
            return bool(_HEADER_LINE.match(handle.readline(1024)))
    except OSError:
        return False


def _maildir_files(root: Path, ctx: ReadContext) -> list[Path]:
    """Every message under a Maildir and its sub-folders (``foo/``, Maildir++ ``.Sent/``).

    Files in ``cur/`` and ``new/`` are messages; loose files elsewhere count only when they
    start like mail, since some archives (notmuch's test corpus) keep messages there too.
    What is not a regular file is reported where a message would be, else passed over.
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
            not_regular = irregular(file)
            if not_regular is not None:
                if in_box:
                    ctx.skip(clean_text(str(file)), "file", not_regular)
            elif in_box or _looks_like_mail(file):
                found.append(file)
    return found


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


def _maildir_records(path: Path, ctx: ReadContext) -> Iterator[Record]:
    if not path.is_dir():
        raise SourceFormatError(clean_text(str(path)), "file", "not a Maildir folder")
    files = _maildir_files(path, ctx)
    yield from _records(_file_messages(files, path, ctx, folders=True), ctx)


def _maildirpp_folders(root: Path) -> list[str]:
    """The Maildir++ folders of ``root`` (``.Sent``, ``.Lists.dev``: hidden sub-folders that
    are Maildirs), sorted; none unless ``root`` is itself a Maildir."""
    try:
        if not _is_maildir(root):
            return []
        names = [entry.name for entry in os.scandir(root) if entry.name.startswith(".")]
        return sorted(name for name in names if _is_maildir(root / name))
    except OSError:  # the source reports it when its records are read
        return []


class _MaildirTree:
    """A Maildir++ tree read as one source per folder.

    On the first read of any folder the whole tree is listed and the header block of every
    message read once: messages are put in Date order over the tree and their threads
    resolved in that order, before any is parsed. A reply in ``.Sent`` thus joins a thread
    whose root lies in a folder read later, and every record gets the thread it gets when
    the tree is read as one source (``--scope``). A message without a Message-ID, named by
    its content hash only once read, stands in the map under a key no header can hold.
    """

    def __init__(self, root: Path, folders: list[str], ctx: ReadContext) -> None:
        self.root = root
        self.folders = frozenset(folders)
        self.ctx = ctx
        self.threads = _Threads()
        self._files: dict[str, list[tuple[Path, str | None]]] | None = None

    def records(self, folder: str) -> Iterator[Record]:
        """The records of ``folder`` (``""`` for the root's own messages), in Date order."""
        if self._files is None:
            self._files = self._read()
        files = self._files.pop(folder, [])
        messages = (
            _file_message(file, self.root, self.ctx, folders=True, thread=thread)
            for file, thread in files
        )
        yield from _records((raw for raw in messages if raw is not None), self.ctx, self.threads)

    def _read(self) -> dict[str, list[tuple[Path, str | None]]]:
        dated: list[tuple[tuple[bool, datetime, str], Path, str | None, list[str]]] = []
        for file in _maildir_files(self.root, self.ctx):
            headers = _headers(file)
            date = own = None
            chain: list[str] = []
            if headers is not None:
                try:
                    date = _parse_date(headers.get("Date"))
                    own = next(iter(_message_ids(headers.get("Message-ID"))), None)
                    chain = _ancestors(headers)[2]
                except Exception:  # the message reports itself when it is parsed
                    pass
            relative = _relative(file, self.root)
            dated.append(((date is None, date or _EPOCH, relative), file, own, chain))
        dated.sort(key=lambda item: item[0])
        files: dict[str, list[tuple[Path, str | None]]] = {}
        for number, (_, file, own, chain) in enumerate(dated):
            key = own or f"\0{number}"
            root = self.threads.resolve(key, chain)
            top = file.relative_to(self.root).parts[0]
            folder = top if top in self.folders else ""
            files.setdefault(folder, []).append((file, None if root == key and not own else root))
        return files


def _eml_files(path: Path, ctx: ReadContext) -> list[Path]:
    if path.is_file():
        return [path]
    found: list[Path] = []
    for child in sorted(path.iterdir()):
        if child.suffix.lower() != ".eml" or child.is_dir():
            continue
        not_regular = irregular(child)
        if not_regular is None:
            found.append(child)
        else:
            ctx.skip(clean_text(str(child)), "file", not_regular)
    return found


def _eml_records(path: Path, ctx: ReadContext) -> Iterator[Record]:
    shown = clean_text(str(path))
    if not path.exists():
        raise SourceFormatError(shown, "file", "no such file or directory")
    if not path.is_file() and not path.is_dir():
        raise SourceFormatError(shown, "file", irregular(path) or "not a file or folder")
    try:
        files = _eml_files(path, ctx)
    except OSError as exc:
        raise SourceFormatError(shown, "file", open_failure(path, exc)) from None
    yield from _records(_file_messages(files, path, ctx), ctx)


# --------------------------------------------------------------------------- connectors


def _folder_name(path: Path) -> str:
    return path.resolve().name or str(path)


class MboxConnector:
    name = "mbox"

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]:
        if path.is_dir():
            yield from _mbox_folder_streams(path, ctx)
            return
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
        name = _folder_name(path)
        folders = _maildirpp_folders(path) if ctx.scope is None else []
        if not folders:
            yield SourceStream(
                scope=ctx.scope_for(f"maildir:{name}"),
                kind=SourceKind.EMAIL,
                platform="maildir",
                location=str(path),
                records=_maildir_records(path, ctx),
                title=name,
            )
            return
        tree = _MaildirTree(path, folders, ctx)
        for folder in ["", *folders]:
            sub = clean_text(folder[1:])
            yield SourceStream(
                scope=f"maildir:{name}/{sub}" if sub else f"maildir:{name}",
                kind=SourceKind.EMAIL,
                platform="maildir",
                location=str(path / folder) if folder else str(path),
                records=tree.records(folder),
                title=sub or name,
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
    """80 for an mbox file (``.mbox``, or a first line that is a ``From `` separator), 40 for
    a file that starts with ``From `` alone, 65 for a folder of mbox files."""
    try:
        if path.is_dir():
            return _detect_mbox_folder(path)
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


MBOX = ConnectorSpec(
    "mbox",
    MboxConnector,
    detect_mbox,
    "an mbox mailbox file (one file, many messages), or a folder of them",
)
MAILDIR = ConnectorSpec(
    "maildir", MaildirConnector, detect_maildir, "a Maildir folder (cur/, new/, sub-folders)"
)
EML = ConnectorSpec("eml", EmlConnector, detect_eml, "a .eml message file, or a folder of them")
