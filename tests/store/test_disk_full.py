"""A disk that fills up: the store survives whole, and the error names the condition and says
what was kept. Each test puts the store on a small tmpfs of its own (it needs root: skipped
otherwise), then fills what is left of it with a file just before the step under test; the
WAL is truncated first, so that the step's first write needs new room."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from locked_store import residue, write_secret

import stratamem
from stratamem.api import Memory
from stratamem.api.trees import Trees
from stratamem.cli import main
from stratamem.errors import StoreFull, is_disk_full
from stratamem.store.tables.locks import SCRUB_PENDING
from stratamem.testing import HashingEmbedder

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """An empty 16 MiB tmpfs, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True, check=False)


def fill(folder: Path, *, leave: int = 0) -> Path:
    """Fill the disk holding ``folder`` with a file, then give back ``leave`` bytes of it."""
    filler = folder / "filler"
    block = b"\xff" * (1 << 16)
    with filler.open("wb", buffering=0) as fh, contextlib.suppress(OSError):
        while fh.write(block):  # until ENOSPC
            pass
    assert shutil.disk_usage(folder).free < len(block)
    if leave:
        os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler


def truncate_wal(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    conn.close()


def integrity(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        result = str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    conn.close()
    return result


def open_memory(db: Path) -> Memory:
    return stratamem.open(db, embedder=HashingEmbedder())


def test_is_disk_full_reads_every_layer() -> None:
    assert is_disk_full(StoreFull("x"))
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = sqlite3.SQLITE_FULL  # type: ignore[attr-defined]
    assert is_disk_full(full)
    assert not is_disk_full(ValueError("x"))


def test_an_ingest_whose_sealing_runs_out_of_room_reports_the_sources_written(
    disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = disk / "mem.db"
    original = Trees.build

    def build_trees_on_a_full_disk(self: Trees, **kwargs: object) -> object:
        truncate_wal(db)
        fill(disk)
        return original(self, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Trees, "build", build_trees_on_a_full_disk)
    with open_memory(db) as mem:
        report = mem.ingest(FIXTURES / "slack")
        assert report.sources
        assert not report.failed
        assert report.trees is not None
        assert report.trees.failed
        assert all("disk full" in failure for failure in report.trees.failed)
    (disk / "filler").unlink()
    assert integrity(db) == "ok"
    with open_memory(db) as mem:
        assert mem.stats()["chunks"] == report.chunks
        assert mem.store.jobs.counts(kind="seal").get("pending", 0) >= 1  # queued, not lost
        monkeypatch.setattr(Trees, "build", original)
        assert not mem.trees.build().failed


def test_an_ingest_with_no_room_writes_nothing_and_says_so(disk: Path) -> None:
    db = disk / "mem.db"
    with open_memory(db) as mem:
        mem.ingest(FIXTURES / "slack", trees=False)
        chunks = mem.stats()["chunks"]
    truncate_wal(db)
    filler = fill(disk, leave=64 << 10)  # room to open, not to write the notes
    result = CliRunner().invoke(
        main, ["--db", str(db), "ingest", "--no-embed", str(FIXTURES / "markdown" / "vault")]
    )
    assert result.exit_code == 1, result.output
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "disk full" in line
    assert "nothing of it was written" in line
    assert "failed unexpectedly" not in result.stderr
    assert "cannot rollback" not in result.stderr
    filler.unlink()
    assert integrity(db) == "ok"
    with open_memory(db) as mem:
        assert mem.stats()["chunks"] == chunks


def test_a_store_on_a_full_disk_says_so_when_it_cannot_open(disk: Path) -> None:
    db = disk / "mem.db"
    with open_memory(db) as mem:
        mem.ingest(FIXTURES / "slack", trees=False)
    truncate_wal(db)  # and closed: the next open makes the WAL's files again
    filler = fill(disk)
    result = CliRunner().invoke(main, ["--db", str(db), "stats"])
    assert result.exit_code == 1, result.output
    (line,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith(f"error: {db}: cannot open: disk full")
    assert "nothing was changed" in line
    filler.unlink()
    assert integrity(db) == "ok"


def test_an_embed_that_runs_out_of_room_keeps_what_it_embedded(disk: Path) -> None:
    db = disk / "mem.db"
    with open_memory(db) as mem:
        mem.ingest(FIXTURES / "slack", trees=False)
        mem.ingest(write_secret(disk / "export", 600), trees=False)  # many batches of chunks
        pending = mem.indexes.pending()
    truncate_wal(db)
    filler = fill(disk, leave=512 << 10)  # room to open and for some vectors, not all
    with open_memory(db) as mem, pytest.raises(StoreFull) as raised:
        mem.indexes.embed()
    message = str(raised.value)
    assert message.startswith("disk full: embedding stopped with ")
    filler.unlink()
    assert integrity(db) == "ok"
    with open_memory(db) as mem:
        left = mem.indexes.pending()
        assert 0 < left < pending  # some batches were committed before the disk filled
        done = f"{pending - left:,} chunks embedded and kept and {left:,} still without a vector"
        # (the chunks embedded from vectors cached for the same text count as embedded)
        assert done in message
        assert mem.indexes.embed().embedded == left
        assert mem.indexes.pending() == 0


def test_a_forget_whose_scrub_runs_out_of_room_says_the_source_is_gone(disk: Path) -> None:
    db = disk / "mem.db"
    with open_memory(db) as mem:
        mem.ingest(FIXTURES / "slack", trees=False)
        mem.ingest(FIXTURES / "markdown" / "vault", trees=False)
        mem.ingest(write_secret(disk / "export"), trees=False)
    (disk / "export" / "secret.jsonl").unlink()
    truncate_wal(db)
    # Room for the removal (it takes some 0.7 of the file's size here, through the WAL), not
    # for VACUUM, which writes every page of it again (1.6 is enough).
    filler = fill(disk, leave=db.stat().st_size)
    result = CliRunner().invoke(main, ["--db", str(db), "forget", "jsonl:secret", "--yes"])
    assert result.exit_code == 1, result.output
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "was forgotten" in line
    assert "disk is full" in line
    assert "not reclaimed" in line
    assert "failed unexpectedly" not in result.stderr
    filler.unlink()
    assert integrity(db) == "ok"
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT value FROM settings WHERE key = ?", (SCRUB_PENDING,)).fetchone()
    conn.close()
    with open_memory(db) as mem:  # an open finishes the scrub, now that there is room
        assert "jsonl:secret" not in {s.scope for s in mem.sources.list()}
        assert mem.store.get_setting(SCRUB_PENDING) is None
    assert residue(db) == {}


def test_an_ingest_the_disk_fills_under_keeps_the_sources_written_and_says_where_it_stopped(
    disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Slack fixture's channels are written one after another; the disk fills as the
    second begins: the first stays, the ingest stops there, and the exit says both."""
    from stratamem.ingest import pipeline

    db = disk / "mem.db"
    open_memory(db).close()
    truncate_wal(db)
    opened: list[str] = []
    original = pipeline._open_source

    def open_source_on_a_filling_disk(store, info, result, *rest):  # type: ignore[no-untyped-def]
        opened.append(info.scope)
        if len(opened) == 2:
            fill(disk)
        return original(store, info, result, *rest)

    monkeypatch.setattr(pipeline, "_open_source", open_source_on_a_filling_disk)
    result = CliRunner().invoke(
        main, ["--db", str(db), "ingest", "--no-embed", "--json", str(FIXTURES / "slack")]
    )
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert [s["error"] is None for s in report["sources"]] == [True, False]
    assert report["stopped"].startswith(f"stopped at {opened[1]}: disk full")
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "1 source(s) written before it are kept" in line
    (disk / "filler").unlink()
    assert integrity(db) == "ok"
    with open_memory(db) as mem:
        assert [s.scope for s in mem.sources.list()] == [opened[0]]
