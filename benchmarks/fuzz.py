"""The long fuzz run: many fuzzed inputs of every input kind through a real ingest.

Every case module that ``tests/fuzz/fuzz_driver.py`` finds (``cases_<name>.py``) makes
``--per-kind`` inputs (seeds 0, 1, 2, ...), each ingested into a fresh store and judged ok,
refused, uncaught, hang, partial or unplaced (see the driver). Each kind runs in its own child
process, ``--jobs`` at a time, and the child's peak resident memory is measured by the parent
(``wait4``). Inputs are written under a temporary folder (``/dev/shm`` where it exists, so the
store's fsyncs cost nothing) and removed as the run goes.

Writes ``benchmarks/results/fuzz.json`` and ``fuzz.md``; a run of some kinds (``--kinds``)
replaces those kinds' rows and keeps the others, each row with the command and date that
produced it. Every bad seed can be replayed alone::

    python benchmarks/fuzz.py [--per-kind 10000] [--kinds slack,discord,jsonl] [--jobs 2]
    python benchmarks/fuzz.py --replay slack:1234   # one input again, kept for a look
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FUZZ = ROOT / "tests" / "fuzz"
RESULTS = ROOT / "benchmarks" / "results"
STATUSES = ("ok", "refused", "uncaught", "hang", "partial", "unplaced")
KEPT_BAD_SEEDS = 5

sys.path[:0] = [str(FUZZ), str(FUZZ.parent)]  # the driver, and the suite's kit it imports
import fuzz_driver  # noqa: E402  (the driver lives beside the tests, not in the package)


def load_cases() -> tuple[list[ModuleType], list[tuple[str, str]]]:
    """The case modules the driver lists, each loaded on its own: one that fails to load is
    returned as ``(module name, error)`` instead of ending the run of the others."""
    found: list[ModuleType] = []
    broken: list[tuple[str, str]] = []
    for name in fuzz_driver.CASE_MODULES:
        file = FUZZ / f"{name}.py"
        if not file.exists():
            continue
        try:
            spec = importlib.util.spec_from_file_location(f"stratamem_fuzz_{name}", file)
            if spec is None or spec.loader is None:
                raise ImportError(f"{file} cannot be loaded")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        except Exception as exc:  # a broken case module is reported, the others still run
            broken.append((name, f"cannot be loaded: {type(exc).__name__}: {exc}"))
            continue
        found.append(module)
    return found, broken


def default_tmp() -> str:
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else tempfile.gettempdir()


def run_kind(name: str, first_seed: int, count: int, timeout_s: float, tmp: str) -> dict[str, Any]:
    """Run ``count`` inputs of one kind in this process; returns its counts."""
    [case] = [c for c in load_cases()[0] if name == c.NAME]
    counts = dict.fromkeys(STATUSES, 0)
    bad: list[dict[str, Any]] = []
    problems = chunks = 0
    slowest = (0.0, first_seed)
    started = time.perf_counter()
    base = Path(tempfile.mkdtemp(prefix=f"fuzz-{name}-", dir=tmp))
    try:
        for seed in range(first_seed, first_seed + count):
            work = base / str(seed)
            work.mkdir()
            try:
                outcome = fuzz_driver.run_case(case, seed, work, timeout_s=timeout_s)
            except Exception as exc:  # the case module itself failed to make an input
                outcome = fuzz_driver.Outcome(name, seed, "uncaught", f"make: {exc!r}")
            finally:
                shutil.rmtree(work, ignore_errors=True)
            counts[outcome.status] += 1
            problems += outcome.problems
            chunks += outcome.chunks
            slowest = max(slowest, (outcome.seconds, seed))
            if outcome.bad and len(bad) < KEPT_BAD_SEEDS:
                bad.append({"seed": seed, "status": outcome.status, "detail": outcome.detail})
            done = seed - first_seed + 1
            if done % 1000 == 0:
                print(f"{name}: {done:,}/{count:,}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return {
        "kind": name,
        "connector": case.CONNECTOR,
        "inputs": count,
        "first_seed": first_seed,
        **counts,
        "problems": problems,
        "chunks": chunks,
        "max_seconds": round(slowest[0], 3),
        "slowest_seed": slowest[1],
        "seconds": round(time.perf_counter() - started, 1),
        "bad_seeds": bad,
    }


def run_children(kinds: list[str], args: argparse.Namespace) -> list[dict[str, Any]]:
    """One child process per kind, ``args.jobs`` at a time; adds each child's peak RSS."""
    pending = list(kinds)
    running: dict[int, tuple[str, Path, subprocess.Popen[bytes]]] = {}
    done: list[dict[str, Any]] = []
    out_dir = Path(tempfile.mkdtemp(prefix="fuzz-results-"))
    try:
        while pending or running:
            while pending and len(running) < args.jobs:
                kind = pending.pop(0)
                out = out_dir / f"{kind}.json"
                command = [
                    sys.executable,
                    __file__,
                    "--child",
                    kind,
                    "--child-out",
                    str(out),
                    "--per-kind",
                    str(args.per_kind),
                    "--seed",
                    str(args.seed),
                    "--timeout",
                    str(args.timeout),
                    "--tmp",
                    args.tmp,
                ]
                child = subprocess.Popen(command)
                running[child.pid] = (kind, out, child)
            pid, status, usage = os.wait4(-1, 0)
            if pid not in running:
                continue
            kind, out, child = running.pop(pid)
            child.returncode = os.waitstatus_to_exitcode(status)
            if child.returncode != 0 or not out.exists():
                row: dict[str, Any] = {"kind": kind, "error": f"exit code {child.returncode}"}
            else:
                row = json.loads(out.read_text())
            row["peak_rss_mb"] = round(usage.ru_maxrss / 1024, 1)  # ru_maxrss is in KiB
            print(json.dumps(row), file=sys.stderr, flush=True)  # kept in the log whatever follows
            done.append(row)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    order = {kind: n for n, kind in enumerate(kinds)}
    return sorted(done, key=lambda row: order[row["kind"]])


