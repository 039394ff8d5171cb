"""What a benchmark report records about the run: the machine, its load, and the code."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
from collections.abc import Callable
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


def keep_run(out: Path, name: str, label: str, run: dict[str, Any]) -> dict[str, Any]:
    """Add ``run`` under ``label`` to ``out/<name>.json`` (runs under other labels are kept)
    and return every run there."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{name}.json"
    runs: dict[str, Any] = json.loads(target.read_text()) if target.exists() else {}
    runs[label] = run
    target.write_text(json.dumps(runs, indent=1) + "\n")
    return runs


def write_results(out: Path, name: str, report: dict[str, Any], text: str) -> None:
    """``out/<name>.json`` (the report) and ``out/<name>.md`` (its text); the text printed."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / f"{name}.md").write_text(text)
    print(text)


Shown = tuple[tuple[str, str], ...]  # (metric key, column label)


def dataset_table(
    data: dict[str, Any],
    shown: Shown,
    *,
    first: str = "run",
    extra: tuple[tuple[str, Callable[[dict[str, Any]], str]], ...] = (),
) -> list[str]:
    """The Markdown table of one dataset's runs: a row per run, a column per metric in
    ``shown`` (LoCoMo's as percentages), then each ``extra`` column, then seconds."""
    pct = data["kind"] != "beir"
    labels = [label for _, label in shown] + [label for label, _ in extra] + ["seconds"]
    lines = [
        f"| {first} | " + " | ".join(labels) + " |",
        "| --- | " + " | ".join("---:" for _ in labels) + " |",
    ]
    for run in data["runs"]:
        values = [
            f"{run['metrics'][name] * 100:.1f}" if pct else f"{run['metrics'][name]:.3f}"
            for name, _ in shown
        ]
        seconds = "—" if run["seconds"] is None else str(run["seconds"])
        values += [cell(run) for _, cell in extra] + [seconds]
        lines.append(f"| {run['name']} | " + " | ".join(values) + " |")
    return lines


def eval_arguments(doc: str, datasets: list[str], results: Path) -> argparse.Namespace:
    """The options every benchmark over the eval datasets takes: the dataset names, where
    the data is, the eval store cache (``cache``, made if missing) and where results go."""
    from stratamem.cli.common import cache_dir_from_environment

    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("names", nargs="*", default=datasets)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--store", type=Path, help="the eval store cache (as `stratamem eval`)")
    parser.add_argument("--out", type=Path, default=results)
    args = parser.parse_args()
    args.cache = args.store or cache_dir_from_environment() / "eval"
    args.cache.mkdir(parents=True, exist_ok=True)
    return args


def clock() -> Callable[[str], None]:
    """A progress line printer, each line stamped with the seconds since it was made."""
    started = time.perf_counter()

    def say(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {message}", flush=True)

    return say
