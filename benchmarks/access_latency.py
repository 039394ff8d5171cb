"""What the access gate costs a search: the owner against principals that see 10 % and 90 %
of the sources, at about 100k chunks, query embedding included.

The corpus is search_latency.py's (its SciFact reader, stage timer and summary are
imported): SciFact's abstracts with their vectors from the bundled MiniLM model, repeated
through the real ingest pipeline until the store holds about ``--chunks`` chunks, each chunk
given its document's real vector plus small noise. Unlike there, the documents are spread
round-robin over ``--sources`` sources (150 by default), so each source is a sample of the
whole corpus. Source ``j`` (sources
sorted by scope) gets the access scope ``g{j mod 10}``; principal ``p10`` holds ``g0`` (a
tenth of the sources) and ``p90`` holds ``g0``-``g8``.

The three readers are three stores open on the same database (one shared embedder). After
a warm-up (which builds or loads every in-memory index for each of them), every query of
SciFact's 300 test claims is run in every mode by the owner, ``p10`` and ``p90`` one after
the other, their order rotating from query to query, so that the machine's drifting load
falls on all three alike. Every query is embedded anew (the query cache is cleared before
each). Modes: ``hybrid`` (what ``Memory.search(query)`` runs) and each leg alone
(``keyword``, ``vector``, ``graph``). A second pass times the hybrid pipeline's stages per
reader (search_latency.py's stage timer).

    python benchmarks/access_latency.py [--chunks 100000] [--sources 150] [--keep DIR]
        [--queries 300] [--name access]

``--chunks 10000`` is a quick check. Writes ``benchmarks/results/<name>.md`` and ``.json``.
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

import numpy as np

import stratamem
from run_info import CPUS, git_state, machine
from search_latency import Stages, _stage_order, add_vectors, base_corpus, summary
from stratamem.embed.base import Embedder
from stratamem.embed.registry import get_embedder
from stratamem.ingest.chunking import ChunkingConfig
from stratamem.ingest.splitting import split_text
from stratamem.retrieval.legs.keyword import sparse_index
from stratamem.store.sqlite.store import SQLiteStore

RESULTS = Path(__file__).resolve().parent / "results"
MODES = ("hybrid", "keyword", "vector", "graph")
READERS = ("owner", "p10", "p90")
GROUPS = 10
SCOPES = {"p10": [f"g{i}" for i in range(1)], "p90": [f"g{i}" for i in range(9)]}


def documents_for(chunks: int, texts: list[tuple[str, str]]) -> int:
    """How many documents, cycling through ``texts``, the ingest splits into ``chunks``."""
    config = ChunkingConfig()
    spans = [
        max(
            1,
            len(
                split_text(
                    text,
                    target=config.doc_target,
                    min_chars=config.doc_min,
                    max_chars=config.doc_max,
                    overlap=config.doc_overlap,
                )
            ),
        )
        for _, text in texts
    ]
    total = documents = 0
    while total < chunks:
        total += spans[documents % len(spans)]
        documents += 1
    return documents


def build(
    path: Path,
    documents: int,
    sources: int,
    texts: list[tuple[str, str]],
    vectors: np.ndarray,
    embedder: Embedder,
) -> float:
    """Ingest the corpus over ``sources`` sources and give its chunks their vectors; a kept
    store is reused."""
    started = time.perf_counter()
    with stratamem.open(path, embedder=embedder) as mem:
        if not mem.store.chunk_count():
            source = path.with_suffix(".jsonl")
            with source.open("w") as fh:
                for i in range(documents):
                    title, text = texts[i % len(texts)]
                    record = {"id": str(i), "title": title, "text": text, "kind": "document"}
                    fh.write(json.dumps(record | {"source": f"s{i % sources:03d}"}) + "\n")
            mem.ingest(source)
            source.unlink()
        mem.trees.build()  # a kept store whose build was cut short seals what it left
        if not mem.store.vector_models():
            add_vectors(mem, vectors)
        grant(mem)
    return time.perf_counter() - started


def grant(mem: stratamem.Memory) -> None:
    """Source ``j`` (by scope) gets scope ``g{j mod 10}``; the principals are made once."""
    for j, source in enumerate(sorted(mem.store.sources(), key=lambda s: s.scope)):
        scope = f"g{j % GROUPS}"
        if source.access != (scope,):
            mem.sources.set_access(source.id, scopes=[scope])
    known = {p.name for p in mem.principals.list()}
    for name, scopes in SCOPES.items():
        if name not in known:
            mem.principals.add(name, scopes)


def open_readers(
    path: Path, embedder: Embedder
) -> tuple[dict[str, stratamem.Memory], dict[str, dict[str, float]]]:
    """The three stores, and the seconds of each one's first search by mode. The owner goes
    first: its warm-up builds the index files the principals' stores then read."""
    owner = stratamem.open(path, embedder=embedder)
    readers, first = {"owner": owner}, {"owner": warm_up(owner)}
    if owner.vectors is not None:
        owner.vectors.saver.flush()
    sparse_index(owner.store).saver.flush()
    for name in READERS[1:]:
        readers[name] = stratamem.open(path, embedder=embedder, principal=name)
        first[name] = warm_up(readers[name])
    return readers, first


