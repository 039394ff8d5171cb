"""The graph leg's two scorings, ``idf`` (direct matches) and ``bm25`` (with co-mention
neighbours), alone and in hybrid search.

For each dataset (SciFact, Cranfield, LoCoMo) the store that ``stratamem eval`` builds and
caches is used as it is. Four runs, interleaved in one process over the same store and
queries: ``graph`` mode (the leg alone through the pipeline: no expansion, no
diversification, no reranker) and ``hybrid`` mode (the eval harness's ``StoreRetriever``:
the three legs fused, expanded and diversified, no reranker), each with ``graph_mode="idf"``
and ``graph_mode="bm25"``. The leg's scoring is switched by the graph factory in
``stratamem.retrieval.legs.LEGS`` for the run.

Metrics: nDCG@10, R@10 and R@100 over the test qrels for BEIR sets (trec_eval's definitions,
``stratamem.eval.metrics``); evidence recall @10 and @25 for LoCoMo. ``answered`` is the share
of queries for which the run returned anything (for ``graph`` mode: a query naming no known
entity gets nothing).

    python benchmarks/graph_leg.py [--data ../shared/data] [--store DIR] [name ...]

Writes ``benchmarks/results/graph_leg.md`` and ``.json``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from run_info import clock, dataset_table, eval_arguments, git_state, machine, write_results
from stratamem.api import Memory
from stratamem.eval.datasets import Dataset, Query
from stratamem.eval.loading import load_dataset
from stratamem.eval.metrics import evaluate_per_query, mean_scores, run_from_ranking
from stratamem.eval.report import run_retriever
from stratamem.eval.runner import StoreRetriever, prepare, scope_of, store_path
from stratamem.retrieval.legs import LEGS, GraphLeg, LegFactory
from stratamem.retrieval.legs.graph import (
    BM25_B,
    BM25_K1,
    GRAPH_MODES,
    NEIGHBOUR_WEIGHT,
    NEIGHBOURS,
)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DATASETS = ("scifact", "cranfield", "locomo")
K = 100
BEIR_SHOWN = (("ndcg_cut_10", "nDCG@10"), ("recall_10", "R@10"), ("recall_100", "R@100"))
LOCOMO_SHOWN = (("R@10", "R@10"), ("R@25", "R@25"))


@contextmanager
def graph_mode(mode: str) -> Iterator[None]:
    """The graph leg scoring by ``mode`` while inside."""
    table = cast(MutableMapping[str, LegFactory], LEGS)
    before = table["graph"]
    table["graph"] = lambda store, vectors, cfg: GraphLeg(
        store, hub_fraction=cfg.hub_fraction, graph_mode=mode
    )
    try:
        yield
    finally:
        table["graph"] = before


@dataclass
class GraphOnly:
    """The graph leg alone through the pipeline, as the harness runs a single leg."""

    memory: Memory
    dataset: Dataset

    def retrieve(self, query: Query, k: int) -> list[str]:
        group = self.dataset.group_of(query)
        sources = () if self.dataset.group_key is None else (scope_of(self.dataset, group),)
        response = self.memory.search(
            query.text,
            sources=sources,
            limit=k,
            mode="graph",
            rerank=False,
            diversify=False,
            config=replace(self.memory.config, expand_seeds=0),
        )
        return list(dict.fromkeys(hit.source_ref or hit.node_id for hit in response.hits))


@dataclass
class Capture:
    """A retriever that keeps what it returned, for metrics the harness does not report."""

    inner: Any
    rankings: dict[str, list[str]]

    def retrieve(self, query: Query, k: int) -> list[str]:
        found: list[str] = self.inner.retrieve(query, k)
        self.rankings[query.id] = list(dict.fromkeys(found))[:k]
        return found


def score(dataset: Dataset, retriever: Any, name: str) -> dict[str, Any]:
    capture = Capture(retriever, {})
    result = run_retriever(dataset, capture, k=K, mode=name)
    metrics: dict[str, float]
    if dataset.kind == "beir":
        queries = dataset.queries_in()
        qrels = {q.id: dataset.qrels.get(q.id, {}) for q in queries}
        names = tuple(n for n, _ in BEIR_SHOWN)
        per_query = evaluate_per_query(qrels, run_from_ranking(capture.rankings), names)
        metrics = mean_scores(per_query, names)
    else:
        metrics = {n: result.metrics[n] for n, _ in LOCOMO_SHOWN}
    answered = sum(1 for found in capture.rankings.values() if found)
    return {
        "name": name,
        "metrics": {k: round(v, 4) for k, v in metrics.items()},
        "answered": round(answered / max(len(capture.rankings), 1), 4),
        "seconds": round(result.seconds, 1),
    }


def run_dataset(folder: Path, cache: Path, say: Callable[[str], None]) -> dict[str, Any]:
    dataset = load_dataset(folder)
    started = time.perf_counter()
    runs: list[dict[str, Any]] = []
    with Memory(store_path(dataset, cache)) as memory:
        prepare(memory, dataset, progress=say)
        for mode in ("graph", "hybrid"):
            for scoring in GRAPH_MODES:
                say(f"{dataset.name}: {mode}, graph_mode={scoring}")
                retriever: Any = (
                    GraphOnly(memory, dataset)
                    if mode == "graph"
                    else StoreRetriever(memory, dataset, "hybrid")
                )
                with graph_mode(scoring):
                    runs.append(score(dataset, retriever, f"{mode} · {scoring}"))
                runs[-1].update(mode=mode, graph_mode=scoring)
    return {
        "dataset": dataset.name,
        "kind": dataset.kind,
        "docs": len(dataset.docs),
        "queries": len(dataset.queries_in()),
        "runs": runs,
        "seconds": round(time.perf_counter() - started, 1),
    }


def verdict(report: dict[str, Any]) -> dict[str, Any]:
    """Whether ``bm25`` should be the default: hybrid holds or improves on every dataset
    (its headline metric) and graph-only improves on every dataset."""
    rows = []
    for data in report["datasets"]:
        head = "ndcg_cut_10" if data["kind"] == "beir" else "R@10"
        got = {(r["mode"], r["graph_mode"]): r["metrics"][head] for r in data["runs"]}
        rows.append(
            {
                "dataset": data["dataset"],
                "metric": head,
                "graph_delta": round(got["graph", "bm25"] - got["graph", "idf"], 4),
                "hybrid_delta": round(got["hybrid", "bm25"] - got["hybrid", "idf"], 4),
            }
        )
    keep = bool(rows) and all(r["hybrid_delta"] >= 0 and r["graph_delta"] > 0 for r in rows)
    return {"bm25_default": keep, "deltas": rows}


def markdown(report: dict[str, Any]) -> str:
    info = report["machine"]
    lines = [
        "# The graph leg: idf over direct matches vs graph-BM25 over the neighbourhood",
        "",
        f"`python benchmarks/graph_leg.py` on {report['started']}, "
        f"{info['cpus_used']} of {info['cpus']} CPUs, Python {info['python']}; 1-minute load "
        f"average {info['load_start'][0]} at the start and {info['load_end'][0]} at the end. "
        f"Code: {report['git']['head'][:12]}"
        f"{' with uncommitted changes under `src/`' if report['git']['modified'] else ''}. "
        f"Run time {report['seconds']:.0f} s.",
        "",
        "`idf`: a chunk scores Σ log(1 + N/df) of the query's entities it mentions. `bm25`: "
        f"the query's entities and their {NEIGHBOURS} strongest co-mentioned neighbours "
        f"(weight {NEIGHBOUR_WEIGHT} · w/(w+1) against a direct match's 1), scored by BM25 "
        f"(k1 {BM25_K1}, b {BM25_B}, length = the chunk's entity count). "
        "`graph` rows run the leg alone (no expansion, no diversification); `hybrid` rows "
        "the eval harness's hybrid mode, no reranker. "
        "`answered`: share of queries with any result. Seconds are wall time on a shared "
        "machine, not a latency measure.",
    ]
    for data in report["datasets"]:
        shown = BEIR_SHOWN if data["kind"] == "beir" else LOCOMO_SHOWN
        lines += [
            "",
            f"## {data['dataset']}",
            "",
            f"{data['docs']:,} documents, {data['queries']:,} queries.",
            "",
            *dataset_table(
                data, shown, extra=(("answered", lambda run: f"{run['answered'] * 100:.0f} %"),)
            ),
        ]
    decided = report["verdict"]
    lines += [
        "",
        "## Verdict",
        "",
        "| dataset | metric | graph: bm25 − idf | hybrid: bm25 − idf |",
        "| --- | --- | ---: | ---: |",
    ]
    for row in decided["deltas"]:
        lines.append(
            f"| {row['dataset']} | {row['metric']} | {row['graph_delta']:+.4f} "
            f"| {row['hybrid_delta']:+.4f} |"
        )
    lines += [
        "",
        "`bm25` becomes the default only if hybrid holds or improves on every dataset and "
        "graph-only improves on every dataset: "
        + ("it does." if decided["bm25_default"] else "it does not; `idf` stays the default.")
        + "",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    args = eval_arguments(__doc__ or "", list(DATASETS), RESULTS)
    cache = args.cache
    load_start = os.getloadavg()
    started = time.perf_counter()
    stamp = datetime.now(UTC).replace(microsecond=0).isoformat()
    say = clock()

    found = [args.data / n for n in args.names if (args.data / n).exists()]
    results = [run_dataset(folder, cache, say) for folder in found]
    report: dict[str, Any] = {
        "started": stamp,
        "seconds": round(time.perf_counter() - started, 1),
        "machine": machine(load_start, os.getloadavg()),
        "git": git_state(),
        "datasets": results,
    }
    report["verdict"] = verdict(report)
    report["bm25"] = {
        "neighbours": NEIGHBOURS,
        "neighbour_weight": NEIGHBOUR_WEIGHT,
        "k1": BM25_K1,
        "b": BM25_B,
    }
    write_results(args.out, "graph_leg", report, markdown(report))


if __name__ == "__main__":
    main()
