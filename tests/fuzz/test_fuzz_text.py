"""Bounded fuzzing of the text connectors (Markdown, IRC, mbox, Maildir, .eml) through a real
ingest.

A fixed set of seeds per input kind, so a run is repeatable and stays short; the long run is
``benchmarks/fuzz.py``. No input may escape with an exception, hang, leave the store unsound or
report a problem without a place.
"""

from __future__ import annotations

import random
from pathlib import Path
from types import ModuleType

import fuzz_driver
import pytest

KINDS = ("markdown", "irc", "mbox", "maildir", "eml")
SEEDS = range(25)
CASES = {case.NAME: case for case in fuzz_driver.load_cases() if case.NAME in KINDS}


@pytest.fixture(scope="module", params=KINDS)
def case(request: pytest.FixtureRequest) -> ModuleType:
    return CASES[request.param]


@pytest.mark.parametrize("seed", SEEDS)
def test_fuzzed_input_is_read_or_refused(case: ModuleType, seed: int, tmp_path: Path) -> None:
    outcome = fuzz_driver.run_case(case, seed, tmp_path, timeout_s=20)
    assert not outcome.bad, f"{case.NAME} seed {seed}: {outcome.status}: {outcome.detail}"


@pytest.mark.parametrize("kind", KINDS)
def test_inputs_are_deterministic_in_the_seed(kind: str, tmp_path: Path) -> None:
    case = CASES[kind]
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
