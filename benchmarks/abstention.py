"""Can an agent tell "nothing relevant is stored" from a strong hit? Abstention and calibration.

Each query is searched twice with the hybrid search (``Memory.search``, limit 10, the pipeline
as ``stratamem eval`` runs it, relevance from the packaged calibration): where its answer is
and where nothing answers it.

* **LoCoMo**: each question in its own conversation (as ``stratamem eval`` scores it), and in
  the next conversation (sorted by sample id; the last's next is the first), where none of
  its evidence turns is.
* **SciFact**: each query against SciFact, and against Cranfield (aeronautics), an unrelated
  corpus. **Cranfield**: the same the other way round.
* **LoCoMo facts**: the observations written as facts (as ``benchmarks/locomo_facts.py``
  writes them, in a copy of the turn store), each question's fact search
  (``Memory.facts.search``) in its own conversation and in the next.
* **LoCoMo recall**: the same store, each question's ``Memory.recall`` (limit 10: turns and
  facts in one list, each hit's relevance shown going down it) in its own conversation and
  in the next.

Scored: the AUROC of the top hit's relevance (0 for no hit) telling the two apart (Mann-
Whitney, ties a half); the precision and recall of ``nothing_relevant`` at the calibration's
default threshold, "nothing relevant" being the positive class (a search where nothing
answers); each on the ``heldout`` half of the queries (the half the calibration was not
fitted on) and on all. Calibration quality on heldout: each of the top 10 hits of both
searches a judged pair (relevant when its document is in the query's qrels; LoCoMo: one of
its evidence turns; a fact: one of its evidence turns is), the relevance shown against the
outcome: Brier score, expected calibration error over 10 bins, and the reliability table.

    python benchmarks/abstention.py

Reuses the stores ``stratamem eval`` keeps (``~/.cache/stratamem/eval``); the facts store is a
copy made beside them the first time. Writes ``benchmarks/results/abstention.md`` and
``.json``.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from run_info import git_state, machine, write_results
from stratamem import Memory
from stratamem.cli.common import cache_dir_from_environment
from stratamem.eval.calibrate import (
    Pair,
    Ranked,
    auroc,
    brier,
    expected_calibration_error,
    facts_store,
    judge,
    judged,
    judged_facts,
    next_group_sources,
    own_sources,
    reliability,
)
from stratamem.eval.datasets import HELDOUT, TEST, Dataset, Query
from stratamem.eval.loading import load_dataset
from stratamem.eval.runner import prepare, store_path
from stratamem.retrieval.relevance import Calibration

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DATA = ROOT.parent / "shared" / "data"
TARGET_AUROC = 0.9


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def abstention(
    own: Sequence[Ranked], away: Sequence[Ranked], threshold: float, wanted: set[str] | None
) -> dict[str, Any]:
    """AUROC of the top relevance, and nothing_relevant's precision and recall, over the
    queries in ``wanted`` (None: all)."""
    here = [r.top for r in own if wanted is None or r.query in wanted]
    there = [r.top for r in away if wanted is None or r.query in wanted]
    flagged_there = sum(1 for v in there if v < threshold)
    flagged_here = sum(1 for v in here if v < threshold)
    flagged = flagged_there + flagged_here
    return {
        "queries": len(here),
        "auroc": round(auroc(here, there), 4),
        "nothing_relevant_precision": round(flagged_there / flagged, 4) if flagged else None,
        "nothing_relevant_recall": round(flagged_there / len(there), 4) if there else None,
        "flagged_where_answer_is": flagged_here,
        "mean_top_where_answer_is": round(sum(here) / len(here), 4) if here else None,
        "mean_top_where_nothing_is": round(sum(there) / len(there), 4) if there else None,
    }


def recalled(
    memory: Memory, queries: Sequence[Query], sources: Any, *, k: int = 10
) -> list[Ranked]:
    """Each question's recall (turns and facts in one list) within ``sources(query)``: the
    relevance each hit shows, for the top."""
    out = []
    for query in queries:
        found = memory.recall(query.text, sources=sources(query), limit=k)
        out.append(
            Ranked(
                query.id,
                tuple(h.source_ref or h.node_id for h in found.hits),
                tuple({} for _ in found.hits),
                tuple(h.relevance or 0.0 for h in found.hits),
            )
        )
    return out


def quality(pairs: Sequence[Pair]) -> dict[str, Any]:
    predicted = [p.relevance for p in pairs]
    outcome = [p.relevant for p in pairs]
    return {
        "pairs": len(pairs),
        "relevant": sum(outcome),
        "brier": round(brier(predicted, outcome), 4),
        "ece": round(expected_calibration_error(predicted, outcome), 4),
        "reliability": reliability(predicted, outcome),
    }


def heldout_ids(dataset: Dataset) -> set[str]:
    return {q.id for q in dataset.queries_in(HELDOUT)}


def reliability_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| bin | hits | mean relevance | share relevant |", "|---|---:|---:|---:|"]
    for row in rows:
        mean = "—" if row["mean_predicted"] is None else f"{row['mean_predicted']:.3f}"
        share = "—" if row["share_relevant"] is None else f"{row['share_relevant']:.3f}"
        lines.append(f"| {row['bin']} | {row['count']} | {mean} | {share} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, help="where eval keeps its stores")
    parser.add_argument("--no-facts", action="store_true", help="leave the fact search out")
    args = parser.parse_args()
    load_start = os.getloadavg()
    git = git_state()
    started = time.perf_counter()
    folder = args.store or cache_dir_from_environment() / "eval"
    calibration = Calibration.load()
    threshold = calibration.threshold
    names = ("locomo", "scifact", "cranfield")
    report: dict[str, Any] = {
        "benchmark": "abstention: top relevance where the answer is vs where nothing is",
        "command": "python benchmarks/abstention.py" + (" --no-facts" if args.no_facts else ""),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "git": git,
        "calibration": {"name": calibration.name, "threshold": threshold},
        "target_auroc": TARGET_AUROC,
    }
    with ExitStack() as stack:
        stores = []
        facts = None
        for name in names:
            dataset = load_dataset(DATA / name)
            location = store_path(dataset, folder)
            memory = stack.enter_context(Memory(location))
            prepare(memory, dataset, progress=log)
            stores.append((dataset, memory))
            if name == "locomo" and not args.no_facts:
                copy = facts_store(dataset, location, DATA / name / "locomo10.json")
                facts = stack.enter_context(Memory(copy))
            embedder = memory.embedder.spec.name if memory.embedder is not None else None
        report["embedder"] = embedder
        report["search"] = {"limit": 10, "mode": "hybrid", "config": "the store's default"}
        judging = judge(stores, TEST, facts=facts, progress=log)
        recalls: tuple[list[Ranked], list[Ranked]] | None = None
        if facts is not None:
            locomo = stores[0][0]
            queries = [q for q in locomo.queries_in(TEST) if locomo.qrels.get(q.id)]
            log(f"locomo recall: {len(queries)} queries, twice")
            recalls = (
                recalled(facts, queries, own_sources(locomo)),
                recalled(facts, queries, next_group_sources(locomo)),
            )
    datasets = {d.name: d for d, _ in stores}
    results: dict[str, Any] = {}
    pairs_heldout: list[Pair] = []
    for name, dataset in datasets.items():
        own, away = judging.own[name], judging.elsewhere.get(name, [])
        held = heldout_ids(dataset)
        versus = "the next conversation" if dataset.group_key else "another corpus"
        results[name] = {
            "elsewhere": versus,
            "heldout": abstention(own, away, threshold, held),
            "all": abstention(own, away, threshold, None),
        }
        pairs = judged([r for r in own if r.query in held], dataset.qrels) + judged(
            [r for r in away if r.query in held], {}
        )
        results[name]["calibration_heldout"] = quality(pairs)
        pairs_heldout.extend(pairs)
    if facts is not None:
        locomo = datasets["locomo"]
        held = heldout_ids(locomo)
        own, away = judging.fact_searches, judging.fact_elsewhere
        results["locomo facts"] = {
            "elsewhere": "the next conversation",
            "heldout": abstention(own, away, threshold, held),
            "all": abstention(own, away, threshold, None),
            "calibration_heldout": quality(
                judged_facts([r for r in own if r.query in held], locomo.qrels)
                + judged_facts([r for r in away if r.query in held], {})
            ),
        }
    if recalls is not None:
        own, away = recalls
        results["locomo recall"] = {
            "elsewhere": "the next conversation",
            "heldout": abstention(own, away, threshold, held),
            "all": abstention(own, away, threshold, None),
        }
    report["results"] = results
    report["calibration_heldout_chunks"] = quality(pairs_heldout)
    report["machine"] = machine(load_start, os.getloadavg())
    report["wall_s"] = round(time.perf_counter() - started)
    write_results(RESULTS, "abstention", report, render(report))


def render(report: dict[str, Any]) -> str:
    lines = [
        "# Abstention: is anything relevant stored?",
        "",
        f"`{report['command']}` · {report['date']} · git {report['git']['head'][:12]}"
        f"{' (modified)' if report['git']['modified'] else ''} · embedder {report['embedder']} · "
        f"{report['wall_s']} s · load {report['machine']['load_start']} → "
        f"{report['machine']['load_end']} on {report['machine']['cpus']} CPUs",
        "",
        f"Calibration `{report['calibration']['name']}`, default threshold "
        f"{report['calibration']['threshold']} (chosen on the tune halves). Each query searched "
        "(hybrid, top 10) where its answer is and where nothing is; positive class of "
        "`nothing_relevant`: the search where nothing is. Target AUROC ≥ "
        f"{report['target_auroc']}.",
        "",
        "| set | vs | split | queries | AUROC | nothing_relevant precision | recall "
        "| answered but flagged | mean top (answer / none) |",
        "|---|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for name, found in report["results"].items():
        for split in ("heldout", "all"):
            row = found[split]
            lines.append(
                f"| {name} | {found['elsewhere']} | {split} | {row['queries']} | "
                f"{row['auroc']:.3f} | {_num(row['nothing_relevant_precision'])} | "
                f"{_num(row['nothing_relevant_recall'])} | {row['flagged_where_answer_is']} | "
                f"{_num(row['mean_top_where_answer_is'])} / "
                f"{_num(row['mean_top_where_nothing_is'])} |"
            )
    lines += [
        "",
        "## Calibration on heldout",
        "",
        "Every hit of both searches is a judged pair; the relevance shown (going down each "
        "list) against whether the hit is relevant.",
        "",
        "| set | pairs | relevant | Brier | ECE (10 bins) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, found in report["results"].items():
        if "calibration_heldout" not in found:
            continue  # recall: its hits are the turns' and the facts', judged above
        q = found["calibration_heldout"]
        lines.append(
            f"| {name} | {q['pairs']} | {q['relevant']} | {q['brier']:.4f} | {q['ece']:.4f} |"
        )
    q = report["calibration_heldout_chunks"]
    lines.append(
        f"| all chunk hits | {q['pairs']} | {q['relevant']} | {q['brier']:.4f} | {q['ece']:.4f} |"
    )
    lines += ["", "Reliability, all chunk hits on heldout:", ""]
    lines += reliability_table(q["reliability"])
    if "locomo facts" in report["results"]:
        lines += ["", "Reliability, LoCoMo fact hits on heldout:", ""]
        lines += reliability_table(
            report["results"]["locomo facts"]["calibration_heldout"]["reliability"]
        )
    return "\n".join(lines) + "\n"


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    main()