def write_results(rows: list[dict[str, Any]], command: str, tmp: str) -> None:
    path = RESULTS / "fuzz.json"
    kept: list[dict[str, Any]] = []
    if path.exists():
        kept = [r for r in json.loads(path.read_text()).get("kinds", []) if "kind" in r]
    when = datetime.now(UTC).isoformat(timespec="seconds")
    fresh = {row["kind"]: {**row, "command": command, "date": when} for row in rows}
    order = [module.removeprefix("cases_") for module in fuzz_driver.CASE_MODULES]
    merged = {r["kind"]: r for r in kept} | fresh
    ordered = sorted(merged.values(), key=lambda r: ([*order, r["kind"]]).index(r["kind"]))
    result = {
        "machine": f"{os.cpu_count()} CPUs, Python {platform.python_version()}",
        "tmp": tmp,
        "kinds": ordered,
    }
    path.write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "fuzz.md").write_text(markdown(result))


def markdown(result: dict[str, Any]) -> str:
    head = ["kind", "inputs", "ok", "refused", "uncaught", "hangs", "partial", "unplaced"]
    head += ["problems reported", "max s/input", "peak RSS MB"]
    lines = [
        "# Fuzzing the connectors",
        "",
        "Fuzzed inputs, each mutated from the real-format fixtures in `tests/fixtures/`, ingested "
        "into a fresh store and judged by `tests/fuzz/fuzz_driver.py`: **ok** (read, every "
        "problem placed, store sound), **refused** (a clean `StratamemError`: the container "
        "itself cannot be read), or bad: **uncaught** (another exception escaped), **hang** "
        "(past the deadline), **partial** (store unsound afterwards), **unplaced** (a problem "
        "without a place). Peak RSS is the child process that ran the kind, Python included.",
        "",
        f"Machine: {result['machine']}; inputs written under `{result['tmp']}`.",
        "",
        "| " + " | ".join(head) + " |",
        "| --- | " + " | ".join("---:" for _ in head[1:]) + " |",
    ]
    for r in result["kinds"]:
        if "error" in r:
            lines.append(f"| {r['kind']} | failed: {r['error']} |" + " |" * (len(head) - 2))
            continue
        cells = [r["kind"], f"{r['inputs']:,}"]
        cells += [f"{r[s]:,}" for s in STATUSES]
        cells += [f"{r['problems']:,}", f"{r['max_seconds']:.2f}", f"{r['peak_rss_mb']:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Runs", ""]
    for r in result["kinds"]:
        if "error" in r:
            continue
        seeds = (
            f"seeds {r.get('first_seed', 0):,}–{r.get('first_seed', 0) + r.get('inputs', 0) - 1:,}"
        )
        lines.append(
            f"- {r['kind']}: `{r['command']}` on {r['date']} ({seeds}, "
            f"{r.get('seconds', 0):,.0f} s; slowest input: seed {r.get('slowest_seed')})"
        )
    bad = [(r["kind"], b) for r in result["kinds"] for b in r.get("bad_seeds", [])]
    lines += ["", "## Bad seeds", ""]
    if not bad:
        lines.append("None.")
    for kind, b in bad:
        replay = f"python benchmarks/fuzz.py --replay {kind}:{b['seed']}"
        lines.append(f"- {kind} seed {b['seed']}: {b['status']}: {b['detail']} (`{replay}`)")
    return "\n".join(lines) + "\n"


