"""Generic JSON Lines: one object per line with a ``text`` and optional metadata.

Recognised fields (first name wins; aliases in brackets)::

    text [content, body]         required, a non-empty string
    id [_id]                     string or number
    timestamp [ts, time, date]   ISO 8601 string, or epoch seconds / milliseconds
    author [speaker], author_id, title, thread, reply_to
    tags, recipients, mentions   list of strings, or one comma-separated string
    source                       groups lines into streams (default: the file's stem)
    kind                         chat | email | document | record (default: record)

Anything else is kept in ``Record.meta["fields"]``. Each distinct ``source`` becomes one stream:
a first pass over the file collects the sources and reports every bad line once; then each
stream re-reads the file and keeps its own lines, so memory stays bounded however large the
file is. A line is cited as ``file:line`` (1-based).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from pathlib import Path
from typing import Any

from stratamem.errors import IngestError
from stratamem.ingest.model import ReadContext, Record, SourceStream, from_epoch, to_utc
from stratamem.ingest.registry import register
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


class JsonlConnector:
    """Reads a ``.jsonl`` file (or a folder of them) into one stream per ``source``."""

    name = NAME

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]:
        if path.is_file():
            yield from _read_file(path, path.name, ctx, in_folder=False)
        elif path.is_dir():
            label = path.resolve().name
            for file in _jsonl_files(path):
                name = f"{label}/{file.relative_to(path).as_posix()}"
                yield from _read_file(file, name, ctx, in_folder=True)
        else:
            raise IngestError(f"{path}: not a file or folder")


def detect(path: Path) -> int:
    """90 for a ``.jsonl``/``.ndjson`` file, 50 for a folder that holds mostly such files."""
    if path.is_file():
        return 90 if path.suffix.lower() in _SUFFIXES else 0
    if not path.is_dir():
        return 0
    names = [entry.name for entry in os.scandir(path) if entry.is_file()]
    jsonl = sum(Path(name).suffix.lower() in _SUFFIXES for name in names)
    return 50 if jsonl and jsonl > len(names) - jsonl else 0


def _jsonl_files(root: Path) -> list[Path]:
    found = [
        file
        for file in root.rglob("*")
        if file.is_file()
        and file.suffix.lower() in _SUFFIXES
        and not any(part.startswith(".") for part in file.relative_to(root).parts)
    ]
    return sorted(found, key=lambda file: file.relative_to(root).as_posix())


@dataclass(slots=True)
class _Row:
    """One good line: its record, its source and kind, and what was odd about it."""

    record: Record
    source: str
    kind: SourceKind
    warnings: list[str] = field(default_factory=list)


def _read_file(
    file: Path, name: str, ctx: ReadContext, *, in_folder: bool
) -> Iterator[SourceStream]:
    stem = file.stem
    sources: dict[str, SourceKind] = {}
    try:
        for number, row in _rows(file, name):
            if isinstance(row, str):
                ctx.skip(file, f"line {number}", row)
                continue
            for warning in row.warnings:
                ctx.skip(file, f"line {number}", warning)
            sources.setdefault(row.source, row.kind)
    except OSError as exc:
        ctx.skip(file, "", f"cannot be read: {exc.strerror or exc}")
        return
    several = len(sources) > 1
    for source, kind in sources.items():
        if several:
            scope = ctx.scope_for(f"jsonl:{source}", source)
        else:
            # Files of one folder must not share the user's scope, or each would replace the last.
            scope = ctx.scope_for(f"jsonl:{stem}", stem if in_folder else None)
        yield SourceStream(
            scope=scope,
            kind=kind,
            platform="jsonl",
            location=str(file),
            records=_source_records(file, name, source),
            title=source,
            meta={"source": source},
        )


def _source_records(file: Path, name: str, source: str) -> Iterator[Record]:
    """The records of one source, re-read from the file; bad lines were reported already."""
    for _, row in _rows(file, name):
        if not isinstance(row, str) and row.source == source:
            yield row.record


def _rows(file: Path, name: str) -> Iterator[tuple[int, _Row | str]]:
    """Every non-blank line as a parsed row, or as the reason it cannot be read."""
    default_source = file.stem
    with file.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if number == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")
            if not raw.strip():
                continue
            warnings: list[str] = []
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                line = raw.decode("utf-8", errors="replace")
                warnings.append("bytes that are not UTF-8 were replaced")
            row = _parse(line, f"{name}:{number}", default_source, warnings)
            yield number, row


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
            kind = SourceKind(str(raw_kind).strip().lower())
        except ValueError:
            warnings.append(f"unknown kind {raw_kind!r}; read as record")

    ts = None
    raw_time = _first(value, _TIME_KEYS)
    if raw_time is not None:
        ts = _as_time(raw_time)
        if ts is None:
            warnings.append(f"unrecognised timestamp {raw_time!r}; kept without a time")

    source = value.get("source")
    record = Record(
        text=text,
        ref=ref,
        ts=ts,
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
    source_name = _string(source) or default_source
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
    """An ISO 8601 string or epoch seconds/milliseconds as UTC; None when unreadable."""
    if isinstance(value, str):
        text = value.strip()
        try:
            number = float(text)
        except ValueError:
            return _iso(text)
        return _epoch(number)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _epoch(float(value))
    return None


def _iso(text: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        try:
            return datetime.combine(date.fromisoformat(text), time(), tzinfo=UTC)
        except ValueError:
            return None
    return to_utc(parsed)


def _epoch(number: float) -> datetime | None:
    if not math.isfinite(number):
        return None
    if abs(number) >= _MILLIS_FROM:
        number /= 1000
    try:
        return from_epoch(number)
    except (OverflowError, OSError, ValueError):
        return None


def _json_type(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"


register(
    NAME,
    JsonlConnector,
    detect,
    "JSON Lines: one object per line with text, timestamp, author, source, kind",
)
