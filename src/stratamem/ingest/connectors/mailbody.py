"""Mail bodies as text: a parsed message's new text, quoted replies and signature.

What its author wrote new becomes a record's ``text``: quoted replies (``> ...`` blocks with
their "On ... wrote:" line, Outlook "Original Message" tails) go to ``quoted`` and the part
after a ``-- `` line goes to ``signature``, so a thread of replies does not index the same
paragraph ten times. Inline patches are body text and stay in ``text``.

The MIME tree is walked in order and one version of each ``multipart/alternative`` is kept,
plain text before HTML; HTML is turned into text only when no plain version exists.

Charset and RFC 2047 decoding live here because attachment names need them;
:mod:`stratamem.ingest.connectors.email` reuses them for headers, so this module must not
import from it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from email.errors import HeaderParseError
from email.header import Header, decode_header
from email.message import Message
from html.parser import HTMLParser

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
