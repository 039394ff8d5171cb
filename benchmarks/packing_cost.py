"""What packing hits into a token budget costs, before and after its cheaper word-piece counts.

Two ways to count, measured interleaved query by query (the order alternating, so the
machine's drifting load falls on both alike), on copies of the evaluation stores (SciFact's
test claims over its 5,183 abstracts; LoCoMo's questions over its conversations' turns):

- ``exact``: as packing counted before: every header and text counted on its own with
  :func:`~stratamem.embed.tokens.count_tokens`, every cut made by
  :func:`~stratamem.embed.tokens.truncate_to_tokens` over the whole text;
- ``cheaper``: :mod:`stratamem.retrieval.pieces` (counts remembered across searches,
  counted once, cuts tokenizing only the prefix they need, a lower bound that skips
  counting a text surely over its share). ``cheaper, nothing remembered`` forgets the
  remembered counts before each packing: the cost for hits never seen before.

For each query the hits of a limit-10 search are packed at each budget by each way, the
packings compared (every card's text, tokens and form, and how many hits were left out: any
difference is counted and reported), and the packing timed. Then the whole hybrid search with
a budget is timed with each way of packing, interleaved the same way.

    python benchmarks/packing_cost.py [--queries 300] [--budgets 500 2000]

Writes ``benchmarks/results/packing_cost.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import stratamem
from run_info import ROOT, git_state, machine, write_results
from stratamem.embed.tokens import count_tokens, truncate_to_tokens
from stratamem.eval import load_dataset
from stratamem.eval.runner import store_path
from stratamem.retrieval import hybrid, pieces
from stratamem.retrieval.packing import pack
from stratamem.types import Card, ScoreBreakdown, SearchResponse

DATA = ROOT.parent / "shared" / "data"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "stratamem" / "eval"
DATASETS = ("scifact", "locomo")
WAYS = ("exact", "cheaper", "cheaper, nothing remembered")


def packed(response: SearchResponse, budget: int, way: str) -> tuple[list[Card], int]:
    hits = response.hits
    common: dict[str, Any] = {
        "reasons": [str(h.explain.get("reason", "")) for h in hits],
        "breakdowns": [ScoreBreakdown()] * len(hits),
        "tier0": [bool(h.explain.get("tier0")) for h in hits],
    }
    if way == "exact":
        return pack(hits, budget, count=count_tokens, truncate=truncate_to_tokens, **common)
    return pack(
        hits,
        budget,
        count=pieces.count,
        truncate=pieces.truncate,
        at_least=pieces.at_least,
        **common,
    )


def exact_cards(
    response: SearchResponse, budget: int, breakdowns: list[ScoreBreakdown]
) -> SearchResponse:
    """The search's packing as it was: every count and cut exact and whole."""
    from dataclasses import replace

    cards, dropped = pack(
        response.hits,
        budget,
        reasons=[str(h.explain.get("reason", "")) for h in response.hits],
        breakdowns=breakdowns,
        tier0=[bool(h.explain.get("tier0")) for h in response.hits],
        count=count_tokens,
        truncate=truncate_to_tokens,
    )
    notes = response.notes
    if dropped:
        notes += (f"{dropped} hit(s) did not fit the {budget}-token budget",)
    return replace(response, cards=tuple(cards), notes=notes)


@contextmanager
def packing_as(way: str) -> Iterator[None]:
    cheaper = hybrid.with_cards
    if way == "exact":
        hybrid.with_cards = exact_cards
    try:
        yield
    finally:
        hybrid.with_cards = cheaper


