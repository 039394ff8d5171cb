"""Retrieval quality of MiniLM embedder variants, side by side, on the evaluation datasets.

For each dataset (SciFact, Cranfield, LoCoMo in ``../shared/data``) the store that
``stratamem eval`` keeps in the user cache is copied once into ``--work`` (the shared store is
only read), and each embedder variant embeds that copy under its own model signature — the
default's vectors already there are never compared with another variant's. Each variant is then
scored as ``stratamem eval`` scores it (vector and hybrid modes; LoCoMo by evidence recall),
and the deltas to the first variant are written to ``benchmarks/results/embed_eval.md`` and
``.json``.

    python benchmarks/embed_eval.py [--embedder minilm --embedder minilm-fast] [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from run_info import git_state, machine
from stratamem import Memory
from stratamem.api.eval import evaluate, load_dataset, store_path
from stratamem.config import load as load_settings
from stratamem.embed.registry import get_embedder
from stratamem.errors import ModelMismatchError

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "benchmarks" / "results"
DATASETS = ("scifact", "cranfield", "locomo")
MODES = ("vector", "hybrid")
# The figure each dataset is held to (the eval's own headline metric).
METRICS = {"scifact": "ndcg_cut_10", "cranfield": "ndcg_cut_10", "locomo": "R@10"}
TOLERANCE = 0.003


def shared_cache() -> Path:
    """Where ``stratamem eval`` keeps its stores (read here, never written)."""
    base = os.environ.get("STRATAMEM_EVAL_CACHE")
    return Path(base) if base else Path.home() / ".cache" / "stratamem" / "eval"


def private_copy(name: str, work: Path) -> tuple[Any, Path]:
    """The dataset and a copy of its shared eval store in ``work`` (made once)."""
    data = load_dataset(DATA / name)
    shared = store_path(data, shared_cache())
    copy = store_path(data, work)
    if not copy.exists():
        if not shared.exists():
            raise SystemExit(f"{shared} is missing: run `stratamem eval {DATA / name}` first")
        work.mkdir(parents=True, exist_ok=True)
        with (
            sqlite3.connect(f"file:{shared}?mode=ro", uri=True) as source,
            sqlite3.connect(copy) as target,
        ):
            source.backup(target)
        index = shared.with_name(shared.name + ".bm25.idx")
        if index.exists():
            shutil.copyfile(index, copy.with_name(copy.name + ".bm25.idx"))
    return data, copy


def score(name: str, embedder: str, work: Path) -> dict[str, Any]:
    """Embed the dataset's private copy for ``embedder`` (once) and score it."""
    data, path = private_copy(name, work / embedder)
    config = load_settings({}).search_config()
    started = time.perf_counter()
    with Memory(path, embedder=get_embedder(embedder)) as memory:
        try:
            memory.indexes.embed()
        except ModelMismatchError:
            memory.indexes.reindex()  # the copy held the default's vectors
        results = evaluate(data, memory, MODES, config=config)
    figures = {}
    for result in results:
        metric = METRICS[name]
        figures[result.mode] = round(float(result.metrics[metric]), 4)
    return {"figures": figures, "seconds": round(time.perf_counter() - started, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedder", action="append", help="registry names; first = reference")
    parser.add_argument("--dataset", action="append", choices=DATASETS)
    parser.add_argument("--work", type=Path, default=Path("/tmp/stratamem-embed-eval"))
    args = parser.parse_args()
    embedders = args.embedder or ["minilm", "minilm-fast"]
    datasets = args.dataset or list(DATASETS)
    load_start = os.getloadavg()
    runs: dict[str, dict[str, Any]] = {}
    for dataset in datasets:
        for embedder in embedders:
            runs.setdefault(embedder, {})[dataset] = score(dataset, embedder, args.work)
            print(embedder, dataset, runs[embedder][dataset], flush=True)
    reference = embedders[0]
    rows = []
    worst: dict[str, float] = {}
    for embedder in embedders:
        for dataset in datasets:
            for mode, value in runs[embedder][dataset]["figures"].items():
                delta = value - runs[reference][dataset]["figures"][mode]
                worst[embedder] = max(worst.get(embedder, 0.0), abs(delta))
                rows.append((embedder, dataset, mode, METRICS[dataset], value, delta))
    report = {
        "benchmark": "retrieval quality of embedder variants",
        "command": "python benchmarks/embed_eval.py "
        + " ".join(f"--embedder {name}" for name in embedders),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start, os.getloadavg()),
        "code": git_state(),
        "reference": reference,
        "tolerance": TOLERANCE,
        "runs": runs,
        "largest_delta": {name: round(value, 4) for name, value in worst.items()},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "embed_eval.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = [
        "# Retrieval quality of the MiniLM variants",
        "",
        f"`{report['command']}` on {report['date']}; each variant embeds a private copy of the "
        f"eval store under its own model signature; deltas to `{reference}`; the bar is "
        f"±{TOLERANCE}.",
        "",
        "| embedder | dataset | mode | metric | value | delta |",
        "| --- | --- | --- | --- | ---: | ---: |",
    ]
    lines += [
        f"| `{e}` | {d} | {m} | {metric} | {v:.4f} | {delta:+.4f} |"
        for e, d, m, metric, v, delta in rows
    ]
    lines += [""] + [
        f"- `{name}`: largest |delta| {value:.4f} "
        f"({'within' if value <= TOLERANCE else 'OUTSIDE'} ±{TOLERANCE})"
        for name, value in worst.items()
        if name != reference
    ]
    (RESULTS / "embed_eval.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
