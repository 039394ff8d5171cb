"""The mbox connector: mbox files, and folders of them.

Messages are parsed into records by :mod:`stratamem.ingest.connectors.email`.

The mbox reader splits the file on ``From `` lines itself, reading bytes line by line, because
:class:`mailbox.mbox` builds a table of contents first; a 1 GB mailbox must stream. Messages are
numbered from 1 in problems and in ``meta["index"]``; ``meta["line"]`` is the 1-based line of
the ``From `` separator and ``meta["offset"]`` its byte offset. Threads are resolved over the
whole file (a folder: over all its files) before the first record: a first pass reads the
header blocks only.

The start of a file. Blank lines are passed over. A file may start with a ``From `` line, or
with headers (one message saved without its envelope line). Anything else before the first
``From `` separator (a stray ``Content-Type: text/plain`` line an archiver left) is skipped and
reported, naming the lines and bytes, as long as the separator starts within the first
:data:`_SNIFF_LINES` lines and :data:`_SNIFF_BYTES` bytes of the file; past that bound the
file is not mbox, so a text file that quotes an envelope line further down is never taken for
one. Folder and file detection use the same bound.

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

Bounds. A message larger than ``ReadContext.max_item_bytes`` is reported and skipped without
being held: the file is read line by line, an over-long line never held whole. A message that
fails is reported as ``message 3 (line 120)``, with ``<message-id>`` when known.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from email.parser import BytesHeaderParser
from email.policy import compat32
from pathlib import Path
from typing import IO

from stratamem.errors import SourceFormatError
from stratamem.ingest.connectors.email import (
    _Entry,
    _folder_name,
    _RawMessage,
    _records,
    _thread_entry,
    _Threads,
)
from stratamem.ingest.connectors.maildir import _is_maildir
from stratamem.ingest.model import (
    ReadContext,
    Record,
    SourceStream,
    capped_lines,
    clean_text,
    irregular,
    open_failure,
    open_regular,
    walk,
)
from stratamem.ingest.registry import ConnectorSpec
from stratamem.types import SourceKind

# --------------------------------------------------------------------------- mbox


_FROM_LINE = re.compile(rb"^From \S+.*\b\d{1,2}:\d\d.*\b\d{4}\b")
# Headers a saved message plausibly starts with when it lacks the mbox "From " line.
_FIRST_HEADER = re.compile(
    rb"^(return-path|received|delivered-to|from|to|date|subject|message-id|mime-version"
    rb"|reply-to|sender|envelope-to|dkim-signature|arc-[a-z-]+|authentication-results|x-[a-z0-9-]+):",
    re.IGNORECASE,
)
_ESCAPED_FROM = re.compile(rb"^>+From ")
# Envelope lines are short; looking further only costs time on long body lines.
_FROM_LINE_LIMIT = 256
# The first "From " separator must start within this many lines and bytes of the file; what
# comes before it is skipped (and reported) unless it is a message's headers.
_SNIFF_LINES = 16
_SNIFF_BYTES = 8 * 1024
# The pass that reads header blocks only: how much of one it keeps, and the blocks it reads.
_HEAD_LIMIT = 256 * 1024
_BLOCK = 64 * 1024
# A header block ends at an empty line, as the stdlib parser ends it (a line of spaces
# continues the header before it).
_EOL = (b"\n", b"\r")


def _is_separator(line: bytes) -> bool:
    return line.startswith(b"From ") and bool(_FROM_LINE.match(line, 0, _FROM_LINE_LIMIT))


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
        """The message, ending in the blank line mbox writes before the next separator: the
        last message of a file may lack it, and a message without a Message-ID is named by a
        hash of its bytes, which must not depend on where in the file it stood."""
        if self.lines and self.lines[-1].strip():
            self.lines.append(b"\n" if self.lines[-1].endswith(b"\n") else b"\n\n")
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
    start = _Start(shown, ctx)
    current: _MboxMessage | None = None
    offset = 0
    try:
        handle = open_regular(path)
    except OSError as exc:
        raise SourceFormatError(shown, "file", open_failure(path, exc)) from None
    with handle:
        for number, line in enumerate(capped_lines(handle, limit), start=1):
            if current is None:
                current = start.read(line, number, offset)
            elif isinstance(line, int):
                current.add(line, limit)
            elif _is_separator(line):
                yield from _finished(current, shown, ctx)
                current = _MboxMessage(current.index + 1, number, offset)
            elif line[:1] == b">" and _ESCAPED_FROM.match(line):
                current.add(line[1:], limit)
            else:
                current.add(line, limit)
            offset += line if isinstance(line, int) else len(line)
    if current is None:
        current = start.end()
    if current is not None:
        yield from _finished(current, shown, ctx)


def _finished(message: _MboxMessage, shown: str, ctx: ReadContext) -> Iterator[_RawMessage]:
    if ctx.too_large(message.size):
        ctx.skip(shown, message.where, ctx.size_reason(message.size))
    else:
        yield message.raw(shown)


_NOT_MBOX = "not an mbox file (no 'From ' line)"


@dataclass(slots=True)
class _Start:
    """Reads the lines before the first message of an mbox file (see the module's docstring).

    Blank lines are passed over. A ``From `` line opens the first message. Headers open one
    saved without its envelope line, unless a separator comes before their block ends. Any
    other line is held until a separator within the bound, then reported as skipped; past
    the bound, or at the end of the file, it raises :class:`SourceFormatError`.
    """

    shown: str
    ctx: ReadContext
    lines: list[bytes] = field(default_factory=list)
    first: tuple[int, int] = (0, 0)  # line number and offset of the first line held

    def read(self, line: bytes | int, number: int, offset: int) -> _MboxMessage | None:
        """The first message, once ``line`` (the file's ``number``-th) shows where it starts."""
        if not self.lines:
            if isinstance(line, int):
                raise SourceFormatError(self.shown, f"line {number}", _NOT_MBOX)
            if not line.strip():
                return None
            if line.startswith(b"From "):
                return _MboxMessage(1, number, offset)
            self.first = (number, offset)
        elif isinstance(line, bytes) and _is_separator(line):
            # Held lines, so the file is not empty: the bound was checked for this line.
            self._report(number, offset)
            return _MboxMessage(1, number, offset)
        if self._headers() and (isinstance(line, int) or not line.strip()):
            return self._saved(line)  # the end of the header block
        if isinstance(line, int):
            raise SourceFormatError(self.shown, f"line {self.first[0]}", _NOT_MBOX)
        self.lines.append(line)
        if number < _SNIFF_LINES and offset + len(line) < _SNIFF_BYTES:
            return None  # the separator may still come
        if self._headers():
            return self._saved(None)
        raise SourceFormatError(self.shown, f"line {self.first[0]}", _NOT_MBOX)

    def end(self) -> _MboxMessage | None:
        """The first message when the file ends before it was found: none in a file of blank
        lines, the message of headers alone; other lines are no mbox."""
        if not self.lines:
            return None
        if self._headers():
            return self._saved(None)
        raise SourceFormatError(self.shown, f"line {self.first[0]}", _NOT_MBOX)

    def _headers(self) -> bool:
        return bool(self.lines) and bool(_FIRST_HEADER.match(self.lines[0]))

    def _saved(self, line: bytes | int | None) -> _MboxMessage:
        """A message saved without its envelope line: the lines held, then ``line``."""
        number, offset = self.first
        message = _MboxMessage(1, number, offset)
        for held in [*self.lines, *([] if line is None else [line])]:
            message.add(held, self.ctx.max_item_bytes)
        return message

    def _report(self, number: int, offset: int) -> None:
        lines = number - 1
        where = "line 1" if lines == 1 else f"lines 1-{lines}"
        self.ctx.skip(
            self.shown,
            where,
            f"{lines} line{'s' if lines > 1 else ''} ({offset:,} bytes) before the first "
            "'From ' line skipped: not part of any message",
        )


def _mbox_records(path: Path, ctx: ReadContext) -> Iterator[Record]:
    if not path.is_file():
        reason = irregular(path) if path.exists() else None
        raise SourceFormatError(clean_text(str(path)), "file", reason or "not a file")
    threads = _Threads(lambda: _mbox_thread_entries(path, ctx.max_item_bytes))
    yield from _records(_mbox_messages(path, ctx), ctx, threads)


def _mbox_thread_entries(path: Path, limit: int) -> Iterator[_Entry]:
    """What :class:`_Threads` needs of each message of an mbox file, from its header block.
    Nothing is reported: the pass that reads the messages reports what fails."""
    parser = BytesHeaderParser(policy=compat32)
    try:
        for head in _mbox_heads(path, limit):
            try:
                yield _thread_entry(parser.parsebytes(head))
            except Exception:  # the message reports itself when it is read
                continue
    except Exception:  # as does the file
        return


def _mbox_heads(path: Path, limit: int) -> Iterator[bytes]:
    """The header block of each message of an mbox file, split where :func:`_mbox_messages`
    splits it. The file's start is read as that reader reads it; then each body is passed
    over with one search per block for a line starting ``From ``, not a step per line (a
    tenth of the time). Raises what the reader raises on a file that is not mbox."""
    quiet = ReadContext(max_item_bytes=limit)
    with open_regular(path) as handle:
        start = _Start(clean_text(str(path)), quiet)
        first: _MboxMessage | None = None
        offset = 0
        for number, line in enumerate(capped_lines(handle, limit), start=1):
            first = start.read(line, number, offset)
            if first is not None:
                break
            offset += line if isinstance(line, int) else len(line)
        else:
            first = start.end()
        if first is None:
            return
        blank = next((n for n, line in enumerate(first.lines) if line[:1] in _EOL), None)
        head = first.lines[:blank]
        size = sum(map(len, head))
        in_body = blank is not None
        blocks = _Blocks(handle)
        while True:
            if in_body:
                if not blocks.separator():
                    break
                blocks.line()
                yield b"".join(head)
                head, size, in_body = [], 0, False
                continue
            line = blocks.line()
            if not line:
                break
            if _is_separator(line):
                yield b"".join(head)
                head, size = [], 0
            elif line[:1] in _EOL or len(line) >= _HEAD_LIMIT:
                in_body = True  # the block's end, or a line too long to be a header
            elif size < _HEAD_LIMIT:
                head.append(line[1:] if _ESCAPED_FROM.match(line) else line)
                size += len(line)
        yield b"".join(head)


class _Blocks:
    """A binary file from its current place, read a block at a time: its next line, or the
    next line that is an mbox separator. The handle must stand at the start of a line."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.handle = handle
        # One byte is always kept before ``at``: a separator is found as "\nFrom ".
        self.data = b"\n"
        self.at = 1
        self.ended = False

    def _more(self) -> bool:
        """Read another block, dropping what lies before ``at`` but one byte."""
        if self.ended:
            return False
        block = self.handle.read(_BLOCK)
        keep = self.at - 1
        self.data = self.data[keep:] + block
        self.at -= keep
        self.ended = not block
        return bool(block)

    def line(self) -> bytes:
        """The next line with its newline (at most :data:`_HEAD_LIMIT` bytes of it, then the
        rest as further lines); ``b""`` at the end."""
        while True:
            end = self.data.find(b"\n", self.at, self.at + _HEAD_LIMIT)
            if end >= 0 or len(self.data) - self.at >= _HEAD_LIMIT or not self._more():
                stop = end + 1 if end >= 0 else min(len(self.data), self.at + _HEAD_LIMIT)
                line = self.data[self.at : stop]
                self.at = stop
                return line

    def separator(self) -> bool:
        """Move to the start of the next line that is an mbox separator; False at the end."""
        while True:
            hit = self.data.find(b"\nFrom ", self.at - 1)
            if hit < 0:
                # Keep the tail: "\nFrom " may straddle two blocks.
                self.at = max(self.at, len(self.data) - 5)
                if not self._more():
                    return False
                continue
            self.at = hit + 1
            if len(self.data) - self.at < _FROM_LINE_LIMIT and self._more():
                continue  # the line's start is not all here yet: find it again
            if _is_separator(self.data[self.at : self.at + _FROM_LINE_LIMIT]):
                return True
            self.at += 1


# --------------------------------------------------------------------------- mbox folders


# Folders are detected from the first files of a sorted walk; each costs one open and read.
_FOLDER_SAMPLE = 50
_GZIP_MAGIC = b"\x1f\x8b"
_GZIPPED = "compressed with gzip; decompress it to read it as mbox"


def _head(path: Path) -> bytes:
    """The start of a regular file, enough to find its first separator; ``b""`` for an
    unreadable one."""
    try:
        with open_regular(path) as handle:
            return handle.read(_SNIFF_BYTES + _FROM_LINE_LIMIT)
    except OSError:
        return b""


def _starts_with_separator(head: bytes) -> bool:
    """Whether the file that starts with ``head`` has an mbox ``From `` separator where the
    reader looks for its first one: its first non-blank line, or any line starting within
    the first :data:`_SNIFF_LINES` lines and :data:`_SNIFF_BYTES` bytes."""
    offset = 0
    for number, line in enumerate(head.split(b"\n"), start=1):
        if number > _SNIFF_LINES or offset >= _SNIFF_BYTES:
            break
        if _is_separator(line):
            return True
        offset += len(line) + 1
    return False


def _is_mbox_file(path: Path) -> bool:
    """An ``.mbox`` file, or one with an mbox ``From `` separator at its start."""
    return path.suffix.lower() == ".mbox" or _starts_with_separator(_head(path))


def _not_mbox_reason(path: Path) -> str:
    if _head(path).startswith(_GZIP_MAGIC):
        return _GZIPPED
    return f"{_NOT_MBOX}; skipped"


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

    for dirpath, dirnames, filenames in walk(root, onerror=failed):
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


def _mbox_folder_threads(files: list[Path], ctx: ReadContext) -> _Threads:
    """One thread map over every message of ``files``, read when the first is parsed."""

    def scan() -> Iterator[_Entry]:
        for file in files:
            yield from _mbox_thread_entries(file, ctx.max_item_bytes)

    return _Threads(scan)


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
    threads = _mbox_folder_threads(files, ctx)
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


# --------------------------------------------------------------------------- connector


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


# --------------------------------------------------------------------------- detection


def detect_mbox(path: Path) -> int:
    """80 for an mbox file (``.mbox``, or a ``From `` separator at its start: see the module's
    docstring), 40 for a file that starts with ``From `` alone, 65 for a folder of mbox files."""
    try:
        if path.is_dir():
            return _detect_mbox_folder(path)
        if not path.is_file():
            return 0
        with open_regular(path) as handle:
            head = handle.read(_SNIFF_BYTES + _FROM_LINE_LIMIT)
    except OSError:
        return 0
    first = head.split(b"\n", 1)[0]
    if path.suffix.lower() == ".mbox" or _starts_with_separator(head):
        return 80
    # "From " without a date may still be mail, but a text note can start that way too.
    return 40 if first.startswith(b"From ") else 0


MBOX = ConnectorSpec(
    "mbox",
    MboxConnector,
    detect_mbox,
    "an mbox mailbox file (one file, many messages), or a folder of them",
)
