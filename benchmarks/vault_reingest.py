"""Re-ingesting a notes vault after a small edit: chunks written, removed and embedded, and
the wall time, for this checkout against an earlier commit.

The vault is the first ``--notes`` Markdown notes (sorted by path) of the real notes
collection in ``../shared/data/notes/til``, copied with their folders and their
``_file_added_dates.tsv``. Each variant ingests its own copy and embeds it with the bundled
model (not timed), then the copy is edited as a person would: a note a quarter of the way
through the vault deleted, a line added at the top of the note a third of the way (every
line below it moves), a paragraph appended to the note two thirds of the way. The variant
ingests the vault again and embeds what is new (timed together, as ``stratamem ingest``
does by default).

The baseline is a ``git worktree`` of ``--baseline`` (a commit), imported by a child process
whose ``PYTHONPATH`` puts its ``src`` first; every phase runs in its own child, the variants
interleaved (setup A, setup B, re-ingest A, re-ingest B), on this shared 2-core machine.

    python benchmarks/vault_reingest.py --baseline dd7cbd4
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIL = ROOT.parent / "shared" / "data" / "notes" / "til"
RESULTS = ROOT / "benchmarks" / "results"

CHILD = r"""
import json, sys, time
import stratamem
phase, db, vault = sys.argv[1:4]
mem = stratamem.open(db)
started = time.perf_counter()
report = mem.ingest(vault)
ingested = time.perf_counter() - started
embedded = mem.indexes.embed()
total = time.perf_counter() - started
source = report.sources[0]
print(json.dumps({
    "phase": phase,
    "chunks": source.chunks,
    "added": source.added,
    "removed": source.removed,
    "unchanged": source.chunks - source.added,
    "summaries_sealed": report.trees.summaries if report.trees else 0,
    "embedded": embedded.embedded,
    "embed_cache": embedded.cached,
    "ingest_s": round(ingested, 2),
    "ingest_and_embed_s": round(total, 2),
}))
"""


def copy_vault(target: Path, notes: int) -> list[Path]:
    files = sorted(p for p in TIL.rglob("*.md") if not p.name.startswith(("README", "CONTRIB")))
    chosen = files[:notes]
    for note in chosen:
        into = target / note.relative_to(TIL)
        into.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(note, into)
    shutil.copyfile(TIL / "_file_added_dates.tsv", target / "_file_added_dates.tsv")
    return [target / note.relative_to(TIL) for note in chosen]


def edit(files: list[Path]) -> dict[str, str]:
    gone, top, end = files[len(files) // 4], files[len(files) // 3], files[2 * len(files) // 3]
    top.write_text("Updated: see the newer note.\n\n" + top.read_text(encoding="utf-8"))
    end.write_text(end.read_text(encoding="utf-8") + "\n\nOne more thing learned since.\n")
    gone.unlink()
    return {"edited_top": top.name, "edited_end": end.name, "deleted": gone.name}


def run_child(src: Path, phase: str, db: Path, vault: Path) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=str(src))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, phase, str(db), str(vault)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notes", type=int, default=537)
    parser.add_argument("--baseline", default="dd7cbd4", help="the commit to compare with")
    args = parser.parse_args()
    if not TIL.is_dir():
        sys.exit(f"{TIL} is absent")
    work = Path(tempfile.mkdtemp(prefix="vault-reingest-"))
    worktree = work / "baseline"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(worktree), args.baseline],
        check=True,
    )
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    variants = {
        f"baseline {args.baseline}": worktree / "src",
        f"this checkout ({head})": ROOT / "src",
    }
    try:
        files: dict[str, list[Path]] = {}
        out: dict[str, dict[str, object]] = {}
        for n, (name, src) in enumerate(variants.items()):
            vault = work / f"vault-{n}"
            files[name] = copy_vault(vault, args.notes)
            out[name] = {"setup": run_child(src, "setup", work / f"{n}.db", vault)}
        edits = {}
        for name in variants:
            edits = edit(files[name])
        for n, (name, src) in enumerate(variants.items()):
            started = time.perf_counter()
            out[name]["reingest"] = run_child(
                src, "reingest", work / f"{n}.db", work / f"vault-{n}"
            )
            out[name]["reingest"]["child_wall_s"] = round(time.perf_counter() - started, 2)
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)], check=False
        )
        shutil.rmtree(work, ignore_errors=True)
    result = {"notes": args.notes, "edits": edits, "variants": out}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "vault_reingest.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
