"""Mail bodies as text: a parsed message's new text, quoted replies and signature.

What its author wrote new becomes a record's ``text``: quoted replies (``> ...`` blocks with
their "On ... wrote:" line, Outlook "Original Message" tails) go to ``quoted`` and the part
after a ``-- `` line goes to ``signature``, so a thread of replies does not index the same
paragraph ten times. Inline patches are body text and stay in ``text``.

The MIME tree is walked in order and one version of each ``multipart/alternative`` is kept,
plain text before HTML; HTML is turned into text only when no plain version exists.

Charset and RFC 2047 decoding live here because attachment names need them;
:mod:`stratamem.ingest.connectors.email`, the message parsing that the ``mbox``, ``maildir``
and ``eml`` connectors share, reuses them for headers, so this module must not import from it
or from them.

Everything here runs in time linear in the size of the message: the HTML reader is a small
tokenizer of its own (the standard library's rescans the rest of the document at every ``<``
that never closes, minutes for a 200 KB body), and a header is decoded from its first
:data:`_HEADER_TEXT_LIMIT` characters only.
"""

from __future__ import annotations

import codecs
import contextlib
import html
import re
from dataclasses import dataclass, field
from email.errors import HeaderParseError
from email.header import Header, decode_header
from email.message import Message

from stratamem.ingest.model import clean_text

# --------------------------------------------------------------------------- decoding


# Codecs Python knows that are no mail charset: they decode in quadratic time (punycode) or
# turn escapes into any character (unicode_escape).
_NOT_CHARSETS = frozenset(
    {"punycode", "idna", "unicode-escape", "raw-unicode-escape", "unicode_escape"}
)
# No real header is longer; RFC 2047 decoding is quadratic in the undecodable tail of one.
_HEADER_TEXT_LIMIT = 16 * 1024


def _decode_bytes(data: bytes, charset: str | None) -> str:
    """The declared charset, else UTF-8, else Latin-1, which decodes any byte string.

    Unknown or bogus charset names (``unknown-8bit``, ``x-user-defined``) fall through; lone
    surrogates a charset can yield (UTF-7 does) become U+FFFD.
    """
    for candidate in (charset, "utf-8"):
        if not candidate:
            continue
        try:
            if codecs.lookup(candidate).name in _NOT_CHARSETS:
                continue
            return clean_text(data.decode(candidate))
        except (LookupError, ValueError, TypeError):
            continue
    return data.decode("latin-1")


def _clean(text: str) -> str:
    """Undo the surrogate escapes the stdlib parser uses for raw 8-bit headers.

    Lone surrogates cannot be stored (SQLite rejects them), so escaped bytes are turned back
    into bytes and decoded properly, and any other surrogate becomes U+FFFD.
    """
    if any("\udc80" <= ch <= "\udcff" for ch in text):
        # Surrogates outside the escape range as well: left to clean_text below.
        with contextlib.suppress(UnicodeEncodeError):
            text = _decode_bytes(text.encode("utf-8", "surrogateescape"), "utf-8")
    return clean_text(text).replace("\x00", "")


def _header_text(value: object) -> str:
    """A header as readable text: RFC 2047 words decoded in any charset, folding undone."""
    if value is None:
        return ""
    if not isinstance(value, Header):
        value = str(value)[:_HEADER_TEXT_LIMIT]
    source: str | Header = value
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


_SPACES = re.compile(r"\s+")


