"""A forget or a lock killed just after its transaction commits (before it scrubs the
database and rewrites the index files) leaves no byte of the removed text in any file once
the store is opened again, whatever is done with it then: a plain open, the same command
again, a search, an ingest. On PostgreSQL: in no live row, nor in this process's index files.

The killed process runs the command in its own session; the store's scrub, the first thing
either command does after its commit, is replaced by a SIGKILL of the process itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from locked_store import PASSPHRASE, SECRET, is_postgres, residue, write_secret

import stratamem
from stratamem.errors import LockError, NotFoundError
from stratamem.retrieval.legs.keyword import index_file, sparse_index
from suite import PATIENCE_S

# Processes killed mid-write: the full tier's (make test-all).
pytestmark = pytest.mark.crash

SCRIPT = f"""
import os, signal, sys
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
import stratamem
from stratamem.access import crypto
from locked_store import FAST_KDF, PASSPHRASE, SECRET
crypto.DEFAULT_KDF = FAST_KDF
action, location = sys.argv[1:3]
with stratamem.open(location, embedder=None) as mem:
    def killed(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)
    mem.store.finish_scrub = killed
    if action == "forget":
        mem.sources.forget(SECRET)
    else:
        mem.locks.lock(SECRET, passphrase=PASSPHRASE)
    print("not killed", flush=True)
"""


def public_notes(path: Path, count: int, *, source: str = "public") -> Path:
    with path.open("w") as fh:
        for i in range(count):
            text = f"Public note {i} about the roadmap and the release train"
            fh.write(json.dumps({"id": f"{source}-{i}", "text": text, "source": source}) + "\n")
    return path


def build(location: str, export: Path) -> None:
    """The secret source and a public one, with sealed summaries and the keyword index file
    saved beside the store (it is small: saved at any size here)."""
    with stratamem.open(location, embedder=None) as mem:
        mem.ingest(write_secret(export, 600), trees=False)
        mem.ingest(public_notes(export / "public.jsonl", 60), trees=False)
        mem.trees.flush()
        index = sparse_index(mem.store)
        index.persist_min_docs = 0
        assert mem.search("zqxcanaryalpha", mode="keyword").hits
        index.persist_now()
        path = index_file(mem.store)
        assert path is not None
        assert path.exists()


def kill_after_commit(action: str, location: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, action, location],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(stratamem.__file__).parents[1])},
        start_new_session=True,
        timeout=PATIENCE_S,
        check=False,
    )
    assert proc.returncode == -9, (proc.returncode, proc.stdout, proc.stderr)


def afterwards(then: str, action: str, location: str, export: Path) -> None:
    with stratamem.open(location, embedder=None) as mem:
        if then == "rerun":
            if action == "forget":
                with pytest.raises(NotFoundError, match="no source"):
                    mem.sources.forget(SECRET)
            else:
                with pytest.raises(LockError, match="already locked"):
                    mem.locks.lock(SECRET, passphrase=PASSPHRASE)
        elif then == "search":
            found = mem.search("roadmap release zqxcanaryalpha", mode="keyword")
            assert found.hits
            assert all(h.content.startswith("Public note") for h in found.hits)
        elif then == "ingest":
            mem.ingest(public_notes(export / "more.jsonl", 5, source="more"), trees=False)
        if action == "forget":
            assert SECRET not in {s.scope for s in mem.sources.list()}
        else:
            assert mem.sources.get(SECRET).locked


@pytest.mark.parametrize("then", ["open", "rerun", "search", "ingest"])
@pytest.mark.parametrize("action", ["forget", "lock"])
def test_a_removal_killed_after_its_commit_leaves_no_byte_behind(
    store_location: str, tmp_path: Path, action: str, then: str
) -> None:
    location = store_location if is_postgres(store_location) else str(tmp_path / "home" / "mem.db")
    export = tmp_path / "export"
    build(location, export)
    before = residue(location)
    bm25 = next(name for name in before if name.endswith(".bm25.idx"))

    kill_after_commit(action, location)

    assert bm25 in residue(location)  # the kill left the old file: the check can see it
    afterwards(then, action, location, export)
    assert residue(location) == {}
