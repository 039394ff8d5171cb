"""Merging a 1% change into a 100k-chunk chat source: time and chunks re-embedded, against a
full re-ingest.

The source is synthetic and written as JSON Lines, one chat message a line (``id``,
``kind: "chat"``, ``timestamp`` ISO 8601, ``author`` from a pool of 50 names, ``text``,
``source: "chan:bench"``), in time order. Messages come in bursts (2-120 messages, 5-120 s
apart) separated by silences of 2 minutes to 8 hours (log-uniform: about 38% longer than the
30-minute ``chat_gap``, so the channel falls into segments of a few bursts each). A message's
text is 20-300 characters (uniform) of words drawn from a seeded vocabulary of 6,000
pseudo-words with Zipf frequencies (s = 1.1), with an occasional @mention of another author
(8% of messages), a link (2%) or a #tag (3%). Chat windows hold at most 20 messages or
1,000 characters, so about 5 messages make a chunk.

The second export is the first with a 1% change to its records:

- **edits**: ``--edit`` (0.5%) of the records, picked uniformly over the whole time line, keep
  their id, time and author; 1-3 of their words are replaced by other vocabulary words (a
  typo fix or a rewording, the text's length changes by a few characters);
- **new**: ``--new`` (0.5%) as many new records are appended after the last one, in new
  bursts made by the same generator (new ids, later times).

Measured, interleaved (the order rotates each round) on this shared 2-core machine:

a. **merge**: a copy of the store holding the first export, with vectors, merges the second
   (``mem.ingest(second, trees=False)``), then ``mem.indexes.embed()``: wall times, chunks
   written and deleted, chunks embedded (``report.embedded``: run through the model) and
   reused from the content-hash cache (``report.cached``);
b. **full re-ingest**: a new store ingests the second export and embeds every chunk;
c. **no-change merge**: a copy of the store merges the first export again.

Every run checks that the merge counts the edits and the new records as such and leaves the
same chunk ids as the full re-ingest.

The vectors are made by :class:`stratamem.testing.HashingEmbedder` (feature hashing, no
model): embedding 100k chunks with the bundled MiniLM takes hours on two cores, too long to
repeat. The chunks embedded are counted whatever the model; the bundled model's time for
those counts is estimated from its rate measured here on ``--minilm-sample`` chunks of the
store (batches of 64, as ``embed`` sends them). The store the merges start from (not timed)
gets its vectors written directly: what ``embed`` would store, computed in larger batches.

The default size (540,000 messages, about 100k chunks) runs all three variants ``--repeat``
times in about 16 minutes here; ``--probe 108000`` also measures another size (about 20k
chunks), each variant once, to show how the times grow. ``--profile`` runs cProfile once on
a merge of the main size, read serially (``parallel=False``) so that the reading is in the
profile, and reports the top functions.

    python benchmarks/merge.py [--records 540000] [--repeat 3] [--probe 108000] [--profile]

Writes ``benchmarks/results/merge.json`` and ``merge.md``.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import json
import os
import pstats
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

import stratamem
from run_info import CPUS, git_state, machine
from stratamem.embed.indexing import ACTIVE_DIM, ACTIVE_MODEL, embed_text
from stratamem.embed.registry import get_embedder
from stratamem.store.vectors import ChunkVector
from stratamem.testing import HashingEmbedder

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SCOPE = "chan:bench"
AUTHORS = [
    "alice", "bob", "carol", "dan", "erin", "frank", "grace", "heidi", "ivan", "judy",
    "mallory", "niaj", "olivia", "peggy", "rupert", "sybil", "trent", "victor", "walter",
    "xena", "yusuf", "zoe", "amir", "bea", "chen", "dmitri", "elena", "farah", "goran",
    "hana", "igor", "jana", "kofi", "lena", "mateo", "nora", "omar", "priya", "quinn",
    "rosa", "sven", "tariq", "uma", "vera", "wen", "ximena", "yara", "zane", "aiko", "bruno",
]  # fmt: skip
VOCABULARY = 6_000
ZIPF_S = 1.1
START = datetime(2024, 1, 1, 9, 0, tzinfo=UTC)


# -- the synthetic channel -------------------------------------------------------------------


class Chat:
    """A seeded generator of chat messages in bursts (see the module docstring)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        syllables = [c + v for c in "bdfghklmnprstvz" for v in ("a", "e", "i", "o", "u", "ai")]
        words: set[str] = set()
        while len(words) < VOCABULARY:
            n = int(self.rng.integers(1, 5))
            words.add("".join(self.rng.choice(syllables, n)))
        self.words = sorted(words, key=len)  # short words are the frequent ones, as in a language
        ranks = np.arange(1, VOCABULARY + 1, dtype=np.float64)
        weights = ranks**-ZIPF_S
        self.cdf = np.cumsum(weights / weights.sum())
        self.clock = START
        self.burst_left = 0
        self.next_id = 1
        self._pool = np.empty(0, dtype=np.int64)

    def word(self) -> str:
        if not self._pool.size:
            self._pool = np.searchsorted(self.cdf, self.rng.random(1 << 16))
        index, self._pool = int(self._pool[0]), self._pool[1:]
        return self.words[min(index, VOCABULARY - 1)]

    def text(self, author: str) -> str:
        target = int(self.rng.integers(20, 301))
        parts: list[str] = []
        draw = self.rng.random(3)
        if draw[0] < 0.08:
            other = AUTHORS[int(self.rng.integers(len(AUTHORS)))]
            if other != author:
                parts.append(f"@{other}")
        size = sum(len(p) + 1 for p in parts)
        while size < target:
            word = self.word()
            parts.append(word)
            size += len(word) + 1
        if draw[1] < 0.02:
            parts.append(f"https://example.org/{self.word()}/{int(self.rng.integers(1, 999))}")
        if draw[2] < 0.03:
            parts.append(f"#{self.word()}")
        text = " ".join(parts)
        return text[:300].rsplit(" ", 1)[0] if len(text) > 300 else text

    def message(self) -> dict[str, Any]:
        if self.burst_left == 0:
            self.burst_left = int(self.rng.integers(2, 121))
            # log-uniform silence between bursts, 2 minutes to 8 hours
            self.clock += timedelta(
                seconds=float(np.exp(self.rng.uniform(np.log(120), np.log(28_800))))
            )
        else:
            self.clock += timedelta(seconds=int(self.rng.integers(5, 121)))
        self.burst_left -= 1
        author = AUTHORS[int(self.rng.integers(len(AUTHORS)))]
        line = {
            "id": f"m{self.next_id:07d}",
            "kind": "chat",
            "timestamp": self.clock.isoformat(),
            "author": author,
            "text": self.text(author),
            "source": SCOPE,
        }
        self.next_id += 1
        return line

    def edit(self, text: str) -> str:
        """1-3 words, at distinct places, replaced by other vocabulary words."""
        words = text.split(" ")
        count = min(len(words), int(self.rng.integers(1, 4)))
        for at in self.rng.choice(len(words), count, replace=False):
            replacement = self.word()
            while replacement == words[at]:
                replacement = self.word()
            words[at] = replacement
        return " ".join(words)


