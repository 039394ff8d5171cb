"""Markdown and plain-text notes: a folder (an Obsidian vault, a TIL collection) or one file.

A folder is one source; every note in it is one :class:`Record` whose ``text`` is the note
verbatim minus its YAML front matter, and whose ``meta["body_line"]`` is the line of the file
where that text starts, so a chunk can be cited as ``file:line``.

Tags are the front matter ``tags`` plus inline ``#tags`` outside code; a tag must contain a
letter and must not look like a hex colour (``#fff``, ``#e66465``). Links are ``[[wikilink]]``
targets as written (Obsidian resolves them by name) and relative ``.md`` links resolved to paths
relative to the folder, the same form as ``Record.doc``.

Its front matter, read, is kept in ``meta["front_matter"]`` (JSON-safe: dates as ISO text), and
``meta["front_matter_unreadable"]`` is set when there was front matter that could not be read;
:mod:`stratamem.memory.structure` makes facts of it.

A note's time is its front matter ``date``/``created``/``updated``; else its date in a
``_file_added_dates.tsv`` beside the notes (``YYYY-MM-DD<TAB>relative/path.md`` per line, as
some TIL collections keep); else the file's modification time.

Bounds. A note is read whole only up to ``ReadContext.max_item_bytes``; FIFOs, devices and
sockets are reported, never opened for reading. Front matter is refused (and kept as text) when
its YAML aliases would expand it past :data:`_MAX_FRONT_MATTER_VALUES` values or nest it past
:data:`_MAX_FRONT_MATTER_DEPTH` levels, so a few hundred bytes of "billion laughs" cannot fill
memory. Everything that scans a note runs in time linear in its length, however long a line.
A note that fails in any other way is reported and skipped; the other notes go on.
"""

from __future__ import annotations

import math
import posixpath
import re
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import yaml

from stratamem.errors import IngestError
from stratamem.ingest.model import (
    ReadContext,
    Record,
    SourceStream,
    clean_text,
    describe_failure,
    from_epoch,
    irregular,
    open_failure,
    open_regular,
    read_capped,
    read_item,
    utc_or_none,
    walk,
)
from stratamem.ingest.registry import ConnectorSpec
from stratamem.types import SourceKind, rfc3339

NAME = "markdown"

