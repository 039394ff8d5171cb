"""Evidence recall on LoCoMo from ``recall``: turns, facts, and the two merged, with the
merge chosen on the tune half and reported on the held-out half.

The store is the one ``stratamem eval`` builds (one chat source per conversation, one chunk
per dialog turn, embedded with the default model); a copy of it receives LoCoMo's
observations as facts exactly as ``benchmarks/locomo_facts.py`` writes them (one
``remember`` per observation sentence, evidence = the cited turns), then one consolidation
pass (``mem.facts.consolidate``) scores them. The copy is kept under ``--work`` between runs
(the cache is never written).

Each question is scoped to its own conversation (``sources=[<its chat source>]``) and its
two legs are read once, as ``Memory.recall`` reads them:

* **turns** (a): the chunk leg, ``Memory.search(question, sources=…, limit=100)`` (what
  ``stratamem eval --mode hybrid`` scores), each hit's turn by its citation;
* **facts** (b): the fact leg, ``stratamem.memory.recall.fact_leg`` (facts true now, limit
  100), each fact replaced by its evidence turns in rank order, repeats removed; also with
  the consolidation prior at β = 0.2 and 0.5;
* **recall** (c): ``stratamem.memory.recall.merge`` of the two under each fusion variant
  (:data:`VARIANTS`), cut to 100 hits as ``recall(limit=100)`` cuts it, a fact hit counted
  as its evidence turns, repeats removed.

Scored with ``stratamem.eval.locomo.evidence_recall`` at 5/10/25/50 on the ``tune`` and
``heldout`` halves (``stratamem.eval.datasets.evaluation_splits``) and on all questions, per
category. The variant is chosen on tune alone: of those at or above turns at every k there,
the best mean of R@5..R@50. The grid was scored first, then a finer one around its best on
tune (``--reuse-legs`` scores new variants on the legs the last run kept). Then, for every
5th held-out question, ``Memory.recall(question, sources=…, limit=100, fusion=<chosen>)``
is run end to end and its turns compared with the offline merge (they must be the same).

    python benchmarks/locomo_recall.py [--work DIR] [--reuse-legs]

Writes ``benchmarks/results/locomo_recall.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from locomo_facts import LOCOMO, copy_store, turn_nodes, write_facts
from run_info import git_state, machine
from stratamem.api import Memory
from stratamem.cli.common import cache_dir_from_environment
from stratamem.eval.datasets import HELDOUT, TUNE, evaluation_splits
from stratamem.eval.locomo import CATEGORIES, LOCOMO_KS, evidence_recall, load_locomo
from stratamem.eval.metrics import run_from_ranking
from stratamem.eval.runner import prepare, scope_of, store_path
from stratamem.memory import recall as recalling
from stratamem.memory.recall import Fusion
from stratamem.types import Filters, NodeKind, RetrievalHit

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DEPTH = 100
PRIORS = (0.0, 0.2, 0.5)
VARIANTS: dict[str, Fusion] = {}
for _method in ("rrf", "lend"):
    for _k in (10, 30, 60):
        for _w in (0.25, 0.5, 0.75, 1.0):
            VARIANTS[f"{_method} k={_k} w={_w}"] = Fusion(_method, _k, _w)
for _w in (0.25, 0.5, 0.75, 1.0):
    VARIANTS[f"parity w={_w}"] = Fusion("parity", 60, _w)
# Finer, around the best of the grid above on tune (lend k=10 w=0.5).
for _k, _w in ((5, 0.35), (5, 0.5), (5, 0.6), (10, 0.35), (10, 0.6), (20, 0.35), (20, 0.5)):
    VARIANTS[f"lend k={_k} w={_w}"] = Fusion("lend", _k, _w)
for _method in ("rrf", "lend"):
    for _w in (0.5, 1.0):
        VARIANTS[f"{_method} k=60 w={_w}, ≤1 fact in top 5"] = Fusion(_method, 60, _w, 5, 1)
        VARIANTS[f"{_method} k=60 w={_w}, ≤2 facts in top 10"] = Fusion(_method, 60, _w, 10, 2)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def turns_of(hits: Iterable[RetrievalHit], doc_of: Mapping[str, str]) -> list[str]:
    """The turns a recall list stands for: a chunk its own, a fact its evidence turns, in
    order, each once, cut to :data:`DEPTH`."""
    turns: dict[str, None] = {}
    for hit in hits:
        if hit.node_kind is NodeKind.FACT:
            for node in hit.explain["evidence"]:
                if node in doc_of:
                    turns.setdefault(doc_of[node])
        elif hit.source_ref:
            turns.setdefault(hit.source_ref)
    return list(turns)[:DEPTH]


def scores(dataset: Any, queries: Sequence[Any], ranked: Mapping[str, list[str]]) -> dict[str, Any]:
    qrels = {q.id: dataset.qrels[q.id] for q in queries}
    categories = {q.id: int(q.meta["category"]) for q in queries}
    found = evidence_recall(qrels, run_from_ranking(ranked), categories, ks=LOCOMO_KS)
    return {"overall": found.overall, "per_category": found.per_category, "counts": found.counts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=LOCOMO)
    parser.add_argument("--store", type=Path, help="where eval keeps its stores")
    parser.add_argument(
        "--work", type=Path, default=Path("/tmp/locomo_recall"), help="the copy with facts"
    )
    parser.add_argument("--limit-questions", type=int, help="a smoke run on the first N")
    parser.add_argument(
        "--reuse-legs", action="store_true", help="score the legs the last run kept"
    )
    args = parser.parse_args()
    load_start = os.getloadavg()
    git = git_state()
    started = time.perf_counter()
    dataset = load_locomo(args.data)
    samples = json.loads(args.data.read_text(encoding="utf-8"))
    sample_ids = [str(s["sample_id"]) for s in samples]
    queries = list(dataset.queries_in())[: args.limit_questions]
    splits = evaluation_splits([q.id for q in queries])
    cache = store_path(dataset, args.store or cache_dir_from_environment() / "eval")
    with Memory(cache) as memory:
        prepare(memory, dataset, progress=log)

    args.work.mkdir(parents=True, exist_ok=True)
    target = args.work / cache.name
    done_mark = args.work / "facts-written.json"
    if not done_mark.exists():
        for old in args.work.glob(f"{cache.name}*"):
            old.unlink()
        copy_store(cache, args.work)
        with Memory(target) as memory:
            nodes = turn_nodes(memory, dataset, sample_ids)
            log("writing the observations as facts")
            writes = write_facts(memory, samples, nodes)
            log("consolidating")
            t0 = time.perf_counter()
            report = memory.facts.consolidate()
            writes["consolidate_s"] = round(time.perf_counter() - t0, 1)
            writes["consolidate"] = str(report)[:300]
        done_mark.write_text(json.dumps(writes))
    writes = json.loads(done_mark.read_text())

    legs: dict[str, dict[str, Any]] = {}
    seconds = {"turns": 0.0, **{f"facts β={b}": 0.0 for b in PRIORS}}
    with Memory(target) as memory:
        nodes = turn_nodes(memory, dataset, sample_ids)
        doc_of = {node: doc for doc, node in nodes.items()}
        home = {s: scope_of(dataset, s) for s in sample_ids}
        kept = args.work / "legs.pickle"
        if args.reuse_legs and kept.exists():
            legs, seconds = pickle.loads(kept.read_bytes())
        for n, query in enumerate(queries if not legs else [], 1):
            scope = home[str(dataset.group_of(query))]
            t0 = time.perf_counter()
            chunks = memory.search(query.text, sources=[scope], limit=DEPTH).hits
            seconds["turns"] += time.perf_counter() - t0
            facts = {}
            for beta in PRIORS:
                t0 = time.perf_counter()
                facts[beta], _ = recalling.fact_leg(
                    memory.store,
                    query.text,
                    filters=Filters(sources=(scope,)),
                    as_of=None,
                    limit=DEPTH,
                    embedder=memory._query_embedder(query.text),
                    prior=beta,
                )
                seconds[f"facts β={beta}"] += time.perf_counter() - t0
            legs[query.id] = {"chunks": chunks, "facts": facts, "scope": scope}
            if n % 250 == 0:
                log(f"{n}/{len(queries)} questions")
        kept.write_bytes(pickle.dumps((legs, seconds)))

        def ranking(name: str, beta: float = 0.0) -> dict[str, list[str]]:
            out = {}
            for qid, leg in legs.items():
                if name == "turns":
                    hits: Sequence[RetrievalHit] = leg["chunks"]
                elif name == "facts":
                    hits = leg["facts"][beta]
                else:
                    hits = recalling.merge(
                        leg["chunks"], leg["facts"][beta], fusion=VARIANTS[name]
                    )[:DEPTH]
                out[qid] = turns_of(hits, doc_of)
            return out

        by_id = {q.id: q for q in queries}
        halves = {
            "all": queries,
            TUNE: [by_id[i] for i in splits[TUNE]],
            HELDOUT: [by_id[i] for i in splits[HELDOUT]],
        }

        def scored(ranked: Mapping[str, list[str]]) -> dict[str, Any]:
            return {h: scores(dataset, qs, ranked) for h, qs in halves.items()}

        rows: dict[str, Any] = {"turns": scored(ranking("turns"))}
        for beta in PRIORS:
            rows[f"facts β={beta}"] = scored(ranking("facts", beta))
        earlier = RESULTS / "locomo_recall.json"
        legs_from = {"date": datetime.now(UTC).isoformat(timespec="seconds"), "git": git}
        if args.reuse_legs and earlier.exists():
            # The variants the last run scored on these same legs are not merged again.
            last = json.loads(earlier.read_text())
            kept_rows = last["rows"]
            rows |= {n: kept_rows[n] for n in VARIANTS if n in kept_rows}
            legs_from = last.get("legs_from") or {"date": last["date"], "git": last["git"]}
        for name in VARIANTS:
            if name in rows:
                continue
            rows[name] = scored(ranking(name))
            log(
                f"{name}: tune "
                + " ".join(f"{100 * v:.1f}" for v in rows[name][TUNE]["overall"].values())
            )
        base = rows["turns"][TUNE]["overall"]
        eligible = [
            n for n in VARIANTS if all(rows[n][TUNE]["overall"][k] >= base[k] for k in base)
        ]
        pool = eligible or list(VARIANTS)
        chosen = max(pool, key=lambda n: (sum(rows[n][TUNE]["overall"].values()), n))
        log(f"chosen on tune: {chosen} ({len(eligible)} eligible)")
        for beta in PRIORS[1:]:
            rows[f"{chosen}, prior β={beta}"] = scored(ranking(chosen, beta))

        # End to end: Memory.recall must give the offline merge's turns.
        checked = differ = 0
        t_recall = 0.0
        for qid in splits[HELDOUT][::5]:
            leg = legs[qid]
            t0 = time.perf_counter()
            found = memory.recall(
                by_id[qid].text, sources=[leg["scope"]], limit=DEPTH, fusion=VARIANTS[chosen]
            )
            t_recall += time.perf_counter() - t0
            offline = recalling.merge(leg["chunks"], leg["facts"][0.0], fusion=VARIANTS[chosen])
            offline = offline[:DEPTH]
            checked += 1
            differ += turns_of(found.hits, doc_of) != turns_of(offline, doc_of)
        log(f"end to end: {differ} of {checked} differ")

    result = {
        "benchmark": "LoCoMo evidence recall from recall: turns, facts and merged",
        "command": "python benchmarks/locomo_recall.py"
        + (" --reuse-legs" if args.reuse_legs else ""),
        "legs_from": legs_from,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start, os.getloadavg()),
        "git": git,
        "wall_s": round(time.perf_counter() - started),
        "questions": {h: len(qs) for h, qs in halves.items()},
        "writes": writes,
        "seconds": {k: round(v, 1) for k, v in seconds.items()},
        "variants": {n: asdict(f) for n, f in VARIANTS.items()},
        "eligible_on_tune": eligible,
        "chosen": chosen,
        "end_to_end": {"checked": checked, "differ": differ, "seconds": round(t_recall, 1)},
        "rows": rows,
        "dataset_notes": dataset.notes,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "locomo_recall.json").write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / "locomo_recall.md").write_text(markdown(result))
    log(f"wrote {RESULTS}/locomo_recall.md in {result['wall_s']} s")


def pct(value: float) -> str:
    return f"{100 * value:.1f}"


def markdown(r: dict[str, Any]) -> str:
    m, rows, chosen = r["machine"], r["rows"], r["chosen"]
    ks = [f"R@{k}" for k in LOCOMO_KS]
    head = "| " + " | ".join(ks)
    lines = [
        "# LoCoMo evidence recall: `recall` (turns and facts merged)",
        "",
        f"`{r['command']}` on {r['date']}, {m['cpus_used']} of {m['cpus']} CPUs, Python "
        f"{m['python']}; 1-minute load average {m['load_start'][0]} at the start and "
        f"{m['load_end'][0]} at the end (the machine is shared). Code: {r['git']['head'][:12]}"
        + (" with uncommitted changes under `src/`." if r["git"]["modified"] else ".")
        + f" Run time {r['wall_s']} s. Questions: "
        + ", ".join(f"{h} {n}" for h, n in r["questions"].items())
        + ". See the script's docstring for each method."
        + (
            ""
            if r["legs_from"]["date"] == r["date"]
            else f" The legs (each question's chunk and fact lists, and the leg times) are "
            f"those the run of {r['legs_from']['date']} read and kept (code "
            f"{r['legs_from']['git']['head'][:12]}"
            + (
                " with uncommitted changes under `src/`"
                if r["legs_from"]["git"]["modified"]
                else ""
            )
            + "); this run merged and scored them, and ran the end-to-end check."
        ),
        "",
        f"**Chosen on tune: `{chosen}`** (the best mean R@5..50 on tune among the "
        f"{len(r['eligible_on_tune'])} variants at or above turns alone at every k there). "
        f"End to end, `Memory.recall` gave the same turns as the offline merge for "
        f"{r['end_to_end']['checked'] - r['end_to_end']['differ']} of "
        f"{r['end_to_end']['checked']} held-out questions.",
        "",
    ]
    for half in ("heldout", "all"):
        lines += [
            f"## {half} ({r['questions'][half]} questions)",
            "",
            "| method " + head + " |",
            "| --- " + "| ---: " * len(ks) + "|",
        ]
        for name in (
            "turns",
            "facts β=0.0",
            chosen,
            *[n for n in rows if n.startswith(f"{chosen}, prior")],
        ):
            cells = " | ".join(pct(rows[name][half]["overall"][k]) for k in ks)
            label = {"turns": "(a) turns alone", "facts β=0.0": "(b) facts alone"}.get(
                name, f"(c) recall: {name}"
            )
            lines.append(f"| {label} | {cells} |")
        lines += [
            "",
            "| category | questions | method " + head + " |",
            "| --- | ---: | --- " + "| ---: " * len(ks) + "|",
        ]
        first = rows["turns"][half]
        for cat in first["per_category"]:
            for name, label in (
                ("turns", "(a) turns"),
                ("facts β=0.0", "(b) facts"),
                (chosen, "(c) recall"),
            ):
                v = rows[name][half]["per_category"][cat]
                cells = " | ".join(pct(v[k]) for k in ks)
                lines.append(f"| {cat} | {first['counts'][cat]} | {label} | {cells} |")
        lines.append("")
    lines += [
        "## Every variant on the tune half",
        "",
        "| variant " + head + " | ≥ turns at every k |",
        "| --- " + "| ---: " * len(ks) + "| --- |",
    ]
    for name in ["turns", *[f"facts β={b}" for b in PRIORS], *r["variants"]]:
        cells = " | ".join(pct(rows[name]["tune"]["overall"][k]) for k in ks)
        ok = "yes" if name in r["eligible_on_tune"] else ""
        lines.append(f"| {name} | {cells} | {ok} |")
    lines += [
        "",
        "Variants: `rrf` is weighted reciprocal rank fusion of the two lists (a chunk "
        "1/(k+r), a fact w/(k+r)); `lend` also lends each fact's w/(k+r) to the chunks it "
        "cites and places the fact just after the best of them. A cap keeps at most that "
        "many facts in the first places. β is the consolidation prior "
        "(`recall.fact_prior`).",
        "",
        f"Facts written: {r['writes'].get('facts_recorded')} "
        f"({r['writes'].get('remember_calls')} `remember` calls); consolidation took "
        f"{r['writes'].get('consolidate_s')} s. Leg time over all questions: "
        + ", ".join(f"{k} {v} s" for k, v in r["seconds"].items())
        + ".",
        "",
        f"Categories: {', '.join(f'{n} {name}' for n, name in CATEGORIES.items())}.",
        "",
        "Dataset notes:",
        "",
        *[f"- {note}" for note in r["dataset_notes"]],
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
