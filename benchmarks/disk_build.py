"""Disk and build time of a store at N chunks, beside LanceDB holding the same texts and vectors.

The corpus: the chunks of SciFact's evaluation store (real abstracts cut by the real chunker,
with their real MiniLM vectors), repeated until there are N, each written as a short document
of its own (a JSONL record) over 20 sources, so that every document is one chunk, as in a
corpus of notes or records. Each copy's vector is the original's plus Gaussian noise
(σ = 0.01, renormalised), as in ``search_latency.py``.

stratamem: ``Memory.ingest`` (chunking, FTS, entities, co-mention edges, summary trees), then
the vectors written through the store, then one search, which builds and saves the keyword
and vector index files beside the database. Disk is every file of the store after a
checkpoint: the database, its WAL, and the index files. The database is broken down by table
with SQLite's ``dbstat`` (indexes counted with their table).

LanceDB: one table of id, title, text and vector (float32, as an embedder gives it), created
from Arrow in one call, then its full-text index on the text (what its hybrid search needs);
no ANN index (it searches 100k vectors exhaustively). Disk is its directory. The same table
with float16 vectors, as stratamem keeps them, is written after it for its size alone.

Both run in one process, one after the other, so the build times are comparable.

    python benchmarks/disk_build.py [--documents 56500] [--label now] [--no-lancedb]
                                    [--keep STORE.db]

Adds a run under ``--label`` to ``benchmarks/results/disk_build.json`` (runs under other
labels are kept: run it on an older checkout with ``PYTHONPATH=<checkout>/src`` and a label
of ``before``) and writes ``disk_build.md`` from all of them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import tempfile
import time
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ingest_scale import bare_fts5
from run_info import git_state, machine
from search_latency import add_vectors, base_corpus, open_store
from stratamem.store.vectors import unpack_vectors

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
MB = 1024 * 1024


def write_corpus(path: Path, n: int, texts: list[tuple[str, str]]) -> None:
    with path.open("w") as fh:
        for i in range(n):
            title, text = texts[i % len(texts)]
            record = {"id": str(i), "title": title, "text": text, "source": f"s{i % 20:02d}"}
            fh.write(json.dumps({**record, "kind": "document"}) + "\n")


def noisy(vectors: np.ndarray, n: int, dim: int) -> np.ndarray:
    rng = np.random.default_rng(7)
    out = vectors[np.arange(n) % len(vectors)] + rng.normal(0, 0.01, (n, dim))
    return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype("<f4")


def by_table(db: Path) -> dict[str, float]:
    """MB per table, its indexes and (for FTS5) its shadow tables counted with it."""
    conn = sqlite3.connect(db)
    owner = dict(conn.execute("SELECT name, tbl_name FROM sqlite_master"))
    sizes: dict[str, float] = {}
    for name, size in conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
        table = owner.get(name, name)
        for fts in ("chunks_fts", "summaries_fts", "facts_fts"):
            if table.startswith(fts + "_"):
                table = fts
        sizes[table] = sizes.get(table, 0.0) + size / MB
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    page = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    sizes["(free pages)"] = free * page / MB
    return {k: round(v, 1) for k, v in sorted(sizes.items(), key=lambda kv: -kv[1]) if v >= 0.05}


def files_of(db: Path) -> dict[str, float]:
    return {
        p.name.replace(db.name, "<db>"): round(p.stat().st_size / MB, 1)
        for p in sorted(db.parent.iterdir())
        if p.name.startswith(db.name) and p.is_file()
    }


def build_stratamem(
    work: Path, n: int, texts: list[tuple[str, str]], vectors: np.ndarray
) -> dict[str, Any]:
    db = work / "store.db"
    corpus = work / "corpus.jsonl"
    write_corpus(corpus, n, texts)
    started = time.perf_counter()
    with open_store(db) as mem:
        report = mem.ingest(corpus)
        ingested = time.perf_counter()
        chunks = add_vectors(mem, vectors, noise=0.0)
        vectored = time.perf_counter()
        mem.search("warm up the indexes", limit=10)
        searched = time.perf_counter()
        summaries = mem.store.conn.execute(
            "SELECT count(*), coalesce(sum(length(content)), 0) FROM summaries WHERE deleted = 0"
        ).fetchone()
        mem.store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    files = files_of(db)
    return {
        "chunks": chunks,
        "documents": n,
        "summaries": summaries[0],
        "summary_text_mb": round(summaries[1] / MB, 1),
        "trees": report.trees.to_dict() if report.trees else None,
        "seconds": {
            "ingest and trees": round(ingested - started, 1),
            "vectors": round(vectored - ingested, 1),
            "first search (index files)": round(searched - vectored, 1),
            "total": round(searched - started, 1),
        },
        "disk_mb": round(sum(files.values()), 1),
        "files_mb": files,
        "tables_mb": by_table(db),
    }


def bare_fts5_reference(work: Path) -> dict[str, Any]:
    """The physical floor of the ingest: the store's chunk texts and titles written into a new
    file's FTS5 table (same tokenizer, WAL, ``synchronous=FULL``) in one transaction."""
    conn = sqlite3.connect(work / "store.db")
    texts = [list(r) for r in conn.execute("SELECT content, title FROM chunks ORDER BY rowid")]
    conn.close()
    target = work / "fts"
    target.mkdir()
    seconds = bare_fts5(texts, target / "fts.db")
    shutil.rmtree(target)
    return {"chunks": len(texts), "seconds": round(seconds, 2)}