_NOTE_SUFFIXES = frozenset({".md", ".markdown", ".txt"})
_MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})
_SKIPPED_DIRS = frozenset({"node_modules"})
_DATES_FILE = "_file_added_dates.tsv"
# Enough files to judge what a folder holds without walking a whole home directory.
_DETECT_SAMPLE = 2000
# A dates file larger than this is no list of dates.
_DATES_FILE_LIMIT = 16 * 1024 * 1024
# Front matter past these bounds is refused: what notes hold is a few dozen values.
_MAX_FRONT_MATTER_VALUES = 10_000
_MAX_FRONT_MATTER_DEPTH = 32

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_FENCE_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})")
_LIST_ITEM = re.compile(r" {0,3}(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)")
_BACKTICKS = re.compile(r"`+")
_FRONT_MATTER_END = re.compile(r"^(?:---|\.\.\.)[ \t]*$", re.MULTILINE)
_HEADING_START = re.compile(r"^ {0,3}#[ \t]", re.MULTILINE)
# A tag starts a word (so URL fragments and `a#b` are not tags) and holds at least one letter.
_TAG = re.compile(r"(?<!\S)#([\w/-]*[^\W\d_][\w/-]*)")
# #fff and #e66465 are colours; #rgba forms only with a digit, so #face and #deadbeef stay tags.
_HEX_COLOUR = re.compile(
    r"[0-9a-fA-F]{3}|[0-9a-fA-F]{6}|(?=\D*\d)(?:[0-9a-fA-F]{4}|[0-9a-fA-F]{8})"
)
_WIKILINK = re.compile(r"!?\[\[([^\[\]\n]+)\]\]")
# No part of a link may run past the start of the next one ("[", "<", "(" end the parts that
# could), so each scan stops where the next begins and a long line is read in linear time.
_MD_LINK = re.compile(
    r"\[(?:[^\[\]\n]|\[[^\[\]\n]*\])*\]"
    r"\(\s*(<[^<>\n]+>|[^)\s\[]+)(?:\s+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^()\n]*\)))?\s*\)"
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
            reason = irregular(path) or "not a file or folder"
            raise IngestError(f"{clean_text(str(path))}: {reason}")
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
    """80 for a single Markdown file, 60 for a folder of mostly notes (75 for a vault). A
    ``.txt`` file counts as a note only when it reads as prose: one whose lines are mostly
    records (``{…}``, ``[…]``, ``(…)``, or led by a time, as logs and data dumps are) is not."""
    if path.is_file():
        suffix = path.suffix.lower()
        if suffix in _MARKDOWN_SUFFIXES:
            return 80
        # Plain text could be anything (chat logs, too); leave it to more specific readers.
        return 20 if suffix == ".txt" and not _reads_as_records(path) else 0
    if not path.is_dir():
        return 0
    notes = others = 0
    for folder, name in _walk(path):
        suffix = Path(name).suffix.lower()
        if suffix in _MARKDOWN_SUFFIXES or (
            suffix in _NOTE_SUFFIXES and not _reads_as_records(path / folder / name)
        ):
            notes += 1
        else:
            others += 1
        if notes + others >= _DETECT_SAMPLE:
            break
    if notes == 0 or notes <= others:
        return 0
    return 75 if (path / ".obsidian").is_dir() else 60


# A line that opens a record rather than a sentence: a data literal (JSON, EDN, an
# s-expression, markup) or a timestamp (a log line).
_RECORD_LINE = re.compile(r"\s*(?:[{\[(<]|#\{|\d{1,4}[-:/.]\d{1,2}[-:/.T ]|\[\d{1,4}[-:/.]\d)")
_SNIFF_BYTES = 4096


def _reads_as_records(file: Path) -> bool:
    """Whether the head of a text file is mostly lines that open records, not prose."""
    try:
        with open_regular(file) as handle:
            head = handle.read(_SNIFF_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return False
    lines = [line for line in head.splitlines()[:40] if line.strip()]
    if len(head) == _SNIFF_BYTES and len(lines) > 1:
        lines.pop()  # cut off by the sniff
    if len(lines) < 3:
        return False
    return sum(bool(_RECORD_LINE.match(line)) for line in lines) >= 0.8 * len(lines)


def _walk(root: Path) -> Iterator[tuple[str, str]]:
    """(folder relative to root in POSIX form, file name) of the visible files under root."""
    for folder, dirnames, filenames in walk(root):
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
    added = _added_dates(root / _DATES_FILE, ctx)
    # A name that is not UTF-8 is cited with U+FFFD in place of its bad bytes.
    shown = {rel: clean_text(rel) for rel in files}
    known = frozenset(shown.values())
    for rel in files:
        file = root / rel
        record: Record | None = None
        with ctx.item(clean_text(str(file)), "file"):
            record = _read_note(file, shown[rel], prefix + shown[rel], added.get(rel), known, ctx)
        if record is not None:
            yield record


def _added_dates(path: Path, ctx: ReadContext) -> dict[str, datetime]:
    """``relative path → midnight UTC`` from a ``_file_added_dates.tsv``; empty when absent."""
    if not path.exists():
        return {}
    try:
        with open_regular(path) as handle:
            data = read_capped(handle, _DATES_FILE_LIMIT)
    except OSError as exc:
        ctx.skip(clean_text(str(path)), "file", open_failure(path, exc))
        return {}
    if data is None:
        ctx.skip(clean_text(str(path)), "file", f"over {_DATES_FILE_LIMIT:,} bytes; not read")
        return {}
    dates: dict[str, datetime] = {}
    for line in data.decode("utf-8", errors="replace").splitlines():
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
    unreadable: bool = False  # there was front matter, but it could not be read


def _read_note(
    file: Path,
    rel: str,
    ref: str,
    added: datetime | None,
    known: frozenset[str],
    ctx: ReadContext,
) -> Record | None:
    shown = clean_text(str(file))
    not_regular = irregular(file)
    if not_regular is not None:
        ctx.skip(shown, "file", not_regular)
        return None
    raw = read_item(file, ctx, shown=shown)
    if raw is None or not raw.strip():
        return None
    mtime = _mtime(file)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = raw.decode("utf-8", errors="replace")
        line = raw.count(b"\n", 0, exc.start) + 1
        ctx.skip(shown, f"line {line}", "bytes that are not UTF-8 were replaced; note ingested")
    del raw
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    front = _front_matter(text, shown, ctx)
    del text
    if not front.body.strip():
        return None
    data = front.data
    masked = _mask_code(front.body)
    ts = _first_time(data, _TIME_KEYS, shown, ctx) or added or mtime
    updated = _first_time(data, _UPDATED_KEYS, shown, ctx) or mtime
    meta: dict[str, Any] = {
        "aliases": _string_list(data.get("aliases", data.get("alias"))),
        "front_matter": _json_safe(data),
        "body_line": front.body_line,
        "updated": rfc3339(updated),
    }
    if front.unreadable:
        # Unread is not empty: what the note's properties say is unknown, not "nothing".
        meta["front_matter_unreadable"] = True
    return Record(
        text=front.body,
        ref=ref,
        time=ts,
        author=_author(data.get("author")),
        id=rel,
        title=_title(data, front.body, masked, file.stem),
        tags=_tags(data.get("tags", data.get("tag")), masked),
        links=_links(masked, posixpath.dirname(rel), known),
        doc=rel,
        meta=meta,
    )


def _mtime(file: Path) -> datetime | None:
    try:
        return from_epoch(file.stat().st_mtime)
    except (OSError, OverflowError, ValueError):
        return None


def _front_matter(text: str, shown: str, ctx: ReadContext) -> _FrontMatter:
    """The parsed front matter and the body after it; invalid front matter stays in the body."""
    none = _FrontMatter({}, text, 1)
    unread = _FrontMatter({}, text, 1, unreadable=True)
    first_end = text.find("\n")
    if first_end == -1 or text[:first_end].rstrip() != "---":
        return none
    closing = _FRONT_MATTER_END.search(text, first_end + 1)
    if closing is None:
        return none
    closing_line = text.count("\n", 0, closing.start()) + 1
    try:
        data = _load_yaml(text[first_end + 1 : closing.start()])
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 2 if mark is not None else 1
        reason = " ".join(str(getattr(exc, "problem", None) or exc).split())
        ctx.skip(shown, f"line {line}", f"invalid front matter: {reason}; kept as text")
        return unread
    except Exception as exc:  # a bad date, a refused alias: the note goes on without it
        reason = str(exc) if isinstance(exc, _Refused) else describe_failure(exc)
        ctx.skip(shown, "front matter", f"invalid front matter: {reason}; kept as text")
        return unread
    if data is None:
        data = {}
    if not isinstance(data, dict):
        ctx.skip(shown, "line 2", "invalid front matter: not a mapping; kept as text")
        return unread
    body_start = text.find("\n", closing.end())
    body = "" if body_start == -1 else text[body_start + 1 :]
    return _FrontMatter(_plain(data, 0), body, closing_line + 1)


class _Refused(ValueError):
    """Front matter past the bounds on its size once aliases are expanded."""


def _load_yaml(text: str) -> Any:
    """The YAML document in ``text``, safely loaded, after :func:`_check_expansion`."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a YAML node graph whose aliases would expand it past the bounds.

    An alias shares its anchor's node, so a few hundred bytes can describe a tree of a billion
    values (nine lists of nine aliases to the list before). Walked once with each node's
    expanded size and depth kept, the graph costs time linear in its own size; an alias that
    refers to a collection it is inside of (a cycle) is refused too.
    """
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        children = _children(node)
        if finished:
            size = 1 + sum(sizes[id(child)] for child in children)
            depth = 1 + max((depths[id(child)] for child in children), default=0)
            if size > _MAX_FRONT_MATTER_VALUES:
                raise _Refused(
                    f"more than {_MAX_FRONT_MATTER_VALUES:,} values once its aliases are expanded"
                )
            if depth > _MAX_FRONT_MATTER_DEPTH:
                raise _Refused(f"nested more than {_MAX_FRONT_MATTER_DEPTH} levels deep")
            sizes[key], depths[key] = size, depth
            open_nodes.discard(key)
        elif key in open_nodes:
            # Depth-first, the open nodes are the ones this node is inside of.
            raise _Refused("an alias refers to a collection it is part of")
        elif key not in sizes:
            open_nodes.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in children)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _plain(value: Any, depth: int) -> Any:
    """Front matter as the rest of this module reads it: string keys, lists for sequences and
    sets, text without lone surrogates, integers past 64 bits as text; dates stay dates."""
    if depth > _MAX_FRONT_MATTER_DEPTH:
        return None
    if isinstance(value, dict):
        return {_text(key): _plain(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(item, depth + 1) for item in value]
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, bool | float | date) or value is None:
        return value
    if isinstance(value, int):
        return value if value.bit_length() < 64 else _text(value)
    return _text(value)


def _text(value: Any) -> str:
    """``str(value)``; an integer too long for ``str`` is written in hex."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 8192:
        return hex(value)
    if isinstance(value, bytes):
        return clean_text(value.decode("utf-8", errors="replace"))
    return clean_text(str(value))


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
        out.append(_mask_inline_code(line))
        prev_blank = False
    return "\n".join(out)


def _mask_inline_code(line: str) -> str:
    """``line`` with its code spans blanked: a run of backticks up to the next run of the same
    length. Each run is looked at once, so the time is linear however many runs never close."""
    if "`" not in line:
        return line
    runs = [(m.start(), m.end()) for m in _BACKTICKS.finditer(line)]
    later: dict[int, deque[int]] = {}
    for index, (start, end) in enumerate(runs):
        later.setdefault(end - start, deque()).append(index)
    pieces: list[str] = []
    done = index = 0
    while index < len(runs):
        start, end = runs[index]
        same = later[end - start]
        while same and same[0] <= index:
            same.popleft()
        if not same:
            index += 1
            continue
        close = same.popleft()
        close_end = runs[close][1]
        pieces += (line[done:start], " " * (close_end - start))
        done = close_end
        index = close + 1
    pieces.append(line[done:])
    return "".join(pieces)


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


def _title(data: Mapping[str, Any], body: str, masked: str, stem: str) -> str:
    value = data.get("title")
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        title = str(value).strip()
        if title:
            return title
    for start in _HEADING_START.finditer(masked):
        # Found in the masked text (so not in a code block), read from the original line, so
        # `code` in the heading stays.
        end = body.find("\n", start.start())
        heading = _heading_text(body[start.start() : None if end == -1 else end])
        if heading:
            return heading
    return clean_text(stem)


def _heading_text(line: str) -> str:
    """The text of an ATX heading line (``# Title #``), its closing ``#`` run dropped."""
    text = line.lstrip(" ")[1:].strip(" \t")
    unclosed = text.rstrip("#")
    if unclosed and unclosed[-1] in " \t":
        text = unclosed.rstrip(" \t")
    return text.strip()


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


def _first_time(
    data: Mapping[str, Any], keys: tuple[str, ...], shown: str, ctx: ReadContext
) -> datetime | None:
    for key in keys:
        value = data.get(key)
        when = _as_time(value)
        if when is not None:
            return when
        if isinstance(value, datetime) or (isinstance(value, str) and _iso_time(value)):
            ctx.skip(shown, "front matter", f"{key}: {value} is outside the calendar in UTC")
    return None


def _as_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return utc_or_none(value)
    if isinstance(value, date):
        return datetime.combine(value, time(), tzinfo=UTC)
    if isinstance(value, str):
        parsed = _iso_time(value)
        return None if parsed is None else utc_or_none(parsed)
    return None


def _iso_time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.strip())
    except ValueError:
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
    """Front matter (made :func:`_plain`) as JSON can hold it: dates as ISO strings."""
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


CONNECTOR = ConnectorSpec(
    NAME,
    MarkdownConnector,
    detect,
    "a folder of Markdown/text notes (Obsidian vaults too) or a single .md file",
)
