"""Where a process keeps its index files for a store on a server.

The in-process indexes (sparse BM25, vectors) are saved as files so that the next process
starts from them rather than building them again. A SQLite store keeps them beside its file;
a store on a server has no file here, so they live in the user's cache directory, one folder
per store id (``$STRATAMEM_INDEX_DIR``, else ``$XDG_CACHE_HOME/stratamem/indexes``, else
``~/.cache/stratamem/indexes``). Each file records the store id and the state it reflects,
and one that does not match is rebuilt, so two machines, or a database restored from a
backup, never read each other's.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from stratamem.store.modes import private_folder


def index_dir() -> Path:
    given = os.environ.get("STRATAMEM_INDEX_DIR")
    if given:
        return Path(given).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "stratamem" / "indexes"


def index_base(store_id: str) -> Path:
    """``<index dir>/<store id>/store``: the files are ``store.bm25.idx`` and so on."""
    safe = re.sub(r"[^0-9A-Za-z_-]", "_", store_id) or "unknown"
    folder = index_dir() / safe
    private_folder(folder)
    return folder / "store"
