"""Scoring a retriever on a dataset, and writing the results as JSON and Markdown.

:func:`run_retriever` asks a :class:`~stratamem.eval.datasets.Retriever` for the top k of
every query in a split, times it, and scores the rankings: nDCG@10, recall@100 and MRR
for BEIR sets; evidence recall @5/10/25/50, overall and per category, for LoCoMo
(@1/3/5/10 at the session level). Metric values are fractions in [0, 1] everywhere;
the Markdown shows LoCoMo recall as a percentage with one decimal, and everything else
with three decimals.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stratamem.eval.datasets import TEST, Dataset, Retriever
from stratamem.eval.locomo import LOCOMO_KS, SESSION_KS, evidence_recall
from stratamem.eval.metrics import BEIR_METRICS, evaluate_per_query, mean_scores, run_from_ranking

Progress = Callable[[int, int], None]

_LABELS = {"recip_rank": "MRR", "map": "MAP"}
_TEXT_COLUMNS = frozenset({"mode", "category", "baseline", "split", "source"})
_CUT_LABELS = {"ndcg_cut": "nDCG", "recall": "Recall", "P": "P", "map_cut": "MAP"}


@dataclass(frozen=True, slots=True)
class EvalResult:
    """One mode scored on one dataset split.

    ``metrics`` are means over the evaluated queries; ``per_category`` the same per
    LoCoMo category; ``counts`` how many queries (per category too) and how many returned
    ids the harness dropped; ``seconds`` the time spent inside ``retrieve``.
    """

    dataset: str
    mode: str
    metrics: dict[str, float]
    per_category: dict[str, dict[str, float]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    split: str = TEST
    per_query: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Baseline:
    """A published number to print beside ours; values are fractions like ours."""

    dataset: str
    name: str
    metrics: dict[str, float]
    source: str = ""


def run_retriever(
    dataset: Dataset,
    retriever: Retriever,
    *,
    k: int = 100,
    split: str | None = None,
    mode: str | None = None,
    progress: Progress | None = None,
) -> EvalResult:
    """Score ``retriever`` on ``split`` (default: every evaluated query, ``test``).

    Returned ids are cleaned before scoring, each kind counted in ``counts``: ids not in
    the dataset, ids outside the query's group, and repeats are dropped, and the rest is
    cut to ``k``. ``mode`` defaults to the retriever's ``mode`` attribute or class name.
    """
    if k <= 0:
        raise ValueError(f"k must be positive, not {k}")
    ks = {"locomo": LOCOMO_KS, "locomo-sessions": SESSION_KS}.get(dataset.kind, ())
    if ks and k < max(ks):
        raise ValueError(f"{dataset.name} is scored at R@{max(ks)}; k={k} is too small")
    split = split or TEST
    queries = dataset.queries_in(split)
    group_of_doc = {doc.id: dataset.group_of(doc) for doc in dataset.docs}
    dropped = {"dropped_unknown": 0, "dropped_out_of_group": 0, "dropped_repeated": 0}

    rankings: dict[str, list[str]] = {}
    seconds = 0.0
    for done, query in enumerate(queries, start=1):
        started = time.perf_counter()
        returned = retriever.retrieve(query, k)
        seconds += time.perf_counter() - started
        group = dataset.group_of(query)
        kept: dict[str, None] = {}
        for doc_id in returned:
            if doc_id not in group_of_doc:
                dropped["dropped_unknown"] += 1
            elif group_of_doc[doc_id] != group:
                dropped["dropped_out_of_group"] += 1
            elif doc_id in kept:
                dropped["dropped_repeated"] += 1
            else:
                kept[doc_id] = None
        rankings[query.id] = list(kept)[:k]
        if progress is not None:
            progress(done, len(queries))

    run = run_from_ranking(rankings)
    qrels = {q.id: dataset.qrels.get(q.id, {}) for q in queries}
    notes = list(dataset.notes)
    notes += [f"{n} returned ids {kind.replace('_', ' ')}" for kind, n in dropped.items() if n]
    counts = {"docs": len(dataset.docs), "k": k} | dropped
    if ks:
        categories = {q.id: int(q.meta["category"]) for q in queries}
        recall = evidence_recall(qrels, run, categories, ks=ks)
        metrics, per_category, per_query = recall.overall, recall.per_category, recall.per_query
        counts = recall.counts | counts
    else:
        per_query = evaluate_per_query(qrels, run, BEIR_METRICS)
        metrics, per_category = mean_scores(per_query, BEIR_METRICS), {}
        counts = {"queries": len(per_query)} | counts
        if k < 100:
            notes.append(f"recall_100 counts only the top {k}")
    return EvalResult(
        dataset=dataset.name,
        mode=mode or str(getattr(retriever, "mode", type(retriever).__name__)),
        metrics=metrics,
        per_category=per_category,
        counts=counts,
        seconds=seconds,
        notes=notes,
        split=split,
        per_query=per_query,
    )


def write_report(
    results: Sequence[EvalResult],
    out_dir: str | os.PathLike[str],
    name: str,
    *,
    baselines: Iterable[Baseline] = (),
    command: str | None = None,
    per_query: bool = False,
    tuned: Mapping[str, Any] | None = None,
    search: Mapping[str, Any] | None = None,
) -> tuple[Path, Path]:
    """Write ``<name>.json`` (everything) and ``<name>.md`` (tables); return both paths.

    ``per_query`` keeps each query's values in the JSON (large for LoCoMo). ``command``
    defaults to this process's command line. ``tuned``: the weights a tuning run chose and
    how (split, metric, score), kept in both files. ``search``: the search settings the
    run used, kept in the JSON.
    """
    baselines = list(baselines)
    header = {
        "name": name,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command if command is not None else shlex.join(sys.argv),
        "machine": {
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
    }
    records = []
    for result in results:
        record = asdict(result)
        if not per_query:
            del record["per_query"]
        records.append(record)
    if tuned is not None:
        header["tuned"] = dict(tuned)
    extra = {} if search is None else {"search": dict(search)}
    document = header | extra | {"results": records, "baselines": [asdict(b) for b in baselines]}

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / f"{name}.json", out / f"{name}.md"
    json_path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n", "utf-8")
    md_path.write_text(render_markdown(results, header, baselines), "utf-8")
    return json_path, md_path


def render_markdown(
    results: Sequence[EvalResult], header: Mapping[str, Any], baselines: Sequence[Baseline] = ()
) -> str:
    """The Markdown report: per dataset, one row per mode, then published baselines."""
    machine = header["machine"]
    lines = [
        f"# {header['name']}",
        "",
        f"{header['date']} · Python {machine['python']} · {machine['cpu_count']} CPUs · "
        f"`{header['command']}`",
    ]
    if "tuned" in header:
        chosen = header["tuned"]
        weights = ", ".join(f"{k} {v:g}" for k, v in chosen["weights"].items())
        lines += [
            "",
            f"Tuned weights: {weights} — chosen on the `{chosen['split']}` split by "
            f"{chosen['metric']} {chosen['tune_score']:.4f} ({chosen['tried']} tried); the "
            "table scores them on `heldout`.",
        ]
    datasets = list(dict.fromkeys([r.dataset for r in results] + [b.dataset for b in baselines]))
    for dataset in datasets:
        ours = [r for r in results if r.dataset == dataset]
        theirs = [b for b in baselines if b.dataset == dataset]
        metric_sets = [r.metrics for r in ours] + [b.metrics for b in theirs]
        names = list(dict.fromkeys(name for metrics in metric_sets for name in metrics))
        lines += ["", f"## {dataset}", ""]
        if ours:
            lines += _table(
                ["mode", *map(metric_label, names), "queries", "split", "seconds"],
                [
                    [r.mode, *_values(r.metrics, names), _count(r), r.split, f"{r.seconds:.1f}"]
                    for r in ours
                ],
            )
        for result in ours:
            if result.per_category:
                lines += ["", f"### {result.mode} by category", ""]
                lines += _table(
                    ["category", *map(metric_label, names), "questions"],
                    [
                        [category, *_values(values, names), str(result.counts.get(category, ""))]
                        for category, values in result.per_category.items()
                    ],
                )
        if theirs:
            lines += ["", "### Published baselines", ""]
            lines += _table(
                ["baseline", *map(metric_label, names), "source"],
                [[b.name, *_values(b.metrics, names), b.source] for b in theirs],
            )
        notes = list(dict.fromkeys(note for r in ours for note in r.notes))
        if notes:
            lines += ["", "Notes:", "", *(f"- {note}" for note in notes)]
    return "\n".join(lines) + "\n"


def metric_label(name: str) -> str:
    """A column heading: ``ndcg_cut_10`` → ``nDCG@10``, ``R@5`` → ``R@5 (%)``."""
    if name.startswith("R@"):
        return f"{name} (%)"
    if name in _LABELS:
        return _LABELS[name]
    base, _, cut = name.rpartition("_")
    if base in _CUT_LABELS and cut.isdigit():
        return f"{_CUT_LABELS[base]}@{cut}"
    return name


def format_metric(name: str, value: float) -> str:
    """LoCoMo evidence recall (``R@k``) as a percentage to 0.1; anything else to 0.001."""
    return f"{100 * value:.1f}" if name.startswith("R@") else f"{value:.3f}"


def _values(metrics: Mapping[str, float], names: Sequence[str]) -> list[str]:
    return [format_metric(n, metrics[n]) if n in metrics else "–" for n in names]


def _count(result: EvalResult) -> str:
    return str(result.counts.get("queries", result.counts.get("questions", "")))


def _table(heading: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    align = ["---" if cell in _TEXT_COLUMNS else "---:" for cell in heading]
    return [_row(heading), _row(align), *(_row(row) for row in rows)]


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"
