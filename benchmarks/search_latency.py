"""Hybrid search latency at 10k and 100k chunks on this machine, query embedding included.

How the corpora are built: the SciFact corpus (5,183 real abstracts) is ingested and embedded
once with the bundled model (the evaluation store is reused if it exists). A corpus of N
chunks repeats those texts over 20 sources through the real ingest pipeline (so the FTS index,
entity index and co-mention edges are built as for real data); each copy's vector is the
original's plus Gaussian noise (σ = 0.01 per dimension, renormalised), which keeps the
clustered structure of real embeddings without embedding N texts. Queries are SciFact's 300
test claims, each embedded anew (the query cache is cleared before every query).

    python benchmarks/search_latency.py [--sizes 10000 100000]

Writes ``benchmarks/results/search_latency.md`` and ``.json``.
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

import numpy as np

import stratamem
from stratamem.eval.datasets import load_dataset
from stratamem.eval.runner import prepare, store_path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "benchmarks" / "results"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "stratamem" / "eval"


def base_corpus() -> tuple[list[tuple[str, str]], np.ndarray, list[str]]:
    dataset = load_dataset(DATA / "scifact")
    with stratamem.open(store_path(dataset, CACHE)) as mem:
        prepare(mem, dataset, progress=print)
        assert mem.embedder is not None
        model = mem.embedder.spec.signature
        rows = mem.store.conn.execute(
            """SELECT c.title, c.content, e.vector FROM chunks c
               JOIN embeddings e ON e.node_id = c.id AND e.model = ? ORDER BY c.rowid""",
            (model,),
        ).fetchall()
    texts = [(r[0], r[1]) for r in rows]
    vectors = np.stack([np.frombuffer(r[2], dtype="<f4") for r in rows])
    queries = [q.text for q in dataset.queries_in("test")]
    return texts, vectors, queries


def build(path: Path, size: int, texts: list[tuple[str, str]], vectors: np.ndarray) -> float:
    started = time.perf_counter()
    source = path.with_suffix(".jsonl")
    with source.open("w") as fh:
        for i in range(size):
            title, text = texts[i % len(texts)]
            fh.write(
                json.dumps(
                    {
                        "id": str(i),
                        "title": title,
                        "text": text,
                        "source": f"s{i % 20:02d}",
                        "kind": "document",
                    }
                )
                + "\n"
            )
    rng = np.random.default_rng(7)
    with stratamem.open(path) as mem:
        mem.ingest(source)
        assert mem.embedder is not None
        spec = mem.embedder.spec
        rows = mem.store.conn.execute(
            "SELECT rowid, id, source_id, content_sha256, source_ref FROM chunks ORDER BY rowid"
        ).fetchall()
        with mem.store.transaction():
            mem.store.set_setting("embed.model", spec.signature)
            mem.store.set_setting("embed.dim", str(spec.dim))
            batch = []
            for row in rows:
                line = int(row["source_ref"].rsplit(":", 1)[1]) - 1
                vector = vectors[line % len(vectors)] + rng.normal(0, 0.01, spec.dim)
                vector = (vector / np.linalg.norm(vector)).astype("<f4")
                batch.append(
                    (
                        row["id"],
                        spec.signature,
                        row["source_id"],
                        spec.dim,
                        vector.tobytes(),
                        row["content_sha256"],
                    )
                )
            mem.store.insert_vectors(batch)
    return time.perf_counter() - started


def measure(path: Path, queries: list[str], mode: str) -> dict[str, float]:
    with stratamem.open(path) as mem:
        mem.search("warm up the index and caches", mode=mode)
        vectors = mem.vectors
        timings = []
        for query in queries:
            if vectors is not None:
                vectors._queries.clear()  # every query is embedded, as a new one would be
            started = time.perf_counter()
            mem.search(query, limit=10, mode=mode)
            timings.append((time.perf_counter() - started) * 1000)
    timings.sort()
    return {
        "p50_ms": round(statistics.median(timings), 2),
        "p95_ms": round(timings[int(0.95 * (len(timings) - 1))], 2),
        "mean_ms": round(statistics.fmean(timings), 2),
        "queries": len(timings),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--modes", nargs="+", default=["hybrid", "keyword", "vector"])
    args = parser.parse_args()
    texts, vectors, queries = base_corpus()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            path = Path(tmp) / f"latency-{size}.db"
            seconds = build(path, size, texts, vectors)
            print(f"built {size:,} chunks in {seconds:.0f}s")
            for mode in args.modes:
                stats = measure(path, queries, mode)
                rows.append({"chunks": size, "mode": mode, **stats})
                print(size, mode, stats)
    result = {
        "benchmark": "search latency",
        "command": "python benchmarks/search_latency.py --sizes " + " ".join(map(str, args.sizes)),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "rows": rows,
        "bar": {"hybrid_100k_p50_ms": 15, "hybrid_100k_p95_ms": 50},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "search_latency.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# Search latency",
        "",
        f"`{result['command']}` on {result['date']}, {os.cpu_count()} CPUs. "
        "One query at a time, limit 10, the query embedded every time (bundled MiniLM on "
        "onnxruntime). Corpus: SciFact's 5,183 abstracts repeated over 20 sources through "
        "the real ingest pipeline; vectors are the real ones plus small noise (see the "
        "script's docstring).",
        "",
        "| chunks | mode | p50 ms | p95 ms | mean ms | queries |",
        "| ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {r['chunks']:,} | {r['mode']} | {r['p50_ms']} | {r['p95_ms']} | {r['mean_ms']} | "
        f"{r['queries']} |"
        for r in rows
    ]
    lines += ["", "Bar: hybrid p50 ≤ 15 ms and p95 ≤ 50 ms at 100k chunks.", ""]
    (RESULTS / "search_latency.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
