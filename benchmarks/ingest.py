"""Ingest throughput on real data, without embeddings.

Ingests the `til` Markdown notes, the LKML Maildir and the Ubuntu IRC logs from
``../shared/data`` into a fresh store, each into its own file, and reports chunks/s and MB/s
(input bytes on disk). Writes ``benchmarks/results/ingest.json`` and ``ingest.md``.

Summary trees are left queued (``trees=False``): their cost is measured on its own by
``benchmarks/tree_build.py``, and an ingest that builds them costs the sum of the two.

    python benchmarks/ingest.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import stratamem

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "benchmarks" / "results"

CORPORA = [
    ("til notes (markdown)", DATA / "notes" / "til", None),
    ("LKML (maildir)", DATA / "email" / "lkml-maildir", None),
    ("Ubuntu IRC dev logs (irc)", DATA / "chat" / "ubuntu-irc" / "dev", "irc"),
]


def input_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run_once(path: Path, kind: str | None) -> tuple[float, stratamem.IngestReport]:
    with tempfile.TemporaryDirectory() as tmp, stratamem.open(Path(tmp) / "bench.db") as mem:
        started = time.perf_counter()
        report = mem.ingest(path, format=kind, trees=False)
        return time.perf_counter() - started, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per corpus; the median counts")
    args = parser.parse_args()
    if not DATA.is_dir():
        raise SystemExit(f"{DATA} is missing: the benchmark needs the shared evaluation data")
    rows = []
    for name, path, kind in CORPORA:
        size = input_bytes(path)
        runs = [run_once(path, kind) for _ in range(args.repeat)]
        seconds = statistics.median(t for t, _ in runs)
        best = min(t for t, _ in runs)
        report = runs[0][1]
        rows.append(
            {
                "corpus": name,
                "path": str(path.relative_to(DATA.parent.parent)),
                "records": report.records,
                "chunks": report.chunks,
                "skipped": len(report.problems),
                "input_mb": round(size / 1e6, 2),
                "seconds": round(seconds, 3),
                "best_seconds": round(best, 3),
                "chunks_per_s": round(report.chunks / seconds),
                "best_chunks_per_s": round(report.chunks / best),
                "items_per_s": round(report.records / seconds),
                "mb_per_s": round(size / 1e6 / seconds, 2),
            }
        )
        print(
            f"{name}: {rows[-1]['chunks']} chunks in {seconds:.2f}s "
            f"= {rows[-1]['chunks_per_s']} chunks/s, {rows[-1]['mb_per_s']} MB/s"
        )
    total_chunks = sum(r["chunks"] for r in rows)
    total_seconds = sum(r["seconds"] for r in rows)
    best_seconds = sum(r["best_seconds"] for r in rows)
    result = {
        "benchmark": "ingest without embeddings",
        "command": f"python benchmarks/ingest.py --repeat {args.repeat}",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "corpora": rows,
        "overall_chunks_per_s": round(total_chunks / total_seconds),
        "overall_best_chunks_per_s": round(total_chunks / best_seconds),
        "bar_chunks_per_s": 2000,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ingest.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# Ingest throughput (no embeddings)",
        "",
        f"`{result['command']}` on {result['date']}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}. Median of {args.repeat} runs, each into a new store.",
        "",
        "| corpus | items | chunks | skipped | input MB | seconds | chunks/s | best chunks/s "
        "| items/s | MB/s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {r['corpus']} | {r['records']:,} | {r['chunks']:,} | {r['skipped']} | "
        f"{r['input_mb']} | {r['seconds']} | {r['chunks_per_s']:,} | {r['best_chunks_per_s']:,} | "
        f"{r['items_per_s']:,} | "
        f"{r['mb_per_s']} |"
        for r in rows
    ]
    lines += [
        "",
        f"Overall: {result['overall_chunks_per_s']:,} chunks/s over the medians, "
        f"{result['overall_best_chunks_per_s']:,} over the best runs (bar: ≥ 2,000). "
        "Runs on this shared 2-core machine vary by ±15%. Items are the "
        "connector's units (notes, mails, chat lines); skipped items are the IRC folder's "
        "`*.annotation.txt` files, which are not logs.",
        "",
        "Reading (parsing, chunking, entity fields and topics) runs in a forked child while the "
        "parent writes (SQLite, FTS5, entity patterns), one transaction per source.",
        "",
    ]
    (RESULTS / "ingest.md").write_text("\n".join(lines))
    print(f"overall {result['overall_chunks_per_s']} chunks/s; wrote {RESULTS}/ingest.md")


if __name__ == "__main__":
    main()
