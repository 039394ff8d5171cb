"""The keyword leg with and without stemming, beside bm25s on the same documents and queries.

For each dataset (SciFact, Cranfield, LoCoMo; any BEIR-style folder given) the store that
``stratamem eval`` builds and caches is used as it is (the ``stemmed`` tokenizer, every store's
default: FTS5's ``porter`` over ``unicode61``), and a copy of it (SQLite's backup API) is
switched to the ``plain`` tokenizer with ``Memory.indexes.set_keyword_tokenizer`` (the ``stratamem
reindex --tokenizer plain`` path: the full-text index re-tokenized, the BM25 index rebuilt;
the vectors are the same). Both are scored through the eval harness (``StoreRetriever``) in
``keyword`` mode (the leg alone) and ``hybrid`` mode, the four runs interleaved with two
references built in the same process over the same documents and queries:

* ``bm25s (Snowball)``: bm25s 0.2+ with its defaults (Lucene idf, k1 1.5, b 0.75), English
  stopwords dropped, PyStemmer's Snowball English stemmer; a document is its title and text.
* ``bm25s (Snowball, k1 0.9, b 0.4)``: the same with Anserini's BM25 parameters.
* ``bm25s (no stemmer)``: the same without the stemmer.

LoCoMo's references index each conversation on its own (a question is answered from its own
conversation, as the harness requires). Metrics: nDCG@10, R@10 and R@25 over the test qrels
for BEIR sets (trec_eval's definitions, ``stratamem.eval.metrics``); evidence recall @10 and
@25 for LoCoMo, overall (``stratamem.eval.locomo``).

    python benchmarks/keyword_stemming.py [--data ../shared/data] [--store DIR] [name ...]

Writes ``benchmarks/results/keyword_stemming.md`` and ``.json``. Needs the bench extra
(``pip install -e '.[bench]'``: bm25s, PyStemmer).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
import Stemmer

from run_info import clock, dataset_table, eval_arguments, git_state, machine, write_results
from stratamem.api import Memory
from stratamem.eval.datasets import Dataset, Query
from stratamem.eval.loading import load_dataset
from stratamem.eval.metrics import evaluate_per_query, mean_scores, run_from_ranking
from stratamem.eval.report import run_retriever
from stratamem.eval.runner import StoreRetriever, prepare, store_path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DATASETS = ("scifact", "cranfield", "locomo")
K = 100
BEIR_SHOWN = (("ndcg_cut_10", "nDCG@10"), ("recall_10", "R@10"), ("recall_25", "R@25"))
LOCOMO_SHOWN = (("R@10", "R@10"), ("R@25", "R@25"))


@dataclass
class Capture:
    """A retriever that keeps what it returned, for metrics the harness does not report."""

    inner: Any
    rankings: dict[str, list[str]]

    def retrieve(self, query: Query, k: int) -> list[str]:
        found: list[str] = self.inner.retrieve(query, k)
        self.rankings[query.id] = list(dict.fromkeys(found))[:k]
        return found


REFERENCES: dict[str, dict[str, Any]] = {
    "bm25s (Snowball)": {"stem": True},
    "bm25s (Snowball, k1 0.9, b 0.4)": {"stem": True, "k1": 0.9, "b": 0.4},
    "bm25s (no stemmer)": {"stem": False},
}


class Bm25sRetriever:
    """bm25s over the dataset's documents (title and text), one index per group."""

    def __init__(self, dataset: Dataset, *, stem: bool, k1: float = 1.5, b: float = 0.75) -> None:
        self.dataset = dataset
        self.stemmer = Stemmer.Stemmer("english") if stem else None
        self.indexes: dict[str | None, tuple[bm25s.BM25, list[str]]] = {}
        for group, ids in dataset.doc_ids_by_group().items():
            wanted = set(ids)
            docs = [d for d in dataset.docs if d.id in wanted]
            tokens = bm25s.tokenize(
                [f"{d.title} {d.text}".strip() for d in docs],
                stopwords="en",
                stemmer=self.stemmer,
                show_progress=False,
            )
            model = bm25s.BM25(k1=k1, b=b)
            model.index(tokens, show_progress=False)
            self.indexes[group] = (model, [d.id for d in docs])

    def retrieve(self, query: Query, k: int) -> list[str]:
        model, ids = self.indexes[self.dataset.group_of(query)]
        tokens = bm25s.tokenize(
            query.text,
            stopwords="en",
            stemmer=self.stemmer,
            show_progress=False,
            return_ids=False,
        )
        scores = model.get_scores(tokens[0]) if tokens and tokens[0] else np.zeros(len(ids))
        matched = np.flatnonzero(scores > 0)
        order = matched[np.lexsort((matched, -scores[matched]))][:k]
        return [ids[i] for i in order.tolist()]


