"""Ingest time against the length of one line: it should double when the line doubles.

Writes one line of 1, 2, 4, 8 and 16 MB (and 50 MB with ``--full``) as the text of a ``.jsonl``
record and as a Markdown note that is a single line, ingests each into a fresh store without
summary trees and without a reader process, and reports the seconds and the ratio per
doubling. Writes ``benchmarks/results/line_length.md``.

The line is prose with punctuation, URLs, addresses, @handles and #tags, and no newline.
``--forms`` adds degenerate lines: no spaces, only spaces, one repeated character, runs of
punctuation, a line of ``#``, a Markdown heading that is the whole line.

    python benchmarks/line_length.py [--full] [--sizes 1,2,4] [--forms all] [--limit 120]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import stratamem

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

_TEXT = (
    "the release of Phoenix slipped because Alice Chen found a RedisCluster bug in the deploy "
    "pipeline and we went over it with Bob Stone on Monday; see https://example.com/a/b?x=1 or "
    "mail alice.chen@example.org, ping @bob_smith and tag #release #ops. Really, it's fine! "
    "Is it? (yes) - maybe: extraordinary configuration management, 42 items, v1.2.3"
)
_WORDS = _TEXT.split()


def prose(size: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(_WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:size]


def _repeat(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


FORMS: dict[str, Callable[[int], str]] = {
    "prose": prose,
    "no spaces": lambda size: _repeat("abcdefghij", size),
    "only spaces": lambda size: "a" + " " * (size - 2) + "z",
    "one char": lambda size: "a" * size,
    "punctuation": lambda size: _repeat("!?.,;:-_()", size),
    "hashes": lambda size: "#" * size,
    "heading": lambda size: "# " + prose(size - 2),
}


def write_input(folder: Path, kind: str, text: str) -> Path:
    if kind == "jsonl":
        path = folder / "line.jsonl"
        path.write_text(json.dumps({"text": text, "source": "probe"}) + "\n", encoding="utf-8")
    else:
        path = folder / "line.md"
        path.write_text(text, encoding="utf-8")
    return path


def run_once(kind: str, text: str) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, chunks) of one ingest into a new store."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = write_input(folder, kind, text)
        with stratamem.open(folder / "bench.db", embedder=None) as mem:
            started, cpu = time.perf_counter(), time.process_time()
            report = mem.ingest(path, format=kind, trees=False, parallel=False)
            return time.perf_counter() - started, time.process_time() - cpu, report.chunks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="add a 50 MB line")
    parser.add_argument("--sizes", default="1,2,4,8,16", help="line lengths in MB")
    parser.add_argument("--kinds", default="jsonl,markdown", help="connectors to ingest with")
    parser.add_argument("--forms", default="prose", help="'all' or comma-separated form names")
    parser.add_argument(
        "--limit",
        type=float,
        default=300,
        help="skip larger sizes of a series after a run this slow",
    )
    args = parser.parse_args()
    sizes = [float(s) for s in args.sizes.split(",")] + ([50.0] if args.full else [])
    forms = list(FORMS) if args.forms == "all" else args.forms.split(",")
    rows: list[dict[str, object]] = []
    for kind in args.kinds.split(","):
        for form in forms:
            previous: tuple[float, float] | None = None
            for mb in sizes:
                text = FORMS[form](int(mb * 1_000_000))
                seconds, cpu, chunks = run_once(kind, text)
                ratio = ""
                if previous is not None:
                    # Normalised to one doubling, so that 8 → 16 and 16 → 50 compare.
                    doublings = math.log2(mb / previous[0])
                    ratio = f"{(cpu / previous[1]) ** (1 / doublings):.2f}"
                rows.append(
                    {
                        "kind": kind,
                        "form": form,
                        "mb": mb,
                        "chunks": chunks,
                        "seconds": round(seconds, 2),
                        "cpu_seconds": round(cpu, 2),
                        "mb_per_s": round(mb / cpu, 2),
                        "ratio": ratio,
                    }
                )
                print(
                    f"{kind} {form} {mb:g} MB: {chunks} chunks in {seconds:.2f}s "
                    f"({cpu:.2f}s CPU), ratio {ratio}"
                )
                previous = (mb, cpu)
                if cpu > args.limit:
                    break
    command = "python benchmarks/line_length.py" + (" --full" if args.full else "")
    if args.forms != "prose":
        command += f" --forms {args.forms}"
    lines = [
        "# Ingest time against the length of one line",
        "",
        f"`{command}` on {datetime.now(UTC).isoformat(timespec='seconds')}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}. One run per size, each "
        "into a new store, `trees=False, parallel=False`, no embedder.",
        "",
        "Seconds are wall clock; CPU seconds are this process's, which other work on a shared "
        "machine disturbs less, so MB/s and the ratio use them. The ratio is the CPU time of a "
        "size over that of the size before it, per doubling of the line (16 → 50 MB is 1.64 "
        "doublings): 2.0 is linear.",
        "",
        "| connector | line | MB | chunks | seconds | CPU seconds | MB/s | ratio per doubling |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {r['kind']} | {r['form']} | {r['mb']:g} | {r['chunks']:,} | {r['seconds']} | "
        f"{r['cpu_seconds']} | {r['mb_per_s']} | {r['ratio']} |"
        for r in rows
    ]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "line_length.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS / 'line_length.md'}")


if __name__ == "__main__":
    main()
