"""Generic JSON Lines: one object per line with a ``text`` and optional metadata.

Recognised fields (first name wins; aliases in brackets)::

    text [content, body]         required, a non-empty string
    id [_id]                     string or number
    timestamp [ts, time, date]   ISO 8601 string, or epoch seconds / milliseconds
    author [speaker], author_id, title, thread, reply_to
    tags, recipients, mentions   list of strings, or one comma-separated string
    source                       the source the line belongs to (default: the file's own)
    kind                         chat | email | document | record (default: record)

Anything else is kept in ``Record.meta["fields"]``. A line is cited as ``file:line`` (1-based).

Each source is one stream, and a line's source depends on that line and its file's name alone,
never on the other lines: a line that names a ``source`` is filed under ``jsonl:<source>``, and
a line that names none, or names the file's stem (``"source": "export"`` in ``export.jsonl``),
under the file's own, ``jsonl:<file stem>``. With a scope given (``ReadContext.scope``), a named
source is ``<scope>/<source>`` and the file's own is the scope itself (``<scope>/<file stem>``
for a file of a folder, so that the files do not share it).

The file is read twice whatever the number of sources, so the time is linear in its size. The
first pass parses every line, reports every bad one once, and notes, for each source, the runs
of consecutive lines that belong to it as ``(byte offset, first line, last line)``; each stream
then seeks to its own runs and parses only its lines. Memory holds those runs and never the
records: one run for a file of one source, at most one per line (24 bytes) when sources
alternate line by line; the source names are the only other thing kept. A line longer than
``ReadContext.max_item_bytes`` is skipped without being held, and a file that changes between
the passes fails its streams instead of yielding lines that were never checked.
"""

from __future__ import annotations

import json
import math
import os
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from pathlib import Path
from typing import IO, Any

from stratamem.errors import IngestError
from stratamem.ingest.model import (
    ReadContext,
    Record,
    SourceStream,
    capped_lines,
    clean_text,
    describe_failure,
    entries,
    from_epoch,
    irregular,
    open_regular,
    utc_or_none,
    walk,
)
from stratamem.ingest.registry import ConnectorSpec
from stratamem.types import SourceKind

NAME = "jsonl"

_SUFFIXES = frozenset({".jsonl", ".ndjson"})
_TEXT_KEYS = ("text", "content", "body")
_ID_KEYS = ("id", "_id")
_TIME_KEYS = ("timestamp", "ts", "time", "date")
_AUTHOR_KEYS = ("author", "speaker")
_KNOWN_KEYS = frozenset(
    {
        *_TEXT_KEYS,
        *_ID_KEYS,
        *_TIME_KEYS,
        *_AUTHOR_KEYS,
        "author_id",
        "title",
        "thread",
        "reply_to",
        "tags",
        "recipients",
        "mentions",
        "source",
        "kind",
    }
)
# Epoch numbers above this are milliseconds: as seconds they would lie after the year 5000.
_MILLIS_FROM = 100_000_000_000
# How much of an odd value a problem message quotes.
_SHOWN = 80


class JsonlConnector:
    """Reads a ``.jsonl`` file (or a folder of them) into one stream per ``source``."""

    name = NAME

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]:
        if path.is_dir():
            label = path.resolve().name
            for file in _jsonl_files(path, ctx):
                name = f"{label}/{file.relative_to(path).as_posix()}"
                yield from _read_file(file, name, ctx, in_folder=True)
            return
        try:
            open_regular(path).close()
        except OSError as exc:
            raise IngestError(f"{path}: cannot be read: {exc.strerror or exc}") from None
        yield from _read_file(path, path.name, ctx, in_folder=False)


def detect(path: Path) -> int:
    """90 for a ``.jsonl``/``.ndjson`` file, 50 for a folder that holds mostly such files."""
    if path.is_file():
        return 90 if path.suffix.lower() in _SUFFIXES else 0
    if not path.is_dir():
        return 0
    names = [entry.name for entry in entries(path) if entry.is_file]
    jsonl = sum(Path(name).suffix.lower() in _SUFFIXES for name in names)
    return 50 if jsonl and jsonl > len(names) - jsonl else 0


