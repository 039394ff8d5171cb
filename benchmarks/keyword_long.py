"""The keyword leg on long, paragraph-sized queries, beside bm25s; and its speed at 100k.

Two judged sets of long queries, built from the evaluation data on this machine:

* ``cranfield-docs``: each Cranfield document judged relevant to some query becomes a query
  (its title and text, ~130 words); the documents relevant to it are the *other* documents
  judged relevant to the same queries (binary). The corpus is Cranfield's 1,400 documents; the
  query's own document is left out of its judgments and of its ranking.
* ``locomo-summaries``: each LoCoMo session summary (``session_N_summary`` in
  ``locomo10.json``, ~150 words) becomes a query over its own conversation's turns (the turn
  corpus ``stratamem eval locomo`` indexes); the relevant turns are that session's turns
  (binary). A summary is not in the corpus, so nothing is left out.

Each set is split in two halves by ``stratamem.eval.datasets.hash_split`` (a hash of the
query id): ``tune`` is where the leg's query settings were chosen, ``heldout`` is reported
apart. The metric is nDCG@10 (trec_eval's definition, ``stratamem.eval.metrics``), also R@10.

The short-query sets are the usual ones (SciFact, Cranfield: nDCG@10; LoCoMo: evidence R@10
and R@25, all through the eval harness's ``StoreRetriever`` in ``keyword`` mode). Every run
goes through ``Memory.search(mode="keyword")`` on a copy of the store ``stratamem eval``
caches, beside bm25s over the same documents and queries, one index per conversation for
LoCoMo:

* ``bm25s (Snowball)``: bm25s's defaults (Lucene idf, k1 1.5, b 0.75), English stopwords
  dropped, PyStemmer's Snowball English stemmer; title and text as one field.
* ``bm25s (Snowball, k1 0.9, b 0.4)``: the same with Anserini's parameters.

Speed (``--speed N``): the keyword leg (``keyword_leg``, as the hybrid search calls it, pool
100) and bm25s (Snowball, stopwords; its index built beforehand, tokenizing and stemming the
query each time) over the same chunks: N documents, SciFact's abstracts repeated over 20
sources as ``search_latency.py`` lays them out, ingested without vectors (a long abstract is
several chunks: 100,000 documents are 176,986 chunks), each system ranking every chunk; the
same queries (SciFact's 300 claims, then 300 Cranfield documents as long queries), one query
at a time, the two interleaved query by query; p50/p95 in ms and their ratio.

    python benchmarks/keyword_long.py [--data ../shared/data] [--store DIR] [--speed 100000]

Writes ``benchmarks/results/keyword_long.md`` and ``.json`` (``keyword_long_speed.*`` for a
run with ``--no-quality``). Needs the bench extra.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import bm25s
import Stemmer

from keyword_stemming import Bm25sRetriever
from run_info import clock, dataset_table, git_state, machine, write_results
from stratamem.api import Memory
from stratamem.cli.common import cache_dir_from_environment
from stratamem.eval.datasets import HELDOUT, TEST, TUNE, Dataset, Query, hash_split
from stratamem.eval.loading import load_dataset
from stratamem.eval.metrics import evaluate_per_query, mean_scores, run_from_ranking
from stratamem.eval.report import run_retriever
from stratamem.eval.runner import StoreRetriever, prepare, store_path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
K = 100
POOL = 100  # what the hybrid search takes from the keyword leg (SearchConfig.pool)
BEIR_SHOWN = (("ndcg_cut_10", "nDCG@10"), ("recall_10", "R@10"))
LOCOMO_SHOWN = (("R@10", "R@10"), ("R@25", "R@25"))
REFERENCES: dict[str, dict[str, Any]] = {
    "bm25s (Snowball)": {},
    "bm25s (Snowball, k1 0.9, b 0.4)": {"k1": 0.9, "b": 0.4},
}


# -- the long-query sets ----------------------------------------------------------------------


def with_splits(dataset: Dataset, queries: list[Query], qrels: dict[str, dict[str, int]]) -> Any:
    ids = [q.id for q in queries]
    tune, heldout = hash_split(ids)
    return Dataset(
        name=dataset.name,
        docs=dataset.docs,
        queries=queries,
        qrels=qrels,
        splits={TEST: ids, TUNE: tune, HELDOUT: heldout},
        group_key=dataset.group_key,
        kind="beir",
    )


def cranfield_docs(cranfield: Dataset) -> Dataset:
    """Cranfield documents as queries for the others judged relevant to the same queries."""
    by_doc = {d.id: d for d in cranfield.docs}
    related: dict[str, set[str]] = {}
    for judged in cranfield.qrels.values():
        relevant = [d for d, grade in judged.items() if grade > 0 and d in by_doc]
        for doc in relevant:
            related.setdefault(doc, set()).update(relevant)
    queries, qrels = [], {}
    for doc_id in sorted(related, key=int):
        others = related[doc_id] - {doc_id}
        if not others:
            continue
        doc = by_doc[doc_id]
        queries.append(Query(id=doc_id, text=f"{doc.title} {doc.text}".strip()))
        qrels[doc_id] = dict.fromkeys(sorted(others), 1)
    return with_splits(cranfield, queries, qrels)


def locomo_summaries(locomo: Dataset, data: Path) -> Dataset:
    """LoCoMo session summaries as queries for their session's turns."""
    turns: dict[str, list[str]] = {}
    for doc in locomo.docs:
        conversation, place = doc.id.split("|", 1)
        session = place.split(":", 1)[0]
        turns.setdefault(f"{conversation}|{session}", []).append(doc.id)
    queries, qrels = [], {}
    for sample in json.loads((data / "locomo" / "locomo10.json").read_text()):
        sid = sample["sample_id"]
        for key, text in sample["session_summary"].items():
            number = key.removeprefix("session_").removesuffix("_summary")
            relevant = turns.get(f"{sid}|D{number}")
            if not relevant or not text.strip():
                continue
            qid = f"{sid}|S{number}"
            queries.append(Query(id=qid, text=text, meta={"sample_id": sid}))
            qrels[qid] = dict.fromkeys(relevant, 1)
    return with_splits(locomo, queries, qrels)


