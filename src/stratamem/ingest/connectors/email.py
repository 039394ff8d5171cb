"""Mail messages as records: what the mail connectors share.

The connectors are :mod:`~stratamem.ingest.connectors.mbox` (mbox files and folders of them),
:mod:`~stratamem.ingest.connectors.maildir` (Maildir and Maildir++) and
:mod:`~stratamem.ingest.connectors.eml` (``.eml`` files). Each message becomes one
:class:`Record`; its body is split into new text, quoted replies and signature by
:mod:`stratamem.ingest.connectors.mailbody`, and the headers and threading are done here, as is
the reading of mailboxes that hold one message per file (Maildir, ``.eml``), in Date order.

Threads are resolved over all the messages of a mailbox before any record is made: a first pass
reads only the header blocks (Message-ID, References, In-Reply-To), so a message's thread is the
same whatever order its mailbox holds the messages in (newest first, shuffled, split over
files). The rule is in :class:`_Threads`.

Bounds. A message that fails in any way is reported with its place (``message 3 (line 120)`` in
an mbox, ``file`` for one message per file, with ``<message-id>`` when known) and the rest go
on. A message file larger than ``ReadContext.max_item_bytes`` is reported and skipped without
being held; multiparts nested too deep, or too many of them, are refused before parsing.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email import message_from_bytes
from email.message import Message
from email.parser import BytesHeaderParser
from email.policy import compat32
from email.utils import getaddresses, parsedate_to_datetime
from pathlib import Path
from typing import Any

from stratamem.ingest.connectors.mailbody import (
    _HEADER_TEXT_LIMIT,
    _body_parts,
    _clean,
    _header_text,
)
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


# One address, loosely: no dotted domain needed (root@localhost). It starts where a run of
# address characters starts, so a long run without "@" is tried once, not once per character.
_MAILBOX = re.compile(r'(?<![^\s<>(),;:"\[\]])[^\s@<>(),;:"\[\]]+@[^\s@<>(),;:"\[\]]+')
# Pipermail hides addresses as "thorsten.hertel at example.com".
_AT_WORD = re.compile(r"(?<![\w.+-])([\w.+-]+) at ([\w-]+(?:\.[\w-]+)+)(?![\w.-])")
# What is left of a From header once its address is taken out: brackets, parentheses, quotes.
_NAME_PUNCTUATION = re.compile(r'[<>()\[\]"]+|\s+')


def _sender(msg: Message) -> tuple[str, str]:
    """(display name, lowercased address) of the From header; ``("", "")`` without one.

    Besides ``Name <addr>``, archives write ``addr (Name)``, ``Name addr`` without brackets,
    ``Last, First <addr>`` without quotes, ``addr <addr>`` and pipermail's ``name at host``.
    A name that is only an address again is no name.
    """
    value = msg.get("From")
    if value is None:
        return "", ""
    # Split on the raw value: a decoded name may hold a comma ("Diaz, Carol").
    text = value[:_HEADER_TEXT_LIMIT] if isinstance(value, str) else _header_text(value)
    text = _clean(text)
    if "@" not in text:
        text = _AT_WORD.sub(r"\1@\2", text)
    pairs = [(name, address.strip()) for name, address in getaddresses([text])]
    pairs = [(name, address) for name, address in pairs if name or address]
    display, address = pairs[0] if pairs else ("", "")
    if not _MAILBOX.fullmatch(address):
        # Not one mailbox to the parser: the first address in the text, the rest its name.
        found = _MAILBOX.search(text)
        if found is not None:
            address = found.group()
            display = _NAME_PUNCTUATION.sub(" ", text[: found.start()] + " " + text[found.end() :])
        else:  # a name alone; a group ("undisclosed-recipients:;") names no one
            address = ""
            display = "" if ":" in text else _NAME_PUNCTUATION.sub(" ", text)
    display = _header_text(display).strip("\"' ")
    if _MAILBOX.fullmatch(display) or display.lower() == address.lower():
        display = ""
    return display, address.lower()


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


_Entry = tuple[str | None, tuple[str, ...]]  # a message's own id and its chain of ancestors


class _Threads:
    """The thread of each message of a mailbox, resolved over all of its messages at once.

    Every message's headers are added (:meth:`add`, or the ``scan`` given, run on the first
    :meth:`thread`) before any thread is asked for, so the answer does not depend on the order
    the messages come in. JWZ's threading, made order-free:

    - The **parent** of a message is the last id of its own chain (References, then
      In-Reply-To). An id no message's own chain gives a parent (an id only named, or a message
      whose headers name none, as list servers strip them) takes the id before it in the chains
      of the messages that name it: the one most of them give, then the smallest.
    - The **thread** is the root reached by following parents: an id without a parent, which
      may be a message missing from the mailbox. Where parents loop, the loop's smallest id.
    - Ids without ``@`` (the ``<yes>`` some clients write) count only where a message holds
      them as its Message-ID.
    """

    def __init__(self, scan: Callable[[], Iterable[_Entry]] | None = None) -> None:
        self._scan = scan
        self._entries: list[_Entry] = []
        self._held: set[str] = set()
        # One string per id, however many chains name it: a long thread names its root in
        # every message.
        self._ids: dict[str, str] = {}
        self._roots: dict[str, str] | None = None

    def add(self, own: str | None, chain: Iterable[str]) -> None:
        """Note a message: its Message-ID (None without one) and its chain, oldest first."""
        if own is not None:
            own = self._ids.setdefault(own, own)
            self._held.add(own)
        self._entries.append((own, tuple(self._ids.setdefault(ref, ref) for ref in chain)))
        self._roots = None

    def thread(self, own: str, chain: Iterable[str]) -> str:
        """The thread of the message ``own`` (its id, or its content hash), whose chain is
        ``chain``: its root's id."""
        roots = self._resolved()
        if own in self._held:
            return roots.get(own, own)
        links = self._links(own, chain)
        return roots.get(links[-1], links[-1]) if links else own

    def _links(self, own: str | None, chain: Iterable[str]) -> list[str]:
        """The chain's ids that count, without repeats and without ``own``."""
        return [
            ref for ref in dict.fromkeys(chain) if ref != own and ("@" in ref or ref in self._held)
        ]

    def _resolved(self) -> dict[str, str]:
        if self._scan is not None:
            scan, self._scan = self._scan, None
            for own, chain in scan():
                self.add(own, chain)
        if self._roots is None:
            self._roots = _roots(self._parents())
        return self._roots

    def _parents(self) -> dict[str, str]:
        own_votes: dict[str, Counter[str]] = defaultdict(Counter)
        named_votes: dict[str, Counter[str]] = defaultdict(Counter)
        for own, chain in self._entries:
            links = self._links(own, chain)
            if own is not None and links:
                own_votes[own][links[-1]] += 1
            for before, after in itertools.pairwise(links):
                named_votes[after][before] += 1
        parents = {ref: _most_named(votes) for ref, votes in named_votes.items()}
        parents.update((ref, _most_named(votes)) for ref, votes in own_votes.items())
        return parents


