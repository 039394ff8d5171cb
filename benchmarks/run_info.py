"""What a benchmark report records about the run: the machine, its load, and the code."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CPUS = len(os.sched_getaffinity(0))


def machine(load_start: tuple[float, ...], load_end: tuple[float, ...]) -> dict[str, Any]:
    """The machine, with the load averages at the start and the end of the run."""
    return {
        "cpus": os.cpu_count(),
        "cpus_used": CPUS,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_start": [round(x, 2) for x in load_start],
        "load_end": [round(x, 2) for x in load_end],
    }


def git_state() -> dict[str, Any]:
    """The commit the code under test is on, and whether the working tree differs from it."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip()

    return {"head": git("rev-parse", "HEAD"), "modified": bool(git("status", "--porcelain", "src"))}
