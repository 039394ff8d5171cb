"""Reconciling extraction round trips per second against a local chat-completions server.

The store (SQLite, a temporary folder) holds ``--n`` notes in one record source, written with
``mem.items.add``; note *i* says that one of ``--subjects`` people (``@p07``) now leads one of
a few projects, a day after note *i - 1*. The model is :class:`stratamem.testing.
FakeModelServer` on 127.0.0.1, scripted to answer at once: for each record of a batch, an
``update`` of the held fact ``handle:pNN leads`` it is shown (by label) when there is one, else
an ``add`` (one decision per person and batch, the first note's). So the model's thinking costs
nothing and what is timed is stratamem's side of a round trip: finding the subjects a batch
mentions and the facts held about them, writing the prompt, the HTTP exchange on loopback,
checking the decisions and applying them (closing the old value, opening the new one) in one
transaction with the source's progress.

For each ``--batch-sizes`` value, a fresh copy of the store is extracted once:

    t0; report = mem.facts.extract([source], endpoint=..., model="m", batch_size=b); t1

and the rate is ``report.batches / (t1 - t0)`` round trips per second (and the decisions
applied per second). The run is single-threaded; the server answers on its own thread. A
warm-up run over a store of a few notes comes first (the HTTP client's first import and
connection), and is not reported.

    python benchmarks/extract_rate.py [--n 400] [--subjects 20] [--batch-sizes 1,8]

Writes ``benchmarks/results/extract_rate.json`` and ``extract_rate.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import stratamem
from run_info import git_state, machine, write_results
from stratamem.memory.decide import DECISION_KEYS
from stratamem.testing import FakeModelServer, held_facts

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SOURCE = "notes:bench"
PROJECTS = ("phoenix", "atlas", "borealis", "cirrus", "delta")
T0 = datetime(2024, 1, 1, 9, 0, tzinfo=UTC)


def reply(prompt: str) -> str:
    """Update the held ``leads`` fact of each record's person, else add it."""
    records = [r for r in prompt.split("Records:", 1)[1].split("\n\n") if r.strip()]
    shown = {tuple(v[:2]): label for label, v in held_facts(prompt).items()}
    out = []
    decided: set[str] = set()  # one decision per person and batch: the first note's
    for record in records:
        label, _, text = record.strip().partition("\n")
        node = label[1:33]
        words = text.split()
        subject, project = f"handle:{words[0].lstrip('@')}", words[-1]
        if subject in decided:
            continue
        decided.add(subject)
        base = dict.fromkeys(DECISION_KEYS) | {"evidence": [node], "reason": "the note says so"}
        held = shown.get((subject, "leads"))
        if held is not None:
            out.append(base | {"action": "update", "fact": held, "object": project})
        else:
            out.append(
                base
                | {"action": "add", "subject": subject, "predicate": "leads"}
                | {"object": project}
            )
    return json.dumps({"decisions": out})


def build(path: Path, n: int, subjects: int) -> float:
    started = time.perf_counter()
    with stratamem.open(path, embedder=None) as memory:
        for i in range(n):
            person = f"p{i % subjects:02d}"
            text = f"@{person} now leads {PROJECTS[(i // subjects) % len(PROJECTS)]}"
            memory.items.add(text, source=SOURCE, id=f"n{i}", time=T0 + timedelta(days=i))
    return time.perf_counter() - started


def run(path: Path, server: FakeModelServer, batch_size: int) -> dict[str, Any]:
    with stratamem.open(path, embedder=None) as memory:
        started = time.perf_counter()
        report = memory.facts.extract(
            [SOURCE], endpoint=server.base_url, model="m", batch_size=batch_size
        )
        seconds = time.perf_counter() - started
        believed = memory.facts.recall(limit=100_000)
    if report.failed or report.skipped:
        raise SystemExit(f"the run did not go through: {report.failed or report.skipped[:3]}")
    decided = report.added + report.updated + report.retracted + report.kept
    return {
        "batch_size": batch_size,
        "batches": report.batches,
        "chunks": report.chunks,
        "added": report.added,
        "updated": report.updated,
        "skipped": len(report.skipped),
        "failed": report.failed,
        "facts_true_now": len(believed),
        "seconds": round(seconds, 3),
        "round_trips_per_s": round(report.batches / seconds, 1),
        "decisions_per_s": round(decided / seconds, 1),
        "ms_per_round_trip": round(1000 * seconds / max(1, report.batches), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=400, help="notes in the store")
    parser.add_argument("--subjects", type=int, default=20, help="people the notes are about")
    parser.add_argument("--batch-sizes", default="1,8", help="comma-separated")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    for name in ("STRATAMEM_EXTRACT_API_KEY", "OPENAI_API_KEY"):
        os.environ.pop(name, None)
    load_start = os.getloadavg()
    runs = []
    with tempfile.TemporaryDirectory() as folder, FakeModelServer(reply=reply) as server:
        warm = Path(folder) / "warm.db"
        build(warm, 3, 3)
        run(warm, server, 1)
        template = Path(folder) / "template.db"
        built = build(template, args.n, args.subjects)
        for size in sizes:
            copy = Path(folder) / f"b{size}.db"
            for file in Path(folder).glob("template.db*"):
                shutil.copyfile(file, Path(folder) / file.name.replace("template", f"b{size}"))
            runs.append(run(copy, server, size))
    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start, os.getloadavg()),
        "git": git_state(),
        "data": {
            "notes": args.n,
            "subjects": args.subjects,
            "backend": "sqlite",
            "build_s": round(built, 1),
        },
        "runs": runs,
    }
    lines = [
        "# Reconciling extraction: round trips per second against a local server",
        "",
        f"- date: {report['date']}; git {report['git']['head'][:12]}"
        f"{' (modified)' if report['git']['modified'] else ''}",
        f"- machine: {report['machine']['cpus_used']} of {report['machine']['cpus']} CPUs, "
        f"Python {report['machine']['python']}, load {report['machine']['load_start']} → "
        f"{report['machine']['load_end']}",
        f"- data: {args.n} notes about {args.subjects} people in one SQLite record source "
        "(built with `mem.items.add`); the model is `FakeModelServer` on 127.0.0.1 answering "
        "at once (update the held fact, else add)",
        "- command: `python benchmarks/extract_rate.py "
        f"--n {args.n} --subjects {args.subjects} --batch-sizes {args.batch_sizes}`",
        "",
        "| batch size | round trips | decisions | seconds | round trips/s | decisions/s "
        "| ms/round trip |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in runs:
        decided = r["added"] + r["updated"]
        lines.append(
            f"| {r['batch_size']} | {r['batches']} | {decided} | {r['seconds']} "
            f"| {r['round_trips_per_s']} | {r['decisions_per_s']} | {r['ms_per_round_trip']} |"
        )
    lines.append("")
    write_results(args.out, "extract_rate", report, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