def warm_up(mem: stratamem.Memory) -> dict[str, float]:
    """Seconds of each mode's first search (indexes built or loaded, masks made)."""
    out = {}
    for mode in MODES:
        started = time.perf_counter()
        mem.search("warm up the index and caches", mode=mode)
        out[mode] = round(time.perf_counter() - started, 2)
    return out


def timed_search(mem: stratamem.Memory, query: str, mode: str) -> tuple[float, set[str]]:
    if mem.vectors is not None:
        mem.vectors._queries.clear()  # every query is embedded, as a new one would be
    started = time.perf_counter()
    found = mem.search(query, limit=10, mode=mode)
    elapsed = (time.perf_counter() - started) * 1000
    return elapsed, {hit.source_id for hit in found.hits}


def measure(
    readers: dict[str, stratamem.Memory], queries: list[str]
) -> tuple[dict[str, dict[str, list[float]]], dict[str, int]]:
    """Milliseconds per query by mode and reader, interleaved; and, per reader, how many
    hits came from a source it may not see (must be 0)."""
    timings: dict[str, dict[str, list[float]]] = {
        mode: {name: [] for name in READERS} for mode in MODES
    }
    visible = {name: {s.id for s in mem.store.sources()} for name, mem in readers.items()}
    leaks = dict.fromkeys(READERS, 0)
    for number, query in enumerate(queries):
        for mode in MODES:
            turn = number % len(READERS)
            for name in READERS[turn:] + READERS[:turn]:
                elapsed, sources = timed_search(readers[name], query, mode)
                timings[mode][name].append(elapsed)
                leaks[name] += len(sources - visible[name])
    return timings, leaks


# Store reads the gate goes into, timed wherever the pipeline makes them; named ``store: …``,
# they overlap the stages and are not summed with them.
STORE_READS = {
    "mentions_of": "store: entities of chunks",
    "chunks_and_mentions": "store: chunks shown and their entities",
    "entity_frequencies": "store: entity frequencies",
    "nodes_by_entities": "store: nodes by entities",
    "allowed_rowids": "store: admitted rowids",
}


class GateStages(Stages):
    """search_latency.py's stages and the store reads in :data:`STORE_READS`."""

    def __enter__(self) -> GateStages:
        super().__enter__()
        for method, stage in STORE_READS.items():
            self.wrap(SQLiteStore, method, stage)
        return self


def stage_order(name: str) -> tuple[int, int]:
    reads = list(STORE_READS.values())
    return (1 + reads.index(name) if name in reads else 0, _stage_order(name))


def stages(
    readers: dict[str, stratamem.Memory], queries: list[str]
) -> dict[str, dict[str, dict[str, float]]]:
    """The hybrid pipeline's stages, per reader (p50 / p95 ms), interleaved as above."""
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in READERS}
    with GateStages() as timer:
        for number, query in enumerate(queries):
            turn = number % len(READERS)
            for name in READERS[turn:] + READERS[:turn]:
                timer.next_query()
                timed_search(readers[name], query, "hybrid")
                timer.next_query()
                rows[name].append(timer.rows.pop())
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name, found in rows.items():
        names = sorted({k for row in found for k in row}, key=stage_order)
        out[name] = {}
        for stage in names:
            values = [row.get(stage, 0.0) for row in found]
            stats = summary(values)
            out[name][stage] = {"p50_ms": stats["p50_ms"], "p95_ms": stats["p95_ms"]}
    return out