def score(dataset: Dataset, retriever: Any, mode: str) -> dict[str, Any]:
    capture = Capture(retriever, {})
    result = run_retriever(dataset, capture, k=K, mode=mode)
    metrics: dict[str, float]
    if dataset.kind == "beir":
        queries = dataset.queries_in()
        qrels = {q.id: dataset.qrels.get(q.id, {}) for q in queries}
        names = tuple(name for name, _ in BEIR_SHOWN)
        per_query = evaluate_per_query(qrels, run_from_ranking(capture.rankings), names)
        metrics = mean_scores(per_query, names)
    else:
        metrics = {name: result.metrics[name] for name, _ in LOCOMO_SHOWN}
    return {
        "name": mode,
        "metrics": {k: round(v, 4) for k, v in metrics.items()},
        "seconds": round(result.seconds, 1),
    }


def plain_copy(source: Path, folder: Path) -> Path:
    """A copy of the store at ``source`` (SQLite's backup API: consistent under WAL)."""
    target = folder / source.name
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    src.close()
    dst.close()
    return target


def run_dataset(folder: Path, cache: Path, scratch: Path, say: Callable[[str], None]) -> Any:
    dataset = load_dataset(folder)
    say(f"{dataset.name}: preparing the stores")
    started = time.perf_counter()
    path = store_path(dataset, cache)
    with Memory(path) as memory:
        prepare(memory, dataset, progress=say)
        memory.indexes.set_keyword_tokenizer("stemmed")
    plain_path = plain_copy(path, scratch)
    runs: list[dict[str, Any]] = []
    with Memory(path) as stemmed, Memory(plain_path) as plain:
        switched = time.perf_counter()
        plain.indexes.set_keyword_tokenizer("plain")
        switch_seconds = time.perf_counter() - switched
        stores = {"stemmed": stemmed, "plain": plain}
        for mode in ("keyword", "hybrid"):
            for name, memory in stores.items():
                say(f"{dataset.name}: {mode}, {name}")
                retriever = StoreRetriever(memory, dataset, mode)
                runs.append(score(dataset, retriever, f"{mode} · {name}"))
                runs[-1]["tokenizer"] = memory.indexes.keyword_tokenizer()
            if mode == "keyword":
                for label, options in REFERENCES.items():
                    say(f"{dataset.name}: {label}")
                    runs.append(score(dataset, Bm25sRetriever(dataset, **options), label))
    plain_path.unlink()
    return {
        "dataset": dataset.name,
        "kind": dataset.kind,
        "docs": len(dataset.docs),
        "queries": len(dataset.queries_in()),
        "plain_switch_seconds": round(switch_seconds, 2),
        "runs": runs,
        "seconds": round(time.perf_counter() - started, 1),
    }


def markdown(report: dict[str, Any]) -> str:
    info = report["machine"]
    lines = [
        "# The keyword leg with and without stemming, beside bm25s",
        "",
        f"`python benchmarks/keyword_stemming.py` on {report['started']}, "
        f"{info['cpus_used']} of {info['cpus']} CPUs, Python {info['python']}; 1-minute load "
        f"average {info['load_start'][0]} at the start and {info['load_end'][0]} at the end. "
        f"Code: {report['git']['head'][:12]}"
        f"{' with uncommitted changes under `src/`' if report['git']['modified'] else ''}. "
        f"bm25s {report['bm25s']}, PyStemmer {report['pystemmer']}. "
        f"Run time {report['seconds']:.0f} s.",
        "",
        "`stemmed` is the store's default keyword tokenizer (FTS5 `porter` over `unicode61`, "
        "diacritics folded); `plain` is `unicode61` alone, on a copy of the same store "
        "switched with `reindex --tokenizer plain`. bm25s runs with its defaults (Lucene idf, "
        "k1 1.5, b 0.75, English stopwords; one run with k1 0.9, b 0.4), title and text as "
        "one field. See the script's "
        "docstring. Seconds are the wall time of all queries on a shared machine (other work "
        "ran beside it), not a latency measure; the bm25s runs leave out building their index.",
    ]
    for data in report["datasets"]:
        shown = BEIR_SHOWN if data["kind"] == "beir" else LOCOMO_SHOWN
        lines += [
            "",
            f"## {data['dataset']}",
            "",
            f"{data['docs']:,} documents, {data['queries']:,} queries; "
            f"switching the copy to `plain` took {data['plain_switch_seconds']} s.",
            "",
            *dataset_table(data, shown),
        ]
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    args = eval_arguments(__doc__ or "", list(DATASETS), RESULTS)
    cache = args.cache
    load_start = os.getloadavg()
    started = time.perf_counter()
    stamp = datetime.now(UTC).replace(microsecond=0).isoformat()
    say = clock()

    scratch = Path(tempfile.mkdtemp(prefix="stratamem-stemming-"))
    try:
        found = [args.data / n for n in args.names if (args.data / n).exists()]
        results = [run_dataset(folder, cache, scratch, say) for folder in found]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report = {
        "started": stamp,
        "seconds": round(time.perf_counter() - started, 1),
        "machine": machine(load_start, os.getloadavg()),
        "git": git_state(),
        "bm25s": bm25s.__version__,
        "pystemmer": metadata.version("PyStemmer"),
        "datasets": results,
    }
    write_results(args.out, "keyword_stemming", report, markdown(report))


if __name__ == "__main__":
    main()