def summary(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {
        "p50_ms": round(statistics.median(values), 3),
        "p95_ms": round(values[int(0.95 * (len(values) - 1))], 3),
        "mean_ms": round(statistics.fmean(values), 3),
    }


def timed(call: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    out = call()
    return (time.perf_counter() - started) * 1000, out


def measure(name: str, queries: list[str], budgets: list[int], folder: Path) -> dict[str, Any]:
    dataset = load_dataset(DATA / name)
    original = store_path(dataset, CACHE)
    if not original.exists():
        raise SystemExit(f"{original}: run `stratamem eval {name}` first to build it")
    path = folder / original.name
    shutil.copy(original, path)
    questions = [q.text for q in dataset.queries_in("test")][: len(queries) or None]
    out: dict[str, Any] = {"queries": len(questions), "budgets": {}}
    with stratamem.open(path) as mem:
        mem.search("warm up the index and caches", budget=2000)
        responses = [mem.search(q, limit=10) for q in questions]
        pieces.forget()
        for budget in budgets:
            times: dict[str, list[float]] = {way: [] for way in WAYS}
            differ = 0
            cards = 0
            for n, response in enumerate(responses):
                order = WAYS if n % 2 == 0 else WAYS[::-1]
                found = {}
                for way in order:
                    if way == "cheaper, nothing remembered":
                        pieces.forget()
                    ms, found[way] = timed(lambda r=response, w=way, b=budget: packed(r, b, w))
                    times[way].append(ms)
                shapes = {
                    way: (
                        [(c.hit.node_id, c.text, c.tokens, c.form) for c in result[0]],
                        result[1],
                    )
                    for way, result in found.items()
                }
                cards += len(shapes["exact"][0])
                differ += sum(shapes[way] != shapes["exact"] for way in WAYS[1:])
            searches: dict[str, list[float]] = {"exact": [], "cheaper": []}
            for n, question in enumerate(questions):
                for way in ("exact", "cheaper") if n % 2 == 0 else ("cheaper", "exact"):
                    with packing_as(way):
                        ms, _ = timed(
                            lambda q=question, b=budget: mem.search(q, limit=10, budget=b)
                        )
                    searches[way].append(ms)
            out["budgets"][str(budget)] = {
                "packings_differing": differ,
                "cards_compared": cards,
                "packing": {way: summary(times[way]) for way in WAYS},
                "search": {way: summary(v) for way, v in searches.items()},
            }
            print(name, budget, out["budgets"][str(budget)], flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--budgets", type=int, nargs="+", default=[500, 2000])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    args = parser.parse_args()
    load_start = os.getloadavg()
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.datasets:
            runs[name] = measure(name, [""] * args.queries, args.budgets, Path(tmp))
    command = "python benchmarks/packing_cost.py --queries " + str(args.queries)
    command += " --budgets " + " ".join(map(str, args.budgets))
    result = {
        "benchmark": "packing cost",
        "command": command,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start, os.getloadavg()),
        "code": git_state(),
        "runs": runs,
    }
    write_results(ROOT / "benchmarks" / "results", "packing_cost", result, report(result))


def report(result: dict[str, Any]) -> str:
    m = result["machine"]
    code = result["code"]["head"][:10] + (" with changes" if result["code"]["modified"] else "")
    lines = [
        "# What packing costs",
        "",
        f"`{result['command']}` on {result['date']}, {m['cpus_used']} of {m['cpus']} CPUs, "
        f"1-minute load average {m['load_start'][0]} at the start and {m['load_end'][0]} at "
        "the end (the machine is shared: compare the rows of one table, measured interleaved "
        f"query by query); code {code}. The hits of a limit-10 hybrid search per query, "
        "packed by each way (see the script's docstring); then the whole search with the "
        "budget, the query embedded, with each way of packing. Ratio: over `exact`.",
        "",
    ]
    for name, run in result["runs"].items():
        for budget, r in run["budgets"].items():
            base = r["packing"]["exact"]["p50_ms"]
            lines += [
                f"## {name}, budget {int(budget):,} tokens ({run['queries']} queries)",
                "",
                f"Packings that differ from `exact`: **{r['packings_differing']}** "
                f"({r['cards_compared']:,} cards compared, each way).",
                "",
                "| packing | p50 ms | p95 ms | mean ms | p50 ratio |",
                "| --- | ---: | ---: | ---: | ---: |",
            ]
            for way in WAYS:
                s = r["packing"][way]
                lines.append(
                    f"| {way} | {s['p50_ms']} | {s['p95_ms']} | {s['mean_ms']} | "
                    f"{s['p50_ms'] / base:.2f} |"
                )
            whole = r["search"]["exact"]["p50_ms"]
            lines += [
                "",
                "| whole search, packing | p50 ms | p95 ms | mean ms | p50 ratio |",
                "| --- | ---: | ---: | ---: | ---: |",
            ]
            for way, s in r["search"].items():
                lines.append(
                    f"| {way} | {s['p50_ms']} | {s['p95_ms']} | {s['mean_ms']} | "
                    f"{s['p50_ms'] / whole:.2f} |"
                )
            lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
