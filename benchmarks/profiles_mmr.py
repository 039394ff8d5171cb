"""Weight profiles and MMR policies of hybrid search, side by side on SciFact, Cranfield, LoCoMo.

One process, the cached eval stores (``stratamem eval`` builds them; reused as they are), every
variant run in turn on each dataset through the eval harness (``evaluate(..., ["hybrid"],
config=...)``), so they share the store, the vectors and the machine's load. The variants:

* our ``balanced`` profile (keyword 0.45, vector 0.45, graph 0.10) with MMR ``on`` (every
  similarity penalised: the pipeline before the ``mmr`` setting), ``off``, ``duplicates``
  (only near-duplicates: cosine ≥ the threshold) at two thresholds, and ``auto`` (chat turns
  as ``on``, everything else as ``duplicates``);
* other projects' weights under the same pipeline as it was (MMR ``on``):
  a seed design's ``balanced`` as written there (graph 0.35, vector 0.35, keyword 0.15,
  freshness 0.15, freshness half-life 7 days), the same four numbers read as keyword 0.35,
  vector 0.35, graph 0.15, freshness 0.15, and a fusion of keyword 0.4, vector 0.4, graph 0.2;
* a reference: plain 50/50 keyword/vector min-max fusion (no graph, no expansion, no MMR).

The seed profiles are registered in ``PROFILES`` for this process only (the freshness half-life
is read from the profile). Metrics: nDCG@10 and R@100 for the BEIR sets; evidence R@5/10/25/50
for LoCoMo (overall).

    python benchmarks/profiles_mmr.py [--data ../shared/data] [--store DIR] [name ...]

Writes ``benchmarks/results/profiles_mmr.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from run_info import clock, dataset_table, git_state, machine, write_results
from stratamem.api import Memory
from stratamem.cli.common import cache_dir_from_environment
from stratamem.config import PROFILES, SearchConfig, WeightProfile
from stratamem.eval.loading import load_dataset
from stratamem.eval.runner import evaluate, store_path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DATASETS = ("locomo", "scifact", "cranfield")
BEIR_SHOWN = (("ndcg_cut_10", "nDCG@10"), ("recall_100", "R@100"))
LOCOMO_SHOWN = (("R@5", "R@5"), ("R@10", "R@10"), ("R@25", "R@25"), ("R@50", "R@50"))

SEED_PROFILES = {
    # A seed design's "balanced", as its table gives it (graph, vector, keyword, freshness).
    "seed-balanced": WeightProfile(
        keyword=0.15, vector=0.35, graph=0.35, freshness=0.15, freshness_half_life_days=7.0
    ),
    # The same numbers with keyword and graph the other way round.
    "seed-balanced-kw": WeightProfile(
        keyword=0.35, vector=0.35, graph=0.15, freshness=0.15, freshness_half_life_days=7.0
    ),
    # Another design's fusion weights (full-text, KNN, graph).
    "seed-fuse": WeightProfile(keyword=0.4, vector=0.4, graph=0.2),
}


@dataclass(frozen=True)
class Variant:
    name: str
    profile: str = "balanced"
    mmr: str = "on"
    threshold: float = 0.9
    weights: dict[str, float] = field(default_factory=dict)
    expand: bool = True

    def config(self) -> SearchConfig:
        base = SearchConfig(
            profile=self.profile, mmr=self.mmr, mmr_threshold=self.threshold, weights=self.weights
        )
        return base if self.expand else SearchConfig(**{**_fields(base), "expand_seeds": 0})


def _fields(config: SearchConfig) -> dict[str, Any]:
    return {name: getattr(config, name) for name in SearchConfig.__dataclass_fields__}


VARIANTS = (
    Variant("ours · mmr on (before)", mmr="on"),
    Variant("ours · mmr off", mmr="off"),
    Variant("ours · mmr duplicates 0.9", mmr="duplicates", threshold=0.9),
    Variant("ours · mmr duplicates 0.8", mmr="duplicates", threshold=0.8),
    Variant("ours · mmr auto (0.9)", mmr="auto", threshold=0.9),
    Variant("seed balanced (g.35 v.35 k.15 f.15) · on", "seed-balanced", "on"),
    Variant("seed balanced read k.35 v.35 g.15 f.15 · on", "seed-balanced-kw", "on"),
    Variant("seed fusion k.4 v.4 g.2 · on", "seed-fuse", "on"),
    Variant(
        "plain 50/50 min-max (no graph, expansion, MMR)",
        mmr="off",
        weights={"keyword": 0.5, "vector": 0.5, "graph": 0.0, "freshness": 0.0},
        expand=False,
    ),
)


def run_dataset(folder: Path, cache: Path, variants: list[Variant], say: Any) -> dict[str, Any]:
    dataset = load_dataset(folder)
    started = time.perf_counter()
    shown = BEIR_SHOWN if dataset.kind == "beir" else LOCOMO_SHOWN
    runs = []
    with Memory(store_path(dataset, cache)) as memory:
        for variant in variants:
            [result] = evaluate(dataset, memory, ["hybrid"], config=variant.config())
            metrics = {name: round(result.metrics[name], 4) for name, _ in shown}
            say(f"{dataset.name}: {variant.name}: {metrics} ({result.seconds:.0f} s)")
            runs.append(
                {
                    "name": variant.name,
                    "variant": asdict(variant),
                    "metrics": metrics,
                    "seconds": round(result.seconds, 1),
                }
            )
    return {
        "dataset": dataset.name,
        "kind": dataset.kind,
        "docs": len(dataset.docs),
        "queries": len(dataset.queries_in()),
        "runs": runs,
        "seconds": round(time.perf_counter() - started, 1),
    }


def markdown(report: dict[str, Any]) -> str:
    info = report["machine"]
    lines = [
        "# Weight profiles and MMR policies",
        "",
        f"`{report['command']}` on {report['started']}, {info['cpus_used']} of {info['cpus']} "
        f"CPUs, Python {info['python']}; 1-minute load average {info['load_start'][0]} at the "
        f"start and {info['load_end'][0]} at the end. Code: {report['git']['head'][:12]}"
        f"{' with uncommitted changes under `src/`' if report['git']['modified'] else ''}. "
        f"Run time {report['seconds']:.0f} s. Hybrid mode of the eval harness over the cached "
        "eval stores; see the script's docstring for the variants. Seconds are the wall time "
        "of all queries on a shared machine, not a latency measure.",
    ]
    for data in report["datasets"]:
        shown = BEIR_SHOWN if data["kind"] == "beir" else LOCOMO_SHOWN
        lines += [
            "",
            f"## {data['dataset']}",
            "",
            f"{data['docs']:,} documents, {data['queries']:,} queries.",
            "",
            *dataset_table(data, shown, first="variant"),
        ]
    if report.get("conclusions"):
        lines += ["", "## What the defaults became, and why", ""]
        lines += [f"- {line}" for line in report["conclusions"]]
    lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", default=list(DATASETS))
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--store", type=Path, help="the eval store cache (as `stratamem eval`)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--conclusions", type=Path, help="a text file whose lines are added as conclusions"
    )
    args = parser.parse_args()
    cache = args.store or cache_dir_from_environment() / "eval"
    PROFILES.update(SEED_PROFILES)
    load_start = os.getloadavg()
    started = time.perf_counter()
    stamp = datetime.now(UTC).replace(microsecond=0).isoformat()
    say = clock()

    found = [args.data / n for n in args.names if (args.data / n).exists()]
    results = [run_dataset(folder, cache, list(VARIANTS), say) for folder in found]
    conclusions = []
    if args.conclusions:
        conclusions = [x for x in args.conclusions.read_text().splitlines() if x.strip()]
    report = {
        "command": "python benchmarks/profiles_mmr.py " + " ".join(args.names),
        "started": stamp,
        "seconds": round(time.perf_counter() - started, 1),
        "machine": machine(load_start, os.getloadavg()),
        "git": git_state(),
        "datasets": results,
        "conclusions": conclusions,
    }
    write_results(args.out, "profiles_mmr", report, markdown(report))


if __name__ == "__main__":
    main()
