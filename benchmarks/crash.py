"""Crash harness: SIGKILL the CLI at random moments, then check the store and that re-running
the same command converges to the result of an uninterrupted run.

Input: a generated JSON Lines chat log (``--lines`` lines, seeded, three channels, so three
sources). The commands run as real subprocesses on a temporary ``--db``, chained so each
starts from the state the previous one leaves: ``ingest --no-embed`` (into an empty store; it
seals the trees that are due), ``flush`` (seals the partial buffers), ``embed`` (chunk and summary
vectors), ``forget`` (one of the three sources). ``stratamem`` has no option to pick the
embedder, so ``embed`` runs the same CLI entry point from a launcher that binds the default
embedder name to the built-in ``hashing`` embedder; the bundled MiniLM takes 15-25 s for 49
chunks on a loaded 2-core machine, too slow for hundreds of runs.

For each command: one uninterrupted run from the "before" store gives the "after" store and
the duration T. Then, until ``--kills`` kills have landed while the command ran (at most three
times that many tries): copy the before store, start the command in its own process group,
SIGKILL the group at a moment drawn uniformly from [0, T) (a seeded RNG), and check

* ``PRAGMA integrity_check`` is ok, and the FTS index agrees with the chunks
  (``INSERT INTO chunks_fts(chunks_fts) VALUES('integrity-check')``);
* no in-between state. What is written in one transaction must be wholly before or wholly
  after, per source: the source row and its chunks (ingest writes each source in one
  transaction), and for ``forget`` everything of the source (row, chunks, vectors,
  summaries). What is committed in steps by design (a summary per transaction while
  sealing, a batch of vectors per transaction while embedding, which ``ingest`` does after
  its sources are written) must lie between: every
  id present before and after is present, and every id present is one of the before or
  after ids;
* then the same command is run again to its end, and the store must equal the after store.

Identity a rebuild must reproduce (the digest): sources (id, scope, kind); chunks (id,
source, seq, content hash, parent summary); summaries (id, tree, level, parent, children,
content hash, deleted, version); trees (id, source, root, max level, status); chunk and
summary vectors (node, model, dim, SHA-256 of the bytes); the entity index rows; jobs (key,
status). Left out: wall-clock fields (sealed_at, ingested_at, created/updated times, job
attempts and leases) and the settings' generation counter. Summary ids hash their children,
and the extractive summarizer is deterministic, so a resumed seal must land on the same ids.
A ``forget`` re-run after a kill that landed after its commit exits non-zero (the source is
gone); that is counted apart, and its store must still equal the after store.

    python benchmarks/crash.py [--kills 100] [--lines 4000] [--seed 7]

Writes ``benchmarks/results/crash.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from run_info import write_results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
STRATAMEM = Path(sys.executable).with_name("stratamem")
FORGET_SCOPE = "jsonl:chan1"

# The CLI's entry point, with the default embedder name bound to the hashing embedder.
EMBED_LAUNCHER = """
import sys
from stratamem.embed import registry
registry.register("minilm", lambda **options: registry.get_embedder("hashing", **options))
from stratamem.cli import main
main(sys.argv[1:], prog_name="stratamem")
"""

VOCABULARY = (
    "alpha beta gamma delta queue sqlite lease seal tree worker crash release deploy redis "
    "postgres review merge incident budget migration outage phoenix rollout schema index"
)
WORDS = VOCABULARY.split()
PEOPLE = ("alice", "bob", "carol", "dan")


@dataclass(slots=True)
class Tally:
    command: str
    argv: list[str]
    duration_s: float = 0.0
    kills: int = 0
    landed: int = 0
    finished_first: int = 0
    integrity_failures: int = 0
    fts_failures: int = 0
    in_between: int = 0
    non_converged: int = 0
    rerun_nonzero: int = 0
    rerun_nonzero_expected: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)


def write_jsonl(path: Path, lines: int, seed: int) -> None:
    rng = random.Random(seed)
    t = 1_700_000_000
    with path.open("w") as out:
        for i in range(lines):
            t += rng.randint(5, 600)
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 40)))
            row = {
                "id": i,
                "timestamp": t,
                "author": rng.choice(PEOPLE),
                "source": f"chan{i % 3}",
                "kind": "chat",
                "text": text,
            }
            out.write(json.dumps(row) + "\n")


def argv_for(command: str, db: Path, jsonl: Path) -> list[str]:
    if command == "ingest":  # its vectors are the next step's: `embed`
        return [str(STRATAMEM), "--db", str(db), "ingest", str(jsonl), "--no-embed", "--quiet"]
    if command == "flush":
        return [str(STRATAMEM), "--db", str(db), "flush", "--json"]
    if command == "embed":
        return [sys.executable, "-c", EMBED_LAUNCHER, "--db", str(db), "embed", "--quiet"]
    if command == "forget":
        return [str(STRATAMEM), "--db", str(db), "forget", FORGET_SCOPE, "--yes"]
    raise ValueError(f"unknown command {command!r}")


def shown(argv: list[str]) -> str:
    parts = ["<launcher>" if "\n" in a else a for a in argv]
    parts[0] = Path(parts[0]).name
    return " ".join(parts)


# -- looking at a store ------------------------------------------------------------------


def _rows(conn: sqlite3.Connection, sql: str) -> list[tuple[Any, ...]]:
    try:
        return sorted(tuple(r) for r in conn.execute(sql))
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []
        raise


def digest(db: Path) -> dict[str, Any]:
    """Everything a rebuild must reproduce (see the module docstring), as sorted rows."""
    if not db.exists():
        return {}
    conn = sqlite3.connect(db)
    conn.create_function("sha", 1, lambda b: hashlib.sha256(b).hexdigest()[:16])
    try:
        return {
            "sources": _rows(conn, "SELECT id, scope, kind FROM sources"),
            "chunks": _rows(
                conn,
                """SELECT c.id, c.source_id, c.seq, c.content_sha256, s.id FROM chunks c
                   LEFT JOIN summaries s ON s.rowid = c.parent_summary""",
            ),
            "summaries": _rows(
                conn,
                """SELECT id, tree_id, level, parent_id, child_ids, content_sha256, deleted,
                          version FROM summaries""",
            ),
            "trees": _rows(conn, "SELECT id, source_id, root_id, max_level, status FROM trees"),
            "vectors": _rows(conn, "SELECT node_id, model, dim, sha(vector) FROM embeddings"),
            "summary_vectors": _rows(
                conn, "SELECT summary_id, model, dim, sha(vector) FROM summary_vectors"
            ),
            "entities": _rows(conn, "SELECT entity_id, node_id, kind FROM entity_index"),
            "jobs": _rows(conn, "SELECT dedupe_key, status FROM jobs"),
        }
    finally:
        conn.close()


def per_source(d: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per source id: its row, chunk ids, vector ids, summary ids and summary vector ids."""
    out: dict[str, dict[str, Any]] = {}

    def slot(sid: str) -> dict[str, Any]:
        return out.setdefault(
            sid, {"row": None, "chunks": set(), "vectors": set(), "summaries": set()}
        )

    chunk_source = {}
    for sid, *rest in d.get("sources", []):
        slot(sid)["row"] = (sid, *rest)
    for cid, sid, *_ in d.get("chunks", []):
        slot(sid)["chunks"].add(cid)
        chunk_source[cid] = sid
    tree_source = {tid: sid for tid, sid, *_ in d.get("trees", [])}
    summary_source = {}
    for sid_, tid, *_ in d.get("summaries", []):
        src = tree_source.get(tid, "?")
        slot(src)["summaries"].add(sid_)
        summary_source[sid_] = src
    for node, *_ in d.get("vectors", []):
        slot(chunk_source.get(node, "?"))["vectors"].add(node)
    for node, *_ in d.get("summary_vectors", []):
        slot(summary_source.get(node, "?"))["vectors"].add(node)
    return out