class _HtmlText:
    """Readable text from HTML: block tags break lines, blockquotes become ``> `` lines."""

    _BREAK = frozenset(
        {"br", "div", "tr", "li", "dt", "dd", "hr", "table", "ul", "ol", "section", "article"}
    )
    _PARAGRAPH = frozenset({"p", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote"})
    _SKIP = frozenset({"script", "style", "title", "noscript", "template"})

    def __init__(self) -> None:
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
            self._current.append(_SPACES.sub(" ", data))
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
        self._flush()
        return re.sub(r"\n{3,}", "\n\n", "\n".join(self.lines)).strip("\n")


def html_to_text(markup: str) -> str:
    """Readable plain text from an HTML mail body (scripts and styles dropped)."""
    reader = _HtmlText()
    _tokenize(markup, reader)
    return reader.text()


_TAG_NAME = re.compile(r"[a-zA-Z][^\t\n\r\f />\x00]*")
# A tag without quotes: most of them, read in one match that stops at the next "<", ">" or
# quote, so the matches tried from all the "<" cover the text about once.
_PLAIN_TAG = re.compile(r"</?([a-zA-Z][^\t\n\r\f />\x00]*)[^<>\"']*>")
# Elements whose content is raw text up to their end tag, as in html.parser.
_RAW_TEXT = frozenset({"script", "style"})


class _Scanner:
    """Searches over one markup text whose start positions mostly move forward.

    ``find`` keeps its last answer for each needle: a search from a position at or after the
    last one, and not past its answer, gets the same answer without scanning. ``tag_end``
    remembers where each chain of quoted attribute values led. Together they keep the whole
    document's reading linear however many ``<`` and quotes never close.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self._found: dict[str, tuple[int, int]] = {}
        self._tag_ends: dict[int, int] = {}

    def find(self, needle: str, start: int) -> int:
        cached = self._found.get(needle)
        if cached is not None and cached[0] <= start and (cached[1] >= start or cached[1] < 0):
            return cached[1]
        found = self.text.find(needle, start)
        self._found[needle] = (start, found)
        return found

    def search(self, key: str, pattern: re.Pattern[str], start: int) -> re.Match[str] | None:
        cached = self._found.get(key)
        if cached is not None and cached[0] <= start and cached[1] < 0:
            return None
        match = pattern.search(self.text, start)
        self._found[key] = (start, -1 if match is None else match.start())
        return match

    def tag_end(self, start: int) -> int:
        """The ``>`` closing a tag whose attributes begin at ``start``, passing over quoted
        values (a quote after ``=``); -1 when none does."""
        visited: list[int] = []
        pos = start
        end = -1
        while True:
            if pos in self._tag_ends:
                end = self._tag_ends[pos]
                break
            visited.append(pos)
            gt = self.find(">", pos)
            if gt < 0:
                break
            quote = self._value_quote(pos, gt)
            if quote < 0:
                end = gt
                break
            close = self.find(self.text[quote], quote + 1)
            if close < 0:
                end = gt  # an unbalanced quote: the first ">" ends the tag
                break
            pos = close + 1
        for seen in visited:
            self._tag_ends[seen] = end
        return end

    def _value_quote(self, pos: int, gt: int) -> int:
        """The first quote in ``[pos, gt)`` that opens an attribute value, or -1."""
        while True:
            quotes = [q for q in (self.find('"', pos), self.find("'", pos)) if 0 <= q < gt]
            if not quotes:
                return -1
            quote = min(quotes)
            if self.text[pos:quote].rstrip().endswith("="):
                return quote
            pos = quote + 1


def _tokenize(markup: str, out: _HtmlText) -> None:
    """Feed ``markup`` to ``out`` much as html.parser would: text with its character
    references resolved, start and end tags by lower-cased name, comments and declarations
    dropped; what opens a construct that never closes is text up to the next ``>`` or ``<``."""
    scan = _Scanner(markup)
    size = len(markup)
    pos = 0
    while pos < size:
        lt = scan.find("<", pos)
        if lt < 0 or scan.find(">", lt) < 0:
            lt = size  # every tag, comment and declaration ends with ">": the rest is text
        if lt > pos:
            out.handle_data(html.unescape(markup[pos:lt]))
        if lt >= size:
            return
        nxt = markup[lt + 1 : lt + 2]
        if markup.startswith("<!--", lt):
            end = scan.find("-->", lt + 4)
            pos = _unclosed(scan, lt, out) if end < 0 else end + 3
        elif nxt in ("!", "?"):
            end = scan.find(">", lt + 2)
            pos = _unclosed(scan, lt, out) if end < 0 else end + 1
        elif nxt == "/":
            pos = _end_tag(scan, lt, out)
        elif nxt.isascii() and nxt.isalpha():
            pos = _start_tag(scan, lt, out)
        else:
            out.handle_data("<")
            pos = lt + 1


def _unclosed(scan: _Scanner, lt: int, out: _HtmlText) -> int:
    gt = scan.find(">", lt + 1)
    if gt >= 0:
        end = gt + 1
    else:
        following = scan.find("<", lt + 1)
        end = following if following >= 0 else len(scan.text)
    out.handle_data(html.unescape(scan.text[lt:end]))
    return end


def _start_tag(scan: _Scanner, lt: int, out: _HtmlText) -> int:
    markup = scan.text
    plain = _PLAIN_TAG.match(markup, lt)
    if plain is not None:
        end = plain.end() - 1
        name = plain[1].lower()
    else:
        end = scan.tag_end(lt + 1)
        if end < 0:
            out.handle_data("<")
            return lt + 1
        name_match = _TAG_NAME.match(markup, lt + 1, end)
        name = name_match[0].lower() if name_match else ""
    out.handle_starttag(name, [])
    if markup[end - 1] == "/" and end - 1 > lt + len(name):
        out.handle_endtag(name)
        return end + 1
    if name in _RAW_TEXT:
        pattern = re.compile(rf"</\s*{name}\s*>", re.IGNORECASE)
        close = scan.search(name, pattern, end + 1)
        if close is None:
            return len(markup)
        out.handle_endtag(name)
        return close.end()
    return end + 1


def _end_tag(scan: _Scanner, lt: int, out: _HtmlText) -> int:
    plain = _PLAIN_TAG.match(scan.text, lt)
    if plain is not None:
        out.handle_endtag(plain[1].lower())
        return plain.end()
    end = scan.tag_end(lt + 2)
    if end < 0:
        return _unclosed(scan, lt, out)
    name_match = _TAG_NAME.match(scan.text, lt + 2, end)
    if name_match is not None:
        out.handle_endtag(name_match[0].lower())
    return end + 1


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
