"""The ingest reader's costliest steps, this code's beside another checkout's, on the texts of
the SciFact store's chunks (those ingest_scale.py repeats into its documents): topic
extraction, the token estimate and splitting a document into spans.

Each function is loaded from both checkouts' source files and run over the same texts, the two
in turn, round after round; the best round of each is reported (the least disturbed by the
shared machine's load), with the ratio. Writes ``benchmarks/results/reader_parts.md``/``.json``.

    python benchmarks/reader_parts.py --compare /tmp/wt-base [--rounds 9]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from ingest_scale import scifact_texts
from run_info import git_state, machine

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
STEPS = {
    "topics": ("entities/extract.py", "topics"),
    "estimate_tokens": ("embed/tokens.py", "estimate_tokens"),
    "split_text": ("ingest/splitting.py", "split_text"),
}


def load(src: Path, relative: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, src / "stratamem" / relative)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {relative} from {src}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module


def _plain(value: Any) -> Any:
    """Spans as (start, end) pairs: each checkout's Span is a class of its own."""
    if isinstance(value, list) and value and hasattr(value[0], "start"):
        return [(span.start, span.end) for span in value]
    return value


def seconds(function: Callable[[str], Any], texts: list[str]) -> float:
    started = time.perf_counter()
    for text in texts:
        function(text)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--compare", type=Path, required=True, help="the old checkout")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    load_start = os.getloadavg()
    texts = [text for _, text in scifact_texts()][:10_000]
    variants = {"new": ROOT / "src", "old": args.compare / "src"}
    functions = {
        (step, variant): getattr(load(src, relative, f"{variant}_{step}"), name)
        for step, (relative, name) in STEPS.items()
        for variant, src in variants.items()
    }
    for step in STEPS:  # same output before any timing
        new, old = functions[step, "new"], functions[step, "old"]
        if any(_plain(new(text)) != _plain(old(text)) for text in texts):
            raise SystemExit(f"{step}: the two checkouts differ")
    best = dict.fromkeys(functions, float("inf"))
    for r in range(args.rounds):
        for key in functions if r % 2 == 0 else reversed(list(functions)):
            best[key] = min(best[key], seconds(functions[key], texts))
    rows = {
        step: {
            "old_s": round(best[step, "old"], 3),
            "new_s": round(best[step, "new"], 3),
            "old_over_new": round(best[step, "old"] / best[step, "new"], 2),
        }
        for step in STEPS
    }
    result = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start, os.getloadavg()),
        "code": git_state(),
        "compare": str(args.compare),
        "texts": len(texts),
        "rounds": args.rounds,
        "steps": rows,
    }
    (RESULTS / "reader_parts.json").write_text(json.dumps(result, indent=1) + "\n")
    m = result["machine"]
    lines = [
        "# The ingest reader's costliest steps, old and new code",
        "",
        f"`python benchmarks/reader_parts.py --compare {args.compare} --rounds {args.rounds}` "
        f"on {result['date']}: {len(texts):,} SciFact chunk texts, each step of both checkouts "
        f"run in turn; the best of {args.rounds} rounds. {m['cpus']} CPUs, load (1 min) "
        f"{m['load_start'][0]} at the start, {m['load_end'][0]} at the end; code "
        f"{result['code']['head'][:10]}.",
        "",
        "| step | old s | new s | old ÷ new |",
        "| --- | ---: | ---: | ---: |",
    ]
    for step, row in rows.items():
        lines.append(f"| {step} | {row['old_s']} | {row['new_s']} | {row['old_over_new']} |")
    (RESULTS / "reader_parts.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
