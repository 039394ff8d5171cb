"""Chat turns read in context: how much of a turn's score its neighbours get, chosen on one
half of LoCoMo's questions and checked on the other.

Hybrid search passes ``context_share`` of each chat turn's min-max keyword and vector score to
the turns up to ``context_window`` places before and after it (``SearchConfig``; see
docs/search.md). This runs the eval harness's hybrid mode (``evaluate(..., ["hybrid"],
config=...)``: the real pipeline, expansion and MMR included) over the store ``stratamem
eval`` caches, in one process:

1. a grid on LoCoMo's ``tune`` half: context off, and every share × window below, each at
   the two pool sizes (candidates per leg) below;
2. the grid's best by R@10 + R@25 on ``tune``, and context off, on ``heldout`` (the other
   half, never used to choose) and on ``test`` (every question, what ``stratamem eval``
   reports);
3. the BEIR sets (no chats, so the context cannot touch them) at both pool sizes, to show
   what the pool alone does to documents.

    python benchmarks/chat_context.py [--data ../shared/data] [--store DIR]

Writes ``benchmarks/results/chat_context.md`` and ``.json``.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from run_info import clock, dataset_table, eval_arguments, git_state, machine, write_results
from stratamem.api import Memory
from stratamem.config import SearchConfig
from stratamem.eval.loading import load_dataset
from stratamem.eval.runner import evaluate, store_path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SHARES = (0.2, 0.4, 0.6)
WINDOWS = (1, 2, 3)
POOLS = (100, 150)
LOCOMO_SHOWN = (("R@5", "R@5"), ("R@10", "R@10"), ("R@25", "R@25"), ("R@50", "R@50"))
BEIR_SHOWN = (("ndcg_cut_10", "nDCG@10"), ("recall_100", "R@100"))


def variant(pool: int, share: float, window: int) -> tuple[str, SearchConfig]:
    config = replace(SearchConfig(), pool=pool, context_share=share, context_window=window)
    name = f"pool {pool}, " + (f"share {share}, window {window}" if share else "context off")
    return name, config


def grid() -> list[tuple[str, SearchConfig]]:
    out = []
    for pool in POOLS:
        out.append(variant(pool, 0.0, 2))
        out += [variant(pool, s, w) for s in SHARES for w in WINDOWS]
    return out


def best_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the highest R@10 + R@25 (the first of equals)."""
    return max(runs, key=lambda r: r["metrics"]["R@10"] + r["metrics"]["R@25"])


def score(
    memory: Memory, dataset: Any, split: str, name: str, config: SearchConfig, say: Any
) -> dict[str, Any]:
    [result] = evaluate(dataset, memory, ["hybrid"], split=split, config=config)
    shown = LOCOMO_SHOWN if dataset.kind.startswith("locomo") else BEIR_SHOWN
    metrics = {key: round(result.metrics[key], 4) for key, _ in shown}
    say(f"{dataset.name} {split}: {name}: {metrics}")
    return {
        "name": name,
        "pool": config.pool,
        "share": config.context_share,
        "window": config.context_window,
        "metrics": metrics,
        "seconds": round(result.seconds, 1),
    }


def run_locomo(folder: Path, cache: Path, say: Any) -> list[dict[str, Any]]:
    dataset = load_dataset(folder)
    with Memory(store_path(dataset, cache)) as memory:
        tuned = [score(memory, dataset, "tune", n, c, say) for n, c in grid()]
        best = best_of(tuned)
        chosen = [
            variant(best["pool"], 0.0, 2),
            variant(best["pool"], best["share"], best["window"]),
        ]
        checks = {
            split: [score(memory, dataset, split, n, c, say) for n, c in chosen]
            for split in ("heldout", "test")
        }
    parts = [("tune", tuned), *checks.items()]
    return [
        {"dataset": dataset.name, "kind": dataset.kind, "split": split, "runs": runs}
        for split, runs in parts
    ]


def run_beir(folder: Path, cache: Path, say: Any) -> dict[str, Any]:
    dataset = load_dataset(folder)
    with Memory(store_path(dataset, cache)) as memory:
        runs = [score(memory, dataset, "test", *variant(pool, 0.4, 2), say) for pool in POOLS]
    return {"dataset": dataset.name, "kind": dataset.kind, "split": "test", "runs": runs}


def markdown(report: dict[str, Any]) -> str:
    info = report["machine"]
    lines = [
        "# Chat turns read in context",
        "",
        f"`python benchmarks/chat_context.py` on {report['started']}, {info['cpus_used']} of "
        f"{info['cpus']} CPUs, Python {info['python']}. Code: {report['git']['head'][:12]}"
        f"{' with uncommitted changes under `src/`' if report['git']['modified'] else ''}. "
        f"Run time {report['seconds']:.0f} s. Hybrid mode of the eval harness; see the "
        "script's docstring. Seconds are the wall time of all queries on a shared machine.",
    ]
    for part in report["parts"]:
        shown = BEIR_SHOWN if part["kind"] == "beir" else LOCOMO_SHOWN
        lines += ["", f"## {part['dataset']}, {part['split']}", ""]
        lines += dataset_table(part, shown, first="variant")
    best = report["best"]
    lines += [
        "",
        f"Chosen on `tune` (best R@10 + R@25): pool {best['pool']}, share {best['share']}, "
        f"window {best['window']}.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    args = eval_arguments(__doc__ or "", ["locomo", "scifact", "cranfield"], RESULTS)
    load_start = os.getloadavg()
    started = time.perf_counter()
    stamp = datetime.now(UTC).replace(microsecond=0).isoformat()
    say = clock()
    parts: list[dict[str, Any]] = []
    for name in args.names:
        folder = args.data / name
        if not folder.exists():
            say(f"{folder} is missing: skipped")
            continue
        if name == "locomo":
            parts += run_locomo(folder, args.cache, say)
        else:
            parts.append(run_beir(folder, args.cache, say))
    tune = next((p for p in parts if p["split"] == "tune"), None)
    best = best_of(tune["runs"]) if tune else {}
    report = {
        "started": stamp,
        "seconds": round(time.perf_counter() - started, 1),
        "machine": machine(load_start, os.getloadavg()),
        "git": git_state(),
        "best": {k: best.get(k) for k in ("pool", "share", "window")},
        "parts": parts,
    }
    write_results(args.out, "chat_context", report, markdown(report))


if __name__ == "__main__":
    main()
