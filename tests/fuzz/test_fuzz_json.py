"""Bounded fuzzing of the JSON connectors (Slack, Discord, JSONL) through a real ingest.

A fixed set of seeds per input kind, so a run is repeatable and stays short; the long run is
``benchmarks/fuzz.py``. No input may escape with an exception, hang, leave the store unsound or
report a problem without a place.
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path
from types import ModuleType

import fuzz_driver
import pytest

KINDS = ("slack", "discord", "jsonl")
SEEDS = range(60)


def _load(kind: str) -> ModuleType:
    # Loaded one by one, as the driver does, so that another kind's module cannot stop these.
    file = Path(__file__).resolve().parent / f"cases_{kind}.py"
    spec = importlib.util.spec_from_file_location(f"stratamem_fuzz_cases_{kind}", file)
    if spec is None or spec.loader is None:
        raise ImportError(f"{file} cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CASES = {kind: _load(kind) for kind in KINDS}


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
