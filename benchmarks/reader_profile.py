"""The ingest reader alone (connector → chunker → entity fields and topics → record keys), timed
and profiled, without a store: where an ingest's reading half spends its time.

    python benchmarks/reader_profile.py [--corpus scifact|til|lkml|irc] [--documents 5650]
                                        [--profile 25] [--dump events.txt]

``scifact`` is ingest_scale.py's corpus (SciFact chunks as one-chunk JSONL documents over 20
sources); the others are ingest.py's. ``--profile N`` prints cProfile's top N functions by
own time; ``--dump`` writes every event the reader sends, one line each, so that two
checkouts' readers can be compared byte for byte.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
CORPORA = {
    "til": (DATA / "notes" / "til", None),
    "lkml": (DATA / "email" / "lkml-maildir", None),
    "irc": (DATA / "chat" / "ubuntu-irc" / "dev", "irc"),
}


def events(path: Path, kind: str | None) -> Any:
    from stratamem.ingest import registry
    from stratamem.ingest.reader import read_events

    connector = registry.get(kind) if kind else registry.detect(path)
    return read_events(connector, path, None, None)


def describe(event: tuple[Any, ...]) -> str:
    """One event as text: every field of every chunk, mention and record it carries."""
    return repr(event)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default="scifact", choices=["scifact", *CORPORA])
    parser.add_argument("--documents", type=int, default=5650)
    parser.add_argument("--profile", type=int, default=0)
    parser.add_argument("--dump", type=Path)
    parser.add_argument("--sort", default="tottime", help="cProfile order: tottime, cumtime")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="reader-") as tmp:
        if args.corpus == "scifact":
            sys.path.insert(0, str(ROOT / "benchmarks"))
            from ingest_scale import scifact_texts, write_corpus

            path, kind = Path(tmp) / "corpus.jsonl", None
            write_corpus(path, args.documents, scifact_texts())
        else:
            path, kind = CORPORA[args.corpus]
        profiler = cProfile.Profile() if args.profile else None
        dump = args.dump.open("w") if args.dump else None
        chunks = 0
        stream = events(path, kind)  # imports the reader before the clock starts
        started = time.perf_counter()
        if profiler:
            profiler.enable()
        for event in stream:
            if event[0] == "rows":
                chunks += len(event[1])
            elif event[0] == "records":
                chunks += len(event[4])
            if dump:
                dump.write(describe(event) + "\n")
        if profiler:
            profiler.disable()
        seconds = time.perf_counter() - started
        if dump:
            dump.close()
    print(f"{args.corpus}: {chunks:,} chunks in {seconds:.2f} s, {chunks / seconds:,.0f} chunks/s")
    if profiler:
        pstats.Stats(profiler).sort_stats(args.sort).print_stats(args.profile)


if __name__ == "__main__":
    main()