def build_lancedb(work: Path) -> dict[str, Any]:
    """LanceDB over exactly the chunks (titles, texts, vectors) of the stratamem store."""
    import lancedb
    import pyarrow as pa

    conn = sqlite3.connect(work / "store.db")
    rows = conn.execute(
        """SELECT c.id, coalesce(c.title, ''), c.content, e.vector, e.dim FROM chunks c
           JOIN embeddings e ON e.node_id = c.id ORDER BY c.rowid"""
    ).fetchall()
    conn.close()
    n = len(rows)
    ids = [r[0] for r in rows]
    titles = [r[1] for r in rows]
    bodies = [r[2] for r in rows]
    vectors = unpack_vectors([r[3] for r in rows], int(rows[0][4]) if rows else 0)
    del rows
    target = work / "lance"
    started = time.perf_counter()
    dim = vectors.shape[1]
    table = pa.table(
        {
            "id": pa.array(ids),
            "title": pa.array(titles),
            "text": pa.array(bodies),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim),
        }
    )
    db = lancedb.connect(target)
    tbl = db.create_table("chunks", data=table)
    written = time.perf_counter()
    with warnings.catch_warnings():  # the call its hybrid-search guide still shows
        warnings.simplefilter("ignore")
        tbl.create_fts_index("text")
    indexed = time.perf_counter()
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    # The same table with its vectors as float16, as stratamem keeps them: disk only.
    half = work / "lance-float16"
    halved = table.set_column(
        3,
        "vector",
        pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1).astype(np.float16)), dim),
    )
    lancedb.connect(half).create_table("chunks", data=halved).create_fts_index("text")
    half_size = sum(p.stat().st_size for p in half.rglob("*") if p.is_file())
    return {
        "version": lancedb.__version__,
        "chunks": n,
        "seconds": {
            "table": round(written - started, 1),
            "fts index": round(indexed - written, 1),
            "total": round(indexed - started, 1),
        },
        "disk_mb": round(size / MB, 1),
        "disk_mb_float16_vectors": round(half_size / MB, 1),
    }