@dataclass(frozen=True, slots=True)
class Exports:
    first: Path
    second: Path
    records: int
    edited: int
    new: int
    bytes_first: int
    bytes_second: int


def write_exports(folder: Path, records: int, edit: float, new: float, seed: int) -> Exports:
    chat = Chat(seed)
    lines = [chat.message() for _ in range(records)]
    # Both exports have the same file name, as a channel exported twice: the source's scope
    # (``jsonl:<file stem>``) is what makes the second one merge into the first.
    first = folder / "first" / "chan-bench.jsonl"
    second = folder / "second" / "chan-bench.jsonl"
    first.parent.mkdir(exist_ok=True)
    second.parent.mkdir(exist_ok=True)
    with first.open("w") as fh:
        for line in lines:
            fh.write(json.dumps(line) + "\n")
    edited = sorted(chat.rng.choice(records, round(records * edit), replace=False).tolist())
    for at in edited:
        lines[at] = {**lines[at], "text": chat.edit(lines[at]["text"])}
    added = [chat.message() for _ in range(round(records * new))]
    with second.open("w") as fh:
        for line in lines + added:
            fh.write(json.dumps(line) + "\n")
    return Exports(
        first,
        second,
        records,
        len(edited),
        len(added),
        first.stat().st_size,
        second.stat().st_size,
    )