def _jsonl_files(root: Path, ctx: ReadContext) -> list[Path]:
    """The JSONL files under ``root`` (hidden ones left out); a FIFO, device or socket with a
    JSONL name is reported and never opened."""
    found = []
    for top, folders, files in walk(root):
        folders[:] = [name for name in folders if not name.startswith(".")]
        for name in files:
            file = Path(top, name)
            if file.suffix.lower() not in _SUFFIXES or name.startswith("."):
                continue
            reason = irregular(file)
            if reason is None:
                found.append(file)
            else:
                ctx.skip(file, "file", reason)
    return sorted(found, key=lambda file: file.relative_to(root).as_posix())


@dataclass(slots=True)
class _Row:
    """One good line: its record, its source and kind, and what was odd about it."""

    record: Record
    source: str
    kind: SourceKind
    warnings: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Source:
    """Where one source's lines lie: ``runs`` holds ``(offset, first line, last line)``
    triples, flattened."""

    kind: SourceKind
    runs: array[int] = field(default_factory=lambda: array("q"))


@dataclass(frozen=True, slots=True)
class _Stamp:
    """What identifies the file's content between the two passes."""

    size: int
    mtime_ns: int
    inode: int

    @classmethod
    def of(cls, handle: IO[bytes]) -> _Stamp:
        st = os.fstat(handle.fileno())
        return cls(st.st_size, st.st_mtime_ns, st.st_ino)


def _read_file(
    file: Path, name: str, ctx: ReadContext, *, in_folder: bool
) -> Iterator[SourceStream]:
    stem = clean_text(file.stem)
    try:
        with open_regular(file) as handle:
            stamp = _Stamp.of(handle)
            sources = _index(handle, file, name, stem, ctx)
    except OSError as exc:
        ctx.skip(file, "file", f"cannot be read: {exc.strerror or exc}")
        return
    for source, entry in sources.items():
        if source != stem:
            scope = ctx.scope_for(f"jsonl:{source}", source)
        else:
            # Files of one folder must not share the user's scope, or each would replace the last.
            scope = ctx.scope_for(f"jsonl:{stem}", stem if in_folder else None)
        yield SourceStream(
            scope=scope,
            kind=entry.kind,
            platform="jsonl",
            location=str(file),
            records=_source_records(file, name, stem, source, entry, stamp, ctx),
            title=source,
            meta={"source": source},
        )


def _index(
    handle: IO[bytes], file: Path, name: str, stem: str, ctx: ReadContext
) -> dict[str, _Source]:
    """The first pass: every bad line reported, every good one noted in its source's runs."""
    sources: dict[str, _Source] = {}
    current: _Source | None = None  # the source of the run still open
    offset = 0
    for number, raw in enumerate(capped_lines(handle, ctx.max_item_bytes), start=1):
        start = offset
        offset += raw if isinstance(raw, int) else len(raw)
        if isinstance(raw, int):
            ctx.skip(file, f"line {number}", ctx.size_reason(raw))
            current = None
            continue
        row = _read_line(raw, number, name, stem)
        if row is None:
            continue
        if isinstance(row, str):
            ctx.skip(file, f"line {number}", row)
            current = None
            continue
        for warning in row.warnings:
            ctx.skip(file, f"line {number}", warning)
        entry = sources.get(row.source)
        if entry is None:
            entry = sources[row.source] = _Source(row.kind)
        if entry is current:
            entry.runs[-1] = number
        else:
            entry.runs.extend((start, number, number))
            current = entry
    return sources


def _source_records(
    file: Path,
    name: str,
    stem: str,
    source: str,
    entry: _Source,
    stamp: _Stamp,
    ctx: ReadContext,
) -> Iterator[Record]:
    """The second pass for one source: its runs, read again; bad lines were reported already."""
    with open_regular(file) as handle:
        if _Stamp.of(handle) != stamp:
            raise IngestError(f"{file}: changed while it was being read; ingest it again")
        runs = entry.runs
        for at in range(0, len(runs), 3):
            offset, number, last = runs[at : at + 3]
            handle.seek(offset)
            for raw in capped_lines(handle, ctx.max_item_bytes):
                if isinstance(raw, int):
                    break
                # Only blank lines lie between the good lines of a run.
                row = _read_line(raw, number, name, stem)
                if isinstance(row, str):
                    ctx.skip(file, f"line {number}", row)
                elif row is not None and row.source == source:
                    yield row.record
                if number == last:
                    break
                number += 1