def render(runs: dict[str, Any]) -> str:
    lines = [
        "# Disk and build time",
        "",
        "`python benchmarks/disk_build.py` (see its docstring for the corpus and what is timed).",
        "Each run's machine, load and code are in `disk_build.json`. A run is one process:",
        "stratamem first, LanceDB right after, on the same texts and vectors.",
        "",
        "| run | chunks | summaries | stratamem MB | LanceDB MB | disk ratio | stratamem build s"
        " | LanceDB build s | build ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, run in runs.items():
        ours, lance = run["stratamem"], run.get("lancedb")
        ratio = f"{ours['disk_mb'] / lance['disk_mb']:.2f}" if lance else "—"
        build = f"{ours['seconds']['total'] / lance['seconds']['total']:.2f}" if lance else "—"
        lines.append(
            f"| {label} ({run['date'][:10]}) | {ours['chunks']:,} | {ours['summaries']:,} "
            f"| {ours['disk_mb']:,} | {lance['disk_mb'] if lance else '—'} | {ratio} "
            f"| {ours['seconds']['total']} | {lance['seconds']['total'] if lance else '—'} "
            f"| {build} |"
        )
    for label, run in runs.items():
        ours = run["stratamem"]
        lines += [
            "",
            f"## {label}",
            "",
            "Build stages, seconds: "
            + ", ".join(f"{k} {v}" for k, v in ours["seconds"].items())
            + ".",
        ]
        if run.get("lancedb"):
            lance = run["lancedb"]
            lines.append(
                "LanceDB stages, seconds: "
                + ", ".join(f"{k} {v}" for k, v in lance["seconds"].items())
                + "."
            )
            if "disk_mb_float16_vectors" in lance:
                half = lance["disk_mb_float16_vectors"]
                lines.append(
                    f"LanceDB with the vectors as float16: {half} MB "
                    f"(stratamem {ours['disk_mb'] / half:.2f}× that)."
                )
        load = run.get("machine", {}).get("load_start")
        if load:
            end = run["machine"]["load_end"]
            lines.append(f"Load (1 min) {load[0]} at the start, {end[0]} at the end.")
        if "bare_fts5" in ours:
            ingest = ours["seconds"]["ingest and trees"]
            bare = ours["bare_fts5"]["seconds"]
            lines.append(
                f"Ingest and trees: {ours['chunks'] / ingest:,.0f} chunks/s; a bare FTS5 insert "
                f"of the same texts {ours['chunks'] / bare:,.0f} chunks/s "
                f"({bare} s; the ingest takes {ingest / bare:.1f}× as long)."
            )
        lines += ["", "Files, MB: " + ", ".join(f"`{k}` {v}" for k, v in ours["files_mb"].items())]
        lines += ["", "| table (with its indexes) | MB |", "| --- | ---: |"]
        lines += [f"| {name} | {mb} |" for name, mb in ours["tables_mb"].items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--documents", type=int, default=56_500, help="about 1.77 chunks each")
    parser.add_argument("--label", default="now")
    parser.add_argument("--no-lancedb", action="store_true")
    parser.add_argument("--keep", type=Path, help="copy the stratamem store here")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    load_start = os.getloadavg()
    texts, vectors, _ = base_corpus()
    work = Path(tempfile.mkdtemp(prefix="disk-build-"))
    try:
        rows = noisy(vectors, args.documents, vectors.shape[1])
        print(f"building stratamem from {args.documents:,} documents in {work}", flush=True)
        ours = build_stratamem(work, args.documents, texts, rows)
        print(json.dumps(ours, indent=1), flush=True)
        ours["bare_fts5"] = bare_fts5_reference(work)
        print(json.dumps(ours["bare_fts5"]), flush=True)
        if args.keep:
            shutil.copy(work / "store.db", args.keep)
        lance = None
        if not args.no_lancedb:
            del rows
            lance = build_lancedb(work)
            print(json.dumps(lance, indent=1), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "disk_build.json"
    runs = json.loads(out.read_text()) if out.exists() else {}
    runs[args.label] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start, os.getloadavg()),
        "code": git_state(),
        "stratamem": ours,
        "lancedb": lance,
    }
    out.write_text(json.dumps(runs, indent=1) + "\n")
    (args.out / "disk_build.md").write_text(render(runs))


if __name__ == "__main__":
    main()
