"""Where a hybrid search's time goes on PostgreSQL beside SQLite: the stage profile of
``search_latency.py`` on the two stores ``postgres_scale.py --work DIR`` built.

Each query is searched on both stores in turn (the order alternating from query to query), in
``hybrid`` mode with the query embedded anew and a 2,000-token budget, while every stage of the
pipeline is timed on the searching thread (exclusive wall time: a stage leaves out the stages it
calls; the query's embedding runs on its own thread and is its own row). The table gives each
stage's p50 and mean per backend and the difference, so the stages that make PostgreSQL slower
stand out.

    python benchmarks/postgres_stages.py --work DIR [--queries 200] [--name postgres_stages]

Writes ``benchmarks/results/<name>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from postgres_scale import (
    BACKENDS,
    buffers_flag,
    open_memory,
    server_settings,
    settings_text,
    start_server,
)
from run_info import git_state, machine
from search_latency import STAGES, Stages
from stratamem.store.sqlite.store import SQLiteStore
from stratamem.store.tables.chunks import ChunkTables
from stratamem.store.tables.sources import SourceTables

RESULTS = Path(__file__).resolve().parent / "results"
# search_latency's stages, with the store's reads timed on the classes both backends share.
_SHARED = dict.fromkeys(
    ("chunks", "chunk_heads", "chunks_and_mentions", "mentions_of"), ChunkTables
)
BOTH = [
    (_SHARED.get(name, SourceTables), name, stage) if owner is SQLiteStore else (owner, name, stage)
    for owner, name, stage in STAGES
]


def profile(locations: dict[str, str], queries: list[str]) -> dict[str, Any]:
    stores = {b: open_memory(loc) for b, loc in locations.items()}
    rows: dict[str, list[dict[str, float]]] = {b: [] for b in stores}
    try:
        for mem in stores.values():
            mem.search("warm up the index and caches", budget=2000)
        with Stages(BOTH) as stages:
            for i, query in enumerate(queries):
                for backend in BACKENDS if i % 2 == 0 else reversed(BACKENDS):
                    mem = stores[backend]
                    assert mem.vectors is not None
                    mem.vectors._queries.clear()
                    stages.current = {}
                    mem.search(query, limit=10, budget=2000)
                    rows[backend].append(dict(stages.current))
    finally:
        for mem in stores.values():
            mem.close()
    names = list(dict.fromkeys(n for r in rows.values() for row in r for n in row))
    out: dict[str, Any] = {}
    for name in names:
        out[name] = {}
        for backend, found in rows.items():
            values = sorted(row.get(name, 0.0) for row in found)
            out[name][backend] = {
                "p50_ms": round(statistics.median(values), 3),
                "mean_ms": round(statistics.fmean(values), 3),
            }
    return out


def report(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [
        f"# Where a hybrid search's time goes: PostgreSQL beside SQLite at "
        f"{result['chunks']:,} chunks",
        "",
        f"{result['date']}, {m['cpus']} cores, load {m['load_start'][0]} → {m['load_end'][0]}; "
        f"`python benchmarks/postgres_stages.py --work DIR --queries {result['queries']}"
        f"{buffers_flag(result)}` on the stores `postgres_scale.py --work DIR` built; "
        f"PostgreSQL with {settings_text(result)}. Hybrid mode, the query embedded anew, a "
        "2,000-token budget; the two stores searched in turn, query by query. Exclusive wall "
        "time per stage on the searching thread (the embedding runs on its own thread).",
        "",
        "| stage | SQLite p50 | PostgreSQL p50 | SQLite mean | PostgreSQL mean | mean difference |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    stages = sorted(
        result["stages"].items(),
        key=lambda kv: -(kv[1]["postgresql"]["mean_ms"] - kv[1]["sqlite"]["mean_ms"]),
    )
    for name, per in stages:
        s, p = per["sqlite"], per["postgresql"]
        lines.append(
            f"| {name} | {s['p50_ms']} | {p['p50_ms']} | {s['mean_ms']} | {p['mean_ms']} | "
            f"{round(p['mean_ms'] - s['mean_ms'], 3):+} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, required=True, help="postgres_scale.py's --work")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--name", default="postgres_stages")
    parser.add_argument(
        "--shared-buffers", help="PostgreSQL's shared_buffers for the run (a size, or default)"
    )
    args = parser.parse_args()
    load_start = os.getloadavg()
    os.environ.setdefault("STRATAMEM_INDEX_DIR", str(args.work / "indexes"))
    queries = json.loads((args.work / "queries.json").read_text())[: args.queries]
    builds = json.loads((args.work / "builds.json").read_text())
    server = start_server(args.work / "pg", args.shared_buffers)
    try:
        settings = server_settings(server)
        locations = {"sqlite": str(args.work / "store.db"), "postgresql": server.url_of("scale")}
        started = time.perf_counter()
        stages = profile(locations, queries)
    finally:
        server.stop(remove=False)
    result = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start, os.getloadavg()),
        "code": git_state(),
        "chunks": builds["sqlite"].get("chunks", 0),
        "queries": len(queries),
        "server": settings,
        "seconds": round(time.perf_counter() - started, 1),
        "stages": stages,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / f"{args.name}.md").write_text(report(result))
    print(report(result))


if __name__ == "__main__":
    main()