def _read_line(raw: bytes, number: int, name: str, stem: str) -> _Row | str | None:
    """A line as a parsed row, or the reason it cannot be read; None for a blank line."""
    # A BOM starts the file, or any line of files joined with cat.
    raw = raw.removeprefix(b"\xef\xbb\xbf")
    if not raw.strip():
        return None
    warnings: list[str] = []
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        line = raw.decode("utf-8", errors="replace")
        warnings.append("bytes that are not UTF-8 were replaced")
    try:
        return _parse(line, f"{name}:{number}", stem, warnings)
    except Exception as exc:  # any failure of one line skips that line
        return describe_failure(exc)


def _parse(line: str, ref: str, default_source: str, warnings: list[str]) -> _Row | str:
    try:
        value = json.loads(line.rstrip("\r\n"))
    except json.JSONDecodeError as exc:
        return f"invalid JSON at column {exc.colno}: {exc.msg}"
    if not isinstance(value, dict):
        return f"not a JSON object but {_json_type(value)}"
    text = _first(value, _TEXT_KEYS)
    if not isinstance(text, str) or not text.strip():
        return "no text (text, content or body)"

    kind = SourceKind.RECORD
    raw_kind = value.get("kind")
    if raw_kind is not None:
        try:
            kind = SourceKind(raw_kind.strip().lower() if isinstance(raw_kind, str) else "")
        except ValueError:
            warnings.append(f"unknown kind {_shown(raw_kind)}; read as record")

    ts = None
    raw_time = _first(value, _TIME_KEYS)
    if raw_time is not None:
        ts = _as_time(raw_time)
        if ts is None:
            warnings.append(f"unrecognised timestamp {_shown(raw_time)}; kept without a time")

    source = value.get("source")
    record = Record(
        text=text,
        ref=ref,
        time=ts,
        author=_string(_first(value, _AUTHOR_KEYS)),
        author_id=_string(value.get("author_id")),
        id=_string(_first(value, _ID_KEYS)),
        thread=_string(value.get("thread")),
        reply_to=_string(value.get("reply_to")),
        title=_string(value.get("title")),
        recipients=_strings(value.get("recipients")),
        mentions=_strings(value.get("mentions")),
        tags=_strings(value.get("tags")),
        meta={"fields": {key: item for key, item in value.items() if key not in _KNOWN_KEYS}},
    )
    source_name = clean_text(_string(source) or default_source)
    return _Row(record, source_name, kind, warnings)


def _first(value: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if value.get(key) is not None:
            return value[key]
    return None


def _string(value: Any) -> str | None:
    if isinstance(value, str):
        return value.strip() or None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def _strings(value: Any) -> tuple[str, ...]:
    items: list[str]
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, list):
        items = [str(item) for item in value if isinstance(item, str | int)]
    else:
        return ()
    return tuple(dict.fromkeys(text for item in items if (text := str(item).strip())))


def _as_time(value: Any) -> datetime | None:
    """An ISO 8601 string or epoch seconds/milliseconds as UTC; None when unreadable or off
    the calendar (year 1 or 9999 with a time zone, epochs past the year 9999)."""
    if isinstance(value, str):
        text = value.strip()
        try:
            number = float(text)
        except ValueError:
            return _iso(text)
        return _epoch(number)
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return _epoch(float(value))
        except OverflowError:  # an integer too large for a float
            return None
    return None


def _iso(text: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        try:
            return datetime.combine(date.fromisoformat(text), time(), tzinfo=UTC)
        except ValueError:
            return None
    return utc_or_none(parsed)


def _epoch(number: float) -> datetime | None:
    if not math.isfinite(number):
        return None
    if abs(number) >= _MILLIS_FROM:
        number /= 1000
    try:
        return from_epoch(number)
    except (OverflowError, OSError, ValueError):
        return None


def _shown(value: Any) -> str:
    """``repr`` of a value for a problem message, cut short (a line may be megabytes)."""
    if isinstance(value, list | dict):
        return f"<{_json_type(value)}>"
    text = repr(value[: _SHOWN + 1] if isinstance(value, str) else value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"


CONNECTOR = ConnectorSpec(
    NAME,
    JsonlConnector,
    detect,
    "JSON Lines: one object per line with text, timestamp, author, source, kind",
)
