"""`add` latency until the item is found by `search`, with the bundled model.

The store holds the `til` Markdown notes from ``../shared/data`` (real notes, about 2,600
chunks), ingested with ``mem.ingest(..., trees=False)`` and embedded with
``mem.indexes.embed()`` and the bundled MiniLM (about 5 minutes here). ``--keep PATH`` builds
it at PATH and reuses it on later runs; the adds then go to a copy, so that the kept store
never changes. Then, ``--n`` times, one new memory is written and searched for:

    t0; w = mem.items.add(text, source="memory"); t1
    hits = mem.search(query, mode="hybrid", limit=10); t2

and the item's chunk id must be among the hits (a failure is counted). The same query is then
searched again with nothing written in between (*search alone*), and by the vector leg
alone (``mode="vector"``), which finds the item only if ``add`` embedded it. The query's
embedding is cleared from the cache before every timed search, so each one embeds its query
as a new query would. A warm-up add and search (the first search builds the in-memory
indexes) come first and are reported apart.

Each item is a distinct sentence made from a seeded vocabulary (a person, a project code
name, a few topic words, a weekday); its query is five of those words in another order, so
it matches the item better than any other, without quoting it.

With ``--searcher`` (default on) a second process keeps the same store open and does the
searching: the writer adds, then asks the searcher, which searches without reopening; the
time runs from before ``add`` to the searcher's answer (a pipe round trip included).

``--profile`` runs cProfile over 50 more searches, each right after an add, and reports where
the first search after a write spends its time.

    python benchmarks/add_latency.py [--n 200] [--no-searcher] [--profile]

Writes ``benchmarks/results/add_latency.json`` and ``add_latency.md``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import multiprocessing as mp
import os
import pstats
import random
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import stratamem
from run_info import CPUS, git_state, machine
from stratamem.embed.registry import get_embedder

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "benchmarks" / "results"
CORPUS = DATA / "notes" / "til"

PEOPLE = [
    "Alice", "Bruno", "Carol", "Dmitri", "Elena", "Farah", "Goran", "Hana", "Igor", "Jana",
    "Kofi", "Lena", "Mateo", "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq",
]  # fmt: skip
TOPICS = [
    "invoice", "backup", "firewall", "migration", "onboarding", "roadmap", "budget", "latency",
    "certificate", "dashboard", "outage", "contract", "printer", "kubernetes", "payroll",
    "newsletter", "warehouse", "forecast", "sprint", "audit", "license", "benchmark",
    "keyboard", "database", "vendor", "translation", "tutorial", "dentist", "passport",
    "garden", "recipe", "bicycle", "concert", "insurance", "mortgage", "laptop", "conference",
    "interview", "refund", "playlist", "telescope", "vaccine", "marathon", "holiday",
    "workshop", "deadline", "prototype", "sensor", "battery", "library",
]  # fmt: skip
VERBS = ["moved", "approved", "cancelled", "postponed", "renewed", "reviewed", "fixed", "booked"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
SYLLABLES = ["ka", "zu", "mir", "tov", "lex", "pra", "quo", "vin", "dra", "sel", "nox", "bri"]


@dataclass(frozen=True, slots=True)
class Item:
    text: str
    query: str


def make_items(n: int, seed: int) -> list[Item]:
    rng = random.Random(seed)
    names: set[str] = set()
    items: list[Item] = []
    while len(items) < n:
        code = "".join(rng.choice(SYLLABLES) for _ in range(3)).capitalize()
        if code in names:
            continue
        names.add(code)
        person = rng.choice(PEOPLE)
        a, b, c = rng.sample(TOPICS, 3)
        verb, day = rng.choice(VERBS), rng.choice(DAYS)
        text = (
            f"{person} {verb} the {a} {b} for project {code} on {day}; "
            f"the {c} question stays open until {person} hears back."
        )
        query = f"{c} {b} {code} {person} {a}"
        items.append(Item(text, query))
    return items


def summary(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {
        "p50_ms": round(statistics.median(values), 1),
        "p95_ms": round(values[int(0.95 * (len(values) - 1))], 1),
        "max_ms": round(values[-1], 1),
        "mean_ms": round(statistics.fmean(values), 1),
        "n": len(values),
    }


def build_store(path: Path) -> dict[str, Any]:
    """Ingest and embed the corpus at ``path``, unless a store is there already."""
    if path.exists():
        with open_store(path) as mem:
            if mem.stats()["chunks"] and not mem.indexes.pending():
                return {"reused": True}
    started = time.perf_counter()
    with open_store(path) as mem:
        report = mem.ingest(CORPUS, trees=False)
        ingested = time.perf_counter() - started
        embedded = mem.indexes.embed()
    return {
        "reused": False,
        "ingest_s": round(ingested, 1),
        "embed_s": round(embedded.seconds, 1),
        "embedded": embedded.embedded,
        "records": report.records,
    }


def copy_store(source: Path, folder: Path) -> Path:
    target = folder / "store.db"
    for file in source.parent.glob(f"{source.name}*"):
        shutil.copyfile(file, folder / ("store.db" + file.name[len(source.name) :]))
    return target


def open_store(path: Path) -> stratamem.Memory:
    return stratamem.open(path, embedder=get_embedder("minilm", threads=CPUS))


def forget_query(mem: stratamem.Memory) -> None:
    """Clear the query embedding cache, so that the next search embeds its query."""
    if mem.vectors is not None:
        mem.vectors._queries.clear()


def timed_search(mem: stratamem.Memory, query: str, mode: str) -> tuple[float, list[str]]:
    forget_query(mem)
    started = time.perf_counter()
    found = mem.search(query, mode=mode, limit=10)
    return (time.perf_counter() - started) * 1000, [hit.node_id for hit in found.hits]


def one_process(path: Path, items: list[Item], warm: Item) -> dict[str, Any]:
    rows: dict[str, list[float]] = {
        "add": [],
        "search after add (hybrid)": [],
        "add + search (hybrid)": [],
        "search alone (hybrid, no write since)": [],
        "search after add (vector leg alone)": [],
    }
    failures = {"hybrid": 0, "vector": 0, "search alone": 0, "not embedded on write": 0}
    with open_store(path) as mem:
        chunks = mem.stats()["chunks"]
        started = time.perf_counter()
        mem.items.add(warm.text, source="memory")
        first_add = (time.perf_counter() - started) * 1000
        first_search, _ = timed_search(mem, warm.query, "hybrid")
        for item in items:
            forget_query(mem)
            t0 = time.perf_counter()
            write = mem.items.add(item.text, source="memory")
            t1 = time.perf_counter()
            hits = [hit.node_id for hit in mem.search(item.query, mode="hybrid", limit=10).hits]
            t2 = time.perf_counter()
            (chunk,) = write.chunks_added
            rows["add"].append((t1 - t0) * 1000)
            rows["search after add (hybrid)"].append((t2 - t1) * 1000)
            rows["add + search (hybrid)"].append((t2 - t0) * 1000)
            failures["hybrid"] += chunk not in hits
            failures["not embedded on write"] += write.embedded != 1
            ms, again = timed_search(mem, item.query, "hybrid")
            rows["search alone (hybrid, no write since)"].append(ms)
            failures["search alone"] += chunk not in again
            ms, vector_hits = timed_search(mem, item.query, "vector")
            rows["search after add (vector leg alone)"].append(ms)
            failures["vector"] += chunk not in vector_hits
    return {
        "chunks_before": chunks,
        "first_add_ms": round(first_add, 1),
        "first_search_ms": round(first_search, 1),
        "timings": {name: summary(values) for name, values in rows.items()},
        "failures": failures,
    }


def searcher(path: str, pipe: Connection) -> None:
    """The second process: keeps the store open, searches for each (query, chunk id) sent."""
    with open_store(Path(path)) as mem:
        mem.search("warm up", mode="hybrid", limit=10)
        pipe.send("ready")
        while (job := pipe.recv()) is not None:
            query, chunk = job
            forget_query(mem)
            started = time.perf_counter()
            hits = [hit.node_id for hit in mem.search(query, mode="hybrid", limit=10).hits]
            pipe.send(((time.perf_counter() - started) * 1000, chunk in hits))


def two_processes(path: Path, items: list[Item]) -> dict[str, Any]:
    parent, child = mp.get_context("spawn").Pipe()
    process = mp.get_context("spawn").Process(target=searcher, args=(str(path), child))
    process.start()
    if parent.recv() != "ready":
        raise SystemExit("the searcher did not start")
    rows: dict[str, list[float]] = {"add": [], "search in the other process": [], "total": []}
    failures = 0
    with open_store(path) as mem:
        mem.items.add("warm up the writer", source="memory")
        for item in items:
            t0 = time.perf_counter()
            write = mem.items.add(item.text, source="memory")
            t1 = time.perf_counter()
            parent.send((item.query, write.chunks_added[0]))
            search_ms, found = parent.recv()
            t2 = time.perf_counter()
            rows["add"].append((t1 - t0) * 1000)
            rows["search in the other process"].append(search_ms)
            rows["total"].append((t2 - t0) * 1000)
            failures += not found
    parent.send(None)
    process.join()
    return {"timings": {name: summary(v) for name, v in rows.items()}, "failures": failures}


def profile_search_after_add(path: Path, items: list[Item], top: int = 10) -> dict[str, Any]:
    """cProfile of the hybrid searches that follow each add (the adds are not profiled)."""
    profiler = cProfile.Profile()
    with open_store(path) as mem:
        mem.search("warm up", mode="hybrid", limit=10)
        for item in items:
            mem.items.add(item.text, source="memory")
            forget_query(mem)
            profiler.enable()
            mem.search(item.query, mode="hybrid", limit=10)
            profiler.disable()
    stats = pstats.Stats(profiler, stream=io.StringIO())
    rows = [
        {
            "function": f"{_short(file)}:{line}({name})",
            "calls": calls,
            "own_s": round(tottime, 3),
            "cumulative_s": round(cumtime, 3),
        }
        for (file, line, name), (_, calls, tottime, cumtime, _) in stats.stats.items()  # type: ignore[attr-defined]
    ]
    return {
        "searches": len(items),
        "top_cumulative": sorted(rows, key=lambda r: -r["cumulative_s"])[:top],
        "top_own": sorted(rows, key=lambda r: -r["own_s"])[:top],
    }


def _short(file: str) -> str:
    for marker in ("/site-packages/", "/src/"):
        if marker in file:
            return file.split(marker, 1)[1]
    return file


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="items added and searched for")
    parser.add_argument("--searcher", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--profile", action="store_true", help="cProfile 50 searches after add")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", type=Path, help="build the store here, or reuse the one here")
    args = parser.parse_args()
    if not CORPUS.is_dir():
        raise SystemExit(f"{CORPUS} is missing: the benchmark needs the shared data")
    load_start = os.getloadavg()
    git = git_state()
    started = time.perf_counter()
    items = make_items(2 * args.n + 51, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        kept = args.keep or Path(tmp) / "corpus.db"
        built = build_store(kept)
        print("store:", built)
        path = copy_store(kept, Path(tmp))
        single = one_process(path, items[1 : args.n + 1], items[0])
        print(json.dumps(single, indent=2))
        double = two_processes(path, items[args.n + 1 : 2 * args.n + 1]) if args.searcher else None
        if double is not None:
            print(json.dumps(double, indent=2))
        profile = profile_search_after_add(path, items[2 * args.n + 1 :]) if args.profile else None
    load_end = os.getloadavg()
    command = f"python benchmarks/add_latency.py --n {args.n}"
    if not args.searcher:
        command += " --no-searcher"
    if args.profile:
        command += " --profile"
    if args.keep:
        command += f" --keep {args.keep}"
    embedder = get_embedder("minilm")
    result = {
        "benchmark": "add latency until found by search",
        "command": command,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start, load_end),
        "wall_s": round(time.perf_counter() - started),
        "git": git,
        "model": embedder.spec.name,
        "store": {"corpus": str(CORPUS.relative_to(DATA.parent.parent)), **built},
        "one_process": single,
        "two_processes": double,
        "profile_search_after_add": profile,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "add_latency.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "add_latency.md").write_text(markdown(result, args.n))
    print(f"wrote {RESULTS}/add_latency.md")


def markdown(result: dict[str, Any], n: int) -> str:
    machine, single, double = result["machine"], result["one_process"], result["two_processes"]
    store = result["store"]
    lines = [
        "# `add` latency until the item is found by `search`",
        "",
        f"`{result['command']}` on {result['date']}, {machine['cpus_used']} of "
        f"{machine['cpus']} CPUs, Python {machine['python']}; 1-minute load average "
        f"{machine['load_start'][0]} at the start and {machine['load_end'][0]} at the end "
        f"(the machine is shared). Code: {result['git']['head'][:12]}"
        + (" with uncommitted changes under `src/`." if result["git"]["modified"] else "."),
        "",
        f"Store: the `til` Markdown notes (`{store['corpus']}`), {single['chunks_before']:,} "
        "chunks, ingested with `trees=False` and embedded with the bundled model "
        f"({result['model']}, onnxruntime, {machine['cpus_used']} threads) "
        + (
            "in an earlier run (`--keep`)."
            if store["reused"]
            else f"in this run (ingest {store['ingest_s']} s, embed {store['embed_s']} s)."
        )
        + f" The adds go to a copy of it. {n} items are "
        "added to the record source `memory` one at a time, each searched for at once with a "
        "query of five of its words (see the script's docstring); the store grows by one "
        "chunk per item. Every timed search embeds its query (the query cache is cleared).",
        "",
        "| step | p50 ms | p95 ms | max ms | mean ms |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, row in single["timings"].items():
        lines.append(
            f"| {name} | {row['p50_ms']} | {row['p95_ms']} | {row['max_ms']} | {row['mean_ms']} |"
        )
    failures = single["failures"]
    lines += [
        "",
        f"Not found: **{failures['hybrid']}** of {n} by the hybrid search right after `add`, "
        f"{failures['search alone']} by the repeated search, {failures['vector']} by the "
        f"vector leg alone; items not embedded by `add` itself: "
        f"{failures['not embedded on write']}. Warm-up (not in the table): first `add` "
        f"{single['first_add_ms']} ms, first search {single['first_search_ms']} ms (it builds "
        "the in-memory indexes).",
        "",
        "`add` embeds the new chunk with the bundled model inside its transaction; *search "
        "after add* is the first search after a write, *search alone* the same query again "
        "with nothing written since: their difference is what a write costs the next search.",
        "",
    ]
    if double is not None:
        lines += [
            "## A second process searching",
            "",
            f"Another {n} items; a second process keeps the store open and searches (hybrid, "
            "limit 10) for each item as soon as the writer's `add` returns. *total*: from "
            "before `add` to the searcher's answer, pipe round trip included.",
            "",
            "| step | p50 ms | p95 ms | max ms | mean ms |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        for name, row in double["timings"].items():
            lines.append(
                f"| {name} | {row['p50_ms']} | {row['p95_ms']} | {row['max_ms']} | "
                f"{row['mean_ms']} |"
            )
        lines += ["", f"Not found by the other process: **{double['failures']}** of {n}.", ""]
    profile = result["profile_search_after_add"]
    if profile is not None:
        lines += [
            "## Where the first search after a write goes",
            "",
            f"cProfile of {profile['searches']} hybrid searches, each right after an `add` (the "
            "adds themselves not profiled), on the same store after the runs above. Top 10:",
            "",
        ]
        for key, title in (("top_cumulative", "cumulative"), ("top_own", "own")):
            lines += [f"By {title} time:", "", "| function | calls | own s | cumulative s |"]
            lines.append("| --- | ---: | ---: | ---: |")
            lines += [
                f"| `{r['function']}` | {r['calls']:,} | {r['own_s']} | {r['cumulative_s']} |"
                for r in profile[key]
            ]
            lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
