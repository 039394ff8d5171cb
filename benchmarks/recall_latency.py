"""``recall`` latency beside ``search``'s at 100k chunks, interleaved in one run.

The store is built as ``benchmarks/search_latency.py`` builds its own (SciFact's abstracts
repeated over 20 sources through the real ingest, each copy's vector its original's plus
noise; kept under ``--keep`` between runs), from a copy of the SciFact evaluation store.
Facts are added to it once: one per ``--facts-every`` chunks
(10 by default: 17,699 facts over the
176,986 chunks that 100,000 documents make), each saying its chunk's first sentence
(``topic:<the chunk's first word>`` ``says`` …) with the chunk as evidence and the chunk's
vector as its own, written in one transaction through the fact store (``remember`` would
embed each, which is not what is timed here).

Queries are SciFact's 300 test claims. For each, ``Memory.search(q, limit=10)``,
``Memory.recall(q, limit=10)`` and ``Memory.search(q, limit=50)`` (the depth of recall's
chunk leg, :func:`~stratamem.memory.recall.leg_depth`) run back to back, which goes first
rotating by query, each with the query cache cleared (every query embedded anew). One
warm-up call of search and of recall first (the reader's fact index is built then).

    python benchmarks/recall_latency.py [--size 100000] [--keep DIR]

Writes ``benchmarks/results/recall_latency.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sqlite3
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from run_info import git_state, machine
from search_latency import CACHE, DATA, build, open_store, summary
from stratamem.eval import load_dataset
from stratamem.eval.runner import prepare, store_path
from stratamem.memory.recall import leg_depth
from stratamem.store.facts import Fact
from stratamem.store.vectors import unpack_vectors

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
RECORDED = datetime(2024, 1, 1, tzinfo=UTC)


def base_corpus(folder: Path) -> tuple[list[tuple[str, str]], np.ndarray, list[str]]:
    """SciFact's texts, vectors and test claims, as ``search_latency.base_corpus`` reads them,
    from a copy of the evaluation store (made here once, and finished here if the cache's
    is not yet: the cache is only read)."""
    dataset = load_dataset(DATA / "scifact")
    copy = folder / "scifact.db"
    if not copy.exists():
        with sqlite3.connect(store_path(dataset, CACHE)) as src, sqlite3.connect(copy) as dst:
            src.backup(dst)
        src.close()
        dst.close()
    with open_store(copy) as mem:
        prepare(mem, dataset, progress=print)
        assert mem.embedder is not None
        rows = mem.store.conn.execute(
            """SELECT c.title, c.content, e.vector FROM chunks c
               JOIN embeddings e ON e.node_id = c.id AND e.model = ? ORDER BY c.rowid""",
            (mem.embedder.spec.signature,),
        ).fetchall()
        dim = mem.embedder.spec.dim
    texts = [(r[0], r[1]) for r in rows]
    vectors = unpack_vectors([r[2] for r in rows], dim)
    return texts, vectors, [q.text for q in dataset.queries_in("test")]


def add_facts(path: Path, every: int) -> int:
    """One fact per ``every`` chunks (see the docstring), unless the store has facts."""
    with open_store(path) as mem:
        store = mem.store
        assert mem.embedder is not None
        model, dim = mem.embedder.spec.signature, mem.embedder.spec.dim
        written = bool(store.facts(limit=1))
        rows = store.conn.execute(
            "SELECT c.id, c.source_id, c.content, e.vector FROM chunks c JOIN embeddings e "
            "ON e.node_id = c.id AND e.model = ? ORDER BY c.rowid",
            (model,),
        ).fetchall()
        by_source: dict[str, list[Fact]] = {}
        vectors: list[tuple[str, bytes]] = []
        for n, row in enumerate(rows[::every]):
            text = re.split(r"(?<=[.!?])\s", row["content"].strip(), maxsplit=1)[0][:200]
            word = (re.findall(r"[a-z]+", text.lower()) or ["thing"])[0]
            fact_id = "fact_" + hashlib.sha256(f"{row['id']}:{n}".encode()).hexdigest()[:24]
            by_source.setdefault(row["source_id"], []).append(
                Fact(
                    id=fact_id,
                    subject=f"topic:{word}",
                    predicate="says",
                    object=text,
                    valid_from=RECORDED,
                    valid_to=None,
                    recorded_at=RECORDED,
                    evidence=(row["id"],),
                    source_id=row["source_id"],
                    single=False,
                )
            )
            # A fact's vector is float32 little-endian (a chunk's may be stored as float16).
            vector = unpack_vectors([row["vector"]], dim)[0]
            vectors.append((fact_id, np.asarray(vector, dtype="<f4").tobytes()))
        with store.transaction():
            if not written:
                for source, facts in by_source.items():
                    store.write_facts(source, (), facts, RECORDED)
            store.write_fact_vectors(model, vectors)
        return sum(len(f) for f in by_source.values())


def measure(path: Path, queries: list[str]) -> dict[str, Any]:
    with open_store(path) as mem:
        t0 = time.perf_counter()
        mem.search("warm up the index and caches")
        warm_search = time.perf_counter() - t0
        t0 = time.perf_counter()
        mem.recall("warm up the index and caches")
        warm_recall = time.perf_counter() - t0
        names = ("search", "recall", "search_deep")
        timings: dict[str, list[float]] = {name: [] for name in names}
        kinds: dict[str, int] = {}
        for n, query in enumerate(queries):
            for name in names[n % 3 :] + names[: n % 3]:
                if mem.vectors is not None:
                    mem.vectors._queries.clear()
                t0 = time.perf_counter()
                if name == "search_deep":  # the chunk leg recall runs: search at its depth
                    found = mem.search(query, limit=leg_depth(10))
                else:
                    found = getattr(mem, name)(query, limit=10)
                timings[name].append((time.perf_counter() - t0) * 1000)
                if name == "recall":
                    for hit in found.hits:
                        kinds[hit.explain["type"]] = kinds.get(hit.explain["type"], 0) + 1
        chunks = mem.store.chunk_count()
    out = {name: summary(values) for name, values in timings.items()}
    ratio = np.asarray(timings["recall"]) / np.asarray(timings["search"])
    return {
        **out,
        "ratio_p50": round(out["recall"]["p50_ms"] / out["search"]["p50_ms"], 2),
        "ratio_p95": round(out["recall"]["p95_ms"] / out["search"]["p95_ms"], 2),
        "ratio_per_query_median": round(float(np.median(ratio)), 2),
        "ratio_p50_to_search_deep": round(
            out["recall"]["p50_ms"] / out["search_deep"]["p50_ms"], 2
        ),
        "ratio_p50_search_deep": round(out["search_deep"]["p50_ms"] / out["search"]["p50_ms"], 2),
        "warm_up_s": {"search": round(warm_search, 2), "recall": round(warm_recall, 2)},
        "recall_hit_types": kinds,
        "chunks": chunks,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--facts-every", type=int, default=10)
    parser.add_argument("--keep", type=Path, help="keep the store here between runs")
    args = parser.parse_args()
    load_start = os.getloadavg()
    git = git_state()
    started = time.perf_counter()
    folder = args.keep or Path(tempfile.mkdtemp())
    folder.mkdir(parents=True, exist_ok=True)
    texts, vectors, queries = base_corpus(folder)
    path = folder / f"corpus_{args.size}.db"
    build_s = build(path, args.size, texts, vectors)
    facts = add_facts(path, args.facts_every)
    print(f"store {path}: built in {build_s:.0f} s, {facts} facts", flush=True)
    found = measure(path, queries)
    result = {
        "benchmark": "recall latency beside search",
        "command": "python benchmarks/recall_latency.py"
        + (f" --size {args.size}" if args.size != 100_000 else ""),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start, os.getloadavg()),
        "git": git,
        "wall_s": round(time.perf_counter() - started),
        "facts": facts,
        **found,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "recall_latency.json").write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / "recall_latency.md").write_text(markdown(result))
    print(json.dumps(result, indent=1))


def markdown(r: dict[str, Any]) -> str:
    m = r["machine"]
    lines = [
        "# `recall` latency beside `search`",
        "",
        f"`{r['command']}` on {r['date']}, {m['cpus_used']} of {m['cpus']} CPUs, Python "
        f"{m['python']}; 1-minute load average {m['load_start'][0]} at the start and "
        f"{m['load_end'][0]} at the end (the machine is shared). Code: {r['git']['head'][:12]}"
        + (" with uncommitted changes under `src/`." if r["git"]["modified"] else ".")
        + f" Run time {r['wall_s']} s.",
        "",
        f"{r['chunks']:,} chunks, {r['facts']:,} facts; {r['search']['queries']} SciFact "
        "claims, each searched (limit 10 and limit 50) and recalled (limit 10) back to back, "
        "which first rotating by query, the query embedded anew each time. See the script's "
        "docstring.",
        "",
        "| call | p50 (ms) | p95 (ms) | mean (ms) |",
        "| --- | ---: | ---: | ---: |",
    ]
    shown = {
        "search": "`search` (limit 10)",
        "search_deep": f"`search` (limit {leg_depth(10)}: recall's chunk leg)",
        "recall": "`recall` (limit 10)",
    }
    for name in ("search", "search_deep", "recall"):
        s = r[name]
        lines.append(f"| {shown[name]} | {s['p50_ms']} | {s['p95_ms']} | {s['mean_ms']} |")
    lines += [
        "",
        f"recall / search: **{r['ratio_p50']}× at p50, {r['ratio_p95']}× at p95** (the "
        f"median of the per-query ratios: {r['ratio_per_query_median']}×; target ≤ 1.3×). "
        f"Search at recall's chunk depth alone is {r['ratio_p50_search_deep']}× search at "
        f"p50; recall is {r['ratio_p50_to_search_deep']}× that at p50 (the fact leg, the "
        "merge and the hits). "
        f"First call: search {r['warm_up_s']['search']} s, recall {r['warm_up_s']['recall']} s "
        "(the reader's fact index is read then). Types among recall's hits: "
        + ", ".join(f"{k} {v}" for k, v in sorted(r["recall_hit_types"].items()))
        + ".",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
