"""Vector search: exact numpy against HNSW in faiss, hnswlib and usearch, on clustered vectors.

For each data set: the exact scan's latency; each HNSW library's build time (M 16,
ef_construction 200, all cores), single-query latency p50/p95 and recall against the exact
top k at k = 10 and k = 100 for several ef; filtered search where 10 % of the rows are allowed,
either at random or as whole neighbourhoods (correlated with the geometry, as access rules
by source are); and ``stratamem``'s ``VectorIndex`` with its defaults, including save/load.

Clustered vectors: 200 Gaussian clusters around random unit centres, spread per cluster drawn
from [0.5, 1.5] × a unit-norm isotropic noise, normalised; queries are fresh draws. Uniform
random vectors have no neighbourhoods (HNSW recall near 0.1) and are not used. Real vectors
(``--vectors``, an (n, d) .npy) are benchmarked too, with ``--query-vectors`` or 300 held-out
rows as queries. Writes ``benchmarks/results/vector_index.json`` and ``vector_index.md``.

    python benchmarks/vector_index.py [--sizes 10000 100000] [--vectors corpus.npy]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from stratamem.retrieval.index.vectors import DEFAULT_EF_SEARCH, VectorIndex

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
M = 16
EF_CONSTRUCTION = 200
EFS = (32, 64, 128)
FILTER_EFS = (64, 256)
Array = np.ndarray[Any, Any]


def clustered(n: int, dim: int, *, clusters: int = 200, seed: int = 0) -> Array:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    spread = rng.uniform(0.5, 1.5, clusters).astype(np.float32)
    labels = rng.integers(0, clusters, n)
    noise = rng.standard_normal((n, dim)).astype(np.float32) / np.float32(np.sqrt(dim))
    points = centres[labels] + spread[labels, None] * noise
    return points / np.linalg.norm(points, axis=1, keepdims=True)


def exact_top(base: Array, queries: Array, k: int, allowed: Array | None = None) -> Array:
    rows = np.arange(len(base)) if allowed is None else np.flatnonzero(allowed)
    out = []
    for start in range(0, len(queries), 64):
        scores = queries[start : start + 64] @ base[rows].T
        out.append(rows[np.argsort(-scores, axis=1)[:, :k]])
    return np.concatenate(out)


def recall(found: list[Array], truth: Array) -> float:
    k = truth.shape[1]
    return float(
        np.mean(
            [len(set(f.tolist()) & set(t.tolist())) / k for f, t in zip(found, truth, strict=True)]
        )
    )


def latency(
    search: Callable[[Array], Array], queries: Array, allows: list[Any] | None = None
) -> tuple[float, float, list[Array]]:
    """p50 and p95 in ms of ``search(query)`` or ``search(query, allow)``, and what it found."""
    calls = [
        (lambda q=q: search(q)) if allows is None else (lambda q=q, a=a: search(q, a))
        for q, a in zip(queries, allows or [None] * len(queries), strict=True)
    ]
    for call in calls[:5]:
        call()
    times, found = [], []
    for call in calls:
        started = time.perf_counter_ns()
        found.append(np.asarray(call()).ravel())
        times.append((time.perf_counter_ns() - started) / 1e6)
    return float(np.percentile(times, 50)), float(np.percentile(times, 95)), found


def allow_sets(base: Array, queries: Array, fraction: float) -> dict[str, list[Array]]:
    """Per query, a boolean mask of allowed rows, about ``fraction`` of them, three ways.

    "random": rows drawn at random. "correlated": whole neighbourhoods (the rows nearest to
    some of 100 anchor rows), as access rules by source are. "far": the neighbourhoods least
    like the query, the case where a graph walk never meets an allowed row.
    """
    rng = np.random.default_rng(7)
    anchors = base[rng.choice(len(base), 100, replace=False)]
    group = np.concatenate(
        [np.argmax(base[s : s + 20_000] @ anchors.T, axis=1) for s in range(0, len(base), 20_000)]
    )
    sizes = np.bincount(group, minlength=100)

    def union(order: Array) -> Array:
        chosen = order[: int(np.searchsorted(np.cumsum(sizes[order]), fraction * len(base))) + 1]
        return np.isin(group, chosen)

    random_mask = rng.random(len(base)) < fraction
    correlated = union(rng.permutation(100))
    return {
        f"random {fraction:.0%}": [random_mask] * len(queries),
        f"correlated {fraction:.0%}": [correlated] * len(queries),
        f"far {fraction:.0%}": [union(np.argsort(anchors @ q)) for q in queries],
    }


def exact_allowed(base: Array, queries: Array, masks: list[Array], k: int) -> Array:
    return np.stack(
        [exact_top(base, q[None, :], k, mask)[0] for q, mask in zip(queries, masks, strict=True)]
    )


# ---------------------------------------------------------------- libraries


class Faiss:
    name = "faiss IndexHNSWFlat"

    def __init__(self, base: Array) -> None:
        import faiss

        self.faiss = faiss
        self.index = faiss.IndexHNSWFlat(base.shape[1], M, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = EF_CONSTRUCTION
        self.index.add(base)

    def search(self, query: Array, k: int, ef: int, allowed: Array | None = None) -> Array:
        params = self.faiss.SearchParametersHNSW()
        params.efSearch = max(ef, k)
        if allowed is not None:
            bitmap = np.packbits(allowed, bitorder="little")
            selector = self.faiss.IDSelectorBitmap(len(bitmap), self.faiss.swig_ptr(bitmap))
            params.sel = selector
        return self.index.search(query[None, :], k, params=params)[1][0]


class Hnswlib:
    name = "hnswlib"

    def __init__(self, base: Array) -> None:
        import hnswlib

        self.index = hnswlib.Index(space="ip", dim=base.shape[1])
        self.index.init_index(len(base), ef_construction=EF_CONSTRUCTION, M=M, random_seed=1)
        self.index.set_num_threads(os.cpu_count() or 1)
        self.index.add_items(base, np.arange(len(base)))

    def search(self, query: Array, k: int, ef: int, allowed: Array | None = None) -> Array:
        self.index.set_ef(max(ef, k))
        keep = None if allowed is None else (lambda label: bool(allowed[label]))
        return self.index.knn_query(query, k=k, num_threads=1, filter=keep)[0][0]


class Usearch:
    name = "usearch"

    def __init__(self, base: Array) -> None:
        from usearch.index import Index

        self.index = Index(
            ndim=base.shape[1],
            metric="ip",
            dtype="f32",
            connectivity=M,
            expansion_add=EF_CONSTRUCTION,
        )
        self.index.add(np.arange(len(base)), base, threads=os.cpu_count() or 1)

    def search(self, query: Array, k: int, ef: int, allowed: Array | None = None) -> Array:
        if allowed is not None:
            raise NotImplementedError("usearch's Python API has no filtered search")
        self.index.expansion_search = max(ef, k)
        return self.index.search(query, k, threads=1).keys


LIBRARIES: dict[str, Callable[[Array], Any]] = {
    "faiss": Faiss,
    "hnswlib": Hnswlib,
    "usearch": Usearch,
}


def version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


# --------------------------------------------------------------------- runs


@dataclass
class Filter:
    """One kind of allowed set: a mask per query, the same as id arrays, and the exact answer."""

    masks: list[Array]
    ids: list[Array]
    truth: Array


def run_dataset(name: str, base: Array, queries: Array, libraries: list[str]) -> dict[str, Any]:
    n, dim = base.shape
    print(f"== {name}: {n:,} × {dim}, {len(queries)} queries", flush=True)
    truth = {k: exact_top(base, queries, k) for k in (10, 100)}
    filters = {}
    for label, masks in allow_sets(base, queries, 0.1).items():
        as_ids = {id(mask): np.flatnonzero(mask).astype(np.int64) for mask in masks}
        filters[label] = Filter(
            masks, [as_ids[id(mask)] for mask in masks], exact_allowed(base, queries, masks, 10)
        )
    rows: list[dict[str, Any]] = []
    filtered: list[dict[str, Any]] = []
    rows.append(run_exact(base, queries, truth, filters, filtered))
    for library in libraries:
        rows += run_library(library, base, queries, truth, filters, filtered)
    product = run_product(base, queries, truth, filters, filtered)
    rows.append(product.pop("row"))
    return {
        "name": name,
        "n": n,
        "dim": dim,
        "queries": len(queries),
        "unfiltered": rows,
        "filtered": filtered,
        "stratamem": product,
    }


def measure_index(
    method: str,
    index: VectorIndex,
    queries: Array,
    truth: dict[int, Array],
    filters: dict[str, Filter],
    filtered: list[dict[str, Any]],
) -> dict[str, Any]:
    """Latency and recall of a ``VectorIndex``, unfiltered (a row) and filtered (appended)."""
    row: dict[str, Any] = {"method": method}
    for k in (10, 100):
        p50, p95, found = latency(lambda q, k=k: index.search(q, k)[0], queries)
        row[f"k{k}"] = {"p50_ms": p50, "p95_ms": p95, "recall": recall(found, truth[k])}
    for label, allowed in filters.items():
        p50, p95, found = latency(
            lambda q, a: index.search(q, 10, allow=a)[0], queries, allowed.ids
        )
        filtered.append(
            {
                "method": method,
                "allow": label,
                "ef": None,
                "p50_ms": p50,
                "p95_ms": p95,
                "recall": recall(found, allowed.truth),
            }
        )
    return row


def run_exact(
    base: Array,
    queries: Array,
    truth: dict[int, Array],
    filters: dict[str, Filter],
    filtered: list[dict[str, Any]],
) -> dict[str, Any]:
    exact = VectorIndex(base.shape[1], hnsw_threshold=sys.maxsize)
    exact.add(np.arange(len(base), dtype=np.int64), base)
    row = measure_index("exact (numpy)", exact, queries, truth, filters, filtered)
    print(f"exact: k=10 p50 {row['k10']['p50_ms']:.2f} ms", flush=True)
    return {**row, "ef": None, "build_s": 0.0}


def run_library(
    library: str,
    base: Array,
    queries: Array,
    truth: dict[int, Array],
    filters: dict[str, Filter],
    filtered: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    started = time.perf_counter()
    index = LIBRARIES[library](base)
    build = time.perf_counter() - started
    print(f"{library}: built in {build:.1f} s", flush=True)
    rows = []
    for ef in EFS:
        row: dict[str, Any] = {"method": index.name, "ef": ef, "build_s": build}
        for k in (10, 100):
            p50, p95, found = latency(lambda q, k=k, ef=ef: index.search(q, k, ef), queries)
            row[f"k{k}"] = {"p50_ms": p50, "p95_ms": p95, "recall": recall(found, truth[k])}
        rows.append(row)
        print(
            f"  ef {ef}: k=10 p50 {row['k10']['p50_ms']:.3f} ms, recall@10 "
            f"{row['k10']['recall']:.3f}; k=100 recall {row['k100']['recall']:.3f}",
            flush=True,
        )
    for label, allowed in filters.items():
        for ef in FILTER_EFS:
            entry: dict[str, Any] = {"method": index.name, "allow": label, "ef": ef}
            try:
                p50, p95, found = latency(
                    lambda q, m, ef=ef: index.search(q, 10, ef, m), queries, allowed.masks
                )
            except NotImplementedError as reason:
                entry["note"] = str(reason)
            else:
                entry |= {"p50_ms": p50, "p95_ms": p95, "recall": recall(found, allowed.truth)}
            filtered.append(entry)
    return rows


def run_product(
    base: Array,
    queries: Array,
    truth: dict[int, Array],
    filters: dict[str, Filter],
    filtered: list[dict[str, Any]],
) -> dict[str, Any]:
    n, dim = base.shape
    started = time.perf_counter()
    index = VectorIndex(dim)
    index.add(np.arange(n, dtype=np.int64), base)
    build = time.perf_counter() - started
    method = f"stratamem VectorIndex ({index.kind})"
    row = measure_index(method, index, queries, truth, filters, filtered)
    row |= {"ef": DEFAULT_EF_SEARCH if index.kind == "hnsw" else None, "build_s": build}
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        path = index.save(Path(folder) / "vectors.smvi")
        saved = time.perf_counter() - started
        started = time.perf_counter()
        loaded = VectorIndex.load(path, dim)
        load = time.perf_counter() - started
        size = path.stat().st_size
    if loaded is None:
        raise SystemExit("the saved index did not load")
    print(
        f"{method}: built {build:.1f} s, k=10 p50 {row['k10']['p50_ms']:.3f} ms, "
        f"recall {row['k10']['recall']:.3f}; save {saved:.2f} s, load {load:.2f} s",
        flush=True,
    )
    return {
        "row": row,
        "kind": index.kind,
        "save_s": saved,
        "load_s": load,
        "file_mb": size / 1e6,
    }


# ------------------------------------------------------------------- report


def fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def markdown(result: dict[str, Any]) -> str:
    versions = ", ".join(f"{name} {ver}" for name, ver in result["versions"].items())
    lines = [
        "# Vector search: exact vs HNSW",
        "",
        f"`{result['command']}` on {result['date']}, {result['machine']['cpus']} CPUs "
        f"({result['machine']['cpu']}), Python {result['machine']['python']}; {versions}. "
        f"Load average (1 min) before and after: {result['machine']['loadavg_1m_before_after']}.",
        "",
        "Latency is one query per call, single-threaded search, after 5 warm-up queries; recall "
        "is against the exact top k (float32 scan). HNSW builds use M 16, ef_construction 200 "
        "and all cores. Clustered vectors: 200 Gaussian clusters with per-cluster spread, "
        "normalised (uniform random vectors would make every HNSW look broken). Filtered "
        'rows allow ~10 %: "random" rows; "correlated", whole neighbourhoods (rows '
        'nearest to some of 100 anchor rows), as access rules by source are; "far", per '
        "query, the neighbourhoods least like it.",
    ]
    for data in result["datasets"]:
        lines += [
            "",
            f"## {data['name']}: {data['n']:,} × {data['dim']}, {data['queries']} queries",
            "",
            "| method | ef | build s | k=10 p50 ms | p95 ms | recall@10 | k=100 p50 ms | p95 ms "
            "| recall@100 |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for row in data["unfiltered"]:
            ef = "–" if row["ef"] is None else str(row["ef"])
            lines.append(
                f"| {row['method']} | {ef} | {fmt(row['build_s'], 1)} | "
                f"{fmt(row['k10']['p50_ms'])} | {fmt(row['k10']['p95_ms'])} | "
                f"{fmt(row['k10']['recall'])} | {fmt(row['k100']['p50_ms'])} | "
                f"{fmt(row['k100']['p95_ms'])} | {fmt(row['k100']['recall'])} |"
            )
        lines += [
            "",
            "Filtered, k = 10, recall against the exact top 10 of the allowed rows:",
            "",
            "| method | allowed rows | ef | p50 ms | p95 ms | recall@10 |",
            "| --- | --- | ---: | ---: | ---: | ---: |",
        ]
        for entry in data["filtered"]:
            ef = "–" if entry["ef"] is None else str(entry["ef"])
            if "note" in entry:
                lines.append(
                    f"| {entry['method']} | {entry['allow']} | {ef} | {entry['note']} | | |"
                )
                continue
            lines.append(
                f"| {entry['method']} | {entry['allow']} | {ef} | {fmt(entry['p50_ms'])} | "
                f"{fmt(entry['p95_ms'])} | {fmt(entry['recall'])} |"
            )
        product = data["stratamem"]
        lines += [
            "",
            f"`VectorIndex` ({product['kind']}): save {fmt(product['save_s'], 2)} s, load "
            f"{fmt(product['load_s'], 2)} s, file {fmt(product['file_mb'], 1)} MB.",
        ]
    if result.get("vectors_note"):
        lines += ["", f"Real vectors: {result['vectors_note']}"]
    lines += ["", "## Reading", "", *NOTES, ""]
    return "\n".join(lines)


NOTES = [
    "- **Choice: faiss `IndexHNSWFlat`** (inner product). At 100k, faiss and hnswlib are "
    "within ~10 % of each other in latency at equal recall (about 0.2 ms p50 at ef 64, "
    "recall@10 ≥ 0.99); at 10-12k they trade places from run to run (and `VectorIndex` "
    "scans exactly there, below its 20k threshold). usearch is 2-3× slower per query. "
    "hnswlib built the 100k graph 1.2-2× faster in each of three runs, its one clear edge, "
    "but PyPI carries it only as source (a C++ compiler at install time); faiss-cpu is "
    "already a core dependency with wheels, streams into `VectorIndex`'s single file and "
    "lends its stored "
    "vectors to numpy without a copy. `VectorIndex` adds 0.1-0.15 ms of Python per query over "
    "raw faiss (input checks, normalisation, float64 rescoring of the candidates for "
    "deterministic ties).",
    "- **Library filters**: faiss's selector search is fast, but its recall collapses when the "
    'allowed rows are whole neighbourhoods ("correlated"), worst when they are the ones '
    'farthest from the query ("far"): the walk stops near the query and returns k poorer '
    "rows with no sign of trouble. hnswlib keeps walking until it holds ef allowed rows, so "
    "its recall holds better, at the price of a Python callback per visited node. usearch's "
    "Python API has no filtered search.",
    "- **`VectorIndex` with `allow`** uses neither: it fetches the graph's top ef rows, ef sized "
    "for ~2k allowed among them, keeps the allowed ones and accepts only when at least k are "
    "allowed (they are then the allowed top k, up to graph recall); otherwise, and for "
    "allowed sets under 5,000 rows or 2 %, it scans the allowed rows exactly. Hence recall "
    "1.0 on every filter, at exact-scan cost (a few ms at 100k) when the filter is correlated.",
    "- **Exact scan**: one query goes through `np.einsum`, not BLAS: OpenBLAS's two-thread "
    "gemv was 2-8× slower than a single thread while other processes held the cores.",
    "- This machine is shared (see the load average above): expect ±20 % between runs, more "
    "on build times.",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--vectors", type=Path, help="real vectors, an (n, d) float .npy")
    parser.add_argument("--query-vectors", type=Path, help="queries for --vectors (.npy)")
    parser.add_argument(
        "--vectors-note", default="", help="how --vectors were made, for the report"
    )
    parser.add_argument("--libraries", nargs="+", default=list(LIBRARIES), choices=LIBRARIES)
    parser.add_argument(
        "--markdown-only",
        action="store_true",
        help="rewrite vector_index.md from the last vector_index.json, measuring nothing",
    )
    args = parser.parse_args()
    if args.markdown_only:
        result = json.loads((RESULTS / "vector_index.json").read_text())
        (RESULTS / "vector_index.md").write_text(markdown(result))
        return

    load_before = os.getloadavg()
    datasets = []
    for size in args.sizes:
        points = clustered(size + args.queries, args.dim)
        datasets.append(
            run_dataset(
                f"clustered {size // 1000}k",
                points[args.queries :],
                points[: args.queries],
                args.libraries,
            )
        )
    if args.vectors is not None:
        real = np.load(args.vectors).astype(np.float32)
        real /= np.linalg.norm(real, axis=1, keepdims=True)
        if args.query_vectors is not None:
            queries = np.load(args.query_vectors).astype(np.float32)
            queries /= np.linalg.norm(queries, axis=1, keepdims=True)
            queries = queries[np.random.default_rng(3).permutation(len(queries))[: args.queries]]
        else:
            order = np.random.default_rng(3).permutation(len(real))
            queries, real = real[order[: args.queries]], real[order[args.queries :]]
        datasets.append(
            run_dataset(f"real vectors ({args.vectors.name})", real, queries, args.libraries)
        )

    command = "python benchmarks/vector_index.py " + " ".join(sys.argv[1:])
    cpu = (
        next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            platform.processor() or "unknown",
        )
        if Path("/proc/cpuinfo").exists()
        else platform.processor() or "unknown"
    )
    result = {
        "benchmark": "vector search: exact vs HNSW",
        "command": command.strip(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "cpu": cpu,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        },
        "versions": {name: version(name) for name in ("numpy", "faiss-cpu", "hnswlib", "usearch")},
        "params": {
            "M": M,
            "ef_construction": EF_CONSTRUCTION,
            "efs": EFS,
            "filter_efs": FILTER_EFS,
            "default_ef_search": DEFAULT_EF_SEARCH,
        },
        "choice": "faiss",
        "vectors_note": args.vectors_note,
        "datasets": datasets,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "vector_index.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "vector_index.md").write_text(markdown(result))
    print(f"wrote {RESULTS}/vector_index.md")


if __name__ == "__main__":
    main()
