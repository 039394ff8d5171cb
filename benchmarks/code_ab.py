"""Hybrid search latency of two checkouts of the code, interleaved query by query.

Each checkout runs in a process of its own (``PYTHONPATH=<checkout>/src``) on a store that
checkout built (the stores hold the same texts and vectors, e.g. ``disk_build.py --keep``
run in each checkout), with the bundled MiniLM model on all cores. This process hands the
two the same SciFact test claims in turn, the order alternating from query to query so that
the machine's drifting load falls on both alike, and each embeds the claim anew and searches
(``Memory.search(claim, limit=10)``, hybrid) and reports its own wall time. Ratios are over
the first checkout's figure.

    python benchmarks/code_ab.py --a LABEL=CHECKOUT:STORE --b LABEL=CHECKOUT:STORE
        [--queries 300] [--name code_ab]

Writes ``benchmarks/results/<name>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from run_info import git_state, machine
from search_latency import summary
from stratamem.eval import load_dataset

RESULTS = Path(__file__).resolve().parent / "results"
DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# Runs in each checkout's process: reads a claim a line, answers its search's milliseconds.
CHILD = """
import json, os, sys, time
import stratamem
from stratamem.embed.registry import get_embedder
mem = stratamem.open(sys.argv[1], embedder=get_embedder("minilm", threads=os.cpu_count()))
mem.search("warm up the index and caches")
print("ready", flush=True)
for line in sys.stdin:
    mem.vectors._queries.clear()  # every claim embedded anew, as a new one would be
    began = time.perf_counter()
    found = mem.search(json.loads(line), limit=10)
    took = (time.perf_counter() - began) * 1000
    print(json.dumps(took), flush=True)
"""


def start(checkout: Path, store: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(checkout / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, store],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        raise SystemExit(f"{checkout}: the searcher did not start")
    return proc


def ask(proc: subprocess.Popen[str], claim: str) -> float:
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write(json.dumps(claim) + "\n")
    proc.stdin.flush()
    return float(json.loads(proc.stdout.readline()))


def parse(spec: str) -> tuple[str, Path, str]:
    label, _, rest = spec.partition("=")
    checkout, _, store = rest.partition(":")
    return label, Path(checkout).resolve(), store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="LABEL=CHECKOUT:STORE")
    parser.add_argument("--b", required=True, help="LABEL=CHECKOUT:STORE")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--name", default="code_ab")
    args = parser.parse_args()
    load_start = os.getloadavg()
    claims = [q.text for q in load_dataset(DATA / "scifact").queries_in("test")][: args.queries]
    sides = [parse(args.a), parse(args.b)]
    procs = [start(checkout, store) for _, checkout, store in sides]
    times: list[list[float]] = [[], []]
    try:
        for i, claim in enumerate(claims):
            for side in (0, 1) if i % 2 == 0 else (1, 0):
                times[side].append(ask(procs[side], claim))
    finally:
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=60)
    result: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start, os.getloadavg()),
        "code": git_state(),
        "queries": len(claims),
        "sides": [
            {"label": label, "checkout": str(checkout), "store": store, **summary(times[k])}
            for k, (label, checkout, store) in enumerate(sides)
        ],
    }
    base = result["sides"][0]
    lines = [
        "# Hybrid search latency of two checkouts, interleaved",
        "",
        f"`python benchmarks/code_ab.py` (see its docstring) on {result['date']}, load "
        f"{result['machine']['load_start'][0]} → {result['machine']['load_end'][0]}; "
        f"{result['queries']} SciFact test claims, each embedded anew, limit 10.",
        "",
        "| code | p50 ms | p95 ms | mean ms | p50 ratio | p95 ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for side in result["sides"]:
        lines.append(
            f"| {side['label']} | {side['p50_ms']} | {side['p95_ms']} | {side['mean_ms']} "
            f"| {side['p50_ms'] / base['p50_ms']:.3f} | {side['p95_ms'] / base['p95_ms']:.3f} |"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
