"""Hybrid searches in one process while another ingests into the same store.

One searcher (this process: the bundled MiniLM model on one thread, SciFact's test claims in
turn, each embedded anew) searches for ``--seconds`` while a writer process ingests files of
400 documents from the store's corpus file, one after another, as ``postgres_scale.py``'s
writer does (no embedding). After each of the writer's commits the searcher's next search
first brings its in-memory indexes up to date: what this measures.

    python benchmarks/search_while_writing.py --store STORE [--corpus FILE] [--seconds 40]
        [--label now] [--stages] [--warm 100]

``--stages`` times every stage of each search as ``search_latency.py``'s profile does, with
the catch-up steps (keyword index, vector index, entity postings) as stages of their own, and
reports them for all searches and for the slowest 5 %: what the tail is made of. ``--warm``
searches SciFact's tune claims first, with no writer (a server just started reads its
indexes from disk at first).

``STORE`` is a SQLite file or a postgresql:// URL (``--server DIR`` starts the PostgreSQL
server whose data is in ``DIR`` first); ``--corpus`` defaults to ``corpus.jsonl`` beside a
SQLite file. Runs are kept by label in ``benchmarks/results/search_while_writing.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import stratamem
from postgres_scale import WRITER, server_settings
from postgres_stages import BOTH
from run_info import git_state, keep_run, machine
from search_latency import Stages
from stratamem.embed.registry import get_embedder
from stratamem.eval import load_dataset
from stratamem.retrieval.legs.keyword import SparseKeywordIndex
from stratamem.retrieval.legs.vector import VectorLeg
from stratamem.store.postgres.server import PostgresServer
from stratamem.store.tables.postings import EntityPostings

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


# The profile's stages: search_latency's (on the table classes both backends share, as
# postgres_stages.py times them), with the catch-up after another process's commit apart.
CATCH_UP = [
    (SparseKeywordIndex, "_sync", "catch-up: keyword index"),
    (SparseKeywordIndex, "_current", "catch-up: keyword index (checks)"),
    (VectorLeg, "_sync", "catch-up: vector index"),
    (EntityPostings, "_current", "catch-up: entity postings"),
]


def stage_table(rows: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Per stage: p50 and mean over every search, and mean over the slowest 5 %."""
    slow = sorted(rows, key=lambda r: r.get("total", 0.0))[int(len(rows) * 0.95) :]
    names = dict.fromkeys(n for row in rows for n in row)
    return {
        name: {
            "p50_ms": round(statistics.median(r.get(name, 0.0) for r in rows), 3),
            "mean_ms": round(statistics.fmean(r.get(name, 0.0) for r in rows), 3),
            "slowest_5pct_mean_ms": round(statistics.fmean(r.get(name, 0.0) for r in slow), 3),
        }
        for name in names
    }


def measure(
    location: str, corpus: Path, seconds: float, *, stages: bool = False, warm: int = 0
) -> dict[str, Any]:
    scifact = load_dataset(DATA / "scifact")
    claims = [q.text for q in scifact.queries_in("test")]
    with stratamem.open(location, embedder=get_embedder("minilm", threads=1)) as mem:
        assert mem.vectors is not None
        mem.search("warm up the indexes")
        # Other claims than those timed, so that the caches a server keeps are as warm as
        # steady use leaves them, not holding the timed searches' own pages.
        for claim in [q.text for q in scifact.queries_in("tune")][:warm]:
            mem.search(claim, limit=10)
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, location, str(corpus), str(seconds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writer.stdin is not None
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "ready"
        writer.stdin.write("go\n")
        writer.stdin.flush()
        timings: list[float] = []
        rows: list[dict[str, float]] = []
        end = time.monotonic() + seconds
        with Stages([*BOTH, *CATCH_UP] if stages else []) as timer:
            while time.monotonic() < end:
                mem.vectors._queries.clear()
                timer.current = {}
                began = time.perf_counter()
                mem.search(claims[len(timings) % len(claims)], limit=10)
                timings.append((time.perf_counter() - began) * 1000)
                rows.append(dict(timer.current))
        wrote = json.loads(writer.communicate(timeout=seconds * 4 + 600)[0].splitlines()[-1])
    timings.sort()
    profile = {"stages": stage_table(rows)} if stages else {}
    return {
        **profile,
        "searches": len(timings),
        "p50_ms": round(statistics.median(timings), 1),
        "p95_ms": round(timings[int(len(timings) * 0.95)], 1),
        "max_ms": round(timings[-1], 1),
        "writer_chunks": wrote["chunks"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--corpus", type=Path)
    parser.add_argument("--server", type=Path, help="start this PostgreSQL data folder first")
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--label", default="now")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--stages", action="store_true", help="time each search's stages")
    parser.add_argument(
        "--warm", type=int, default=100, help="searches of other claims before the writer starts"
    )
    args = parser.parse_args()
    load_start = os.getloadavg()
    server = PostgresServer.start(str(args.server)) if args.server else None
    try:
        location = server.url_of(args.store) if server else args.store
        settings = server_settings(server) if server else {}
        corpus = args.corpus or Path(args.store).parent / "corpus.jsonl"
        with stratamem.open(location, embedder=None) as mem:
            chunks = mem.store.chunk_count()
        found = measure(location, corpus, args.seconds, stages=args.stages, warm=args.warm)
    finally:
        if server is not None:
            server.stop(remove=False)
    run = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "backend": "postgresql" if server else "sqlite",
        "chunks": chunks,
        "seconds": args.seconds,
        "warm": args.warm,
        **({"server": settings} if settings else {}),
        **found,
        "machine": machine(load_start, os.getloadavg()),
        "code": git_state(),
    }
    runs = keep_run(args.out, "search_while_writing", args.label, run)
    lines = [
        "# Hybrid searches while another process ingests into the same store",
        "",
        "`python benchmarks/search_while_writing.py --store STORE` (see its docstring); one",
        "searcher, one writer, two cores; machine, load and code in `search_while_writing.json`.",
        "",
        "| run | backend | chunks | searches | p50 ms | p95 ms | max ms | writer's chunks |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, r in runs.items():
        lines.append(
            f"| {label} ({r['date'][:10]}) | {r['backend']} | {r['chunks']:,} | {r['searches']} "
            f"| {r['p50_ms']} | {r['p95_ms']} | {r['max_ms']} | {r['writer_chunks']:,} |"
        )
    for label, r in runs.items():
        if "stages" not in r:
            continue
        lines += [
            "",
            f"## Stages: {label} ({r['date'][:10]})",
            "",
            "Exclusive wall time per stage on the searching thread (`--stages`); the query's "
            "embedding runs on its own thread. The last column is over the slowest 5 % of the "
            "searches: what the tail is made of.",
            "",
            "| stage | p50 ms | mean ms | mean of the slowest 5 %, ms |",
            "| --- | ---: | ---: | ---: |",
        ]
        for name, v in sorted(r["stages"].items(), key=lambda kv: -kv[1]["slowest_5pct_mean_ms"]):
            lines.append(
                f"| {name} | {v['p50_ms']} | {v['mean_ms']} | {v['slowest_5pct_mean_ms']} |"
            )
    (args.out / "search_while_writing.md").write_text("\n".join(lines) + "\n")
    print(json.dumps(run, indent=1))


if __name__ == "__main__":
    main()
