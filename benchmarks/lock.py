"""Locking and unlocking a 10k-chunk source of real text: how long each takes, and how long a
store takes to open with the source unlocked in memory.

The store holds two sources of real text from ``../shared/data`` (the benchmark stops with a
message where it is absent): the locked one, BEIR SciFact's 5,183 abstracts written as JSON
Lines documents (``id``, ``title``, ``text``, ``kind: "document"``, source ``scifact``),
chunked with a target of 700 characters (:data:`CHUNKING`; the default 800 gives 9.2k chunks)
into about 10.8k chunks, and the til Markdown notes (1,873 notes), which
stay unlocked so that the scrub rewrites a store that is more than the locked source. Every
chunk has a vector from :class:`stratamem.testing.HashingEmbedder` (feature hashing, no model:
vectors are sealed as bytes whatever model made them, so their size, 384 float32s a chunk, is
what matters) and the summary trees are sealed (extractive summaries), so a lock seals chunks,
full-text rows, records, entities and edges, vectors, summaries and their vectors.

Measured on a fresh copy of that store, ``--repeat`` rounds, reporting the median:

a. **lock**: ``Memory.locks.lock`` with the default key derivation (scrypt n=2^17, r=8, p=1): the
   key, the seal transaction (read, serialise, compress, encrypt and verify every part, delete
   the plaintext), the scrub (full-text optimize, VACUUM, WAL truncation) and the index files
   rewritten;
b. **open unlocked**: ``stratamem.open(db, unlock={...})`` (the file copied into memory, the
   source restored there) and a first keyword search that finds it;
c. **unlock**: ``Memory.locks.unlock``, which restores every row in one transaction;

and, once, the key derivation alone. Each round checks that the unlock gives back the
source's chunks, summaries and vectors.

    python benchmarks/lock.py [--repeat 3]

Writes ``benchmarks/results/lock.json`` and ``lock.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import tempfile
import time
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import stratamem
from run_info import git_state, machine
from stratamem.access.crypto import DEFAULT_KDF, SourceKey
from stratamem.ingest.chunking import ChunkingConfig
from stratamem.testing import HashingEmbedder

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DATA = ROOT.parent / "shared" / "data"
SCIFACT = DATA / "scifact" / "corpus.jsonl"
NOTES = DATA / "notes" / "til"
LOCKED = "jsonl:scifact"
CHUNKING = ChunkingConfig(doc_target=700, doc_min=175, doc_max=1050)
PASSPHRASE = "a benchmark passphrase"


def build(folder: Path) -> Path:
    """The store both sources are ingested into, embedded and summarised; closed."""
    export = folder / "scifact.jsonl"
    with SCIFACT.open() as src, export.open("w") as out:
        for line in src:
            doc = json.loads(line)
            out.write(
                json.dumps(
                    {
                        "id": doc["_id"],
                        "title": doc["title"],
                        "text": doc["text"],
                        "kind": "document",
                        "source": "scifact",
                    }
                )
                + "\n"
            )
    db = folder / "base.db"
    with stratamem.open(db, embedder=HashingEmbedder()) as mem:
        mem.ingest(export, trees=False, chunking=CHUNKING)
        mem.ingest(NOTES, trees=False)
        mem.indexes.embed()
        mem.trees.build()
        mem.trees.flush()
    return db


def counts(db: Path) -> dict[str, int]:
    """What the locked source holds, and what the file weighs."""
    with closing(sqlite3.connect(db)) as conn:
        (sid,) = conn.execute("SELECT id FROM sources WHERE scope = ?", (LOCKED,)).fetchone()

        def one(sql: str) -> int:
            return int(conn.execute(sql, (sid,)).fetchone()[0])

        return {
            "chunks": one("SELECT count(*) FROM chunks WHERE source_id = ?"),
            "chunk_text_bytes": one(
                "SELECT coalesce(sum(length(CAST(content AS BLOB))), 0) FROM chunks "
                "WHERE source_id = ?"
            ),
            "vectors": one("SELECT count(*) FROM embeddings WHERE source_id = ?"),
            "summaries": one("SELECT count(*) FROM summaries WHERE source_id = ?"),
            "entity_rows": one("SELECT count(*) FROM entity_index WHERE source_id = ?"),
            "other_chunks": one("SELECT count(*) FROM chunks WHERE source_id != ?"),
            "file_bytes": db.stat().st_size,
        }


def sealed(db: Path) -> dict[str, int]:
    with closing(sqlite3.connect(db)) as conn:
        parts, size = conn.execute("SELECT count(*), sum(length(data)) FROM sealed").fetchone()
    return {"parts": int(parts), "sealed_bytes": int(size), "file_bytes": db.stat().st_size}


def copy_store(base: Path, target: Path) -> None:
    for file in target.parent.glob(f"{target.name}*"):
        file.unlink()
    shutil.copyfile(base, target)


def one_round(base: Path, work: Path, expected: dict[str, int]) -> dict[str, Any]:
    copy_store(base, work)
    out: dict[str, Any] = {}
    with stratamem.open(work, embedder=HashingEmbedder()) as mem:
        started = time.perf_counter()
        report = mem.locks.lock(LOCKED, passphrase=PASSPHRASE)
        out["lock_s"] = time.perf_counter() - started
        if report.chunks != expected["chunks"]:
            raise SystemExit(f"locked {report.chunks} chunks, expected {expected['chunks']}")
    out.update(sealed(work))
    started = time.perf_counter()
    with stratamem.open(work, embedder=HashingEmbedder(), unlock={LOCKED: PASSPHRASE}) as mem:
        hits = mem.search("diffusion tensor imaging white matter", mode="keyword").hits
        out["open_unlocked_s"] = time.perf_counter() - started
        if not any(h.tree_scope == LOCKED for h in hits):
            raise SystemExit("the store opened unlocked does not find the source")
    with stratamem.open(work, embedder=HashingEmbedder()) as mem:
        started = time.perf_counter()
        mem.locks.unlock(LOCKED, passphrase=PASSPHRASE)
        out["unlock_s"] = time.perf_counter() - started
    after = counts(work)
    for key in ("chunks", "vectors", "summaries", "entity_rows", "chunk_text_bytes"):
        if after[key] != expected[key]:
            raise SystemExit(f"after the unlock: {key} {after[key]}, expected {expected[key]}")
    return out


def kdf_seconds() -> float:
    started = time.perf_counter()
    SourceKey.create(PASSPHRASE, store_id="bench", source_id="bench")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="rounds (the median is reported)")
    args = parser.parse_args()
    if not SCIFACT.is_file() or not NOTES.is_dir():
        raise SystemExit(f"{DATA} is not present (needs scifact/ and notes/til/): skipped")
    load_start = os.getloadavg()
    git = git_state()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        build_started = time.perf_counter()
        base = build(folder)
        build_s = time.perf_counter() - build_started
        store = counts(base)
        print("store:", store, f"built in {build_s:.0f} s")
        rounds = []
        for n in range(args.repeat):
            rounds.append(one_round(base, folder / "work.db", store))
            print(f"round {n + 1}:", {k: round(v, 3) for k, v in rounds[-1].items()})
    load_end = os.getloadavg()
    medians = {
        key: statistics.median(r[key] for r in rounds)
        for key in ("lock_s", "open_unlocked_s", "unlock_s")
    }
    result = {
        "benchmark": "lock and unlock a 10k-chunk source of real text",
        "command": f"python benchmarks/lock.py --repeat {args.repeat}",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start, load_end),
        "sqlite": sqlite3.sqlite_version,
        "wall_s": round(time.perf_counter() - started),
        "git": git,
        "vectors": f"stratamem.testing.HashingEmbedder ({HashingEmbedder().spec.signature})",
        "kdf": {"name": "scrypt", "n": DEFAULT_KDF.n, "r": DEFAULT_KDF.r, "p": DEFAULT_KDF.p},
        "kdf_s": kdf_seconds(),
        "build_s": build_s,
        "store": store,
        "rounds": rounds,
        "median": medians,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "lock.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "lock.md").write_text(markdown(result))
    print(f"wrote {RESULTS}/lock.md in {result['wall_s']} s")


def markdown(result: dict[str, Any]) -> str:
    machine, store, median = result["machine"], result["store"], result["median"]
    first = result["rounds"][0]
    kdf = result["kdf"]

    def spread(key: str) -> str:
        values = [r[key] for r in result["rounds"]]
        return f"{min(values):.2f}-{max(values):.2f}"

    lines = [
        "# Locking and unlocking a 10k-chunk source of real text",
        "",
        f"`{result['command']}` on {result['date']}, {machine['cpus_used']} of "
        f"{machine['cpus']} CPUs, Python {machine['python']}, SQLite {result['sqlite']}; "
        f"1-minute load average {machine['load_start'][0]} at the start and "
        f"{machine['load_end'][0]} at the end (the machine is shared); "
        f"{result['wall_s'] / 60:.0f} minutes in all. Code: {result['git']['head'][:12]}"
        + (" with uncommitted changes under `src/`." if result["git"]["modified"] else "."),
        "",
        "**Store**: BEIR SciFact's 5,183 abstracts as JSONL documents (source "
        f"`{LOCKED}`, the one locked), chunked with a 700-character target: "
        f"{store['chunks']:,} chunks "
        f"({store['chunk_text_bytes'] / 1e6:.1f} MB of text), {store['vectors']:,} vectors, "
        f"{store['summaries']:,} summaries, {store['entity_rows']:,} entity mentions; beside "
        f"it the til Markdown notes, {store['other_chunks']:,} chunks, which stay unlocked. "
        f"The file: {store['file_bytes'] / 1e6:.1f} MB. Built (ingest, embed, trees) in "
        f"{result['build_s']:.0f} s, not timed below.",
        "",
        f"**Vectors** are made by `{result['vectors']}` (feature hashing, no model): a lock "
        "seals vectors as bytes whatever model made them, and these have the bundled model's "
        "size (384 float32s).",
        "",
        f"**Key**: scrypt n=2^{kdf['n'].bit_length() - 1}, r={kdf['r']}, p={kdf['p']} (the "
        f"default), {result['kdf_s']:.2f} s to derive, paid once by each lock, unlock and "
        "open. Every part is AES-256-GCM.",
        "",
        f"## Median of {len(result['rounds'])} rounds, each on a fresh copy of the store",
        "",
        "| step | median s | range s |",
        "| --- | ---: | ---: |",
        f"| lock (`Memory.locks.lock`: key, seal transaction, scrub, index files) | "
        f"{median['lock_s']:.2f} | {spread('lock_s')} |",
        f"| open with the source unlocked in memory, and a first keyword search | "
        f"{median['open_unlocked_s']:.2f} | {spread('open_unlocked_s')} |",
        f"| unlock (`Memory.locks.unlock`: key, restore transaction) | {median['unlock_s']:.2f} | "
        f"{spread('unlock_s')} |",
        "",
        f"Sealed: {first['parts']} part(s), {first['sealed_bytes'] / 1e6:.1f} MB "
        f"(compressed JSON lines, then encrypted); the file after the lock and its scrub: "
        f"{first['file_bytes'] / 1e6:.1f} MB, against {store['file_bytes'] / 1e6:.1f} MB "
        "before. Every round checked that the unlock gave back the source's chunks (and their "
        "text), vectors, summaries and entity mentions.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