def replay(spec: str, timeout_s: float) -> None:
    """Make and ingest one input again; the input and its store are left for a look."""
    name, _, seed = spec.partition(":")
    cases = [c for c in load_cases()[0] if name == c.NAME]
    if not cases or not seed.isdigit():
        raise SystemExit(f"--replay takes KIND:SEED, such as slack:1234, not {spec!r}")
    work = Path(tempfile.mkdtemp(prefix=f"fuzz-replay-{name}-"))
    outcome = fuzz_driver.run_case(cases[0], int(seed), work, timeout_s=timeout_s)
    print(f"{outcome.status}: {outcome.detail or 'no detail'}")
    print(f"{outcome.problems} problems, {outcome.chunks} chunks, {outcome.seconds:.2f} s")
    print(f"input and store kept in {work}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-kind", type=int, default=10_000, help="inputs per kind")
    parser.add_argument("--kinds", help="comma-separated kinds (default: every case module)")
    parser.add_argument("--seed", type=int, default=0, help="the first seed")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="kinds at once")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds before a hang")
    parser.add_argument("--tmp", default=default_tmp(), help="where inputs are written")
    parser.add_argument("--replay", metavar="KIND:SEED", help="run one input and keep it")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        row = run_kind(args.child, args.seed, args.per_kind, args.timeout, args.tmp)
        Path(args.child_out).write_text(json.dumps(row))
        return
    if args.replay:
        replay(args.replay, args.timeout)
        return
    cases, broken = load_cases()
    known = [case.NAME for case in cases]
    kinds = args.kinds.split(",") if args.kinds else known
    unknown = sorted(set(kinds) - set(known))
    if unknown:
        raise SystemExit(f"unknown kinds {unknown}; known: {', '.join(known)}; {broken or ''}")
    rows = run_children(kinds, args)
    if not args.kinds:
        rows += [{"kind": name.removeprefix("cases_"), "error": error} for name, error in broken]
    command = "python benchmarks/fuzz.py " + shlex.join(sys.argv[1:])
    write_results(rows, command.strip(), args.tmp)
    for row in rows:
        if "error" in row:
            print(f"{row['kind']}: {row['error']}", flush=True)
            continue
        counts = ", ".join(f"{s} {row.get(s, 0):,}" for s in STATUSES)
        print(
            f"{row['kind']}: {row.get('inputs', 0):,} inputs: {counts}; "
            f"peak RSS {row['peak_rss_mb']:.0f} MB",
            flush=True,
        )
    if any(row.get(s) for row in rows for s in fuzz_driver.BAD) or any("error" in r for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
