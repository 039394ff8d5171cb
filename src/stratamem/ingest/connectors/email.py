"""Mail connectors: mbox files, Maildir folders and ``.eml`` files.

Each message becomes one :class:`Record` whose ``text`` is what its author wrote new: quoted
replies (``> ...`` blocks with their "On ... wrote:" line, Outlook "Original Message" tails) go
to ``quoted`` and the part after a ``-- `` line goes to ``signature``, so a thread of replies
does not index the same paragraph ten times. Inline patches are body text and stay in ``text``.

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
from email.errors import HeaderParseError
from email.header import Header, decode_header
from email.message import Message
from email.parser import BytesHeaderParser
from email.policy import compat32
from email.utils import getaddresses, parsedate_to_datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from stratamem.errors import SourceFormatError
from stratamem.ingest.model import ReadContext, Record, SourceStream, to_utc
from stratamem.ingest.registry import register
from stratamem.types import SourceKind

# --------------------------------------------------------------------------- decoding


def _decode_bytes(data: bytes, charset: str | None) -> str:
    """The declared charset, else UTF-8, else Latin-1, which decodes any byte string.

    Unknown or bogus charset names (``unknown-8bit``, ``x-user-defined``) fall through.
    """
    for candidate in (charset, "utf-8"):
        if not candidate:
            continue
        try:
            return data.decode(candidate)
        except (LookupError, ValueError):
            continue
    return data.decode("latin-1")


def _clean(text: str) -> str:
    """Undo the surrogate escapes the stdlib parser uses for raw 8-bit headers.

    Lone surrogates cannot be stored (SQLite rejects them), so they are turned back into bytes
    and decoded properly.
    """
    if any("\udc80" <= ch <= "\udcff" for ch in text):
        text = _decode_bytes(text.encode("utf-8", "surrogateescape"), "utf-8")
    return text.replace("\x00", "")


def _header_text(value: object) -> str:
    """A header as readable text: RFC 2047 words decoded in any charset, folding undone."""
    if value is None:
        return ""
    source: str | Header = value if isinstance(value, Header) else str(value)
    try:
        text = _join_decoded(decode_header(source))
    except (HeaderParseError, ValueError, LookupError):
        # One malformed encoded word: decode the others one by one, keep it raw.
        text = _ENCODED_WORD.sub(_decode_word, str(source))
    return " ".join(_clean(text).split())


_ENCODED_WORD = re.compile(r"=\?[^?\s]+\?[bBqQ]\?[^?\s]*\?=")


def _join_decoded(pieces: list[tuple[bytes | str, str | None]]) -> str:
    return "".join(
        piece if isinstance(piece, str) else _decode_bytes(piece, charset)
        for piece, charset in pieces
    )


def _decode_word(match: re.Match[str]) -> str:
    try:
        return _join_decoded(decode_header(match.group(0)))
    except (HeaderParseError, ValueError, LookupError):
        return match.group(0)


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


# --------------------------------------------------------------------------- HTML


class _HtmlText(HTMLParser):
    """Readable text from HTML: block tags break lines, blockquotes become ``> `` lines."""

    _BREAK = frozenset(
        {"br", "div", "tr", "li", "dt", "dd", "hr", "table", "ul", "ol", "section", "article"}
    )
    _PARAGRAPH = frozenset({"p", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote"})
    _SKIP = frozenset({"script", "style", "title", "noscript", "template"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = []
        self._current: list[str] = []
        self._skipping = 0
        self._pre = 0
        self._quote = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self._skipping += 1
        elif tag in self._PARAGRAPH:
            self._paragraph()
        elif tag in self._BREAK:
            self._flush()
        if tag == "li":
            self._current.append("- ")
        elif tag == "td" or tag == "th":
            self._current.append(" ")
        elif tag == "pre":
            self._pre += 1
        elif tag == "blockquote":
            self._quote += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP:
            self._skipping = max(0, self._skipping - 1)
        elif tag in self._PARAGRAPH:
            self._paragraph()
        elif tag in self._BREAK:
            self._flush()
        if tag == "pre":
            self._pre = max(0, self._pre - 1)
        elif tag == "blockquote":
            self._quote = max(0, self._quote - 1)

    def handle_data(self, data: str) -> None:
        if self._skipping:
            return
        if not self._pre:
            self._current.append(re.sub(r"\s+", " ", data))
            return
        first, *rest = data.split("\n")
        self._current.append(first)
        for line in rest:
            self._flush(keep_spaces=True)
            self._current.append(line)

    def _flush(self, *, keep_spaces: bool = False) -> None:
        text = "".join(self._current)
        text = text.rstrip() if keep_spaces or self._pre else text.strip()
        self._current = []
        if text:
            self.lines.append("> " * self._quote + text)
        elif keep_spaces:
            self.lines.append("")

    def _paragraph(self) -> None:
        self._flush()
        if self.lines and self.lines[-1] != "":
            self.lines.append("")

    def text(self) -> str:
        self.close()
        self._flush()
        return re.sub(r"\n{3,}", "\n\n", "\n".join(self.lines)).strip("\n")


def html_to_text(markup: str) -> str:
    """Readable plain text from an HTML mail body (scripts and styles dropped)."""
    parser = _HtmlText()
    parser.feed(markup)
    return parser.text()


# --------------------------------------------------------------------------- quotes


_ATTRIBUTION = re.compile(
    r"(wrote|writes|said|schrieb|a écrit|escribió|ha scritto|skrev|kirjoitti)\s*:\s*$",
    re.IGNORECASE,
)
_ATTRIBUTION_OPENERS = ("On ", "Am ", "Le ", "El ", "Il ")
# Where an Outlook-style tail begins: the whole rest is the old message.
_OUTLOOK_TAIL = re.compile(
    r"^[ \t]*-{2,}[ \t]*(original message|ursprüngliche nachricht|message d'origine)[ \t]*-{2,}"
    r"[ \t]*$|^_{20,}[ \t]*\n[ \t]*from:",
    re.IGNORECASE | re.MULTILINE,
)
# A mailing-list footer: a rule, then "X mailing list".
_LIST_FOOTER = re.compile(r"^_{20,}[ \t]*\n[^\n]*mailing list", re.IGNORECASE | re.MULTILINE)
_SIGNATURE_DELIMITER = "-- "


# Supercite/Gnus quote with the author's initials: " LK> the text".
_INITIALS_QUOTE = re.compile(r"^ ?[A-Z][A-Za-z]{0,3}>( |$)")


def _is_quote(line: str) -> bool:
    if line[:1] == ">":
        return True
    return ">" in line[:6] and bool(_INITIALS_QUOTE.match(line))


def _mark_quotes(lines: list[str]) -> list[bool]:
    """Which lines belong to quote blocks: ``>`` lines, blank lines between them, and the
    attribution line ("On Tue, ... Alice wrote:") just above a block, even when wrapped."""
    quoted = [_is_quote(line) for line in lines]
    for index in range(len(lines)):
        if not quoted[index] or (index > 0 and quoted[index - 1]):
            continue
        above = index - 1
        while above >= 0 and not lines[above].strip():
            above -= 1
        if above < 0:
            continue
        if quoted[above]:
            for blank in range(above + 1, index):
                quoted[blank] = True
        elif _ATTRIBUTION.search(lines[above]):
            for part in range(above, index):
                quoted[part] = True
            # Gmail wraps long attributions: "On Tue, ... Alice Chen <alice@acme.io>\nwrote:".
            wrapped = above - 1
            if (
                wrapped >= 0
                and not lines[above].startswith(_ATTRIBUTION_OPENERS)
                and lines[wrapped].startswith(_ATTRIBUTION_OPENERS)
            ):
                quoted[wrapped] = True
    return quoted


def _blocks(groups: list[list[str]]) -> str:
    texts = ["\n".join(group).strip("\n") for group in groups]
    return re.sub(r"\n{3,}", "\n\n", "\n\n".join(text for text in texts if text.strip()))


def _cut(text: str, match: re.Match[str] | None) -> tuple[str, str]:
    return (text, "") if match is None else (text[: match.start()], text[match.start() :])


@dataclass(slots=True)
class _Split:
    new: list[list[str]] = field(default_factory=list)
    quoted: list[list[str]] = field(default_factory=list)
    signature: list[list[str]] = field(default_factory=list)


def split_body(body: str) -> tuple[str, str, str]:
    """(new text, quoted text, signature) of a plain-text body.

    New text between quote blocks (an inline reply) stays in order; each run of quoted lines
    goes to ``quoted``. The signature runs from the first unquoted ``-- `` line to the next
    quote block.
    """
    body = body.replace("\r\n", "\n").replace("\r", "\n")
    body, tail = _cut(body, _OUTLOOK_TAIL.search(body))
    footers = list(_LIST_FOOTER.finditer(body))
    body, footer = _cut(body, footers[-1] if footers else None)
    lines = body.split("\n")

    split = _Split()
    state = ""
    for line, is_quoted in zip(lines, _mark_quotes(lines), strict=True):
        if is_quoted:
            kind = "quoted"
        elif state == "signature" or line == _SIGNATURE_DELIMITER:
            kind = "signature"
        else:
            kind = "new"
        groups: list[list[str]] = getattr(split, kind)
        if kind != state:
            groups.append([])
            state = kind
            if line == _SIGNATURE_DELIMITER and kind == "signature":
                continue  # the delimiter itself is not part of the signature
        groups[-1].append(line)
    if tail:
        split.quoted.append(tail.split("\n"))
    if footer:
        split.signature.append(footer.split("\n"))
    return _blocks(split.new), _blocks(split.quoted), _blocks(split.signature)


# --------------------------------------------------------------------------- MIME bodies


_SIGNATURE_TYPES = frozenset(
    {"application/pgp-signature", "application/pkcs7-signature", "application/x-pkcs7-signature"}
)
_PATCH_TYPES = frozenset({"text/x-diff", "text/x-patch", "text/x-diff-patch"})
_NOT_BODY_TEXT = frozenset({"text/calendar", "text/vcard", "text/x-vcard", "text/rfc822-headers"})


@dataclass(slots=True)
class _Body:
    plain: list[str] = field(default_factory=list)
    html: list[str] = field(default_factory=list)
    attachments: list[str] = field(default_factory=list)


def _payload_text(part: Message) -> str:
    data = part.get_payload(decode=True)
    if not isinstance(data, bytes):
        payload = part.get_payload()
        return _clean(payload) if isinstance(payload, str) else ""
    text = _decode_bytes(data, part.get_content_charset())
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")


def _filename(part: Message) -> str:
    try:
        name = part.get_filename()
    except (HeaderParseError, ValueError, LookupError):
        return ""
    return _header_text(name) if name else ""


def _collect_leaf(part: Message, body: _Body) -> None:
    ctype = part.get_content_type()
    if ctype in _SIGNATURE_TYPES:
        return
    filename = _filename(part)
    disposition = part.get_content_disposition()
    # A patch is the message's content even when the client attached it.
    if ctype in _PATCH_TYPES or filename.lower().endswith((".patch", ".diff")):
        body.plain.append(_payload_text(part))
        if disposition == "attachment" and filename:
            body.attachments.append(filename)
        return
    is_text = part.get_content_maintype() == "text" and ctype not in _NOT_BODY_TEXT
    if is_text and disposition != "attachment":
        (body.html if ctype == "text/html" else body.plain).append(_payload_text(part))
        return
    body.attachments.append(filename or ctype)


def _collect(part: Message, body: _Body) -> None:
    """Walk the MIME tree in order; of ``multipart/alternative`` keep one version, plain first."""
    payload = part.get_payload()
    if not part.is_multipart() or not isinstance(payload, list):
        _collect_leaf(part, body)
        return
    children = [child for child in payload if isinstance(child, Message)]
    if part.get_content_type() != "multipart/alternative":
        for child in children:
            _collect(child, body)
        return
    versions: list[_Body] = []
    for child in children:
        version = _Body()
        _collect(child, version)
        versions.append(version)
    best = next((v for v in versions if v.plain), None) or next(
        (v for v in versions if v.html), None
    )
    if best is not None:
        body.plain.extend(best.plain)
        body.html.extend(best.html)
    for version in versions:
        body.attachments.extend(version.attachments)


def _body_parts(msg: Message) -> tuple[str, str, str, list[str]]:
    """(text, quoted, signature, attachment names) of a message."""
    body = _Body()
    _collect(msg, body)
    texts = body.plain if body.plain else [html_to_text(markup) for markup in body.html]
    new: list[str] = []
    quoted: list[str] = []
    signature: list[str] = []
    # Each part is split on its own: a signature in the body must not swallow an attached patch.
    for text in texts:
        part_new, part_quoted, part_signature = split_body(text)
        new.append(part_new)
        quoted.append(part_quoted)
        signature.append(part_signature)
    return _join(new), _join(quoted), _join(signature), body.attachments


def _join(texts: list[str]) -> str:
    return "\n\n".join(text for text in texts if text)


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
