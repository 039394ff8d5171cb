"""What a search setting costs a hybrid search, on a store that exists: variants of
``SearchConfig`` interleaved query by query in one process.

Each ``--variant`` is a list of ``SearchConfig`` fields over the store's configured pipeline,
``pool=100`` or ``context_share=0,pool=150``. Queries are SciFact's test claims over the whole
store (``--queries-from scifact``), or LoCoMo's questions, each in its own conversation as the
eval harness asks them (``--queries-from locomo``, for a store ``stratamem eval`` built from
LoCoMo). Each query is embedded anew (the query cache is cleared before every search), limit
10. The variants take turns as the first of each query, so the machine's drifting load falls
on all alike. Ratio: a variant's figure over the first variant's in the same run.

    python benchmarks/settings_latency.py --store STORE --variant pool=100 --variant pool=150
        [--queries-from scifact|locomo] [--queries 300] [--name settings_latency]

Writes ``benchmarks/results/<name>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import fields, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

import stratamem
from run_info import git_state, machine, write_results
from stratamem.config import SearchConfig

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
Query = tuple[str, tuple[str, ...]]  # the text, and the sources it is asked in


def parse_variant(text: str) -> dict[str, Any]:
    """``pool=150,context_share=0`` → the fields, each of the type ``SearchConfig`` gives it."""
    kinds = {f.name: type(getattr(SearchConfig(), f.name)) for f in fields(SearchConfig)}
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, value = part.partition("=")
        if name not in kinds or kinds[name] not in (int, float, str):
            raise SystemExit(f"--variant: {name!r} is not a number or text field of SearchConfig")
        out[name] = kinds[name](value)
    return out


def questions(data: Path, source: str, count: int) -> list[Query]:
    if source == "scifact":
        lines = (data / "scifact" / "queries.jsonl").read_text().splitlines()
        return [(json.loads(line)["text"], ()) for line in lines if line.strip()][:count]
    from stratamem.eval.locomo import load_locomo
    from stratamem.eval.runner import scope_of

    dataset = load_locomo(data / "locomo")
    return [
        (q.text, (scope_of(dataset, dataset.group_of(q)),)) for q in dataset.queries_in()[:count]
    ]


def measure(
    store: str, variants: list[dict[str, Any]], queries: list[Query]
) -> tuple[list[list[float]], int]:
    """Milliseconds per search for each variant, and the store's chunk count."""
    times: list[list[float]] = [[] for _ in variants]
    with stratamem.open(store) as memory:
        vectors = memory.vectors
        configs = [replace(memory.config, **variant) for variant in variants]
        for config in configs:  # warm-up: indexes loaded, caches filled
            memory.search(queries[0][0], sources=queries[0][1], config=config)
        order = list(range(len(configs)))
        for n, (text, sources) in enumerate(queries):
            for i in order[n % len(order) :] + order[: n % len(order)]:
                if vectors is not None:
                    vectors._queries.clear()
                started = time.perf_counter()
                memory.search(text, sources=sources, limit=10, config=configs[i])
                times[i].append((time.perf_counter() - started) * 1000)
        chunks = memory.stats()["chunks"]
    return times, chunks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--variant", action="append", required=True, dest="variants")
    parser.add_argument("--queries-from", choices=("scifact", "locomo"), default="scifact")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--name", default="settings_latency")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    variants = [parse_variant(v) for v in args.variants]
    load_start = os.getloadavg()
    stamp = datetime.now(UTC).replace(microsecond=0).isoformat()
    queries = questions(args.data, args.queries_from, args.queries)
    measured, chunks = measure(args.store, variants, queries)
    base = np.array(measured[0])
    rows: list[dict[str, Any]] = []
    for label, ms_list in zip(args.variants, measured, strict=True):
        ms = np.array(ms_list)
        rows.append(
            {
                "variant": label,
                "p50_ms": round(float(np.percentile(ms, 50)), 2),
                "p95_ms": round(float(np.percentile(ms, 95)), 2),
                "mean_ms": round(float(ms.mean()), 2),
                "p50_ratio": round(float(np.percentile(ms, 50) / np.percentile(base, 50)), 3),
                "p95_ratio": round(float(np.percentile(ms, 95) / np.percentile(base, 95)), 3),
                "queries": len(ms),
            }
        )
    command = "python benchmarks/settings_latency.py --store <store> " + " ".join(
        f"--variant {v}" for v in args.variants
    )
    command += f" --queries-from {args.queries_from} --queries {args.queries}"
    report = {
        "command": command,
        "started": stamp,
        "chunks": chunks,
        "machine": machine(load_start, os.getloadavg()),
        "git": git_state(),
        "rows": rows,
    }
    info = report["machine"]
    lines = [
        "# What a search setting costs",
        "",
        f"`{command}` on {stamp}, {info['cpus_used']} of {info['cpus']} CPUs, Python "
        f"{info['python']}; commit {report['git']['head'][:12]}. A store of {chunks:,} "
        f"chunks; {args.queries_from} queries, limit 10, each embedded anew, the variants "
        "interleaved query by query. Ratio: over the first variant's figure in the same run.",
        "",
        "| variant | p50 ms | p95 ms | mean ms | p50 ratio | p95 ratio | queries |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| {row['variant']} | {row['p50_ms']} | {row['p95_ms']} | {row['mean_ms']} | "
            f"{row['p50_ratio']} | {row['p95_ratio']} | {row['queries']} |"
        )
    write_results(args.out, args.name, report, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