def table(timings: dict[str, dict[str, list[float]]]) -> list[dict[str, Any]]:
    rows = []
    for mode in MODES:
        owner = summary(timings[mode]["owner"])
        for name in READERS:
            stats = summary(timings[mode][name])
            rows.append(
                {
                    "mode": mode,
                    "reader": name,
                    **stats,
                    "p50_ratio": round(stats["p50_ms"] / owner["p50_ms"], 2),
                    "p95_ratio": round(stats["p95_ms"] / owner["p95_ms"], 2),
                }
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--sources", type=int, default=150)
    parser.add_argument("--queries", type=int, default=300, help="at most this many")
    parser.add_argument(
        "--keep",
        type=Path,
        help="build the store in this folder and keep it; reuse what is already there",
    )
    parser.add_argument(
        "--name", default="access", help="results file name (default: access; .md and .json)"
    )
    args = parser.parse_args()
    load_start = os.getloadavg()
    texts, vectors, queries = base_corpus()
    queries = queries[: args.queries]
    embedder = get_embedder("minilm", threads=CPUS)
    documents = documents_for(args.chunks, texts)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"access-{args.chunks}-{args.sources}.db"
        built = build(path, documents, args.sources, texts, vectors, embedder)
        print(f"store ready in {built:.0f}s")
        readers, first = open_readers(path, embedder)
        try:
            print("first searches", first)
            counts = {
                name: {"sources": len(mem.store.sources()), "chunks": mem.store.chunk_count()}
                for name, mem in readers.items()
            }
            print("readers", counts)
            timings, leaks = measure(readers, queries)
            breakdown = stages(readers, queries)
        finally:
            for mem in readers.values():
                mem.close()
    rows = table(timings)
    for row in rows:
        print(row)
    command = f"python benchmarks/access_latency.py --chunks {args.chunks}"
    if args.sources != 150:
        command += f" --sources {args.sources}"
    if len(queries) != 300:
        command += f" --queries {len(queries)}"
    if args.name != "access":
        command += f" --name {args.name}"
    result = {
        "benchmark": "access gate latency",
        "command": command,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start, os.getloadavg()),
        "git": git_state(),
        "documents": documents,
        "readers": counts,
        "first_search_s": first,
        "leaked_hits": leaks,
        "rows": rows,
        "stages": breakdown,
        "bar": "p10 and p90 hybrid p50 and p95 each at most 1.5 times the owner's",
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / f"{args.name}.md").write_text(report(result, len(queries)))


def report(result: dict[str, Any], queries: int) -> str:
    info, git = result["machine"], result["git"]
    readers = result["readers"]
    lines = [
        "# Access gate latency",
        "",
        f"`{result['command']}` on {result['date']}, {info['cpus_used']} of {info['cpus']} "
        f"CPUs, Python {info['python']}, load {info['load_start']} → {info['load_end']}; "
        f"commit {git['head'][:12]}{' with src/ modified' if git['modified'] else ''}.",
        "",
        f"{result['documents']:,} SciFact documents over {readers['owner']['sources']} "
        f"sources, {readers['owner']['chunks']:,} chunks, real MiniLM vectors plus small "
        "noise (see the script's docstring). `p10` sees "
        f"{readers['p10']['sources']} sources ({readers['p10']['chunks']:,} chunks), `p90` "
        f"{readers['p90']['sources']} ({readers['p90']['chunks']:,} chunks). {queries} "
        "SciFact test claims, limit 10, each embedded anew, owner / p10 / p90 interleaved "
        "query by query. Ratio: the principal's figure over the owner's in the same run. "
        f"Hits from a source the reader may not see: {sum(result['leaked_hits'].values())}.",
        "",
        "| mode | reader | p50 ms | p95 ms | mean ms | p50 ratio | p95 ratio |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {r['mode']} | {r['reader']} | {r['p50_ms']} | {r['p95_ms']} | {r['mean_ms']} | "
        f"{r['p50_ratio']} | {r['p95_ratio']} |"
        for r in result["rows"]
    ]
    lines += [
        "",
        f"Bar: {result['bar']}.",
        "",
        "## First search (seconds)",
        "",
        "The warm-up query of each mode: the owner's builds the in-memory indexes (or reads "
        "the files a kept store has beside it) and saves them, the principals' read the "
        "saved files and make their gate masks.",
        "",
        "| reader | " + " | ".join(MODES) + " |",
        "| --- |" + " ---: |" * len(MODES),
    ]
    lines += [
        f"| {name} | " + " | ".join(str(first[m]) for m in MODES) + " |"
        for name, first in result["first_search_s"].items()
    ]
    lines += [
        "",
        "## Hybrid stages",
        "",
        "Milliseconds per query (p50 / p95), timed in a second interleaved pass. The vector "
        "leg includes embedding the query, which overlaps the keyword and graph legs. The "
        "`store: …` rows are store reads summed over wherever the pipeline makes them (the "
        "legs, expansion, the hits); they are part of the stages above them.",
        "",
        "| stage | " + " | ".join(READERS) + " |",
        "| --- |" + " ---: |" * len(READERS),
    ]
    breakdown = result["stages"]
    names = sorted({n for t in breakdown.values() for n in t}, key=stage_order)
    for name in names:
        cells = [
            f"{t[name]['p50_ms']} / {t[name]['p95_ms']}" if name in t else "–"
            for t in breakdown.values()
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
