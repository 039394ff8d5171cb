"""Markdown and plain-text notes: a folder (an Obsidian vault, a TIL collection) or one file.

A folder is one source; every note in it is one :class:`Record` whose ``text`` is the note
verbatim minus its YAML front matter, and whose ``meta["body_line"]`` is the line of the file
where that text starts, so a chunk can be cited as ``file:line``.

Tags are the front matter ``tags`` plus inline ``#tags`` outside code; a tag must contain a
letter and must not look like a hex colour (``#fff``, ``#e66465``). Links are ``[[wikilink]]``
targets as written (Obsidian resolves them by name) and relative ``.md`` links resolved to paths
relative to the folder, the same form as ``Record.doc``.

A note's time is its front matter ``date``/``created``/``updated``; else its date in a
``_file_added_dates.tsv`` beside the notes (``YYYY-MM-DD<TAB>relative/path.md`` per line, as
some TIL collections keep); else the file's modification time.
"""

from __future__ import annotations

import math
import os
import posixpath
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import yaml

from stratamem.errors import IngestError
from stratamem.ingest.model import ReadContext, Record, SourceStream, from_epoch, to_utc
from stratamem.ingest.registry import register
from stratamem.types import SourceKind, rfc3339

NAME = "markdown"

_NOTE_SUFFIXES = frozenset({".md", ".markdown", ".txt"})
_MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})
_SKIPPED_DIRS = frozenset({"node_modules"})
_DATES_FILE = "_file_added_dates.tsv"
# Enough files to judge what a folder holds without walking a whole home directory.
_DETECT_SAMPLE = 2000

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_FENCE_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})")
_LIST_ITEM = re.compile(r" {0,3}(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)")
_INLINE_CODE = re.compile(r"(?<!`)(`+)(?!`)[^\n]+?(?<!`)\1(?!`)")
_FRONT_MATTER_END = re.compile(r"^(?:---|\.\.\.)[ \t]*$", re.MULTILINE)
_HEADING_START = re.compile(r"^ {0,3}#[ \t]", re.MULTILINE)
_HEADING = re.compile(r" {0,3}#[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")
# A tag starts a word (so URL fragments and `a#b` are not tags) and holds at least one letter.
_TAG = re.compile(r"(?<!\S)#([\w/-]*[^\W\d_][\w/-]*)")
# #fff and #e66465 are colours; #rgba forms only with a digit, so #face and #deadbeef stay tags.
_HEX_COLOUR = re.compile(
    r"[0-9a-fA-F]{3}|[0-9a-fA-F]{6}|(?=\D*\d)(?:[0-9a-fA-F]{4}|[0-9a-fA-F]{8})"
)
_WIKILINK = re.compile(r"!?\[\[([^\[\]\n]+)\]\]")
_MD_LINK = re.compile(
    r"\[(?:[^\[\]\n]|\[[^\[\]\n]*\])*\]"
    r"\(\s*(<[^>\n]+>|[^)\s]+)(?:\s+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^)\n]*\)))?\s*\)"
)
_URL_SCHEME = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*:")
_TAG_SPLIT = re.compile(r"[,\s]+")
_COMMA = re.compile(",")

_TIME_KEYS = ("date", "created", "updated")
_UPDATED_KEYS = ("updated", "modified", "lastmod")


class MarkdownConnector:
    """Reads a notes folder (or one note) into one document source."""

    name = NAME

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]:
        if path.is_file():
            root = path.parent
            files = [path.name]
            label = path.stem
            prefix = ""
        elif path.is_dir():
            root = path
            files = _note_files(path)
            label = path.resolve().name
            prefix = label + "/"
        else:
            raise IngestError(f"{path}: not a file or folder")
        obsidian = (root / ".obsidian").is_dir()
        yield SourceStream(
            scope=ctx.scope_for(f"notes:{label}"),
            kind=SourceKind.DOCUMENT,
            platform="obsidian" if obsidian else "markdown",
            location=str(path),
            records=_records(root, files, prefix, ctx),
            title=label,
            meta={"files": len(files)},
        )


def detect(path: Path) -> int:
    """80 for a single Markdown file, 60 for a folder of mostly notes (75 for a vault)."""
    if path.is_file():
        suffix = path.suffix.lower()
        if suffix in _MARKDOWN_SUFFIXES:
            return 80
        # Plain text could be anything (chat logs, too); leave it to more specific readers.
        return 20 if suffix == ".txt" else 0
    if not path.is_dir():
        return 0
    notes = others = 0
    for _, name in _walk(path):
        if Path(name).suffix.lower() in _NOTE_SUFFIXES:
            notes += 1
        else:
            others += 1
        if notes + others >= _DETECT_SAMPLE:
            break
    if notes == 0 or notes <= others:
        return 0
    return 75 if (path / ".obsidian").is_dir() else 60


