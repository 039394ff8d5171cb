"""What connectors produce: source streams of records, and the problems they skipped.

A connector turns a path into one or more :class:`SourceStream` objects. Each stream is one
source (a Slack channel, a mailbox, a notes folder) and yields :class:`~stratamem.types.Record`
objects lazily, so a 1 GB mailbox never sits in memory. Malformed items are reported through
:meth:`ReadContext.skip` and left out; the rest of the stream goes on.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Protocol, runtime_checkable

from stratamem.ingest import confine
from stratamem.ingest.confine import entries as entries
from stratamem.ingest.confine import open_file
from stratamem.ingest.confine import walk as walk

# Record is defined beside the other value types (entity extraction reads it too) and
# re-exported here, where connectors find everything they produce.
from stratamem.types import Record as Record
from stratamem.types import SourceKind


@dataclass(slots=True)
class SourceStream:
    """One source read from a path; ``records`` is consumed exactly once."""

    scope: str
    kind: SourceKind
    platform: str
    location: str
    records: Iterable[Record]
    title: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    # Whether its records merge into what the source holds (see stratamem.ingest.merge);
    # None: as its kind decides (chat, mail and records merge; documents are replaced).
    merge: bool | None = None
    # What a merging source says of itself in its structure (a channel's topic and its
    # changes; see stratamem.memory.structure_chat), known once its records are read: called
    # after they are, in the reading process.
    structure: Callable[[], Sequence[Any]] | None = None


@dataclass(frozen=True, slots=True)
class Problem:
    """A skipped item: the file, the place in it (line, message index) and why."""

    path: str
    where: str
    reason: str

    def __str__(self) -> str:
        place = f"{self.path}:{self.where}" if self.where else self.path
        return f"{place}: {self.reason}"


# The largest item a connector reads into memory: a file, a zip member, a line, a message.
DEFAULT_MAX_ITEM_BYTES = 64 * 1024 * 1024


@dataclass(slots=True)
class ReadContext:
    """Passed to every connector: the user's scope override, the list of skipped items and
    the bound on what one item may hold (``max_item_bytes``)."""

    scope: str | None = None
    problems: list[Problem] = field(default_factory=list)
    on_problem: Callable[[Problem], None] | None = None
    max_item_bytes: int = DEFAULT_MAX_ITEM_BYTES

    def skip(self, path: str | Path, where: str, reason: str) -> None:
        """Report a skipped item. ``where`` names the place; ``"file"`` for a whole file."""
        problem = Problem(str(path), where or "file", reason)
        self.problems.append(problem)
        if self.on_problem is not None:
            self.on_problem(problem)

    @contextmanager
    def item(self, path: str | Path, where: str) -> Iterator[None]:
        """Read one item inside this block: whatever it raises becomes a skipped item.

        Malformed input fails in ways no parser lists (a RecursionError from JSON nested
        100k deep, an OverflowError from a date at the calendar's edge, a TypeError from a
        field of the wrong type); none of them may take the rest of the source with it.
        """
        try:
            yield
        except Exception as exc:  # any failure of one item skips that item
            self.skip(path, where, describe_failure(exc))

    def too_large(self, size: int) -> bool:
        return size > self.max_item_bytes

    def size_reason(self, size: int) -> str:
        return (
            f"{size:,} bytes is over the {self.max_item_bytes:,}-byte limit for one item "
            "(raise it with --max-item-size)"
        )

    def scope_for(self, default: str, sub: str | None = None) -> str:
        """The scope of a stream: the user's override if given, else ``default``.

        Connectors that yield several streams from one path (one per channel) pass the
        channel as ``sub``; the override then becomes a prefix: ``team/#eng``.
        """
        if self.scope is None:
            return default
        return f"{self.scope}/{sub}" if sub else self.scope


@runtime_checkable
class Connector(Protocol):
    """Reads a path into source streams. ``name`` is what ``--format`` selects."""

    name: str

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]: ...


def to_utc(value: datetime) -> datetime:
    """A naive datetime is taken as UTC; an aware one is converted to UTC.

    Raises ``ValueError`` where the conversion would leave the calendar
    (``0001-01-01 00:00+05:00``); :func:`utc_or_none` returns None instead.
    """
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"{value.isoformat()} is outside the calendar in UTC") from None


def utc_or_none(value: datetime) -> datetime | None:
    """:func:`to_utc`, or None for a time that has no UTC equivalent."""
    try:
        return to_utc(value)
    except ValueError:
        return None


def describe_failure(exc: BaseException) -> str:
    """One line saying why an item could not be read, for a skipped-item message."""
    if isinstance(exc, RecursionError):
        return "nested too deeply to read"
    if isinstance(exc, MemoryError):
        return "too large to read into memory"
    text = " ".join(str(exc).split())
    if len(text) > 200:
        text = text[:199] + "…"
    name = type(exc).__name__
    return f"cannot be read ({name}: {text})" if text else f"cannot be read ({name})"


_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, so that it encodes as UTF-8.

    JSON may escape half a surrogate pair (``"\\ud800"``) and a file name that is not UTF-8
    decodes to surrogates; neither can be written to the store or printed.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def open_regular(path: Path) -> IO[bytes]:
    """Open a regular file for binary reading, or raise ``OSError`` naming what it is. Every
    file a connector reads is opened here: under an ingest root through no link, and never
    one of the store's own files (see :mod:`stratamem.ingest.confine`)."""
    return os.fdopen(open_file(path), "rb")


def irregular(path: Path) -> str | None:
    """Why ``path`` is not read as a file ("not a regular file (a FIFO)", or a link under an
    ingest root), or None for a regular file and for one that cannot be examined (opening it
    will say why)."""
    return confine.irregular(path)


def open_failure(path: str | Path, exc: OSError) -> str:
    """One line saying why ``path`` could not be opened or read, without repeating the path."""
    reason = exc.strerror or str(exc)
    return "cannot be read: " + reason.removeprefix(f"{path}: ")


def read_item(path: Path, ctx: ReadContext, *, shown: str | None = None) -> bytes | None:
    """The whole of a regular file that is one item (a note, a message), or None after
    reporting why not: not a regular file, unreadable, or over ``ctx.max_item_bytes``.
    ``shown`` is the path as problems name it."""
    name = str(path) if shown is None else shown
    try:
        with open_regular(path) as handle:
            size = os.fstat(handle.fileno()).st_size
            data = None if ctx.too_large(size) else read_capped(handle, ctx.max_item_bytes)
            if data is None:
                size = max(size, os.fstat(handle.fileno()).st_size, ctx.max_item_bytes + 1)
    except OSError as exc:
        ctx.skip(name, "file", open_failure(path, exc))
        return None
    if data is None:
        ctx.skip(name, "file", ctx.size_reason(size))
    return data


def read_capped(handle: IO[bytes], limit: int) -> bytes | None:
    """Everything ``handle`` holds, or None when that is more than ``limit`` bytes; never
    reads more than ``limit + 1`` bytes into memory."""
    data = handle.read(limit + 1)
    return None if len(data) > limit else data


def capped_lines(handle: IO[bytes], limit: int) -> Iterator[bytes | int]:
    """The lines of a binary file, each with its newline; a line longer than ``limit`` bytes
    is yielded as its length (an int) instead, read through in blocks and never held."""
    while True:
        line = handle.readline(limit + 1)
        if not line:
            return
        if len(line) <= limit or (len(line) == limit + 1 and line.endswith(b"\n")):
            yield line
            continue
        size = len(line)
        while not line.endswith(b"\n"):
            line = handle.readline(1 << 20)
            if not line:
                break
            size += len(line)
        yield size


def from_epoch(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)
