"""Hybrid search latency at 10k and 100k chunks on this machine, query embedding included.

How the corpora are built: the SciFact corpus (5,183 real abstracts) is ingested and embedded
once with the bundled model (the evaluation store is reused if it exists). A corpus of N
chunks repeats those texts over 20 sources through the real ingest pipeline (so the FTS index,
entity index and co-mention edges are built as for real data); each copy's vector is the
original's plus Gaussian noise (σ = 0.01 per dimension, renormalised), which keeps the
clustered structure of real embeddings without embedding N texts. Queries are SciFact's 300
test claims, each embedded anew (the query cache is cleared before every query).

Besides the end-to-end modes it times the hybrid pipeline stage by stage, and the keyword leg
alone three ways on the same store: the sparse BM25 index the hybrid search uses, the FTS5
query it replaces, and bm25s (if installed: ``pip install bm25s``) over the same chunk texts.

    python benchmarks/search_latency.py [--sizes 10000 100000] [--keep DIR]

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
from stratamem.embed.registry import get_embedder
from stratamem.eval import load_dataset
from stratamem.eval.runner import prepare, store_path
from stratamem.retrieval import hybrid, legs
from stratamem.retrieval.legs.keyword import SparseKeywordIndex
from stratamem.retrieval.legs.vector import VectorLeg
from stratamem.retrieval.query import match_expression, query_terms
from stratamem.store.sqlite.store import SQLiteStore
from stratamem.store.vectors import unpack_vectors
from stratamem.types import Filters

POOL = 100  # what the hybrid search takes from each leg (SearchConfig.pool)
# The embedder would otherwise start a thread per CPU of the machine, even when this process
# may use fewer (taskset), and its threads would then fight over one core.
CPUS = len(os.sched_getaffinity(0))


def open_store(path: Path) -> stratamem.Memory:
    return stratamem.open(path, embedder=get_embedder("minilm", threads=CPUS))


ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "benchmarks" / "results"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "stratamem" / "eval"


def base_corpus() -> tuple[list[tuple[str, str]], np.ndarray, list[str]]:
    dataset = load_dataset(DATA / "scifact")
    with open_store(store_path(dataset, CACHE)) as mem:
        prepare(mem, dataset, progress=print)
        assert mem.embedder is not None
        model = mem.embedder.spec.signature
        rows = mem.store.conn.execute(
            """SELECT c.title, c.content, e.vector FROM chunks c
               JOIN embeddings e ON e.node_id = c.id AND e.model = ? ORDER BY c.rowid""",
            (model,),
        ).fetchall()
    texts = [(r[0], r[1]) for r in rows]
    vectors = unpack_vectors([r[2] for r in rows], mem.embedder.spec.dim)
    queries = [q.text for q in dataset.queries_in("test")]
    return texts, vectors, queries


def build(path: Path, size: int, texts: list[tuple[str, str]], vectors: np.ndarray) -> float:
    """Ingest the corpus and give every chunk its vector; with ``--keep``, whichever of the
    two a kept store already has is not redone."""
    started = time.perf_counter()
    if path.exists():
        with open_store(path) as mem:
            if mem.store.vector_models():
                return time.perf_counter() - started
            if mem.store.chunk_count():
                add_vectors(mem, vectors)
                return time.perf_counter() - started
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
    with open_store(path) as mem:
        mem.ingest(source)
        add_vectors(mem, vectors)
    return time.perf_counter() - started


def add_vectors(mem: stratamem.Memory, vectors: np.ndarray, *, noise: float = 0.01) -> int:
    """Each chunk gets its document's real vector (row k for the corpus file's line k) plus
    small noise (see the docstring); returns how many chunks got one."""
    rng = np.random.default_rng(7)
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
            # The line of the corpus file (a long abstract's later chunks add ":2", ":3").
            line = int(row["source_ref"].rsplit(".jsonl:", 1)[1].split(":")[0]) - 1
            vector = vectors[line % len(vectors)]
            if noise:
                vector = vector + rng.normal(0, noise, spec.dim)
                vector = (vector / np.linalg.norm(vector)).astype("<f4")
            batch.append(
                (
                    row["id"],
                    spec.signature,
                    row["source_id"],
                    spec.dim,
                    np.asarray(vector, dtype="<f4").tobytes(),
                    row["content_sha256"],
                )
            )
        mem.store.insert_vectors(batch)
    return len(rows)


def summary(timings: list[float]) -> dict[str, float]:
    timings = sorted(timings)
    return {
        "p50_ms": round(statistics.median(timings), 2),
        "p95_ms": round(timings[int(0.95 * (len(timings) - 1))], 2),
        "mean_ms": round(statistics.fmean(timings), 2),
        "queries": len(timings),
    }


def measure(path: Path, queries: list[str], mode: str) -> dict[str, float]:
    with open_store(path) as mem:
        started = time.perf_counter()
        mem.search("warm up the index and caches", mode=mode)
        warm_up = time.perf_counter() - started
        vectors = mem.vectors
        timings = []
        for query in queries:
            if vectors is not None:
                vectors._queries.clear()  # every query is embedded, as a new one would be
            started = time.perf_counter()
            mem.search(query, limit=10, mode=mode)
            timings.append((time.perf_counter() - started) * 1000)
    return {**summary(timings), "first_search_s": round(warm_up, 2)}


class Stages:
    """Wall time per stage of the hybrid pipeline, by wrapping the functions it calls."""

    def __init__(self) -> None:
        self.current: dict[str, float] = {}
        self.rows: list[dict[str, float]] = []
        self._undo: list[tuple[object, str, object]] = []

    def wrap(self, owner: object, name: str, stage: str) -> None:
        original = getattr(owner, name)

        def timed(*args: object, **kwargs: object) -> object:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                elapsed = (time.perf_counter() - started) * 1000
                self.current[stage] = self.current.get(stage, 0.0) + elapsed

        self._undo.append((owner, name, original))
        setattr(owner, name, timed)

    def __enter__(self) -> Stages:
        self.wrap(legs, "keyword_leg", "keyword leg")
        self.wrap(VectorLeg, "embed_query", "vector: embed query")
        self.wrap(VectorLeg, "search", "vector leg (with embedding)")
        self.wrap(legs, "graph_leg", "graph leg")
        self.wrap(hybrid.HybridSearcher, "_in_context", "chat context")
        self.wrap(hybrid.HybridSearcher, "_expand", "expansion")
        self.wrap(SQLiteStore, "chunks", "read chunks")
        self.wrap(VectorLeg, "vectors", "read vectors for mmr")
        self.wrap(hybrid, "mmr", "mmr")
        self.wrap(hybrid, "_hits", "hits")
        self.wrap(hybrid.HybridSearcher, "search", "total")
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)

    def next_query(self) -> None:
        if self.current:
            row = dict(self.current)
            inside = sum(v for k, v in row.items() if k != "total" and ":" not in k)
            row["other (fusion, boosts, bookkeeping)"] = row.get("total", 0.0) - inside
            self.rows.append(row)
        self.current = {}


def stage_breakdown(path: Path, queries: list[str]) -> dict[str, dict[str, float]]:
    with open_store(path) as mem:
        mem.search("warm up the index and caches")
        vectors = mem.vectors
        with Stages() as stages:
            for query in queries:
                if vectors is not None:
                    vectors._queries.clear()
                stages.next_query()
                mem.search(query, limit=10)
            stages.next_query()
    names = sorted({k for row in stages.rows for k in row}, key=_stage_order)
    out = {}
    for name in names:
        values = sorted(row.get(name, 0.0) for row in stages.rows)
        out[name] = {
            "p50_ms": round(statistics.median(values), 2),
            "p95_ms": round(values[int(0.95 * (len(values) - 1))], 2),
            "mean_ms": round(statistics.fmean(values), 2),
        }
    return out


def _stage_order(name: str) -> int:
    order = [
        "keyword leg",
        "vector leg (with embedding)",
        "vector: embed query",
        "graph leg",
        "chat context",
        "expansion",
        "read chunks",
        "read vectors for mmr",
        "mmr",
        "hits",
        "other (fusion, boosts, bookkeeping)",
        "total",
    ]
    return order.index(name) if name in order else len(order)


def keyword_legs(path: Path, queries: list[str]) -> dict[str, dict[str, float]]:
    """The keyword leg alone, top 100, no filter: the sparse index, FTS5, and bm25s."""
    out: dict[str, dict[str, float]] = {}
    Path(f"{path}.bm25.idx").unlink(missing_ok=True)
    with SQLiteStore(path) as store:
        started = time.perf_counter()
        SparseKeywordIndex(store).search(["warm"], Filters(), POOL)
        build_s = time.perf_counter() - started
        index = SparseKeywordIndex(store)
        started = time.perf_counter()
        index.search(["warm"], Filters(), POOL)
        load_s = time.perf_counter() - started
        timings = []
        for query in queries:
            started = time.perf_counter()
            index.search(query_terms(query), Filters(), POOL)
            timings.append((time.perf_counter() - started) * 1000)
        out["sparse BM25 index (hybrid keyword leg)"] = {
            **summary(timings),
            "build_s": round(build_s, 2),
            "load_s": round(load_s, 2),
        }
        timings = []
        for query in queries:
            started = time.perf_counter()
            expression = match_expression(query)
            if expression is not None:
                store.fts_search(expression, Filters(), POOL, snippets=False, count=False)
            timings.append((time.perf_counter() - started) * 1000)
        out["FTS5 MATCH ... ORDER BY rank (previous leg)"] = summary(timings)
        texts = [
            f"{title} {content}"
            for title, content in store.conn.execute(
                "SELECT title, content FROM chunks ORDER BY rowid"
            )
        ]
    try:
        import bm25s  # type: ignore[import-not-found]
    except ImportError:
        return out
    started = time.perf_counter()
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    build_s = time.perf_counter() - started
    timings = []
    for query in queries:
        started = time.perf_counter()
        tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
        retriever.retrieve(tokens, k=POOL, show_progress=False, n_threads=1)
        timings.append((time.perf_counter() - started) * 1000)
    out[f"bm25s {bm25s.__version__} (numpy backend, query tokenized)"] = {
        **summary(timings),
        "build_s": round(build_s, 2),
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--modes", nargs="+", default=["hybrid", "keyword", "vector"])
    parser.add_argument(
        "--keep",
        type=Path,
        help="build the corpora in this folder and keep them; reuse what is already there",
    )
    args = parser.parse_args()
    texts, vectors, queries = base_corpus()
    rows = []
    stages: dict[str, dict[str, dict[str, float]]] = {}
    legs: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for size in args.sizes:
            path = folder / f"latency-{size}.db"
            seconds = build(path, size, texts, vectors)
            print(f"built {size:,} documents in {seconds:.0f}s")
            for index_file in folder.glob(f"{path.name}.*.idx"):
                index_file.unlink()  # every run starts without saved indexes
            for mode in args.modes:
                stats = measure(path, queries, mode)
                rows.append({"documents": size, "chunks": _chunks(path), "mode": mode, **stats})
                print(size, mode, stats)
            stages[str(size)] = stage_breakdown(path, queries)
            print(size, "stages", stages[str(size)])
            legs[str(size)] = keyword_legs(path, queries)
            print(size, "keyword legs", legs[str(size)])
    result = {
        "benchmark": "search latency",
        "command": "python benchmarks/search_latency.py --sizes " + " ".join(map(str, args.sizes)),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "cpus_used": CPUS,
            "python": platform.python_version(),
        },
        "rows": rows,
        "stages": stages,
        "keyword_legs": legs,
        "bar": {"hybrid_100k_p50_ms": 15, "hybrid_100k_p95_ms": 50},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "search_latency.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# Search latency",
        "",
        f"`{result['command']}` on {result['date']}, {CPUS} of "
        f"{os.cpu_count()} CPUs. "
        "One query at a time, limit 10, the query embedded every time (bundled MiniLM on "
        "onnxruntime). Corpus: SciFact's 5,183 abstracts repeated over 20 sources through "
        "the real ingest pipeline (long abstracts make more than one chunk); vectors are "
        "the real ones plus small noise (see the script's docstring). First search: the "
        "warm-up query, which builds the in-memory indexes (no saved index files) and reads "
        "the entity postings. The query is embedded on a second thread while the keyword and "
        "graph legs run, so the stages below overlap and do not sum to the total.",
        "",
        "| documents | chunks | mode | p50 ms | p95 ms | mean ms | queries | first search s |",
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {r['documents']:,} | {r['chunks']:,} | {r['mode']} | {r['p50_ms']} | "
        f"{r['p95_ms']} | {r['mean_ms']} | {r['queries']} | {r['first_search_s']} |"
        for r in rows
    ]
    lines += ["", "Bar: hybrid p50 ≤ 15 ms and p95 ≤ 35 ms at 100k chunks.", ""]
    lines += [
        "## Hybrid stages",
        "",
        "Milliseconds per query (p50 / p95). The vector leg includes embedding the query.",
        "",
        "| stage | " + " | ".join(f"{int(s):,} documents" for s in stages) + " |",
        "| --- |" + " ---: |" * len(stages),
    ]
    names = sorted({n for table in stages.values() for n in table}, key=_stage_order)
    for name in names:
        cells = [
            f"{t[name]['p50_ms']} / {t[name]['p95_ms']}" if name in t else "–"
            for t in stages.values()
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Keyword leg alone",
        "",
        f"Top {POOL}, no filter, the same store and queries. Build: seconds to build the "
        "in-memory index from the store (bm25s: from the chunk texts); load: seconds to "
        "read the index saved beside the database and check it against the store.",
        "",
        "| documents | implementation | p50 ms | p95 ms | mean ms | build s | load s |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for size, table in legs.items():
        for name, r in table.items():
            lines.append(
                f"| {int(size):,} | {name} | {r['p50_ms']} | {r['p95_ms']} | {r['mean_ms']} | "
                f"{r.get('build_s', '–')} | {r.get('load_s', '–')} |"
            )
    lines.append("")
    (RESULTS / "search_latency.md").write_text("\n".join(lines))


def _chunks(path: Path) -> int:
    with SQLiteStore(path) as store:
        return store.chunk_count()


if __name__ == "__main__":
    main()