def _walk(root: Path) -> Iterator[tuple[str, str]]:
    """(folder relative to root in POSIX form, file name) of the visible files under root."""
    for folder, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d not in _SKIPPED_DIRS]
        rel = Path(folder).relative_to(root).as_posix()
        for name in filenames:
            if not name.startswith("."):
                yield ("" if rel == "." else rel), name


def _note_files(root: Path) -> list[str]:
    """Relative POSIX paths of the notes under root, sorted."""
    found = [
        f"{folder}/{name}" if folder else name
        for folder, name in _walk(root)
        if Path(name).suffix.lower() in _NOTE_SUFFIXES
    ]
    return sorted(found)


def _records(root: Path, files: list[str], prefix: str, ctx: ReadContext) -> Iterator[Record]:
    added = _added_dates(root / _DATES_FILE)
    known = frozenset(files)
    for rel in files:
        record = _read_note(root / rel, rel, prefix + rel, added.get(rel), known, ctx)
        if record is not None:
            yield record


def _added_dates(path: Path) -> dict[str, datetime]:
    """``relative path → midnight UTC`` from a ``_file_added_dates.tsv``; empty when absent."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return {}
    dates: dict[str, datetime] = {}
    for line in lines:
        day, _, rel = line.partition("\t")
        try:
            when = date.fromisoformat(day.strip())
        except ValueError:
            continue
        dates.setdefault(rel.strip(), datetime.combine(when, time(), tzinfo=UTC))
    return dates


@dataclass(frozen=True, slots=True)
class _FrontMatter:
    data: dict[str, Any]
    body: str
    body_line: int


def _read_note(
    file: Path,
    rel: str,
    ref: str,
    added: datetime | None,
    known: frozenset[str],
    ctx: ReadContext,
) -> Record | None:
    try:
        raw = file.read_bytes()
        mtime = from_epoch(file.stat().st_mtime)
    except OSError as exc:
        ctx.skip(file, "", f"cannot be read: {exc.strerror or exc}")
        return None
    if not raw.strip():
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = raw.decode("utf-8", errors="replace")
        line = raw.count(b"\n", 0, exc.start) + 1
        ctx.skip(file, f"line {line}", "bytes that are not UTF-8 were replaced; note ingested")
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    front = _front_matter(text, file, ctx)
    if not front.body.strip():
        return None
    data = front.data
    masked = _mask_code(front.body)
    ts = _first_time(data, _TIME_KEYS) or added or mtime
    updated = _first_time(data, _UPDATED_KEYS) or mtime
    meta: dict[str, Any] = {
        "aliases": _string_list(data.get("aliases", data.get("alias"))),
        "front_matter": _json_safe(data),
        "body_line": front.body_line,
        "updated": rfc3339(updated),
    }
    return Record(
        text=front.body,
        ref=ref,
        ts=ts,
        author=_author(data.get("author")),
        id=rel,
        title=_title(data, front.body, masked, file),
        tags=_tags(data.get("tags", data.get("tag")), masked),
        links=_links(masked, posixpath.dirname(rel), known),
        doc=rel,
        meta=meta,
    )


def _front_matter(text: str, file: Path, ctx: ReadContext) -> _FrontMatter:
    """The parsed front matter and the body after it; invalid front matter stays in the body."""
    none = _FrontMatter({}, text, 1)
    first_end = text.find("\n")
    if first_end == -1 or text[:first_end].rstrip() != "---":
        return none
    closing = _FRONT_MATTER_END.search(text, first_end + 1)
    if closing is None:
        return none
    closing_line = text.count("\n", 0, closing.start()) + 1
    try:
        data = yaml.load(text[first_end + 1 : closing.start()], Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 2 if mark is not None else 1
        reason = " ".join(str(getattr(exc, "problem", None) or exc).split())
        ctx.skip(file, f"line {line}", f"invalid front matter: {reason}; kept as text")
        return none
    if data is None:
        data = {}
    if not isinstance(data, dict):
        ctx.skip(file, "line 2", "invalid front matter: not a mapping; kept as text")
        return none
    body_start = text.find("\n", closing.end())
    body = "" if body_start == -1 else text[body_start + 1 :]
    return _FrontMatter(data, body, closing_line + 1)


def _mask_code(text: str) -> str:
    """``text`` with fenced, indented and inline code blanked out, offsets kept.

    Tags, links and headings are searched in the masked text, so ``#include`` in a code block
    is no tag and ``[[ -n "$x" ]]`` in a shell snippet is no wikilink.
    """
    out: list[str] = []
    fence = ""
    prev_blank = True
    in_indented = in_list = False
    for line in text.split("\n"):
        if fence:
            out.append(" " * len(line))
            stripped = line.strip()
            if _indent(line) < 4 and stripped.startswith(fence) and not stripped.strip(fence[0]):
                fence = ""
            continue
        opening = _FENCE_OPEN.match(line)
        if opening and not (opening[1][0] == "`" and "`" in line[opening.end() :]):
            fence = opening[1]
            out.append(" " * len(line))
            prev_blank = in_indented = False
            continue
        if not line.strip():
            out.append(line)
            prev_blank = True
            continue
        indent = _indent(line)
        if indent >= 4 and not in_list and (in_indented or prev_blank):
            in_indented = True
            out.append(" " * len(line))
            prev_blank = False
            continue
        in_indented = False
        if indent < 4:
            if _LIST_ITEM.match(line):
                in_list = True
            elif prev_blank:
                in_list = False
        out.append(line)
        prev_blank = False
    return _INLINE_CODE.sub(lambda m: " " * len(m[0]), "\n".join(out))


def _indent(line: str) -> int:
    width = 0
    for char in line:
        if char == " ":
            width += 1
        elif char == "\t":
            width += 4 - width % 4
        else:
            break
    return width


def _title(data: Mapping[str, Any], body: str, masked: str, file: Path) -> str:
    value = data.get("title")
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        title = str(value).strip()
        if title:
            return title
    for start in _HEADING_START.finditer(masked):
        # Found in the masked text (so not in a code block), read from the original line, so
        # `code` in the heading stays.
        end = body.find("\n", start.start())
        heading = _HEADING.match(body[start.start() : None if end == -1 else end])
        if heading is not None and heading[1].strip():
            return heading[1].strip()
    return file.stem


def _tags(declared: Any, masked: str) -> tuple[str, ...]:
    found = [item.lstrip("#") for item in _string_list(declared, split=_TAG_SPLIT)]
    for match in _TAG.finditer(masked):
        tag = match[1].rstrip("/-")
        if tag and not _HEX_COLOUR.fullmatch(tag):
            found.append(tag)
    return _unique(tag.lower() for tag in found if tag)


def _links(masked: str, note_dir: str, known: frozenset[str]) -> tuple[str, ...]:
    found: list[tuple[int, str]] = []
    for match in _WIKILINK.finditer(masked):
        target = match[1].split("|", 1)[0].split("#", 1)[0].rstrip("\\").strip()
        if target:
            found.append((match.start(), target))
    for match in _MD_LINK.finditer(masked):
        resolved = _resolve_md_link(match[1], note_dir, known)
        if resolved:
            found.append((match.start(), resolved))
    found.sort(key=lambda pair: pair[0])
    return _unique(target for _, target in found)


def _resolve_md_link(target: str, note_dir: str, known: frozenset[str]) -> str | None:
    """A relative link to a Markdown file as a path relative to the folder, else ``None``.

    A link that names no note beside its own note but does name one from the folder's top is
    taken from the top: collections written for a site often link that way.
    """
    target = target.strip("<>").split("#", 1)[0].split("?", 1)[0]
    if not target or _URL_SCHEME.match(target):
        return None
    target = unquote(target)
    if Path(target).suffix.lower() not in _MARKDOWN_SUFFIXES:
        return None
    if target.startswith("/"):
        return posixpath.normpath(target.lstrip("/"))
    resolved = posixpath.normpath(posixpath.join(note_dir, target))
    if resolved not in known and not target.startswith("."):
        from_top = posixpath.normpath(target)
        if from_top in known:
            return from_top
    return resolved


def _first_time(data: Mapping[str, Any], keys: tuple[str, ...]) -> datetime | None:
    for key in keys:
        when = _as_time(data.get(key))
        if when is not None:
            return when
    return None


def _as_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return to_utc(value)
    if isinstance(value, date):
        return datetime.combine(value, time(), tzinfo=UTC)
    if isinstance(value, str):
        text = value.strip()
        try:
            return to_utc(datetime.fromisoformat(text))
        except ValueError:
            return None
    return None


def _author(value: Any) -> str | None:
    names = _string_list(value)
    return ", ".join(names) if names else None


def _string_list(value: Any, *, split: re.Pattern[str] | None = None) -> list[str]:
    """A front matter value that may be a list or a single (comma-separated) string."""
    if value is None or isinstance(value, bool):
        return []
    if isinstance(value, list | tuple):
        items = [str(item).strip() for item in value if item is not None]
    else:
        items = (split or _COMMA).split(str(value))
    return [item.strip() for item in items if item.strip()]


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def _json_safe(value: Any) -> Any:
    """Front matter as JSON can hold it: dates as ISO strings, keys as strings."""
    if isinstance(value, dict):
        return {str(key): _json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set):
        return [_json_safe(item) for item in value]
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


register(
    NAME,
    MarkdownConnector,
    detect,
    "a folder of Markdown/text notes (Obsidian vaults too) or a single .md file",
)
