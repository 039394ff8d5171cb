"""How long a process holding a live vector index takes to catch up with another's writes.

A reader keeps a store open with its vector index in memory; a writer (another connection,
as another process would be) commits a few new chunks with their vectors; the reader's next
search first brings its index up to date. Two readers are timed after each commit, in
alternating order: one that compares every (rowid, chunk id) vector key of the store with its
index (what every sync did before), and one that reads only the vector rows written since its
last sync when nothing was taken away (what a sync does now). Both end holding the same rows,
which is checked after each round.

The store is an existing one (the million-chunk store of ``postgres_scale.py``, say); its
vectors are held exactly (no HNSW graph), so that the readers start in seconds and what is
timed is the sync's own reading, not the graph's insertions, which are the same for both.
The writer's chunks are short JSONL documents, and their vectors random unit vectors of the
store's model.

    python benchmarks/vector_sync.py --store STORE.db [--rounds 10] [--add 200] [--label now]

Writes ``benchmarks/results/vector_sync.{json,md}`` (runs under other labels are kept).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

import stratamem
from run_info import git_state, keep_run, machine
from stratamem.retrieval.legs.vector import VectorLeg
from stratamem.store.vectors import ChunkVector

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


class Signature:
    """Stands for the store's embedder where only its name and width are read."""

    def __init__(self, signature: str, dim: int) -> None:
        self.spec = type("Spec", (), {"signature": signature, "dim": dim})()


def reader(path: str, signature: str, dim: int, *, compare_all: bool) -> tuple[Any, VectorLeg]:
    memory = stratamem.open(path, embedder=None)
    leg = VectorLeg(memory.store, Signature(signature, dim), hnsw_threshold=10**9, persist=False)  # type: ignore[arg-type]
    if compare_all:
        leg._sync_added = lambda index, dim: False  # type: ignore[method-assign]
    return memory, leg


def write_some(writer: Any, work: Path, round_no: int, n: int, signature: str, dim: int) -> None:
    path = work / f"new-{round_no}.jsonl"
    with path.open("w") as fh:
        for i in range(n):
            text = f"round {round_no} note {i} about item{i} and topic{i % 7}"
            fh.write(json.dumps({"id": f"r{round_no}-{i}", "text": text, "source": "sync"}) + "\n")
    writer.ingest(path, trees=False)
    rng = np.random.default_rng(round_no)
    store = writer.store
    pending = store.pending_embeddings(signature, n + 10)
    vectors = rng.normal(size=(len(pending), dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with store.transaction():
        store.insert_vectors(
            ChunkVector(p.id, signature, p.source_id, dim, v.tobytes(), p.content_sha256)
            for p, v in zip(pending, vectors, strict=True)
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", required=True, help="a SQLite store with vectors")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--add", type=int, default=200, help="chunks the writer adds a round")
    parser.add_argument("--label", default="now")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    load_start = os.getloadavg()

    with stratamem.open(args.store, embedder=None) as probe:
        signature = probe.store.get_setting("embed.model")
        dim = int(probe.store.get_setting("embed.dim") or 0)
        chunks = int(probe.store.conn.execute("SELECT count(*) FROM chunks").fetchone()[0])
    assert signature, "the store holds no vectors"
    started = time.perf_counter()
    old_memory, old = reader(args.store, signature, dim, compare_all=True)
    old.index()
    new_memory, new = reader(args.store, signature, dim, compare_all=False)
    new.index()
    print(f"{chunks:,} chunks; both readers built in {time.perf_counter() - started:.1f} s")

    times: dict[str, list[float]] = {"every key": [], "rows since": []}
    with tempfile.TemporaryDirectory() as work, stratamem.open(args.store, embedder=None) as w:
        for round_no in range(args.rounds):
            write_some(w, Path(work), round_no, args.add, signature, dim)
            legs = [("every key", old), ("rows since", new)]
            for name, leg in legs if round_no % 2 == 0 else legs[::-1]:
                began = time.perf_counter()
                leg.index()
                times[name].append(time.perf_counter() - began)
            assert old.index().ids().tolist() == new.index().ids().tolist()
            assert old._rows == new._rows
            print(
                f"round {round_no}: every key {times['every key'][-1] * 1000:.0f} ms, "
                f"rows since {times['rows since'][-1] * 1000:.1f} ms",
                flush=True,
            )
    old_memory.close()
    new_memory.close()

    summary = {
        name: {
            "p50_ms": round(statistics.median(values) * 1000, 2),
            "max_ms": round(max(values) * 1000, 2),
        }
        for name, values in times.items()
    }
    run = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "chunks": chunks,
        "rounds": args.rounds,
        "added_per_round": args.add,
        "sync": summary,
        "ratio_p50": round(summary["every key"]["p50_ms"] / summary["rows since"]["p50_ms"], 1),
        "machine": machine(load_start, os.getloadavg()),
        "code": git_state(),
    }
    runs = keep_run(args.out, "vector_sync", args.label, run)
    lines = [
        "# Catching up with another process's writes: the vector index",
        "",
        "`python benchmarks/vector_sync.py --store STORE.db` (see its docstring). Per run: the",
        "time a reader's next search spends bringing its in-memory vector index up to date",
        "after another connection committed new chunks with vectors, comparing every vector",
        "key against reading only the rows written since, interleaved; machine and load in",
        "`vector_sync.json`.",
        "",
        "| run | chunks | rounds × chunks added | every key p50 / max ms | rows since p50 / max ms"
        " | ratio (p50) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, found in runs.items():
        every, since = found["sync"]["every key"], found["sync"]["rows since"]
        lines.append(
            f"| {label} ({found['date'][:10]}) | {found['chunks']:,} "
            f"| {found['rounds']} × {found['added_per_round']} "
            f"| {every['p50_ms']:,} / {every['max_ms']:,} | {since['p50_ms']} / {since['max_ms']} "
            f"| {found['ratio_p50']} |"
        )
    (args.out / "vector_sync.md").write_text("\n".join(lines) + "\n")
    print(json.dumps(run, indent=1))


if __name__ == "__main__":
    main()
