"""How long the inspector's sources, tree and entity pages take to read their data, on LoCoMo.

Reads a copy of the LoCoMo store `stratamem eval locomo` keeps with its facts (made by
``benchmarks/locomo_facts.py``; the original is only read), adds a principal that may read
every source, and times each page's data (``stratamem.server.inspector.views``) as the owner
and as that principal, the two interleaved call by call in every round, so that the machine's
load falls on both alike: the principal's reads go through the access gate, the owner's do
not. The pages: the source list, one source, the tree's top and one level down, the entity
list (all, and a search), and the most mentioned person's page (its mentions per day, the
entities mentioned with it, and every fact about it).

    python benchmarks/inspector_views.py [--rounds 15]

Writes ``benchmarks/results/inspector_views.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from run_info import git_state, machine, write_results
from stratamem.api import Memory
from stratamem.server.inspector import views

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
CACHE = Path.home() / ".cache" / "stratamem" / "eval"
READER = "everyone"


def copy_store(source: Path, target: Path) -> None:
    """``source`` copied to ``target`` through SQLite's backup, reading it read-only."""
    with sqlite3.connect(f"file:{source}?mode=ro", uri=True) as src:
        with sqlite3.connect(target) as dst:
            src.backup(dst)
        dst.close()
    src.close()


def pages(memory: Memory) -> dict[str, Callable[[], Any]]:
    """Each page's data, on the store's largest source and its most mentioned person."""
    largest = max(views.sources(memory), key=lambda r: r.chunks or 0)
    top = views.tree(memory, largest.id)
    assert top is not None, "the store has no summary tree"
    assert top.children, "the store has no summary tree"
    node = top.children[0].id
    entity = memory.entities.top(kinds=["person"], limit=1)[0]
    name = entity.surface.split()[0]
    return {
        "sources": lambda: views.sources(memory),
        "source": lambda: views.source(memory, largest.id),
        "tree (top)": lambda: views.tree(memory, largest.id),
        "tree (a node)": lambda: views.tree(memory, largest.id, node),
        "entities (50 most mentioned)": lambda: views.entities(memory),
        f"entities matching {name!r}": lambda: views.entities(memory, name),
        f"entity {entity.canonical_id!r}": lambda: views.entity(memory, entity.canonical_id),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument(
        "--store", type=Path, help="the LoCoMo facts store (default: the one eval keeps)"
    )
    args = parser.parse_args()
    source = args.store or next(iter(sorted(CACHE.glob("locomo-*-facts.db"))), None)
    if source is None or not source.exists():
        raise SystemExit("no LoCoMo facts store: run benchmarks/locomo_facts.py first")
    load_start = os.getloadavg()
    git = git_state()
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / "locomo.db"
        copy_store(source, copy)
        with Memory(copy, embedder=None) as owner:
            owner.principals.add(READER, ["*"])
            stats = owner.stats()
            person = owner.entities.top(kinds=["person"], limit=1)[0].canonical_id
            facts = len(owner.facts.about(person))
        with Memory(copy, embedder=None) as owner, owner.as_principal(READER) as reader:
            calls = {"owner": pages(owner), "principal": pages(reader)}
            times: dict[str, dict[str, list[float]]] = {
                who: {page: [] for page in found} for who, found in calls.items()
            }
            for who in calls:  # warm both: the first read of a store fills its caches
                for call in calls[who].values():
                    call()
            for _ in range(args.rounds):
                for page in calls["owner"]:
                    for who in ("owner", "principal"):
                        began = time.perf_counter()
                        calls[who][page]()
                        times[who][page].append((time.perf_counter() - began) * 1000)
    load_end = os.getloadavg()
    rows = []
    for page in times["owner"]:
        own, theirs = times["owner"][page], times["principal"][page]
        rows.append(
            {
                "page": page,
                "owner_p50_ms": round(statistics.median(own), 2),
                "owner_max_ms": round(max(own), 2),
                "principal_p50_ms": round(statistics.median(theirs), 2),
                "principal_max_ms": round(max(theirs), 2),
                "ratio_p50": round(statistics.median(theirs) / statistics.median(own), 2),
            }
        )
    report = {
        "machine": machine(load_start, load_end),
        "git": git,
        "store": {
            "source": str(source),
            "chunks": stats["chunks"],
            "sources": stats.get("sources"),
            "facts_of_the_person": facts,
        },
        "rounds": args.rounds,
        "pages": rows,
    }
    lines = [
        "# Inspector pages: the time to read each page's data",
        "",
        f"LoCoMo store with its facts (a copy of `{source.name}`: {stats['chunks']:,} chunks, "
        f"{facts} fact rows about the person shown), {args.rounds} rounds, owner and a principal "
        "reading every source (`*`) interleaved call by call; warm caches. Load average "
        f"(1 min) {load_start[0]:.2f} at the start, {load_end[0]:.2f} at the end, on "
        f"{os.cpu_count()} CPUs; commit `{git['head'][:10]}`"
        f"{' with changes' if git['modified'] else ''}.",
        "",
        "| page | owner p50 ms | owner max ms | principal p50 ms | principal max ms | "
        "principal / owner |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {r['page']} | {r['owner_p50_ms']} | {r['owner_max_ms']} | {r['principal_p50_ms']} "
        f"| {r['principal_max_ms']} | {r['ratio_p50']}× |"
        for r in rows
    ]
    lines.append("")
    write_results(RESULTS, "inspector_views", report, "\n".join(lines))


if __name__ == "__main__":
    main()