def _most_named(votes: Counter[str]) -> str:
    """The id named most often; of several, the smallest."""
    return min(votes, key=lambda ref: (-votes[ref], ref))


def _roots(parents: dict[str, str]) -> dict[str, str]:
    """The root of every id that has a parent, following ``parents``; where they loop, the
    loop's smallest id. Ids without a parent are their own root and are not listed."""
    roots: dict[str, str] = {}
    for start in parents:
        path: dict[str, None] = {}
        ref = start
        while ref not in roots and ref in parents and ref not in path:
            path[ref] = None
            ref = parents[ref]
        if ref in roots:
            root = roots[ref]
        elif ref in path:
            loop = list(path)
            root = min(loop[loop.index(ref) :])
        else:
            root = ref
        for seen in path:
            roots[seen] = root
    return roots


def _thread_entry(headers: Message) -> _Entry:
    """What :class:`_Threads` needs of a message's headers."""
    own = next(iter(_message_ids(headers.get("Message-ID"))), None)
    return own, tuple(_ancestors(headers)[2])


@dataclass(frozen=True, slots=True)
class _RawMessage:
    """The bytes of one message and where it came from, for refs and problem reports.

    ``path`` is the file as problems and refs name it; ``where`` the place of the message in
    it (``message 3 (line 120)``), or ``file`` for a file that holds one message.
    """

    data: bytes
    path: str
    where: str = "file"
    meta: dict[str, Any] = field(default_factory=dict)


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
    :class:`_Threads` takes."""
    in_reply_to = next(iter(_message_ids(msg.get("In-Reply-To"))), None)
    references = [ref for value in msg.get_all("References") or [] for ref in _message_ids(value)]
    chain = references + ([in_reply_to] if in_reply_to and in_reply_to not in references else [])
    return references, in_reply_to, chain


def _parse(raw: _RawMessage, msg: Message, own_ids: list[str], threads: _Threads) -> Record:
    message_id = own_ids[0] if own_ids else None
    record_id = message_id or "sha256:" + hashlib.sha256(raw.data).hexdigest()[:32]
    references, in_reply_to, chain = _ancestors(msg)
    reply_to = in_reply_to or (references[-1] if references else None)

    name, address = _sender(msg)
    to = _address_list(msg, "To")
    cc = _address_list(msg, "Cc")
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
        thread=threads.thread(record_id, chain),
        reply_to=reply_to,
        title=_header_text(msg.get("Subject")) or None,
        recipients=tuple(dict.fromkeys(to + cc)),
        quoted=quoted,
        signature=signature,
        meta=meta,
    )


def _records(
    messages: Iterable[_RawMessage], ctx: ReadContext, threads: _Threads
) -> Iterator[Record]:
    """The records of ``messages``; ``threads`` must know every one of them by the time the
    first is parsed."""
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
                # The block ends at an empty line, where the parser of the whole message ends
                # it: a line of spaces continues the header before it.
                if line[:1] in (b"", b"\n", b"\r"):
                    break
                head += line
        return BytesHeaderParser(policy=compat32).parsebytes(bytes(head))
    except Exception:  # only the order and threads depend on it; the message reports itself
        return None


_EPOCH = datetime(1, 1, 1, tzinfo=UTC)

_Place = tuple[bool, datetime, str]  # undated, Date, path: the reading order of message files


def _file_place(file: Path, root: Path, threads: _Threads) -> _Place:
    """Where a message file is read among the others (by Date, then by path; undated ones
    last), reading only its header block; its headers are added to ``threads``."""
    headers = _headers(file)
    date = None
    if headers is not None:
        try:
            date = _parse_date(headers.get("Date"))
            threads.add(*_thread_entry(headers))
        except Exception:  # only the order and threads depend on it; the message reports itself
            pass
    return (date is None, date or _EPOCH, _relative(file, root))


def _relative(file: Path, root: Path) -> str:
    return file.relative_to(root).as_posix() if root != file else file.name


def _file_records(
    files: list[Path], root: Path, ctx: ReadContext, *, folders: bool = False
) -> Iterator[Record]:
    """The records of message files, in Date order, threaded over all of them."""
    threads = _Threads()
    ordered = sorted(files, key=lambda file: _file_place(file, root, threads))
    messages = (_file_message(file, root, ctx, folders=folders) for file in ordered)
    yield from _records((raw for raw in messages if raw is not None), ctx, threads)


def _file_message(
    file: Path, root: Path, ctx: ReadContext, *, folders: bool = False
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
    return _RawMessage(data, shown, "file", meta)


def _folder_name(path: Path) -> str:
    return path.resolve().name or str(path)