# -- retrievers ----------------------------------------------------------------------------------


class LeavingOut:
    """A retriever whose ranking leaves out the query's own document."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def retrieve(self, query: Query, k: int) -> list[str]:
        found: list[str] = self.inner.retrieve(query, k + 1)
        return [d for d in found if d != query.id][:k]


def long_scores(dataset: Dataset, retriever: Any) -> dict[str, dict[str, float]]:
    """nDCG@10 and R@10 on each split of a long-query set."""
    rankings = {q.id: retriever.retrieve(q, K) for q in dataset.queries}
    names = tuple(name for name, _ in BEIR_SHOWN)
    per_query = evaluate_per_query(dataset.qrels, run_from_ranking(rankings), names)
    out = {}
    for split in (TUNE, HELDOUT, TEST):
        wanted = set(dataset.split_ids(split))
        part = {q: v for q, v in per_query.items() if q in wanted}
        out[split] = {k: round(v, 4) for k, v in mean_scores(part, names).items()}
    return out


def short_scores(dataset: Dataset, retriever: Any) -> dict[str, float]:
    if dataset.kind != "beir":
        result = run_retriever(dataset, retriever, k=K, mode="keyword")
        return {name: round(result.metrics[name], 4) for name, _ in LOCOMO_SHOWN}
    queries = dataset.queries_in()
    rankings = {q.id: list(dict.fromkeys(retriever.retrieve(q, K)))[:K] for q in queries}
    qrels = {q.id: dataset.qrels.get(q.id, {}) for q in queries}
    names = tuple(name for name, _ in BEIR_SHOWN)
    per_query = evaluate_per_query(qrels, run_from_ranking(rankings), names)
    return {k: round(v, 4) for k, v in mean_scores(per_query, names).items()}


def store_copy(source: Path, folder: Path) -> Path:
    """A copy of a cached eval store (SQLite's backup API), so that nothing writes to it."""
    target = folder / source.name
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    src.close()
    dst.close()
    return target


def quality(data: Path, cache: Path, scratch: Path, say: Callable[[str], None]) -> list[Any]:
    results = []
    for name in ("scifact", "cranfield", "locomo"):
        base = load_dataset(data / name)
        path = store_path(base, cache)
        if not path.exists():
            with Memory(path) as memory:
                prepare(memory, base, progress=say)
        copy = store_copy(path, scratch)
        sets: list[tuple[str, Dataset]] = [(name, base)]
        if name == "cranfield":
            sets.append(("cranfield-docs", cranfield_docs(base)))
        if name == "locomo":
            sets.append(("locomo-summaries", locomo_summaries(base, data)))
        with Memory(copy) as memory:
            for label, dataset in sets:
                long = label != name
                retrievers: dict[str, Any] = {"keyword": StoreRetriever(memory, dataset, "keyword")}
                for ref, options in REFERENCES.items():
                    retrievers[ref] = Bm25sRetriever(dataset, stem=True, **options)
                runs = []
                for run_name, retriever in retrievers.items():
                    say(f"{label}: {run_name}")
                    started = time.perf_counter()
                    if long:
                        metrics: Any = long_scores(dataset, LeavingOut(retriever))
                    else:
                        metrics = short_scores(dataset, retriever)
                    seconds = round(time.perf_counter() - started, 1)
                    runs.append({"name": run_name, "metrics": metrics, "seconds": seconds})
                results.append(
                    {
                        "dataset": label,
                        "kind": "long" if long else dataset.kind,
                        "docs": len(dataset.docs),
                        "queries": {s: len(dataset.split_ids(s)) for s in dataset.splits},
                        "runs": runs,
                    }
                )
        copy.unlink()
    return results


# -- speed ---------------------------------------------------------------------------------------


def build(path: Path, size: int, texts: list[tuple[str, str]]) -> None:
    """``size`` chunks: SciFact's abstracts repeated over 20 sources, as ``search_latency.py``
    lays them out, ingested without vectors (the keyword leg reads none)."""
    if path.exists():
        return
    source = path.with_suffix(".jsonl")
    with source.open("w") as fh:
        for i in range(size):
            title, text = texts[i % len(texts)]
            row = {"id": str(i), "title": title, "text": text, "source": f"s{i % 20:02d}"}
            fh.write(json.dumps({**row, "kind": "document"}) + "\n")
    with Memory(path, embedder=None) as memory:
        memory.ingest(source)
    source.unlink()


def speed(data: Path, size: int, folder: Path, say: Callable[[str], None]) -> dict[str, Any]:
    from stratamem.retrieval.legs.keyword import keyword_leg
    from stratamem.types import Filters

    scifact = load_dataset(data / "scifact")
    texts = [(d.title, d.text) for d in scifact.docs]
    long = cranfield_docs(load_dataset(data / "cranfield"))
    queries = {
        "SciFact claims": [q.text for q in scifact.queries_in()],
        "Cranfield documents": [q.text for q in long.queries[:300]],
    }
    path = folder / f"keyword-{size}.db"
    say(f"speed: {size:,} chunks")
    build(path, size, texts)
    stemmer = Stemmer.Stemmer("english")
    with Memory(path, embedder=None) as memory:
        store = memory.store
        rows = store.conn.execute("SELECT title, content FROM chunks ORDER BY rowid")
        corpus = [f"{t or ''} {c}".strip() for t, c in rows.fetchall()]
        say("speed: bm25s index")
        model = bm25s.BM25()
        model.index(
            bm25s.tokenize(corpus, stopwords="en", stemmer=stemmer, show_progress=False),
            show_progress=False,
        )
        keyword_leg(store, "warm up", Filters(), POOL)
        out: dict[str, Any] = {"chunks": len(corpus)}
        for label, texts_ in queries.items():
            ours, theirs = [], []
            for text in texts_:
                started = time.perf_counter()
                keyword_leg(store, text, Filters(), POOL)
                ours.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                tokens = bm25s.tokenize(
                    text, stopwords="en", stemmer=stemmer, show_progress=False, return_ids=False
                )
                model.retrieve(tokens, k=POOL, show_progress=False, n_threads=1)
                theirs.append((time.perf_counter() - started) * 1000)
            out[label] = {"keyword leg": summary(ours), "bm25s (Snowball)": summary(theirs)}
            say(f"speed: {label}: {out[label]}")
    return out


def summary(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    return {
        "p50": round(statistics.median(ordered), 2),
        "p95": round(ordered[int(0.95 * (len(ordered) - 1))], 2),
    }


# -- report --------------------------------------------------------------------------------------


def markdown(report: dict[str, Any]) -> str:
    info = report["machine"]
    lines = [
        "# The keyword leg on long queries, beside bm25s",
        "",
        f"`python benchmarks/keyword_long.py` on {report['started']}, "
        f"{info['cpus_used']} of {info['cpus']} CPUs, Python {info['python']}; 1-minute load "
        f"average {info['load_start'][0]} at the start and {info['load_end'][0]} at the end. "
        f"Code: {report['git']['head'][:12]}"
        f"{' with uncommitted changes under `src/`' if report['git']['modified'] else ''}. "
        f"bm25s {report['bm25s']}, PyStemmer {report['pystemmer']}. "
        f"Run time {report['seconds']:.0f} s.",
        "",
        "See the script's docstring for how the long-query sets are built. `keyword` is "
        "`Memory.search(mode='keyword')` on a copy of the cached eval store; seconds are "
        "the wall time of all queries on a shared machine, not a latency measure.",
    ]
    for data in report["datasets"]:
        lines += ["", f"## {data['dataset']}", ""]
        counts = data["queries"]
        if data["kind"] == "long":
            lines += [
                f"{data['docs']:,} documents; {counts[TEST]:,} queries "
                f"({counts[TUNE]:,} tune, {counts[HELDOUT]:,} held out).",
                "",
                "| run | nDCG@10 tune | nDCG@10 held out | nDCG@10 all | R@10 held out | seconds |",
                "| --- | ---: | ---: | ---: | ---: | ---: |",
            ]
            for run in data["runs"]:
                m = run["metrics"]
                lines.append(
                    f"| {run['name']} | {m[TUNE]['ndcg_cut_10']:.3f} "
                    f"| {m[HELDOUT]['ndcg_cut_10']:.3f} | {m[TEST]['ndcg_cut_10']:.3f} "
                    f"| {m[HELDOUT]['recall_10']:.3f} | {run['seconds']} |"
                )
        else:
            shown = BEIR_SHOWN if data["kind"] == "beir" else LOCOMO_SHOWN
            lines += [
                f"{data['docs']:,} documents, {counts[TEST]:,} queries.",
                "",
                *dataset_table(data, shown),
            ]
    if report.get("speed"):
        found = report["speed"]
        lines += [
            "",
            f"## Speed at {found['chunks']:,} chunks",
            "",
            "One query at a time, ours and bm25s interleaved query by query, in ms.",
            "",
            "| queries | keyword leg p50 | p95 | bm25s p50 | p95 | p50 ratio |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for label, pair in found.items():
            if label == "chunks":
                continue
            ours, theirs = pair["keyword leg"], pair["bm25s (Snowball)"]
            lines.append(
                f"| {label} | {ours['p50']} | {ours['p95']} | {theirs['p50']} "
                f"| {theirs['p95']} | {ours['p50'] / theirs['p50']:.2f} |"
            )
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--store", type=Path, help="the eval store cache (as `stratamem eval`)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--speed", type=int, default=0, help="chunks for the speed run")
    parser.add_argument("--no-quality", action="store_true")
    parser.add_argument("--keep", type=Path, help="where the speed run's store is kept")
    args = parser.parse_args()
    cache = args.store or cache_dir_from_environment() / "eval"
    load_start = os.getloadavg()
    code = git_state()  # the code the run imports, not what the tree holds when it ends
    started = time.perf_counter()
    stamp = datetime.now(UTC).replace(microsecond=0).isoformat()
    say = clock()
    scratch = Path(tempfile.mkdtemp(prefix="stratamem-keyword-long-"))
    try:
        datasets = [] if args.no_quality else quality(args.data, cache, scratch, say)
        timing = None
        if args.speed:
            timing = speed(args.data, args.speed, args.keep or scratch, say)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report = {
        "started": stamp,
        "seconds": round(time.perf_counter() - started, 1),
        "machine": machine(load_start, os.getloadavg()),
        "git": code,
        "bm25s": bm25s.__version__,
        "pystemmer": metadata.version("PyStemmer"),
        "datasets": datasets,
        "speed": timing,
    }
    # A speed run alone is its own report: the quality figures' header is not its header.
    name = "keyword_long_speed" if args.no_quality else "keyword_long"
    write_results(args.out, name, report, markdown(report))


if __name__ == "__main__":
    main()
