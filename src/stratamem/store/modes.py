"""The modes of the files a store makes: its owner's alone, whatever the umask.

A SQLite database is made here, empty and ``0600``, before SQLite opens it; SQLite gives the
``-wal``, ``-shm`` and ``-journal`` it makes beside it the database's mode. Index files are
written through ``mkstemp`` (``0600``, see :mod:`stratamem.retrieval.index.file`). A folder
made for a store, or for its index files, is ``0700``. A store made before this, opened by
the user who owns its files, has every permission for others taken off them; folders that
exist keep their modes (a store may live in a folder of the user's own choosing).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

FILE_MODE = 0o600
FOLDER_MODE = 0o700
_SIDE_FILES = ("", "-wal", "-shm", "-journal")


def private_folder(folder: Path) -> None:
    """Make ``folder`` and any missing folder above it, each ``0700``; a folder that exists
    keeps its mode."""
    missing: list[Path] = []
    at = folder
    while not at.exists() and at != at.parent:
        missing.append(at)
        at = at.parent
    for made in reversed(missing):
        try:
            made.mkdir(mode=FOLDER_MODE)
        except FileExistsError:
            continue
        os.chmod(made, FOLDER_MODE)  # the umask may have taken the owner's bits off too


def private_file(path: Path) -> None:
    """Make the database file ``path``, empty and ``0600``, where it is missing (in folders
    made by :func:`private_folder`); where it exists and this process's user owns it, take
    every permission for others off it and its side files."""
    private_folder(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        tighten(path)
    except OSError:
        return  # SQLite says why it cannot open the file
    else:
        os.close(fd)


def tighten(path: Path) -> None:
    """Take every permission for others off the database ``path`` and its side files, those
    this process's user owns; the rest are left as they are."""
    for end in _SIDE_FILES:
        side = Path(f"{path}{end}")
        try:
            found = os.stat(side)
            if found.st_uid == os.geteuid() and found.st_mode & 0o077:
                os.chmod(side, stat.S_IMODE(found.st_mode) & ~0o077)
        except OSError:
            continue  # missing, or not ours to change
