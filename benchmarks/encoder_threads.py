"""Hybrid search latency with the query encoder's worker threads spinning or sleeping.

onnxruntime's worker threads spin-wait for work after each call by default. The bundled MiniLM
embedder now lets them sleep (``MiniLMEmbedder(spin_wait=False)``, the default). This compares
the two in one run on the same store and queries: for every query the search runs once with
each encoder, alternating which goes first, the query embedded every time. It does so three
times: on an otherwise idle process, beside a second process that runs hybrid searches on the
same store without pause, and beside a pure-Python CPU burner. Both encoders use as many
threads as this process may use CPUs, as the default does.

    python benchmarks/encoder_threads.py STORE [STORE ...] [--queries 300]

A store is one built by ``benchmarks/search_latency.py --keep DIR`` (SciFact abstracts
repeated, real vectors plus noise). Writes ``benchmarks/results/encoder_threads.md`` and
``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import stratamem
from stratamem.embed.onnx_minilm import MiniLMEmbedder
from stratamem.eval import load_dataset

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "benchmarks" / "results"
CPUS = len(os.sched_getaffinity(0))
SETTINGS = {
    "spinning (before)": (True, CPUS),
    "sleeping (now)": (False, CPUS),
    "sleeping, 1 thread": (False, 1),
}

GIVEN = "query vector given"

_SEARCHER = """
import sys, stratamem
from stratamem.embed.onnx_minilm import MiniLMEmbedder
queries = sys.argv[2:]
with stratamem.open(sys.argv[1], embedder=MiniLMEmbedder(threads=%d)) as mem:
    mem.search("warm up the index and caches")
    print("ready", flush=True)
    while True:
        for query in queries:
            mem.vectors._queries.clear()
            mem.search(query, limit=10)
"""

_BURNER = """
print("ready", flush=True)
while True:
    sum(i * i for i in range(10_000))
"""


def summary(timings: list[float]) -> dict[str, float]:
    timings = sorted(timings)
    return {
        "p50_ms": round(statistics.median(timings), 2),
        "p95_ms": round(timings[int(0.95 * (len(timings) - 1))], 2),
        "mean_ms": round(statistics.fmean(timings), 2),
        "queries": len(timings),
    }


def background(load: str, store: Path, queries: list[str]) -> subprocess.Popen[str] | None:
    if load == "none":
        return None
    if load == "second process searching":
        args = ["-c", _SEARCHER % CPUS, str(store), *queries[::-1]]
    else:
        args = ["-c", _BURNER]
    process = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    if process.stdout.readline().strip() != "ready":
        raise RuntimeError(f"the background load {load!r} did not start")
    return process


def measure(store: Path, queries: list[str]) -> dict[str, dict[str, dict[str, float]]]:
    encoders = {
        name: MiniLMEmbedder(threads=threads, spin_wait=spin)
        for name, (spin, threads) in SETTINGS.items()
    }
    out: dict[str, dict[str, dict[str, float]]] = {}
    with stratamem.open(store, embedder=encoders["sleeping (now)"]) as mem:
        vectors = mem.vectors
        assert vectors is not None
        for encoder in encoders.values():
            vectors.embedder = encoder
            mem.search("warm up the index and caches")
        for load in ("none", "second process searching", "CPU burner"):
            process = background(load, store, queries)
            try:
                modes = [*encoders, GIVEN]
                timings: dict[str, list[float]] = {name: [] for name in modes}
                for i, query in enumerate(queries):
                    for name in modes if i % 2 == 0 else modes[::-1]:
                        vectors._queries.clear()  # every query is embedded anew
                        if name == GIVEN:
                            vectors.embedder = encoders["sleeping (now)"]
                            vectors.embed_query(query)  # cached: the search does not embed
                        else:
                            vectors.embedder = encoders[name]
                        started = time.perf_counter()
                        mem.search(query, limit=10)
                        timings[name].append((time.perf_counter() - started) * 1000)
            finally:
                if process is not None:
                    process.kill()
                    process.wait()
            out[load] = {name: summary(values) for name, values in timings.items()}
            print(store.name, load, out[load], flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stores", type=Path, nargs="+")
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    dataset = load_dataset(DATA / "scifact")
    queries = [q.text for q in dataset.queries_in("test")][: args.queries]
    rows = []
    load_before = os.getloadavg()
    for store in args.stores:
        with stratamem.open(store, embedder=None) as mem:
            chunks = mem.store.chunk_count()
        for load, table in measure(store, queries).items():
            before, now = table["spinning (before)"], table["sleeping (now)"]
            rows.append(
                {
                    "store": store.name,
                    "chunks": chunks,
                    "load": load,
                    "modes": table,
                    "p50_ratio": round(now["p50_ms"] / before["p50_ms"], 2),
                    "p95_ratio": round(now["p95_ms"] / before["p95_ms"], 2),
                }
            )
    result = {
        "benchmark": "encoder threads",
        "command": "python benchmarks/encoder_threads.py "
        + " ".join(s.name for s in args.stores)
        + f" --queries {args.queries}",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "cpus_used": CPUS,
            "python": platform.python_version(),
            "load_average_1_5_15_before": [round(x, 2) for x in load_before],
            "load_average_1_5_15_after": [round(x, 2) for x in os.getloadavg()],
        },
        "rows": rows,
        "bar": {"hybrid_100k_p50_ms": 15, "hybrid_100k_p95_ms": 35},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "encoder_threads.json").write_text(json.dumps(result, indent=2) + "\n")
    modes = [*SETTINGS, GIVEN]
    lines = [
        "# Query encoder: spinning or sleeping worker threads",
        "",
        f"`{result['command']}` on {result['date']}, {CPUS} of {os.cpu_count()} CPUs "
        f"(load average {load_before[0]:.1f} when it started, {os.getloadavg()[0]:.1f} when "
        "it ended: the machine was shared). Hybrid search, limit 10, the query embedded "
        "every time by the bundled MiniLM on onnxruntime; per query every setting runs once, "
        "one after the other, the order reversed every other query. Settings: onnxruntime's "
        f"default spinning worker threads ({CPUS} intra-op threads, as before), sleeping ones "
        f"({CPUS} threads, now the default), sleeping with one thread, and no encoder at all "
        "(the query's vector already cached: the rest of the search). Background load: "
        "none (beyond whatever else the machine ran), a "
        "second process running hybrid searches on the same store without pause, or a "
        "pure-Python CPU burner.",
        "",
        "Milliseconds, p50 / p95:",
        "",
        "| chunks | background | " + " | ".join(modes) + " | p50 now/before | p95 now/before |",
        "| ---: | --- |" + " ---: |" * (len(modes) + 2),
    ]
    for r in rows:
        cells = [f"{r['modes'][m]['p50_ms']} / {r['modes'][m]['p95_ms']}" for m in modes]
        lines.append(
            f"| {r['chunks']:,} | {r['load']} | "
            + " | ".join(cells)
            + f" | {r['p50_ratio']} | {r['p95_ratio']} |"
        )
    lines += ["", "Bar: hybrid p50 ≤ 15 ms and p95 ≤ 35 ms at 100k chunks.", ""]
    (RESULTS / "encoder_threads.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