def integrity(db: Path) -> tuple[bool, bool, str]:
    if not db.exists():
        return True, True, ""
    conn = sqlite3.connect(db)
    try:
        result = conn.execute("PRAGMA integrity_check").fetchall()
        ok = result == [("ok",)]
        try:
            conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES('integrity-check')")
            fts_ok, fts_msg = True, ""
        except sqlite3.OperationalError as exc:
            fts_ok, fts_msg = "no such table" in str(exc), str(exc)
        except sqlite3.DatabaseError as exc:
            fts_ok, fts_msg = False, str(exc)
        return ok, fts_ok, "" if ok else str(result[:3]) + fts_msg
    finally:
        conn.close()


# Which parts of a source are written in one transaction by each command (the rest is
# committed step by step and only has to lie between before and after).
ATOMIC: dict[str, tuple[str, ...]] = {
    "ingest": ("row", "chunks"),
    "flush": ("row", "chunks", "vectors"),
    "embed": ("row", "chunks", "summaries"),
    "forget": ("row", "chunks", "vectors", "summaries"),
}
STEPPED: dict[str, tuple[str, ...]] = {
    "ingest": ("summaries", "vectors"),
    "flush": ("summaries",),
    "embed": ("vectors",),
    "forget": (),
}


def in_between(command: str, before: Any, killed: Any, after: Any) -> list[str]:
    """How the killed store's sources lie strictly between before and after, if they do."""
    b, k, a = per_source(before), per_source(killed), per_source(after)
    empty: dict[str, Any] = {"row": None, "chunks": set(), "vectors": set(), "summaries": set()}
    found = []
    for sid in sorted({*b, *k, *a}):
        bs, ks, as_ = b.get(sid, empty), k.get(sid, empty), a.get(sid, empty)
        keys = ATOMIC[command]
        state = tuple(_frozen(ks[key]) for key in keys)
        if state not in (
            tuple(_frozen(bs[key]) for key in keys),
            tuple(_frozen(as_[key]) for key in keys),
        ):
            found.append(f"{sid}: {'/'.join(keys)} neither before nor after")
        for key in STEPPED[command]:
            if not (bs[key] & as_[key]) <= ks[key] <= (bs[key] | as_[key]):
                found.append(f"{sid}: {key} outside before..after")
    return found


