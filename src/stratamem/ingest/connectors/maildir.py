"""The Maildir connector: a Maildir, a folder of Maildirs, or a Maildir++ tree.

Each message file is read whole and parsed into a record by
:mod:`stratamem.ingest.connectors.email`; messages are read in Date order. Files in ``cur/``
and ``new/`` are messages; loose files elsewhere count only when they start like mail.

A plain Maildir, and a folder of Maildirs, is one source ``maildir:<name>``; each record's
``meta["folder"]`` names its sub-folder.

Maildir++. A Maildir whose hidden sub-folders are Maildirs (``.Sent``, ``.Lists.dev``, each
with ``cur/`` or ``new/``, usually a ``maildirfolder`` file) is one source per folder:
``maildir:<name>`` for the root's own messages (with any plain sub-folder such as ``foo/``),
``maildir:<name>/Sent`` and ``maildir:<name>/Lists.dev`` for the others. The scope is the
folder's name without its leading dot; Maildir++ writes the hierarchy with dots, and
``.Lists.dev`` stays ``Lists.dev``, not ``Lists/dev``. With ``--scope`` the tree is one source.
Either way records are the same: ``meta["file"]`` and ``meta["folder"]`` are relative to the
tree's root (``""`` for the root, ``.Sent`` for the others), and threads are resolved over the
whole tree before any source is read, so a reply in ``.Sent`` joins a thread whose root is in
the inbox.

Bounds. A message larger than ``ReadContext.max_item_bytes`` is reported and skipped without
being held; FIFOs, devices and sockets in a Maildir are reported, never opened for reading. A
message that fails is reported with its file (and ``<message-id>`` when known).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from stratamem.errors import SourceFormatError
from stratamem.ingest.connectors.email import (
    _file_message,
    _file_place,
    _file_records,
    _folder_name,
    _Place,
    _records,
    _Threads,
)
from stratamem.ingest.model import (
    ReadContext,
    Record,
    SourceStream,
    clean_text,
    entries,
    irregular,
    open_regular,
    walk,
)
from stratamem.ingest.registry import ConnectorSpec
from stratamem.types import SourceKind

# --------------------------------------------------------------------------- files


_MAILDIR_META = frozenset({"maildirfolder", "subscriptions", "courierimapuiddb"})
_HEADER_LINE = re.compile(rb"^[A-Za-z][A-Za-z0-9-]*:")


def _is_maildir(path: Path) -> bool:
    return (path / "cur").is_dir() or (path / "new").is_dir()


def _looks_like_mail(path: Path) -> bool:
    try:
        with open_regular(path) as handle:
            return bool(_HEADER_LINE.match(handle.readline(1024)))
    except OSError:
        return False


def _maildir_files(root: Path, ctx: ReadContext) -> list[Path]:
    """Every message under a Maildir and its sub-folders (``foo/``, Maildir++ ``.Sent/``).

    Files in ``cur/`` and ``new/`` are messages; loose files elsewhere count only when they
    start like mail, since some archives (notmuch's test corpus) keep messages there too.
    What is not a regular file is reported where a message would be, else passed over.
    """
    found: list[Path] = []
    for dirpath, dirnames, filenames in walk(root):
        here = Path(dirpath)
        is_box = _is_maildir(here)
        dirnames[:] = sorted(
            name
            for name in dirnames
            if not (is_box and name == "tmp")
            and (not name.startswith(".") or _is_maildir(here / name))
        )
        in_box = here.name in ("cur", "new") and _is_maildir(here.parent)
        for name in sorted(filenames):
            if name.startswith(".") or name.startswith("dovecot") or name in _MAILDIR_META:
                continue
            file = here / name
            not_regular = irregular(file)
            if not_regular is not None:
                if in_box:
                    ctx.skip(clean_text(str(file)), "file", not_regular)
            elif in_box or _looks_like_mail(file):
                found.append(file)
    return found


def _maildir_records(path: Path, ctx: ReadContext) -> Iterator[Record]:
    if not path.is_dir():
        raise SourceFormatError(clean_text(str(path)), "file", "not a Maildir folder")
    yield from _file_records(_maildir_files(path, ctx), path, ctx, folders=True)


def _maildirpp_folders(root: Path) -> list[str]:
    """The Maildir++ folders of ``root`` (``.Sent``, ``.Lists.dev``: hidden sub-folders that
    are Maildirs), sorted; none unless ``root`` is itself a Maildir."""
    try:
        if not _is_maildir(root):
            return []
        names = [entry.name for entry in entries(root) if entry.name.startswith(".")]
        return sorted(name for name in names if _is_maildir(root / name))
    except OSError:  # the source reports it when its records are read
        return []


class _MaildirTree:
    """A Maildir++ tree read as one source per folder.

    On the first read of any folder the whole tree is listed and the header block of every
    message read once: messages are put in Date order over the tree and their threads
    resolved over all of them, before any is parsed. A reply in ``.Sent`` thus joins a thread
    whose root lies in a folder read later, and every record gets the thread it gets when
    the tree is read as one source (``--scope``).
    """

    def __init__(self, root: Path, folders: list[str], ctx: ReadContext) -> None:
        self.root = root
        self.folders = frozenset(folders)
        self.ctx = ctx
        self.threads = _Threads()
        self._files: dict[str, list[Path]] | None = None

    def records(self, folder: str) -> Iterator[Record]:
        """The records of ``folder`` (``""`` for the root's own messages), in Date order."""
        if self._files is None:
            self._files = self._read()
        files = self._files.pop(folder, [])
        messages = (_file_message(file, self.root, self.ctx, folders=True) for file in files)
        yield from _records((raw for raw in messages if raw is not None), self.ctx, self.threads)

    def _read(self) -> dict[str, list[Path]]:
        placed: list[tuple[_Place, Path]] = [
            (_file_place(file, self.root, self.threads), file)
            for file in _maildir_files(self.root, self.ctx)
        ]
        files: dict[str, list[Path]] = {}
        for _, file in sorted(placed, key=lambda item: item[0]):
            top = file.relative_to(self.root).parts[0]
            files.setdefault(top if top in self.folders else "", []).append(file)
        return files


# --------------------------------------------------------------------------- connector


class MaildirConnector:
    name = "maildir"

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]:
        name = _folder_name(path)
        folders = _maildirpp_folders(path) if ctx.scope is None else []
        if not folders:
            yield SourceStream(
                scope=ctx.scope_for(f"maildir:{name}"),
                kind=SourceKind.EMAIL,
                platform="maildir",
                location=str(path),
                records=_maildir_records(path, ctx),
                title=name,
            )
            return
        tree = _MaildirTree(path, folders, ctx)
        for folder in ["", *folders]:
            sub = clean_text(folder[1:])
            yield SourceStream(
                scope=f"maildir:{name}/{sub}" if sub else f"maildir:{name}",
                kind=SourceKind.EMAIL,
                platform="maildir",
                location=str(path / folder) if folder else str(path),
                records=tree.records(folder),
                title=sub or name,
            )


# --------------------------------------------------------------------------- detection


def detect_maildir(path: Path) -> int:
    try:
        if not path.is_dir():
            return 0
        if _is_maildir(path):
            return 90
        folders = [entry.path for entry in entries(path) if entry.is_dir]
        folders = [child for child in folders if not child.name.startswith(".")]
        mailboxes = all(_is_maildir(child) for child in folders)
    except OSError:
        return 0
    # Only a folder holding nothing but Maildirs: a workspace with one inside is not one.
    return 70 if folders and mailboxes else 0


MAILDIR = ConnectorSpec(
    "maildir", MaildirConnector, detect_maildir, "a Maildir folder (cur/, new/, sub-folders)"
)
