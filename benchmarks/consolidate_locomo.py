"""Consolidation over LoCoMo's observations written as facts: how long a pass takes.

The turns are ingested as ``stratamem eval`` ingests them (one chat source per conversation,
one chunk per dialog turn; no embeddings: consolidation needs none), into a fresh store in a
temporary folder. The observations are written as facts exactly as
``benchmarks/locomo_facts.py`` writes them (its ``write_facts``: one ``remember`` per
observation sentence, subject ``person:<speaker>``, predicate ``observed``, many-valued, on
the cited turns). Then ``Memory.facts.consolidate`` runs with its default thresholds, timed:

* **first pass**: every fact scored, every qualifying (subject, scope) rolled up;
* **second pass**, nothing changed: every rollup kept, none written.

    python benchmarks/consolidate_locomo.py [--limit-conversations N]

Writes ``benchmarks/results/consolidate_locomo.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from locomo_facts import LOCOMO, RESULTS, log, turn_nodes, write_facts
from run_info import git_state, machine
from stratamem.api import Memory
from stratamem.eval.locomo import load_locomo
from stratamem.eval.runner import prepare


def timed_pass(memory: Memory) -> dict[str, Any]:
    report = memory.facts.consolidate()
    found = report.to_dict()
    found["facts_per_second"] = (
        round(report.facts_scored / report.seconds) if report.seconds else None
    )
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-conversations", type=int, help="only the first N conversations")
    parser.add_argument("--data", type=Path, default=LOCOMO, help="locomo10.json")
    args = parser.parse_args()
    load_start = os.getloadavg()
    git = git_state()
    started = time.perf_counter()

    dataset = load_locomo(args.data)
    samples = json.loads(args.data.read_text(encoding="utf-8"))
    chosen = samples[: args.limit_conversations] if args.limit_conversations else samples
    chosen_ids = [str(s["sample_id"]) for s in chosen]
    with (
        tempfile.TemporaryDirectory() as tmp,
        Memory(Path(tmp) / "locomo.db", embedder=None) as memory,
    ):
        log(f"ingesting {len(dataset.docs):,} turns")
        ingest_started = time.perf_counter()
        prepare(memory, dataset, embed=False)
        ingest_s = round(time.perf_counter() - ingest_started, 1)
        nodes = turn_nodes(memory, dataset, chosen_ids)
        log(f"writing the observations of {len(chosen)} conversations as facts")
        writes = write_facts(memory, chosen, nodes)
        facts = len(memory.facts.recall(limit=1_000_000))
        log(f"{facts:,} facts; consolidating")
        first = timed_pass(memory)
        log(f"first pass: {first}")
        second = timed_pass(memory)
        log(f"second pass: {second}")
        rollups = memory.facts.rollups(limit=1000)
        largest = max((len(r.body["facts"]) for r in rollups), default=0)
        body_bytes = sum(len(json.dumps(r.body)) for r in rollups)
        scopes = sorted({r.scope for r in rollups})

    speakers = [s["conversation"][f"speaker_{x}"].lower() for s in chosen for x in ("a", "b")]
    command = "python benchmarks/consolidate_locomo.py"
    if args.limit_conversations:
        command += f" --limit-conversations {args.limit_conversations}"
    result = {
        "benchmark": "consolidation over LoCoMo observations as facts",
        "command": command,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start, os.getloadavg()),
        "git": git,
        "wall_s": round(time.perf_counter() - started),
        "conversations": chosen_ids,
        "turns": len(dataset.docs),
        "ingest_s": ingest_s,
        "writes": writes,
        "facts": facts,
        "first_pass": first,
        "second_pass": second,
        "speakers": len(speakers),
        "speaker_names": len(set(speakers)),
        "rollups": len(rollups),
        "rollup_scopes": scopes,
        "largest_rollup_facts": largest,
        "rollup_body_bytes": body_bytes,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "consolidate_locomo.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "consolidate_locomo.md").write_text(markdown(result))
    log(f"wrote {RESULTS}/consolidate_locomo.md in {result['wall_s']} s")


def markdown(r: dict[str, Any]) -> str:
    m, first, second = r["machine"], r["first_pass"], r["second_pass"]
    rows = [
        ("first pass", first),
        ("second pass, nothing changed", second),
    ]
    lines = [
        "# Consolidation over LoCoMo observations",
        "",
        f"`{r['command']}` on {r['date']}, {m['cpus_used']} of {m['cpus']} CPUs, Python "
        f"{m['python']}; 1-minute load average {m['load_start'][0]} at the start and "
        f"{m['load_end'][0]} at the end (the machine is shared). Code: {r['git']['head'][:12]}"
        + (" with uncommitted changes under `src/`." if r["git"]["modified"] else ".")
        + f" Run time {r['wall_s']} s.",
        "",
        f"{len(r['conversations'])} conversations, {r['turns']:,} turns ingested without "
        f"embeddings ({r['ingest_s']} s), {r['writes']['remember_calls']:,} observations "
        f"written as facts by `locomo_facts.write_facts`; {r['facts']:,} facts true now. "
        f"Thresholds: at least {first['min_facts']} facts or a fact scoring "
        f"{first['min_score']}.",
        "",
        "| pass | facts scored | subjects | rollups written | kept | dropped | seconds | facts/s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, p in rows:
        lines.append(
            f"| {label} | {p['facts_scored']:,} | {p['subjects']:,} | {p['rollups_written']} | "
            f"{p['rollups_kept']} | {p['rollups_dropped']} | {p['seconds']} | "
            f"{p['facts_per_second']:,} |"
        )
    lines += [
        "",
        f"Rollups: {r['rollups']} (scopes: {', '.join(repr(s) for s in r['rollup_scopes'])}); "
        f"the largest holds {r['largest_rollup_facts']} facts; their bodies take "
        f"{r['rollup_body_bytes'] / 1e6:.1f} MB of JSON. The subjects are the speakers: "
        f"{r['speakers']} speakers, {r['speaker_names']} distinct names. The conversations' "
        "sources all have the access scope a chat source gets by default, so one name's "
        "observations share one card whatever the conversation. A second pass over an "
        "unchanged store scores every fact again (the scores are rewritten) and keeps "
        "every rollup: its time is the pass's reads and the score writes.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