def _frozen(value: Any) -> Any:
    return frozenset(value) if isinstance(value, set) else value


# -- running -----------------------------------------------------------------------------


def fresh_copy(template: Path | None, db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    if template is not None:
        shutil.copyfile(template, db)


def checkpoint(db: Path) -> None:
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def run_to_end(argv: list[str], timeout: float) -> tuple[int, float, str]:
    started = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    return proc.returncode, time.perf_counter() - started, proc.stderr[-400:]


def run_and_kill(argv: list[str], at_s: float) -> bool:
    """Start ``argv`` in its own process group and SIGKILL the group at ``at_s``; False when
    it finished first."""
    with subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    ) as proc:
        try:
            proc.wait(timeout=at_s)
            return False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return True


def trial(
    command: str,
    before_db: Path | None,
    work: Path,
    jsonl: Path,
    kills: int,
    rng: random.Random,
    log: Callable[[str], None],
) -> tuple[Tally, Path]:
    db = work / f"{command}.db"
    argv = argv_for(command, db, jsonl)
    tally = Tally(command, argv)
    started = time.perf_counter()
    before = digest(before_db) if before_db is not None else {}
    fresh_copy(before_db, db)
    code, tally.duration_s, err = run_to_end(argv, timeout=600)
    if code != 0:
        raise SystemExit(f"{command}: the uninterrupted run failed ({code}): {err}")
    checkpoint(db)
    after_db = work / f"{command}.after.db"
    shutil.copyfile(db, after_db)
    after = digest(after_db)
    if command != "forget" and after == before:
        raise SystemExit(f"{command}: the uninterrupted run changed nothing")
    # Until ``kills`` kills have landed mid-run: a kill drawn after the command's end (later
    # runs can be faster than the timed one) is checked all the same but not counted as one.
    n = -1
    while tally.landed < kills and tally.kills < 3 * kills:
        n += 1
        at = rng.uniform(0.0, tally.duration_s)
        fresh_copy(before_db, db)
        tally.kills += 1
        if run_and_kill(argv, at):
            tally.landed += 1
        else:
            tally.finished_first += 1
        ok, fts_ok, message = integrity(db)
        if not ok:
            tally.integrity_failures += 1
            tally.problems.append(f"kill {n} at {at:.3f}s: integrity: {message}")
        if not fts_ok:
            tally.fts_failures += 1
            tally.problems.append(f"kill {n} at {at:.3f}s: fts: {message}")
        killed = digest(db)
        between = in_between(command, before, killed, after)
        if between:
            tally.in_between += 1
            tally.problems.append(f"kill {n} at {at:.3f}s: {'; '.join(between[:3])}")
        code, _, err = run_to_end(argv, timeout=max(120.0, 20 * tally.duration_s))
        if code != 0:
            gone = command == "forget" and not any(
                r[1] == FORGET_SCOPE for r in killed.get("sources", [])
            )
            if gone:
                tally.rerun_nonzero_expected += 1
            else:
                tally.rerun_nonzero += 1
                tally.problems.append(f"kill {n} at {at:.3f}s: re-run exited {code}: {err}")
        final = digest(db)
        if final != after:
            tally.non_converged += 1
            diff = [k for k in after if final.get(k) != after[k]]
            tally.problems.append(f"kill {n} at {at:.3f}s: re-run differs in {diff}")
        if (n + 1) % 10 == 0:
            log(
                f"{command}: {n + 1} kills, {tally.landed}/{kills} landed, "
                f"{tally.integrity_failures + tally.fts_failures} integrity, "
                f"{tally.in_between} in-between, {tally.non_converged} non-converged"
            )
    tally.seconds = time.perf_counter() - started
    return tally, after_db


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Crash recovery: SIGKILL at random moments, then the same command again",
        "",
        f"`{result['command_line']}` on {result['date']}, {result['cpus']} CPUs (1-min load "
        f"average {result['load_average']} at the end), Python {result['python']}, "
        f"SQLite {result['sqlite']}.",
        "",
        f"Input: a generated JSON Lines chat log of {result['lines']:,} lines in three "
        f"channels (seed {result['seed']}): {result['chunks']:,} chunks. Commands chained on "
        "one temporary store: ingest `--no-embed` (empty store) → flush → embed → forget "
        f"`{FORGET_SCOPE}`. `embed` ran the CLI entry point with the default embedder name "
        "bound to the built-in `hashing` embedder (the CLI has no option to choose one; the "
        "bundled MiniLM is too slow here for hundreds of runs). Kill moments are drawn "
        "uniformly over the measured duration of one uninterrupted run (which includes the "
        "CLI's start-up); the whole process group gets SIGKILL.",
        "",
        "| command | uninterrupted run (s) | kills | landed mid-run | finished first "
        "| integrity failures | FTS failures | in-between states | re-run non-zero "
        "| non-converged re-runs |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for t in result["commands"]:
        nonzero = str(t["rerun_nonzero"])
        if t["rerun_nonzero_expected"]:
            nonzero += f" (+{t['rerun_nonzero_expected']} expected)"
        lines.append(
            f"| `{t['command']}` | {t['duration_s']:.2f} | {t['kills']} | {t['landed']} "
            f"| {t['finished_first']} | {t['integrity_failures']} | {t['fts_failures']} "
            f"| {t['in_between']} | {nonzero} | {t['non_converged']} |"
        )
    lines += [
        "",
        "Command lines (`--db` a temporary file): "
        + "; ".join(f"`{t['argv']}`" for t in result["commands"])
        + ".",
        "",
        "*In-between*: a source whose row and chunks (for `forget`: also its vectors and "
        "summaries) are neither as before nor as after the uninterrupted run, or a step-wise "
        "committed set (summaries while sealing, vectors while embedding) holding an id "
        "outside before ∪ after or missing one in before ∩ after. *Re-run non-zero, "
        "expected*: `forget` re-run after a kill that landed after its commit (the source is "
        "already gone). *Non-converged*: the store after the re-run differs from the "
        "uninterrupted run's in sources, chunk ids and parents, summary ids, levels, parents, "
        "children and text hashes, tree roots, vector bytes, entity rows or job states.",
    ]
    problems = [p for t in result["commands"] for p in t["problems"]]
    if problems:
        lines += ["", "## Problems seen", ""] + [f"- {p}" for p in problems[:50]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--kills", type=int, default=100, help="Kills that land mid-run, per command."
    )
    parser.add_argument("--lines", type=int, default=4000, help="Lines of generated JSONL.")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--commands", default="ingest,flush,embed,forget", help="Comma-separated, in order."
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    commands = args.commands.split(",")
    rng = random.Random(args.seed)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    tallies: list[Tally] = []
    with tempfile.TemporaryDirectory(prefix="stratamem-crash-") as tmp:
        work = Path(tmp)
        jsonl = work / "chat.jsonl"
        write_jsonl(jsonl, args.lines, args.seed)
        before_db: Path | None = None
        chunks = 0
        for command in ("ingest", "flush", "embed", "forget"):
            if command not in commands:
                # Still build the state the next command starts from, uninterrupted.
                db = work / f"{command}.db"
                fresh_copy(before_db, db)
                code, _, err = run_to_end(argv_for(command, db, jsonl), timeout=600)
                if code != 0:
                    raise SystemExit(f"{command} failed: {err}")
                checkpoint(db)
                before_db = work / f"{command}.after.db"
                shutil.copyfile(db, before_db)
                continue
            tally, before_db = trial(command, before_db, work, jsonl, args.kills, rng, log)
            tallies.append(tally)
            log(f"{command}: done in {tally.seconds:.0f}s")
            if command == "ingest":
                chunks = len(digest(before_db).get("chunks", []))
        if not chunks:
            chunks = len(digest(work / "ingest.after.db").get("chunks", []))
    result = {
        "command_line": "python benchmarks/crash.py " + " ".join(sys.argv[1:]),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "load_average": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "lines": args.lines,
        "seed": args.seed,
        "chunks": chunks,
        "embedder": "hashing (default embedder name bound to it in a launcher)",
        "commands": [
            {
                "command": t.command,
                "argv": shown(t.argv),
                "duration_s": round(t.duration_s, 3),
                "kills": t.kills,
                "landed": t.landed,
                "finished_first": t.finished_first,
                "integrity_failures": t.integrity_failures,
                "fts_failures": t.fts_failures,
                "in_between": t.in_between,
                "rerun_nonzero": t.rerun_nonzero,
                "rerun_nonzero_expected": t.rerun_nonzero_expected,
                "non_converged": t.non_converged,
                "seconds": round(t.seconds, 1),
                "problems": t.problems,
            }
            for t in tallies
        ],
    }
    write_results(args.out, "crash", result, markdown(result))


if __name__ == "__main__":
    main()