# -- the measurements ------------------------------------------------------------------------


def open_store(path: Path) -> stratamem.Memory:
    return stratamem.open(path, embedder=HashingEmbedder())


def copy_store(base: Path, target: Path) -> None:
    remove_store(target)
    for file in base.parent.glob(f"{base.name}*"):
        shutil.copyfile(file, target.parent / (target.name + file.name[len(base.name) :]))


def remove_store(path: Path) -> None:
    for file in path.parent.glob(f"{path.name}*"):
        file.unlink()


def source_counts(report: stratamem.IngestReport) -> dict[str, int]:
    (source,) = report.sources
    if source.error is not None:
        raise SystemExit(f"ingest failed: {source.error}")
    return {
        "records_read": source.records,
        "records_new": source.new,
        "records_updated": source.updated,
        "chunks": source.chunks,
        "chunks_added": source.added,
        "chunks_removed": source.removed,
    }


def chunk_digest(mem: stratamem.Memory) -> str:
    """A digest of the store's chunk ids: equal digests, equal chunks (an id covers a chunk's
    text and fields)."""
    ids = sorted(c.id for s in mem.sources.list() for c in mem.store.iter_chunks(s.id))
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]


def add_vectors(mem: stratamem.Memory) -> tuple[int, float]:
    """Give every chunk its hashing vector, written directly: what ``embed`` would store
    (same model, same text), without its per-batch scan for chunks that lack a vector.
    Returns (chunks, seconds spent computing the vectors)."""
    embedder = mem.embedder
    if embedder is None:
        raise SystemExit("no embedder")
    spec = embedder.spec
    compute = 0.0
    count = 0
    with mem.store.transaction():
        mem.store.set_setting(ACTIVE_MODEL, spec.signature)
        mem.store.set_setting(ACTIVE_DIM, str(spec.dim))
        for source in mem.sources.list():
            chunks = list(mem.store.iter_chunks(source.id))
            for at in range(0, len(chunks), 1000):
                part = chunks[at : at + 1000]
                started = time.perf_counter()
                vectors = embedder.embed_batch(
                    [embed_text(c.title, c.content) for c in part], role="passage"
                )
                compute += time.perf_counter() - started
                mem.store.insert_vectors(
                    ChunkVector(
                        node_id=c.id,
                        model=spec.signature,
                        source_id=c.source_id,
                        dim=spec.dim,
                        vector=np.ascontiguousarray(v, dtype="<f4").tobytes(),
                        content_sha256=c.content_sha256,
                    )
                    for c, v in zip(part, vectors, strict=True)
                )
                count += len(part)
    return count, compute


def build_base(path: Path, export: Path) -> dict[str, Any]:
    remove_store(path)
    with open_store(path) as mem:
        started = time.perf_counter()
        report = mem.ingest(export, trees=False)
        ingest_s = time.perf_counter() - started
        started = time.perf_counter()
        vectors, compute_s = add_vectors(mem)
        vectors_s = time.perf_counter() - started
    return {
        **source_counts(report),
        "ingest_s": round(ingest_s, 2),
        "vectors": vectors,
        "vectors_s": round(vectors_s, 2),
        "hashing_compute_s": round(compute_s, 2),
    }


def ingest_and_embed(path: Path, export: Path) -> dict[str, Any]:
    with open_store(path) as mem:
        started = time.perf_counter()
        report = mem.ingest(export, trees=False)
        ingest_s = time.perf_counter() - started
        started = time.perf_counter()
        embedded = mem.indexes.embed()
        embed_s = time.perf_counter() - started
        row: dict[str, Any] = {
            **source_counts(report),
            "ingest_s": ingest_s,
            "embed_s": embed_s,
            "total_s": ingest_s + embed_s,
            "embedded": embedded.embedded,
            "cached": embedded.cached,
        }
        row["chunk_digest"] = chunk_digest(mem)
    return row


