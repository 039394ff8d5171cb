"""Ingest throughput on real data, without embeddings.

Ingests the `til` Markdown notes, the LKML Maildir and the Ubuntu IRC logs from
``../shared/data`` into a fresh store, each into its own file, and reports chunks/s and MB/s
(input bytes on disk). Writes ``benchmarks/results/ingest.json`` and ``ingest.md``.

Summary trees are left queued (``trees=False``): their cost is measured on its own by
``benchmarks/tree_build.py``, and an ingest that builds them costs the sum of the two.

    python benchmarks/ingest.py [--repeat 3] [--compare /tmp/wt-base [--label what]]

``--compare`` names a checkout whose ``src`` holds other code (e.g. ``git worktree add
/tmp/wt-base 8cd52d7``): every run is then a process of its own, this checkout's code and
that one's in turn, and both are reported (chunks/s and the ratio of the medians), in a
section of ``ingest_compare.md`` of its own (``--label``; earlier sections are kept).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

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


def run_in_process(src: Path, path: Path, kind: str | None) -> tuple[float, int]:
    """(seconds, chunks) of one ingest run by the code under ``src``, in a process of its own."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(path), kind or ""],
        env={**os.environ, "PYTHONPATH": str(src)},
        capture_output=True,
        text=True,
        check=True,
    )
    seconds, chunks = done.stdout.split()[-2:]
    return float(seconds), int(chunks)


def compare(args: argparse.Namespace) -> None:
    """This checkout's code and ``args.compare``'s, run in turn on every corpus."""
    load_start = os.getloadavg()
    variants = {"new": ROOT / "src", "old": args.compare / "src"}
    rows = []
    for name, path, kind in CORPORA:
        times: dict[str, list[float]] = {v: [] for v in variants}
        chunks: dict[str, int] = {}
        for r in range(args.repeat):
            for variant in list(variants)[:: 1 if r % 2 == 0 else -1]:
                seconds, chunks[variant] = run_in_process(variants[variant], path, kind)
                times[variant].append(seconds)
        row: dict[str, Any] = {"corpus": name}
        for variant in variants:
            median = statistics.median(times[variant])
            row[variant] = {
                "chunks": chunks[variant],
                "seconds": round(median, 3),
                "chunks_per_s": round(chunks[variant] / median),
                "runs_s": [round(t, 3) for t in times[variant]],
            }
        row["old_over_new"] = round(
            statistics.median(times["old"]) / statistics.median(times["new"]), 2
        )
        rows.append(row)
        print(json.dumps(row), flush=True)
    from run_info import git_state, machine

    result = {
        "benchmark": "ingest without embeddings, this code beside another checkout",
        "command": f"python benchmarks/ingest.py --repeat {args.repeat} --compare {args.compare}",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start, os.getloadavg()),
        "code": git_state(),
        "corpora": rows,
    }
    # One section per label, kept across runs (a file of a single run is that run's section).
    out = RESULTS / "ingest_compare.json"
    runs = json.loads(out.read_text()) if out.exists() else {}
    if "corpora" in runs:
        runs = {runs["date"]: runs}
    runs[args.label or result["date"]] = result
    out.write_text(json.dumps(runs, indent=2) + "\n")
    lines = ["# Ingest throughput (no embeddings): this code beside another checkout", ""]
    for label, run in runs.items():
        m = run["machine"]
        repeat = run["command"].split("--repeat ")[1].split()[0]
        code = run["code"]
        lines += [
            f"## {label}",
            "",
            f"`{run['command']}` on {run['date']}, {m['cpus']} CPUs, load (1 min) "
            f"{m['load_start'][0]} at the start, {m['load_end'][0]} at the end; code "
            f"{code['head'][:10]}{' (modified)' if code['modified'] else ''}. Each run a new "
            f"store in a process of its own, the two codes in turn; medians of {repeat}.",
            "",
            "| corpus | chunks | old s | new s | old chunks/s | new chunks/s | old ÷ new time |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for row in run["corpora"]:
            old, new = row["old"], row["new"]
            lines.append(
                f"| {row['corpus']} | {new['chunks']:,} | {old['seconds']} | {new['seconds']} "
                f"| {old['chunks_per_s']:,} | {new['chunks_per_s']:,} | {row['old_over_new']} |"
            )
        lines.append("")
    (RESULTS / "ingest_compare.md").write_text("\n".join(lines))
    print("\n".join(lines))


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        seconds, report = run_once(Path(sys.argv[2]), sys.argv[3] or None)
        print(seconds, report.chunks)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per corpus; the median counts")
    parser.add_argument("--compare", type=Path, help="a checkout holding the code to compare")
    parser.add_argument("--label", help="the section of ingest_compare.md a comparison writes")
    args = parser.parse_args()
    if args.compare:
        compare(args)
        return
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
