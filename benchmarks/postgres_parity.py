"""Retrieval quality on the PostgreSQL store against the SQLite store, dataset by dataset.

For each dataset, the SQLite store ``stratamem eval`` keeps in the user cache (made by it,
ingested and embedded with the bundled MiniLM model) is copied into a new database on a
PostgreSQL 18 + pgvector 0.8.5 server started for the run (``stratamem copy``: the same
chunks and the same vectors), and every mode is scored on both stores with the eval harness
in this one run. The PostgreSQL store then answers everything itself: BM25 from its own
keyword tables and in-process index, the vector leg in pgvector, the graph leg, expansion and
the rest through its SQL.

    python benchmarks/postgres_parity.py [--dataset scifact --dataset locomo ...]

Writes ``benchmarks/results/postgres_parity.md`` and ``.json``: each metric on both stores,
the difference, and whether it is within ±0.005.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from run_info import git_state, machine
from search_latency import CACHE, DATA
from stratamem.api import Memory
from stratamem.eval.loading import load_dataset
from stratamem.eval.runner import evaluate, store_path
from stratamem.store.copy import copy_store
from stratamem.store.postgres.server import PostgresServer

RESULTS = Path(__file__).resolve().parent / "results"
DATASETS = ("scifact", "cranfield", "locomo")
MODES = ("keyword", "vector", "hybrid")
SHOWN = {
    "scifact": ("ndcg_cut_10", "recall_100"),
    "cranfield": ("ndcg_cut_10", "recall_100"),
    "locomo": ("R@5", "R@10", "R@25", "R@50"),
}
TOLERANCE = 0.005


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", action="append", choices=DATASETS)
    args = parser.parse_args()
    load_start = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="stratamem-parity-"))
    os.environ.setdefault("STRATAMEM_INDEX_DIR", str(work / "indexes"))
    server = PostgresServer.start(str(work / "pg"))
    rows: list[dict[str, Any]] = []
    timings: dict[str, Any] = {}
    try:
        for name in args.dataset or DATASETS:
            data = load_dataset(DATA / name)
            sqlite = store_path(data, CACHE)
            with Memory(sqlite) as memory:  # made (ingested, embedded) where missing
                evaluate(data, memory, ["keyword"], progress=print)
            url = server.new_database(name)
            started = time.perf_counter()
            copied = copy_store(sqlite, url)
            timings[name] = {"copy_s": round(time.perf_counter() - started, 1), "rows": copied.rows}
            scores: dict[str, dict[str, dict[str, float]]] = {}
            for backend, location in (("sqlite", str(sqlite)), ("postgresql", url)):
                with Memory(location) as memory:
                    started = time.perf_counter()
                    results = evaluate(data, memory, list(MODES), progress=print)
                    timings[name][f"{backend}_eval_s"] = round(time.perf_counter() - started, 1)
                scores[backend] = {r.mode: r.metrics for r in results}
            for mode in MODES:
                for metric in SHOWN[name]:
                    s = scores["sqlite"][mode][metric]
                    p = scores["postgresql"][mode][metric]
                    rows.append(
                        {
                            "dataset": name,
                            "mode": mode,
                            "metric": metric,
                            "sqlite": round(s, 4),
                            "postgresql": round(p, 4),
                            "difference": round(p - s, 4),
                            "within": abs(p - s) <= TOLERANCE,
                        }
                    )
    finally:
        server.stop()
    result = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start, os.getloadavg()),
        "code": git_state(),
        "tolerance": TOLERANCE,
        "rows": rows,
        "timings": timings,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "postgres_parity.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "postgres_parity.md").write_text(report(result))
    print(report(result))


def report(result: dict[str, Any]) -> str:
    lines = [
        "# Retrieval quality: PostgreSQL store against SQLite store",
        "",
        f"{result['date']}; `python benchmarks/postgres_parity.py`. The PostgreSQL store is "
        "a `stratamem copy` of the SQLite eval store (same chunks, same MiniLM vectors), "
        "scored with the same harness in the same run.",
        "",
        "| dataset | mode | metric | SQLite | PostgreSQL | difference | within ±0.005 |",
        "| --- | --- | --- | ---: | ---: | ---: | --- |",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['dataset']} | {r['mode']} | {r['metric']} | {r['sqlite']:.4f} | "
            f"{r['postgresql']:.4f} | {r['difference']:+.4f} | {'yes' if r['within'] else 'NO'} |"
        )
    lines += ["", "| dataset | copy s | rows | eval s (SQLite) | eval s (PostgreSQL) |"]
    lines += ["| --- | ---: | ---: | ---: | ---: |"]
    for name, t in result["timings"].items():
        lines.append(
            f"| {name} | {t['copy_s']} | {t['rows']:,} | {t.get('sqlite_eval_s', '–')} | "
            f"{t.get('postgresql_eval_s', '–')} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