def run_merge(base: Path, work: Path, export: Path) -> dict[str, Any]:
    copy_store(base, work)
    try:
        return ingest_and_embed(work, export)
    finally:
        remove_store(work)


def run_full(work: Path, export: Path) -> dict[str, Any]:
    remove_store(work)
    try:
        return ingest_and_embed(work, export)
    finally:
        remove_store(work)


def profile_merge(base: Path, work: Path, export: Path, top: int = 10) -> dict[str, Any]:
    """cProfile of one merge, read serially (``parallel=False``) so that the reading and the
    derivation the reader does are in the profile too."""
    copy_store(base, work)
    profiler = cProfile.Profile()
    try:
        with open_store(work) as mem:
            started = time.perf_counter()
            profiler.enable()
            mem.ingest(export, trees=False, parallel=False)
            profiler.disable()
            seconds = time.perf_counter() - started
    finally:
        remove_store(work)
    stats = pstats.Stats(profiler, stream=io.StringIO())
    rows = [
        {
            "function": f"{_short(file)}:{line}({name})",
            "calls": calls,
            "own_s": round(tottime, 2),
            "cumulative_s": round(cumtime, 2),
        }
        for (file, line, name), (_, calls, tottime, cumtime, _) in stats.stats.items()  # type: ignore[attr-defined]
    ]
    return {
        "seconds": round(seconds, 1),
        "top_cumulative": sorted(rows, key=lambda r: -r["cumulative_s"])[:top],
        "top_own": sorted(rows, key=lambda r: -r["own_s"])[:top],
    }


def _short(file: str) -> str:
    for marker in ("/site-packages/", "/src/"):
        if marker in file:
            return file.split(marker, 1)[1]
    if "/lib/python" in file:
        return file.split("/lib/python", 1)[1].split("/", 1)[-1]
    return file


