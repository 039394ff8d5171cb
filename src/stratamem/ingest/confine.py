"""What an ingest may open: files under the ingest roots reached without a link, and never
the store's own files.

Every file a connector reads is opened by :func:`open_file` (through
:func:`stratamem.ingest.model.open_regular`), and every folder it lists is listed by
:func:`entries` or :func:`walk`. What they may reach is set for the length of an ingest by
two context managers, read through context variables (a reader in a forked child inherits
them):

- :func:`confined` (a principal's ingest through a server): a path is opened from the fd of
  the ingest root it lies under, one component at a time, each with ``O_NOFOLLOW``
  (``openat``); a symbolic link anywhere on the way, the file itself or any folder above
  it, fails the open with :data:`LINK_REASON` and is never followed. The file is then checked
  by ``fstat`` to be a regular file. A file or folder swapped for a link between the
  connector's listing and its open therefore cannot lead out of the roots. Folders are
  listed through the same walk, their entries taken as they are (a link is neither a folder
  nor a file) and a walk never descends through a link.
- :func:`keeping_out` (every ingest, the owner's own included): the store's own files (the
  database, its ``-wal``, ``-shm`` and ``-journal``, the index files beside it) are never
  read, however they are reached: after the open, the file's ``(st_dev, st_ino)`` is compared
  with theirs, and a file in the store's folder whose name is the database's or starts with
  it (``stratamem.db.bm25.idx``) is refused too, whatever its inode.

Outside :func:`confined` (the owner's local ingest) paths are opened as given, links
followed, as before.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

LINK_REASON = "a symbolic link: links are not followed under an ingest root"
STORE_REASON = "one of the store's own files: an ingest never reads it"
OUTSIDE_REASON = "outside the ingest roots"

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
# What opening a link with O_NOFOLLOW fails with: ELOOP on Linux and macOS, EMLINK on
# FreeBSD; ENOTDIR where a folder was asked for and the link is to a file.
_LINK_ERRORS = frozenset({errno.ELOOP, errno.EMLINK, errno.ENOTDIR})

FileId = tuple[int, int]


@dataclass(frozen=True, slots=True)
class StoreFiles:
    """The files of one store an ingest never reads: ``ids`` (``(st_dev, st_ino)`` of those
    there when the ingest began) and, in the folder ``folder`` (its id), every name that is
    ``name`` or starts with it followed by ``-`` or ``.`` (or ``.name.``: a file being
    written)."""

    ids: frozenset[FileId]
    folder: FileId | None
    name: str

    def holds(self, file: os.stat_result, folder: FileId | None, name: str) -> bool:
        if _id(file) in self.ids:
            return True
        return folder is not None and folder == self.folder and _named_after(name, self.name)


def store_files(base: str | Path) -> StoreFiles | None:
    """The files of the store whose database (or index base) is ``base``; None where there is
    no such folder."""
    path = Path(base).expanduser()
    try:
        path = path.resolve()
        folder = os.stat(path.parent)
    except (OSError, RuntimeError):
        return None
    ids: set[FileId] = set()
    try:
        with os.scandir(path.parent) as listing:
            for entry in listing:
                if _named_after(entry.name, path.name):
                    try:
                        ids.add(_id(entry.stat(follow_symlinks=False)))
                    except OSError:
                        continue
    except OSError:
        pass
    return StoreFiles(frozenset(ids), _id(folder), path.name)


def _named_after(name: str, base: str) -> bool:
    return name == base or name.startswith((f"{base}-", f"{base}.")) or name.startswith(f".{base}.")


def _id(found: os.stat_result) -> FileId:
    return (found.st_dev, found.st_ino)


_ROOTS: ContextVar[tuple[Path, ...] | None] = ContextVar("stratamem_ingest_roots", default=None)
_KEPT: ContextVar[tuple[StoreFiles, ...]] = ContextVar("stratamem_store_files", default=())


@contextmanager
def confined(roots: Sequence[str | Path]) -> Iterator[None]:
    """Within the block, ingest reads only under ``roots`` (resolved folders), through no
    link; with no roots, nothing at all."""
    resolved = tuple(Path(os.path.abspath(Path(root).expanduser())) for root in roots)
    token = _ROOTS.set(resolved)
    try:
        yield
    finally:
        _ROOTS.reset(token)


@contextmanager
def keeping_out(files: StoreFiles | None) -> Iterator[None]:
    """Within the block, ingest never reads ``files`` (nothing more where None)."""
    if files is None:
        yield
        return
    token = _KEPT.set((*_KEPT.get(), files))
    try:
        yield
    finally:
        _KEPT.reset(token)


def is_confined() -> bool:
    return _ROOTS.get() is not None


# -- opening ---------------------------------------------------------------------------------


def open_file(path: str | Path) -> int:
    """A descriptor of the regular file at ``path``, open for reading (blocking), or
    ``OSError`` naming why not: not a regular file, a link under an ingest root, outside the
    roots, or one of the store's own files.

    One of the store's own files is recognised before it is opened (by ``stat``, which opens
    nothing): closing any descriptor of a file drops every POSIX lock this process holds on
    it, and SQLite's locks on the database are such locks. A file swapped for the store's
    between that look and the open is recognised after it, and its descriptor is kept open
    rather than closed, for the same reason."""
    roots = _ROOTS.get()
    kept = _KEPT.get()
    folder: FileId | None = None
    name = ""
    if roots is None:
        if kept:
            folder, name = _real_place(path)
            _refuse_store_file(kept, _stat(path, None, True), folder, name, path)
        fd = os.open(path, _FILE_FLAGS)
    else:
        parent, last = _parent(Path(path), roots)
        try:
            if last is None:
                raise IsADirectoryError(errno.EISDIR, "not a regular file (a folder)", str(path))
            name = last
            folder = _id(os.fstat(parent))
            if kept:
                _refuse_store_file(kept, _stat(name, parent, False), folder, name, path)
            fd = _open_at(parent, name, _FILE_FLAGS, path)
        finally:
            os.close(parent)
    try:
        found = os.fstat(fd)
        if kept and any(files.holds(found, folder, name) for files in kept):
            _HELD.append(fd)  # swapped in after the look: closing it would drop the locks
            fd = -1
            raise PermissionError(errno.EACCES, STORE_REASON, str(path))
        if not stat.S_ISREG(found.st_mode):
            raise OSError(f"{path}: not a regular file ({file_type(found.st_mode)})")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return fd
    except BaseException:
        if fd >= 0:
            os.close(fd)
        raise


# Descriptors of the store's own files opened by a race (see :func:`open_file`): never closed.
_HELD: list[int] = []


def _stat(name: str | Path, parent: int | None, follow: bool) -> os.stat_result | None:
    """What ``name`` is (in ``parent``, a folder's descriptor), without opening it; None
    where it cannot be looked at (opening it will say why)."""
    try:
        return os.stat(name, dir_fd=parent, follow_symlinks=follow)
    except (OSError, ValueError):
        return None


def _refuse_store_file(
    kept: tuple[StoreFiles, ...],
    found: os.stat_result | None,
    folder: FileId | None,
    name: str,
    path: str | Path,
) -> None:
    if found is not None and any(files.holds(found, folder, name) for files in kept):
        raise PermissionError(errno.EACCES, STORE_REASON, str(path))


def _real_place(path: str | Path) -> tuple[FileId | None, str]:
    """The id of the folder the file at ``path`` really lies in, and its name there."""
    real = os.path.realpath(path)
    try:
        return _id(os.stat(os.path.dirname(real))), os.path.basename(real)
    except OSError:
        return None, os.path.basename(real)


def open_folder(path: str | Path) -> int:
    """A descriptor of the folder at ``path`` (confined: reached through no link)."""
    roots = _ROOTS.get()
    if roots is None:
        return os.open(path, _DIR_FLAGS)
    parent, name = _parent(Path(path), roots)
    if name is None:
        return parent
    try:
        return _open_at(parent, name, _DIR_FLAGS, path)
    finally:
        os.close(parent)


def _parent(path: Path, roots: Sequence[Path]) -> tuple[int, str | None]:
    """A descriptor of the folder holding ``path``, reached from its root through no link,
    and the last component (None: ``path`` is the root, whose descriptor is returned)."""
    where = Path(os.path.abspath(path))
    under = [root for root in roots if where == root or where.is_relative_to(root)]
    if not under:
        raise PermissionError(errno.EACCES, OUTSIDE_REASON, str(path))
    root = max(under, key=lambda found: len(found.parts))
    parts = where.relative_to(root).parts
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts[:-1]:
            child = _open_at(fd, part, _DIR_FLAGS, path)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd, (parts[-1] if parts else None)


def _open_at(folder: int, name: str, flags: int, shown: str | Path) -> int:
    try:
        return os.open(name, flags | _NOFOLLOW, dir_fd=folder)
    except OSError as exc:
        if exc.errno in _LINK_ERRORS and _is_link(folder, name):
            raise OSError(errno.ELOOP, LINK_REASON, str(shown)) from None
        raise type(exc)(exc.errno, exc.strerror, str(shown)) from None


def _is_link(folder: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        return False


def irregular(path: str | Path) -> str | None:
    """Why ``path`` is not read as a file ("not a regular file (a FIFO)", or, confined, a
    link), or None for a regular file and for one that cannot be examined (opening it will
    say why)."""
    roots = _ROOTS.get()
    try:
        if roots is None:
            mode = os.stat(path).st_mode
        else:
            parent, name = _parent(Path(path), roots)
            try:
                if name is None:
                    return "not a regular file (a folder)"
                mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
            finally:
                os.close(parent)
    except (OSError, ValueError) as exc:
        if isinstance(exc, OSError) and exc.strerror == LINK_REASON:
            return LINK_REASON
        return None
    if stat.S_ISLNK(mode):
        return LINK_REASON
    return None if stat.S_ISREG(mode) else f"not a regular file ({file_type(mode)})"


def file_type(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a plain file"


# -- listing ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry of a folder. Outside :func:`confined` a link counts as what it leads to (as
    ``Path.is_dir`` says); confined, a link is neither a folder nor a file."""

    name: str
    path: Path
    is_dir: bool
    is_file: bool


def entries(folder: str | Path) -> list[Entry]:
    """The entries of ``folder``, in the order the system lists them; ``OSError`` where it
    cannot be listed."""
    base = Path(folder)
    follow = _ROOTS.get() is None
    if follow:
        with os.scandir(base) as listing:
            found = list(listing)
    else:
        fd = open_folder(base)
        try:
            with os.scandir(fd) as listing:
                found = list(listing)
        finally:
            os.close(fd)
    return [
        Entry(
            entry.name,
            base / entry.name,
            _safely(entry.is_dir, follow),
            _safely(entry.is_file, follow),
        )
        for entry in found
    ]


def _safely(test: Callable[..., bool], follow: bool) -> bool:
    try:
        return test(follow_symlinks=follow)
    except OSError:
        return False


Walked = tuple[str, list[str], list[str]]


def walk(top: str | Path, *, onerror: Callable[[OSError], None] | None = None) -> Iterator[Walked]:
    """As ``os.walk(top, onerror=onerror)`` (top down; prune by editing the folder names).
    Confined, folders are opened through no link and a link is listed with the files, so
    that reading it reports it."""
    if _ROOTS.get() is None:
        yield from os.walk(top, onerror=onerror)
        return
    try:
        fd = open_folder(top)
    except OSError as exc:
        if onerror is not None:
            onerror(exc)
        return
    yield from _walk_at(str(top), fd, onerror)


def _walk_at(here: str, fd: int, onerror: Callable[[OSError], None] | None) -> Iterator[Walked]:
    try:
        try:
            with os.scandir(fd) as listing:
                found = list(listing)
        except OSError as exc:
            if onerror is not None:
                onerror(type(exc)(exc.errno, exc.strerror, here))
            return
        folders = [entry.name for entry in found if _safely(entry.is_dir, False)]
        files = [entry.name for entry in found if not _safely(entry.is_dir, False)]
        yield here, folders, files
        for name in folders:
            inner = os.path.join(here, name)
            try:
                child = _open_at(fd, name, _DIR_FLAGS, inner)
            except OSError as exc:
                if onerror is not None:
                    onerror(exc)
                continue
            yield from _walk_at(inner, child, onerror)
    finally:
        os.close(fd)
