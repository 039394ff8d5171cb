"""Runs one fuzzed input through a real ingest and judges what happened.

A case module (``tests/fuzz/cases_<name>.py``, loaded by file path) describes one input kind::

    NAME = "slack-zip"        # the input kind, unique
    CONNECTOR = "slack"       # the connector name, passed as ``kind=``
    def make(rng: random.Random, root: Path) -> Path:
        '''Write one input under ``root`` (mutated from a real-format fixture) and return
        the path to ingest. Deterministic in ``rng``.'''

The same cases serve the bounded suite (``tests/fuzz/test_*.py``) and the long run
(``benchmarks/fuzz.py``). An outcome is one of:

- ``ok``: the ingest returned; every problem names a place; the store is sound.
- ``refused``: the ingest raised a :class:`~stratamem.errors.StratamemError` (the container
  itself cannot be read); the store is sound and holds nothing of it.
- ``uncaught``: any other exception escaped (a bug).
- ``hang``: the ingest ran past the deadline.
- ``partial``: the store is unsound afterwards: the integrity check fails, the FTS index
  disagrees with the chunks, a source row has no chunks though its records make some (or it
  holds no records either), or a source that failed left rows.
- ``unplaced``: a reported problem has an empty ``where``.
"""

from __future__ import annotations

import importlib.util
import random
import sqlite3
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import stratamem
from stratamem.errors import StratamemError
from stratamem.ingest.chunking import chunk_records
from stratamem.store.sqlite.store import SQLiteStore
from stratamem.types import SourceKind
from suite import Deadline, deadline

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "fixtures"
CASE_MODULES = (
    "cases_slack",
    "cases_discord",
    "cases_jsonl",
    "cases_markdown",
    "cases_irc",
    "cases_email",
    "cases_maildir",
    "cases_eml",
)
BAD = frozenset({"uncaught", "hang", "partial", "unplaced"})


@dataclass(frozen=True, slots=True)
class Outcome:
    kind: str
    seed: int
    status: str
    detail: str = ""
    problems: int = 0
    chunks: int = 0
    seconds: float = 0.0

    @property
    def bad(self) -> bool:
        return self.status in BAD


def load_cases() -> list[ModuleType]:
    """Every case module that exists, in a fixed order."""
    found = []
    for name in CASE_MODULES:
        file = HERE / f"{name}.py"
        if not file.exists():
            continue
        spec = importlib.util.spec_from_file_location(f"stratamem_fuzz_{name}", file)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        found.append(module)
    return found


def run_case(case: ModuleType, seed: int, workdir: Path, *, timeout_s: float = 20.0) -> Outcome:
    """Make input ``seed`` of ``case`` under ``workdir``, ingest it into a fresh store, judge."""
    root = workdir / f"{case.NAME}-{seed}"
    root.mkdir(parents=True)
    path = case.make(random.Random(seed), root)
    db = root / "fuzz.db"
    started = time.perf_counter()
    report = None
    try:
        with stratamem.open(db) as memory, deadline(timeout_s):
            report = memory.ingest(path, format=case.CONNECTOR, trees=False, parallel=False)
    except Deadline:
        return Outcome(case.NAME, seed, "hang", f"past {timeout_s:g} s", seconds=timeout_s)
    except StratamemError as exc:
        status, detail = "refused", str(exc)
    except Exception:  # any other failure is what the fuzzer looks for
        last = traceback.format_exc().strip().splitlines()[-1]
        return Outcome(case.NAME, seed, "uncaught", last, seconds=time.perf_counter() - started)
    else:
        status, detail = "ok", ""
    seconds = time.perf_counter() - started
    unsound = store_problems(db, failed={s.source_id for s in report.failed} if report else set())
    if unsound:
        return Outcome(case.NAME, seed, "partial", unsound, seconds=seconds)
    if report is None:
        return Outcome(case.NAME, seed, status, detail, seconds=seconds)
    unplaced = [str(p) for p in report.problems if not p.where]
    if unplaced:
        return Outcome(case.NAME, seed, "unplaced", unplaced[0], len(report.problems))
    return Outcome(case.NAME, seed, status, detail, len(report.problems), report.chunks, seconds)


def _chunkless(db: Path, source_id: str, kind: SourceKind) -> str:
    """What is wrong with a source that holds no chunks: nothing, where it holds records and
    none of them makes a chunk (a message with no text and no subject); else why not."""
    with SQLiteStore(db) as store:
        keys = list(store.record_keys(source_id))
        if not keys:
            return f"source {source_id} has no chunks and no records"
        records = [stored.record for stored in store.records_by_key(source_id, keys)]
    if any(True for _ in chunk_records(kind, records)):
        return f"source {source_id} has no chunks, but its {len(keys)} records make some"
    return ""


def store_problems(db: Path, *, failed: set[str] = frozenset()) -> str:  # type: ignore[assignment]
    """What is wrong with the store at ``db``, or ``""`` when it is sound."""
    if not db.exists():
        return ""
    conn = sqlite3.connect(db)
    try:
        check = conn.execute("PRAGMA integrity_check").fetchone()[0]
        if check != "ok":
            return f"integrity_check: {check}"
        try:
            conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('integrity-check')")
        except sqlite3.DatabaseError as exc:
            return f"FTS integrity-check: {exc}"
        chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        indexed = conn.execute("SELECT count(*) FROM chunks_fts").fetchone()[0]
        if chunks != indexed:
            return f"{chunks} chunks but {indexed} FTS rows"
        empty = conn.execute(
            "SELECT s.id, s.kind FROM sources s WHERE NOT EXISTS "
            "(SELECT 1 FROM chunks c WHERE c.source_id = s.id)"
        ).fetchall()
        for source_id, kind in empty:
            wrong = _chunkless(db, source_id, SourceKind(kind))
            if wrong:
                return wrong
        for source_id in failed:
            left = conn.execute(
                "SELECT count(*) FROM chunks WHERE source_id = ?", (source_id,)
            ).fetchone()[0]
            if left:
                return f"failed source {source_id} left {left} chunks"
        return ""
    finally:
        conn.close()
