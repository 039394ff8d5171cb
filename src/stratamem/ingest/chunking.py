"""Turning a stream of records into chunk drafts, by source kind.

- chat: conversation windows, one per thread, closed by a time gap or a size cap; each line keeps
  its author (``Alice Chen: …``) and the window keeps the time range of its messages;
- email: one message per chunk, split with :func:`split_text` only when long;
- documents and records: heading-aware spans of about 800 characters.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from stratamem.embed.tokens import estimate_tokens
from stratamem.entities.extract import chunk_tags
from stratamem.ingest.splitting import split_text
from stratamem.types import Chunk, Record, SourceKind


@dataclass(frozen=True, slots=True)
class ChunkingConfig:
    doc_target: int = 800
    doc_min: int = 200
    doc_max: int = 1200
    doc_overlap: int = 80
    chat_gap: timedelta = timedelta(minutes=30)
    chat_max_chars: int = 1000
    chat_max_messages: int = 20
    email_max_chars: int = 4000
    # Every chunk repeats its title; a longer one is cut at a word with an ellipsis.
    title_max: int = 300


@dataclass(slots=True)
class Draft:
    """A chunk before it has an id: its text, the records it came from and where it lives."""

    content: str
    records: list[Record]
    title: str = ""
    ref: str = ""
    thread: str | None = None
    doc: str | None = None
    tags: tuple[str, ...] = ()
    meta: dict[str, object] = field(default_factory=dict)

    @property
    def author(self) -> str | None:
        return next((r.author for r in self.records if r.author), None)

    @property
    def time_range(self) -> tuple[datetime | None, datetime | None]:
        times = [r.time for r in self.records if r.time is not None]
        return (min(times), max(times)) if times else (None, None)

    def chunk(
        self, *, id: str, source_id: str, seq: int, sha: str, record_key: str | None = None
    ) -> Chunk:
        """The chunk of this draft, under the id its caller made (``sha`` is its content's
        sha256)."""
        start, end = self.time_range
        return Chunk(
            id=id,
            source_id=source_id,
            seq=seq,
            content=self.content,
            token_count=estimate_tokens(self.content),
            time_start=start,
            time_end=end,
            author=self.author,
            title=self.title,
            tags=self.tags,
            source_ref=self.ref,
            thread=self.thread,
            doc_id=self.doc,
            content_sha256=sha,
            record_key=record_key,
            meta=self.meta,
        )


def chunk_records(
    kind: SourceKind, records: Iterable[Record], config: ChunkingConfig | None = None
) -> Iterator[Draft]:
    config = config or ChunkingConfig()
    if kind is SourceKind.CHAT:
        yield from _chat_windows(records, config)
    elif kind is SourceKind.EMAIL:
        for record in records:
            yield from _email(record, config)
    else:
        for record in records:
            yield from _document(record, config)


def _document(record: Record, config: ChunkingConfig) -> Iterator[Draft]:
    text = record.text
    body_line = _int(record.meta.get("body_line"), 1)
    spans = split_text(
        text,
        target=config.doc_target,
        min_chars=config.doc_min,
        max_chars=config.doc_max,
        overlap=config.doc_overlap,
    )
    where = _Locator(text)
    record_title = record.title or ""
    titles: tuple[str, str] = ("", _clip(record_title, config.title_max))
    for part, span in enumerate(spans):
        piece = text[span.start : span.end]
        content = piece.strip()
        if not content:
            continue
        line = body_line + where.newlines_before(span.start)
        line += len(piece) - len(piece.lstrip("\n"))
        ref = f"{record.ref}:{line}" if len(spans) > 1 or body_line > 1 else record.ref
        heading = where.heading_at(span.start)
        if heading != titles[0]:
            # Composed once per heading, not once per span: a heading can be a whole long line.
            title = record_title
            if heading and heading != title:
                title = f"{title} › {heading}" if title else heading
            titles = (heading, _clip(title, config.title_max))
        yield Draft(
            content=content,
            records=[record],
            title=titles[1],
            ref=ref,
            thread=record.thread,
            doc=record.doc,
            tags=chunk_tags(content, record) if len(spans) > 1 else record.tags,
            meta={"part": part, "parts": len(spans)} if len(spans) > 1 else {},
        )


def _email(record: Record, config: ChunkingConfig) -> Iterator[Draft]:
    text = record.text.strip() or record.quoted.strip()
    if not text:
        text = record.title or ""
    if not text:
        return
    if len(text) <= config.email_max_chars:
        spans = [(0, len(text))]
    else:
        spans = [
            (s.start, s.end)
            for s in split_text(text, target=2000, min_chars=1000, max_chars=config.email_max_chars)
        ]
    title = _clip(record.title or "", config.title_max)
    for part, (start, end) in enumerate(spans):
        content = text[start:end].strip()
        if content:
            yield Draft(
                content=content,
                records=[record],
                title=title,
                ref=record.ref,
                thread=record.thread,
                tags=record.tags,
                meta={"part": part, "parts": len(spans)} if len(spans) > 1 else {},
            )


@dataclass(slots=True)
class _Window:
    thread: str | None
    records: list[Record] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    chars: int = 0
    last: datetime | None = None


def _chat_windows(records: Iterable[Record], config: ChunkingConfig) -> Iterator[Draft]:
    """Windows keyed by thread; a window closes on a gap, a size cap, or the end of the stream.

    Closed windows are emitted in the order they were opened, so the output is deterministic.
    """
    open_windows: dict[str | None, _Window] = {}
    ready: list[_Window] = []
    for record in records:
        text = record.text.strip()
        if not text:
            continue
        line = f"{record.author}: {text}" if record.author else text
        now = record.time
        for key in list(open_windows):
            last = open_windows[key].last
            if now and last and now - last > config.chat_gap:
                ready.append(open_windows.pop(key))
        window: _Window | None = open_windows.get(record.thread)
        if window and (
            window.chars + len(line) > config.chat_max_chars
            or len(window.records) >= config.chat_max_messages
        ):
            ready.append(open_windows.pop(record.thread))
            window = None
        if window is None:
            window = open_windows[record.thread] = _Window(record.thread)
        window.records.append(record)
        window.lines.append(line)
        window.chars += len(line) + 1
        window.last = now or window.last
        if ready:
            for closed in ready:
                yield from _chat_drafts(closed, config)
            ready.clear()
    for remaining in open_windows.values():
        yield from _chat_drafts(remaining, config)


def _chat_drafts(window: _Window, config: ChunkingConfig) -> Iterator[Draft]:
    first = window.records[0]
    refs = first.ref if len(window.records) == 1 else f"{first.ref} (+{len(window.records) - 1})"
    content = "\n".join(window.lines)
    tags: list[str] = []
    for record in window.records:
        tags.extend(t for t in record.tags if t not in tags)
    # Only a single oversized message makes a window this long: split it like a document.
    spans = split_text(
        content,
        target=config.chat_max_chars,
        min_chars=config.chat_max_chars // 2,
        max_chars=config.chat_max_chars * 2,
        overlap=config.doc_overlap,
    )
    title = _clip(first.title or "", config.title_max)
    for part, span in enumerate(spans):
        meta: dict[str, object] = {"messages": len(window.records)}
        if len(spans) > 1:
            meta |= {"part": part, "parts": len(spans)}
        yield Draft(
            content=content[span.start : span.end].strip(),
            records=window.records,
            title=title,
            ref=refs,
            thread=window.thread,
            tags=tuple(tags),
            meta=meta,
        )


class _Locator:
    """Line numbers and nearest Markdown headings of offsets into one text, read forwards.

    Each call scans only the text between the previous offset and this one, and parses a
    heading line once, so a whole text costs O(its length) however many spans it has. (A
    search from the start of the text for every span made one long line quadratic.) An
    offset before the previous one starts the scan over: correct, just not cheap.
    """

    def __init__(self, text: str) -> None:
        self._text = text
        self._counted = 0
        self._newlines = 0
        self._restart_headings()

    def _restart_headings(self) -> None:
        # [0, _searched) has been searched for "\n#"; _cut is the newline before the nearest
        # "#" line (-1 for the first line, None for none) and _heading its parsed text.
        self._searched = 0
        self._cut: int | None = -1 if self._text.startswith("#") else None
        self._heading: str | None = None

    def newlines_before(self, pos: int) -> int:
        if pos < self._counted:
            self._counted = self._newlines = 0
        self._newlines += self._text.count("\n", self._counted, pos)
        self._counted = pos
        return self._newlines

    def heading_at(self, pos: int) -> str:
        """The nearest Markdown heading at or before ``pos``, without its hashes.

        Nearest means the last line starting at or before ``pos`` with a ``#``: when that
        line is not a heading (``#tag``), there is none.
        """
        end = pos + 1
        if end < self._searched:
            self._restart_headings()
        # A "\n#" that straddles the previous end was not seen yet: start one back.
        cut = self._text.rfind("\n#", max(self._searched - 1, 0), end)
        self._searched = max(end, self._searched)
        if cut != -1 and cut != self._cut:
            self._cut, self._heading = cut, None
        if self._cut is None:
            return ""
        if self._heading is None:
            self._heading = _heading_line(self._text, self._cut + 1)
        return self._heading


def _heading_line(text: str, start: int) -> str:
    """The text of the Markdown heading on the line at ``start``, or "" when it is none."""
    line_end = text.find("\n", start)
    line = text[start : line_end if line_end != -1 else len(text)]
    stripped = line.lstrip("#")
    if not stripped.startswith((" ", "\t")):
        return ""
    return stripped.strip()


def _clip(title: str, limit: int) -> str:
    """``title`` cut at a word end to at most ``limit`` characters, marked with an ellipsis.

    Every chunk of a record repeats its title, and a heading can be a whole line of any
    length: unclipped, a one-line note would store its text once per chunk.
    """
    if len(title) <= limit:
        return title
    head = title[: limit - 1]
    if not title[limit - 1].isspace():
        word_start = head.rfind(" ")
        if word_start > limit // 2:
            head = head[:word_start]
    return head.rstrip() + "…"


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) else default
