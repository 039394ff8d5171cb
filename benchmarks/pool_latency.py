"""What the number of candidates taken from each leg (``SearchConfig.pool``) costs a hybrid
search, on a store that exists: pool sizes interleaved query by query in one process.

Queries are SciFact's test claims, each embedded anew (the query cache is cleared before
every search), limit 10, the pipeline as configured but for the pool. The sizes take turns
as the first of each query, so the machine's drifting load falls on all alike. Ratio: a
size's figure over the first size's in the same run.

    python benchmarks/pool_latency.py --store STORE [--pools 100 150] [--queries 300]
        [--name pool_latency]

Writes ``benchmarks/results/<name>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

import stratamem
from run_info import git_state, machine

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def claims(data: Path, count: int) -> list[str]:
    lines = (data / "scifact" / "queries.jsonl").read_text().splitlines()
    return [json.loads(line)["text"] for line in lines if line.strip()][:count]


def measure(store: str, pools: list[int], queries: list[str]) -> tuple[dict[int, list[float]], int]:
    """Milliseconds per search for each pool size, and the store's chunk count."""
    times: dict[int, list[float]] = {pool: [] for pool in pools}
    with stratamem.open(store) as memory:
        vectors = memory.vectors
        configs = {pool: replace(memory.config, pool=pool) for pool in pools}
        for pool in pools:  # warm-up: indexes loaded, caches filled
            memory.search("warm up the indexes", config=configs[pool])
        for n, query in enumerate(queries):
            turn = pools[n % len(pools) :] + pools[: n % len(pools)]
            for pool in turn:
                if vectors is not None:
                    vectors._queries.clear()
                started = time.perf_counter()
                memory.search(query, limit=10, config=configs[pool])
                times[pool].append((time.perf_counter() - started) * 1000)
        chunks = memory.stats()["chunks"]
    return times, chunks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--pools", type=int, nargs="+", default=[100, 150])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--name", default="pool_latency")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    load_start = os.getloadavg()
    stamp = datetime.now(UTC).replace(microsecond=0).isoformat()
    measured, chunks = measure(args.store, args.pools, claims(args.data, args.queries))
    first = args.pools[0]
    rows: list[dict[str, Any]] = []
    for pool in args.pools:
        ms = np.array(measured[pool])
        base = np.array(measured[first])
        rows.append(
            {
                "pool": pool,
                "p50_ms": round(float(np.percentile(ms, 50)), 2),
                "p95_ms": round(float(np.percentile(ms, 95)), 2),
                "mean_ms": round(float(ms.mean()), 2),
                "p50_ratio": round(float(np.percentile(ms, 50) / np.percentile(base, 50)), 3),
                "p95_ratio": round(float(np.percentile(ms, 95) / np.percentile(base, 95)), 3),
                "queries": len(ms),
            }
        )
    report = {
        "command": "python benchmarks/pool_latency.py --store <store> --pools "
        + " ".join(map(str, args.pools))
        + f" --queries {args.queries}",
        "started": stamp,
        "chunks": chunks,
        "machine": machine(load_start, os.getloadavg()),
        "git": git_state(),
        "rows": rows,
    }
    info = report["machine"]
    lines = [
        "# Candidates per leg: what they cost a search",
        "",
        f"`{report['command']}` on {stamp}, {info['cpus_used']} of {info['cpus']} CPUs, "
        f"Python {info['python']}; commit {report['git']['head'][:12]}. A store of "
        f"{chunks:,} chunks; SciFact claims, limit 10, each embedded anew, the pool sizes "
        "interleaved query by query. Ratio: over the first size's figure in the same run.",
        "",
        "| pool | p50 ms | p95 ms | mean ms | p50 ratio | p95 ratio | queries |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| {row['pool']} | {row['p50_ms']} | {row['p95_ms']} | {row['mean_ms']} | "
            f"{row['p50_ratio']} | {row['p95_ratio']} | {row['queries']} |"
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
