"""The keyword index's cost per query, and of the first query after the documents changed.

The index is the store's saved BM25 file, loaded once. Timed: the ranking of SciFact's test
claims (the top 100 of each, as the hybrid search asks), and the first ranking after new
documents were appended (each append moves the mean document length, on which every
posting's BM25 gain depends), over ``--appends`` appends of 100 short documents each, and
the appends themselves.

    python benchmarks/keyword_catch_up.py --store STORE.db [--label now] [--appends 5]

Run it on an older checkout with ``PYTHONPATH=<checkout>/src`` and another label to compare;
runs under other labels are kept in ``benchmarks/results/keyword_catch_up.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

import stratamem
from run_info import git_state, keep_run, machine
from stratamem.eval import load_dataset
from stratamem.retrieval.index import bm25_file
from stratamem.retrieval.index.bm25 import Postings
from stratamem.retrieval.query import query_terms

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def appended(count: int, start: int, columns: int) -> tuple[np.ndarray, list[str], Postings]:
    """``count`` short documents of three common words each, rowids from ``start``."""
    words = ["cell", "protein", "study"]
    term = np.repeat(np.arange(len(words)), count)
    doc = np.tile(np.arange(count), len(words))
    order = np.lexsort((doc, term))
    postings = Postings(
        terms=words,
        term=term[order],
        doc=doc[order],
        freq=np.ones(len(term), np.float64),
        lengths=np.tile(np.array([[3] + [0] * (columns - 1)], np.int64), (count, 1)),
    )
    return (
        np.arange(start, start + count, dtype=np.int64),
        [f"new{start + i}" for i in range(count)],
        postings,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--label", default="now")
    parser.add_argument("--appends", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    load_start = os.getloadavg()
    with stratamem.open(args.store, embedder=None) as mem:
        schema, store_id = mem.store.keyword_schema(), mem.store.store_id()
    index, _ = bm25_file.read_file(Path(f"{args.store}.bm25.idx"), schema, store_id=store_id)
    claims = [q.text for q in load_dataset(DATA / "scifact").queries_in("test")]
    terms = [query_terms(claim) for claim in claims]
    index.ranked(terms[0], 100)  # what the index keeps between queries, made once
    per_query = []
    for phrases in terms:
        began = time.perf_counter()
        index.ranked(phrases, 100)
        per_query.append((time.perf_counter() - began) * 1000)
    after_change, appends = [], []
    for n in range(args.appends):
        batch = appended(100, index.max_rowid + 1, len(index.columns))
        began = time.perf_counter()
        index.append(*batch)
        appends.append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        index.ranked(terms[n % len(terms)], 100)
        after_change.append((time.perf_counter() - began) * 1000)
    per_query.sort()
    run = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "documents": len(index),
        "postings": index.nnz,
        "query_p50_ms": round(statistics.median(per_query), 2),
        "query_p95_ms": round(per_query[int(len(per_query) * 0.95)], 2),
        "append_p50_ms": round(statistics.median(appends), 1),
        "first_after_change_p50_ms": round(statistics.median(after_change), 1),
        "machine": machine(load_start, os.getloadavg()),
        "code": git_state(),
    }
    runs = keep_run(args.out, "keyword_catch_up", args.label, run)
    lines = [
        "# The keyword index: per query, and the first query after a change",
        "",
        "`python benchmarks/keyword_catch_up.py --store STORE.db` (see its docstring);",
        "machine, load and code of each run in `keyword_catch_up.json`.",
        "",
        "| run | documents | postings | ranking p50 / p95 ms | append of 100 documents, p50 ms"
        " | first ranking after an append, p50 ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, found in runs.items():
        lines.append(
            f"| {label} ({found['date'][:10]}) | {found['documents']:,} | {found['postings']:,} "
            f"| {found['query_p50_ms']} / {found['query_p95_ms']} "
            f"| {found.get('append_p50_ms', '–')} | {found['first_after_change_p50_ms']:,} |"
        )
    (args.out / "keyword_catch_up.md").write_text("\n".join(lines) + "\n")
    print(json.dumps(run, indent=1))


if __name__ == "__main__":
    main()