def minilm_rate(path: Path, sample: int) -> dict[str, Any]:
    """Seconds per chunk of the bundled model on ``sample`` chunks of the store (spread over
    it), in batches of 64 as ``embed`` sends them, after a warm-up batch."""
    with stratamem.open(path, embedder=None) as mem:
        (source,) = mem.sources.list()
        chunks = list(mem.store.iter_chunks(source.id))
    step = max(1, len(chunks) // (sample + 64))
    texts = [embed_text(c.title, c.content) for c in chunks[::step]][: sample + 64]
    embedder = get_embedder("minilm", threads=CPUS)
    embedder.embed_batch(texts[sample:], role="passage")  # warm-up: loads the model
    texts = texts[:sample]
    started = time.perf_counter()
    for at in range(0, len(texts), 64):
        embedder.embed_batch(texts[at : at + 64], role="passage")
    seconds = time.perf_counter() - started
    return {
        "model": embedder.spec.name,
        "chunks": len(texts),
        "mean_chars": round(statistics.fmean(len(t) for t in texts)),
        "seconds": round(seconds, 2),
        "chunks_per_s": round(len(texts) / seconds, 2),
        "s_per_chunk": seconds / len(texts),
    }


@dataclass(slots=True)
class Size:
    """The measurements at one size of the channel."""

    exports: Exports
    base: dict[str, Any]
    runs: dict[str, list[dict[str, Any]]]

    def medians(self) -> dict[str, dict[str, Any]]:
        out = {}
        for name, results in self.runs.items():
            first = results[0]
            row: dict[str, Any] = {}
            for key, value in first.items():
                if isinstance(value, float):
                    row[key] = round(statistics.median(r[key] for r in results), 2)
                else:
                    row[key] = value
            row["runs_ingest_s"] = [round(r["ingest_s"], 2) for r in results]
            if "total_s" in first:
                row["runs_total_s"] = [round(r["total_s"], 2) for r in results]
            out[name] = row
        return out

    def checks(self) -> dict[str, bool]:
        merges = self.runs["merge"]
        digests = {r["chunk_digest"] for r in merges + self.runs["full"]}
        same = self.runs["no change"]
        return {
            "merge counts the edited records as updated and the new ones as new": all(
                r["records_updated"] == self.exports.edited and r["records_new"] == self.exports.new
                for r in merges
            ),
            "merge leaves the same chunks as a full ingest of the second export": len(digests) == 1,
            "merge with no change writes and deletes no chunk and embeds none": all(
                r["chunks_added"] == r["chunks_removed"] == r["embedded"] == 0 for r in same
            ),
            "every run of a variant gives the same counts": all(
                len({json.dumps({k: v for k, v in r.items() if isinstance(v, int)}) for r in rs})
                == 1
                for rs in self.runs.values()
            ),
        }


def measure_size(folder: Path, records: int, args: argparse.Namespace, *, repeat: int) -> Size:
    started = time.perf_counter()
    exports = write_exports(folder, records, args.edit, args.new, args.seed)
    print(
        f"exports: {exports.records:,} records, {exports.edited:,} edited, "
        f"{exports.new:,} new ({time.perf_counter() - started:.0f}s)"
    )
    base = folder / "base.db"
    built = build_base(base, exports.first)
    print("base store:", built)
    work = folder / "work.db"
    variants = {
        "merge": lambda: run_merge(base, work, exports.second),
        "full": lambda: run_full(work, exports.second),
        "no change": lambda: run_merge(base, work, exports.first),
    }
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    names = list(variants)
    for round_ in range(repeat):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in order:
            result = variants[name]()
            runs[name].append(result)
            shown = ", ".join(
                f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in result.items()
            )
            print(f"{records:,} records, round {round_ + 1}, {name}: {shown}", flush=True)
    return Size(exports, built, runs)


def size_result(size: Size, rate: dict[str, Any]) -> dict[str, Any]:
    ex = size.exports
    medians = size.medians()
    per_chunk = rate["s_per_chunk"]
    for row in medians.values():
        row["minilm_estimate_s"] = round(row["embedded"] * per_chunk, 1)
        row["ingest_plus_minilm_s"] = round(row["ingest_s"] + row["minilm_estimate_s"], 1)
    merge, full = medians["merge"], medians["full"]
    ratios = {
        "ingest": round(full["ingest_s"] / merge["ingest_s"], 2),
        "chunks_embedded": round(full["embedded"] / max(merge["embedded"], 1), 1),
        "ingest_plus_minilm": round(
            full["ingest_plus_minilm_s"] / merge["ingest_plus_minilm_s"], 1
        ),
    }
    ratios["total_hashing"] = round(full["total_s"] / merge["total_s"], 2)
    return {
        "exports": {
            "records_first": ex.records,
            "records_edited": ex.edited,
            "records_new": ex.new,
            "records_second": ex.records + ex.new,
            "mb_first": round(ex.bytes_first / 1e6, 1),
            "mb_second": round(ex.bytes_second / 1e6, 1),
        },
        "repeat": len(size.runs["merge"]),
        "base_store": size.base,
        "medians": medians,
        "ratios_full_over_merge": ratios,
        "checks": size.checks(),
        "runs": size.runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--records", type=int, default=540_000, help="messages in the first export (~100k chunks)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds")
    parser.add_argument(
        "--probe",
        type=int,
        help="also measure this many messages, each variant once",
    )
    parser.add_argument("--edit", type=float, default=0.005, help="share of records edited")
    parser.add_argument("--new", type=float, default=0.005, help="share of records appended")
    parser.add_argument("--minilm-sample", type=int, default=200)
    parser.add_argument("--profile", action="store_true", help="cProfile one merge")
    parser.add_argument("--seed", type=int, default=20240101)
    parser.add_argument("--keep", type=Path, help="work in this folder and leave it")
    args = parser.parse_args()
    load_start = os.getloadavg()
    git = git_state()
    started = time.perf_counter()
    profile: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        main_folder = folder / f"r{args.records}"
        main_folder.mkdir(parents=True, exist_ok=True)
        sizes = [measure_size(main_folder, args.records, args, repeat=args.repeat)]
        base = main_folder / "base.db"
        if args.profile:
            profile = profile_merge(base, main_folder / "work.db", sizes[0].exports.second)
            print("profile:", profile)
        rate = minilm_rate(base, args.minilm_sample)
        print("minilm:", rate)
        if not args.keep:
            shutil.rmtree(main_folder)
        if args.probe:
            probe_folder = folder / f"r{args.probe}"
            probe_folder.mkdir(parents=True, exist_ok=True)
            sizes.append(measure_size(probe_folder, args.probe, args, repeat=1))
    load_end = os.getloadavg()

    command = f"python benchmarks/merge.py --records {args.records} --repeat {args.repeat}"
    if args.probe:
        command += f" --probe {args.probe}"
    if args.edit != 0.005 or args.new != 0.005:
        command += f" --edit {args.edit} --new {args.new}"
    if args.profile:
        command += " --profile"
    if args.keep:
        command += f" --keep {args.keep}"
    result = {
        "benchmark": "merge a 1% change into a chat source vs a full re-ingest",
        "command": command,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start, load_end),
        "wall_s": round(time.perf_counter() - started),
        "git": git,
        "seed": args.seed,
        "vectors": f"stratamem.testing.HashingEmbedder ({HashingEmbedder().spec.signature})",
        "minilm": {k: v for k, v in rate.items() if k != "s_per_chunk"},
        "sizes": [size_result(size, rate) for size in sizes],
        "profile": profile,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "merge.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "merge.md").write_text(markdown(result))
    print(f"wrote {RESULTS}/merge.md in {result['wall_s']} s")


# -- the report ------------------------------------------------------------------------------


def markdown(result: dict[str, Any]) -> str:
    machine, rate = result["machine"], result["minilm"]
    lines = [
        "# Merging a 1% change into a 100k-chunk chat source, against a full re-ingest",
        "",
        f"`{result['command']}` on {result['date']}, {machine['cpus_used']} of "
        f"{machine['cpus']} CPUs, Python {machine['python']}; 1-minute load average "
        f"{machine['load_start'][0]} at the start and {machine['load_end'][0]} at the end "
        f"(the machine is shared); {result['wall_s'] / 60:.0f} minutes in all. Code: "
        f"{result['git']['head'][:12]}"
        + (" with uncommitted changes under `src/`." if result["git"]["modified"] else "."),
        "",
        "**Source**: one synthetic chat channel written as JSONL, in time order: messages of "
        "20-300 characters from 50 authors, in bursts separated by 2 minutes to 8 hours of "
        "silence (see the script's docstring). Chat windows hold at most 20 messages or 1,000 "
        "characters and close after 30 minutes of silence. **Second export**: the same "
        "messages, 0.5% of them edited (1-3 words replaced; id, time and author kept; picked "
        "uniformly over the time line), and 0.5% as many new messages appended after the last.",
        "",
        "**Variants**, interleaved (the order rotates each round): (a) a copy of the store "
        "holding the first export, with vectors, merges the second (`mem.ingest(second, "
        "trees=False)`) then `mem.indexes.embed()`; (b) a new store ingests the second export and "
        "embeds every chunk; (c) a copy of the store merges the first export again.",
        "",
        "**Vectors** are made by `stratamem.testing.HashingEmbedder` (feature hashing, no "
        "model): the bundled MiniLM would take hours per full embed here. *Chunks embedded* "
        "(run through the model; *reused* = vector found under the same text) do not depend on "
        "the model. The MiniLM columns estimate the bundled model's time for those chunks from "
        f"its rate measured here: **{rate['chunks_per_s']} chunks/s** ({rate['chunks']} chunks "
        f"of the store, mean {rate['mean_chars']} characters, batches of 64, "
        f"{machine['cpus_used']} threads); model time only.",
        "",
    ]
    for size in result["sizes"]:
        lines += size_markdown(size)
    lines += NOTES
    profile = result["profile"]
    if profile:
        first = result["sizes"][0]
        lines += [
            f"## Profile of one merge ({first['base_store']['chunks']:,} chunks)",
            "",
            "cProfile of `mem.ingest(second, trees=False, parallel=False)` on a copy of the "
            f"store: {profile['seconds']} s under the profiler (read serially, so that the "
            "reading is in it). Top 10:",
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


NOTES = [
    "## Notes",
    "",
    "A merge reads, parses and keys every record of the export and compares its digest with "
    "the stored one: that is the no-change time, linear in the export. A chat edit then "
    "re-derives its whole segment (the windows between two silences over 30 minutes), so many "
    "more chunks are derived than are new; only the windows whose text or fields changed get "
    "new ids and are embedded.",
    "",
]


def size_markdown(size: dict[str, Any]) -> list[str]:
    ex, base, m = size["exports"], size["base_store"], size["medians"]
    ratios, repeat = size["ratios_full_over_merge"], size["repeat"]
    merge, full, same = m["merge"], m["full"], m["no change"]
    runs = f"median of {repeat} rounds" if repeat > 1 else "one round"
    lines = [
        f"## {base['chunks']:,} chunks ({ex['records_first']:,} messages), {runs}",
        "",
        f"First export {ex['records_first']:,} messages ({ex['mb_first']} MB) → "
        f"{base['chunks']:,} chunks; second export: {ex['records_edited']:,} edited + "
        f"{ex['records_new']:,} new = {ex['records_second']:,} messages "
        f"({ex['mb_second']} MB) → {merge['chunks']:,} chunks.",
        "",
        "| variant | ingest s | embed s (hashing) | chunks added | chunks removed | chunks "
        "embedded | reused | MiniLM embed s (est.) | ingest + MiniLM s (est.) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, row in (
        ("(a) merge the 1% change", merge),
        ("(b) full re-ingest, new store", full),
        ("(c) merge, nothing changed", same),
    ):
        lines.append(
            f"| {name} | {row['ingest_s']} | {row['embed_s']} | "
            f"{row['chunks_added']:,} | {row['chunks_removed']:,} | "
            f"{row['embedded']:,} | "
            f"{row['cached']:,} | {row['minilm_estimate_s']:,} | "
            f"{row['ingest_plus_minilm_s']:,} |"
        )
    pct = merge["embedded"] / merge["chunks"]
    batches = -(-merge["embedded"] // 64)
    per_batch = f"{merge['embed_s'] / batches:.2f}" if batches else "–"
    lines += [
        "",
        f"Full re-ingest ÷ merge: ingest **{ratios['ingest']}×**, chunks embedded "
        f"**{ratios['chunks_embedded']}×**, ingest + MiniLM embed (est.) "
        f"**{ratios['ingest_plus_minilm']}×**"
        + (
            f", ingest + hashing embed {ratios['total_hashing']}×."
            if "total_hashing" in ratios
            else "."
        )
        + f" The merge embeds {merge['embedded']:,} of {merge['chunks']:,} chunks ({pct:.1%}); "
        f"its `mem.indexes.embed()` took {merge['embed_s']} s, {per_batch} s per batch of 64"
        + ("; the merge's ingest is slower than a full one." if ratios["ingest"] < 1 else "."),
        "",
        f"Per-run ingest s: merge {merge['runs_ingest_s']}, full {full['runs_ingest_s']}, no "
        f"change {same['runs_ingest_s']}.",
    ]
    per_chunk = base["hashing_compute_s"] / base["vectors"]
    lines += [
        f"Per-run ingest + embed s: merge {merge['runs_total_s']}, full "
        f"{full['runs_total_s']}. The full re-ingest's `mem.indexes.embed()` took "
        f"{full['embed_s']} s "
        f"for {full['embedded']:,} chunks, of which computing the hashing vectors is about "
        f"{per_chunk * full['embedded']:.0f} s (their rate when building the base store); the "
        "rest is `embed`'s store work.",
    ]
    lines += [
        "",
        f"The store the merges start from (not timed above): ingest {base['ingest_s']} s; its "
        f"{base['vectors']:,} hashing vectors written directly in {base['vectors_s']} s, of "
        f"which {base['hashing_compute_s']} s computing them.",
        "",
        "Checks: "
        + "; ".join(f"{name}: {'yes' if ok else '**NO**'}" for name, ok in size["checks"].items())
        + ".",
        "",
    ]
    return lines


if __name__ == "__main__":
    main()
