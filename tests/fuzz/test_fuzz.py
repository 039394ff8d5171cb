"""Bounded fuzzing of every connector through a real ingest.

A fixed set of seeds per input kind, so a run is repeatable and stays short; the long run is
``benchmarks/fuzz.py``. No input may escape with an exception, hang, leave the store unsound or
report a problem without a place. The quick tier runs the first seed of each kind; the rest
are marked ``fuzz`` (tier all).
"""

from __future__ import annotations

import random
from pathlib import Path
from types import ModuleType

import fuzz_driver
import pytest

from suite import PATIENCE_S

CASES = {case.NAME: case for case in fuzz_driver.load_cases()}
# The JSON formats are cheap to ingest, the mail and notes formats dearer: about 15 s each.
SEEDS = {"slack": 60, "discord": 60, "jsonl": 60}
DEFAULT_SEEDS = 25
# Seeds of the long run kept as cases of their own.
KEPT_SEEDS = [("maildir", 679), ("eml", 912)]


def test_every_input_kind_has_cases() -> None:
    assert set(CASES) == {"slack", "discord", "jsonl", "markdown", "irc", "mbox", "maildir", "eml"}


@pytest.mark.parametrize(
    ("kind", "seed"),
    [
        pytest.param(kind, seed, marks=[pytest.mark.fuzz] if seed else [])
        for kind in CASES
        for seed in range(SEEDS.get(kind, DEFAULT_SEEDS))
    ]
    # Each leaves a mail source holding one message with no text and no subject: a record,
    # and no chunk to make of it.
    + [pytest.param(kind, seed, marks=[pytest.mark.fuzz]) for kind, seed in KEPT_SEEDS],
)
def test_fuzzed_input_is_read_or_refused(kind: str, seed: int, tmp_path: Path) -> None:
    # A hang is an input still being read after minutes; a slow machine is not one.
    outcome = fuzz_driver.run_case(CASES[kind], seed, tmp_path, timeout_s=PATIENCE_S)
    assert not outcome.bad, f"{kind} seed {seed}: {outcome.status}: {outcome.detail}"


@pytest.mark.parametrize("kind", sorted(CASES))
def test_inputs_are_deterministic_in_the_seed(kind: str, tmp_path: Path) -> None:
    case: ModuleType = CASES[kind]
    first = case.make(random.Random(7), _fresh(tmp_path / "a"))
    second = case.make(random.Random(7), _fresh(tmp_path / "b"))
    assert _contents(first) == _contents(second)


def _fresh(path: Path) -> Path:
    path.mkdir()
    return path


def _contents(path: Path) -> list[tuple[str, bytes]]:
    if path.is_file():
        return [(path.name, path.read_bytes())]
    return sorted(
        (p.relative_to(path).as_posix(), p.read_bytes() if p.is_file() else b"")
        for p in path.rglob("*")
    )


def test_a_source_without_chunks_is_sound_only_where_its_records_make_none(
    tmp_path: Path,
) -> None:
    import json
    import sqlite3

    import stratamem

    db = tmp_path / "store.db"
    notes = tmp_path / "team.jsonl"
    notes.write_text(
        "".join(json.dumps({"text": f"note {i}", "source": "team"}) + "\n" for i in range(3))
    )
    with stratamem.open(db, embedder=None) as mem:
        mem.ingest(notes, trees=False)
    assert fuzz_driver.store_problems(db) == ""
    conn = sqlite3.connect(db)
    (source,) = conn.execute("SELECT id FROM sources").fetchone()
    with conn:
        conn.execute("DELETE FROM chunks")
    assert fuzz_driver.store_problems(db) == (
        f"source {source} has no chunks, but its 3 records make some"
    )
    with conn:
        conn.execute("DELETE FROM records")
    conn.close()
    assert fuzz_driver.store_problems(db) == f"source {source} has no chunks and no records"
