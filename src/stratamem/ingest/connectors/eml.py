"""The ``.eml`` connector: one message file, or a folder of them.

A folder is read as its ``.eml`` files (sub-folders are not walked), in Date order, as one
source ``email:<folder name>``; a single file is the source ``email:<stem>``. Each message is
parsed into a record by :mod:`stratamem.ingest.connectors.email`.

Bounds. A message larger than ``ReadContext.max_item_bytes`` is reported and skipped without
being held; FIFOs, devices and sockets in a folder of ``.eml`` files are reported, never opened
for reading. A message that fails is reported with its file (and ``<message-id>`` when known).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from stratamem.errors import SourceFormatError
from stratamem.ingest.connectors.email import _file_records, _folder_name
from stratamem.ingest.model import (
    ReadContext,
    Record,
    SourceStream,
    clean_text,
    entries,
    irregular,
    open_failure,
)
from stratamem.ingest.registry import ConnectorSpec
from stratamem.types import SourceKind

# --------------------------------------------------------------------------- files


def _eml_files(path: Path, ctx: ReadContext) -> list[Path]:
    if path.is_file():
        return [path]
    found: list[Path] = []
    for entry in sorted(entries(path), key=lambda entry: entry.name):
        child = entry.path
        if child.suffix.lower() != ".eml" or entry.is_dir:
            continue
        not_regular = irregular(child)
        if not_regular is None:
            found.append(child)
        else:
            ctx.skip(clean_text(str(child)), "file", not_regular)
    return found


def _eml_records(path: Path, ctx: ReadContext) -> Iterator[Record]:
    shown = clean_text(str(path))
    if not path.exists():
        raise SourceFormatError(shown, "file", "no such file or directory")
    if not path.is_file() and not path.is_dir():
        raise SourceFormatError(shown, "file", irregular(path) or "not a file or folder")
    try:
        files = _eml_files(path, ctx)
    except OSError as exc:
        raise SourceFormatError(shown, "file", open_failure(path, exc)) from None
    yield from _file_records(files, path, ctx)


# --------------------------------------------------------------------------- connector


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


def detect_eml(path: Path) -> int:
    try:
        if path.is_file():
            return 90 if path.suffix.lower() == ".eml" else 0
        if not path.is_dir():
            return 0
        names = [entry.name for entry in entries(path) if entry.is_file]
    except OSError:
        return 0
    names = [name for name in names if not name.startswith(".")]
    emls = sum(1 for name in names if name.lower().endswith(".eml"))
    return 70 if emls and emls * 2 > len(names) else 0


EML = ConnectorSpec("eml", EmlConnector, detect_eml, "a .eml message file, or a folder of them")
