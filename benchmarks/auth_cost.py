"""What a flood of made-up bearer tokens costs a caller with a good one, before and after the
token checks moved off the reader threads and were limited per address.

A store of ``examples/workspace`` (keyword search only, no embedder) with one principal is
served twice at once: by the base commit's code (``--base``, checked out in a throwaway
worktree) and by this checkout's, each in a process of its own (``create_app`` on uvicorn,
tokens required, real scrypt tokens). For each of ``--rounds`` rounds, the two in turn (the
order alternating): one client makes ``--quiet`` keyword searches with its good token one after
another; then ``--clients`` clients each send ``--bogus`` requests with made-up tokens one
after another, while the good client goes on searching until they are done. Every request
comes from 127.0.0.1, so the flood and the good client share an address.

    python benchmarks/auth_cost.py [--base 67d129d] [--rounds 3]

Writes ``benchmarks/results/auth_cost.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from ab_servers import ROOT, Served, base_checkout, percentile, serving
from run_info import git_state, machine

RESULTS = ROOT / "benchmarks" / "results"
EXAMPLES = ROOT / "examples" / "workspace"
QUERIES = ["redis maxmemory", "deploy rollback", "postgres migration", "on-call handover"]


def build(path: Path) -> str:
    """The store; returns the principal's token."""
    sys.path.insert(0, str(ROOT / "src"))
    import stratamem

    with stratamem.open(path, embedder=None) as memory:
        for part in sorted(EXAMPLES.iterdir()):
            memory.ingest(part)
        for source in memory.sources.list():
            memory.sources.set_access(source.id, scopes="team")
        return memory.principals.add("reader", ["team"])


async def search(client: httpx.AsyncClient, token: str, n: int) -> tuple[float, int]:
    started = time.perf_counter()
    answer = await client.post(
        "/v1/search",
        json={"query": QUERIES[n % len(QUERIES)], "mode": "keyword", "limit": 10},
        headers={"Authorization": f"Bearer {token}"},
    )
    return (time.perf_counter() - started) * 1000, answer.status_code


async def phase(
    server: Served, token: str, *, quiet: int, clients: int, bogus: int
) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
        await search(client, token, 0)  # the token checked once, and remembered
        alone = [(await search(client, token, n))[0] for n in range(quiet)]
        statuses: collections.Counter[int] = collections.Counter()
        done = asyncio.Event()

        async def flooder(k: int) -> None:
            async with httpx.AsyncClient(base_url=server.url, timeout=600) as own:
                for n in range(bogus):
                    fake = f"stm_{k:06x}{n:06x}_{os.urandom(16).hex()}"
                    answer = await own.get(
                        "/v1/sources", headers={"Authorization": f"Bearer {fake}"}
                    )
                    statuses[answer.status_code] += 1

        async def good() -> list[float]:
            found: list[float] = []
            n = 0
            while not done.is_set():
                took, status = await search(client, token, n)
                assert status == 200, status
                found.append(took)
                n += 1
            return found

        started = time.perf_counter()
        reader = asyncio.create_task(good())
        await asyncio.gather(*(flooder(k) for k in range(clients)))
        flood_s = time.perf_counter() - started
        done.set()
        during = await reader
    return {
        "server": server.name,
        "alone_ms": alone,
        "during_ms": during,
        "flood_s": flood_s,
        "statuses": dict(statuses),
    }


def summary(runs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    mine = [r for r in runs if r["server"] == name]
    alone = [x for r in mine for x in r["alone_ms"]]
    during = [x for r in mine for x in r["during_ms"]]
    statuses: collections.Counter[str] = collections.Counter()
    for r in mine:
        statuses.update({str(k): v for k, v in r["statuses"].items()})
    return {
        "alone_p50": percentile(alone, 50),
        "alone_p95": percentile(alone, 95),
        "during_p50": percentile(during, 50),
        "during_p95": percentile(during, 95),
        "during_max": max(during),
        "reads_during": len(during),
        "flood_s": [round(r["flood_s"], 2) for r in mine],
        "reads_per_s_during": len(during) / sum(r["flood_s"] for r in mine),
        "statuses": dict(statuses),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="67d129d")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quiet", type=int, default=100)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--bogus", type=int, default=8)
    args = parser.parse_args()
    load_start = os.getloadavg()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder, base_checkout(args.base) as base_src:
        stores = {name: Path(folder) / f"{name}.db" for name in ("before", "after")}
        token = build(stores["before"])
        for suffix in ("", "-wal", "-shm"):
            source = Path(str(stores["before"]) + suffix)
            if source.exists():
                Path(str(stores["after"]) + suffix).write_bytes(source.read_bytes())
        with (
            serving("before", base_src, stores["before"]) as before,
            serving("after", ROOT / "src", stores["after"]) as after,
        ):
            for n in range(args.rounds):
                for server in (before, after) if n % 2 == 0 else (after, before):
                    found = asyncio.run(
                        phase(
                            server, token, quiet=args.quiet, clients=args.clients, bogus=args.bogus
                        )
                    )
                    print(
                        f"round {n + 1} {server.name}: flood {found['flood_s']:.1f}s "
                        f"{found['statuses']}, {len(found['during_ms'])} reads during",
                        flush=True,
                    )
                    runs.append(found)
    result = {
        "command": " ".join(["python", "benchmarks/auth_cost.py", *sys.argv[1:]]),
        "base": args.base,
        "machine": machine(load_start, os.getloadavg()),
        "git": git_state(),
        "settings": vars(args),
        "before": summary(runs, "before"),
        "after": summary(runs, "after"),
        "runs": runs,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "auth_cost.json").write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / "auth_cost.md").write_text(report(result))
    print(report(result))


def report(result: dict[str, Any]) -> str:
    m, s = result["machine"], result["settings"]
    b, a = result["before"], result["after"]
    rows = []
    for label, key in (("p50 alone", "alone_p50"), ("p95 alone", "alone_p95")):
        rows.append((label, b[key], a[key]))
    for label, key in (
        ("p50 during the flood", "during_p50"),
        ("p95 during the flood", "during_p95"),
    ):
        rows.append((label, b[key], a[key]))
    rows.append(("max during the flood", b["during_max"], a["during_max"]))
    lines = [
        "# A flood of made-up tokens against a caller with a good one",
        "",
        f"`{result['command']}`, {m['cpus_used']} of {m['cpus']} CPUs, Python {m['python']}, "
        f"load {m['load_start']} → {m['load_end']}; commit {result['git']['head'][:12]}"
        f"{' (modified)' if result['git']['modified'] else ''} against {result['base']}.",
        "",
        f"The same store (examples/workspace, keyword search) served by both versions at once, "
        f"tokens required. Each of {s['rounds']} rounds, each server in turn: a good token's "
        f"keyword searches alone ({s['quiet']}), then while {s['clients']} clients each send "
        f"{s['bogus']} made-up tokens back to back. All from 127.0.0.1.",
        "",
        "| good reads, ms | before | after | after / before |",
        "| --- | ---: | ---: | ---: |",
    ]
    for label, before, after in rows:
        lines.append(f"| {label} | {before:.1f} | {after:.1f} | {after / before:.2f} |")
    lines += [
        "",
        "| | before | after |",
        "| --- | --- | --- |",
        f"| p50 during / p50 alone | {b['during_p50'] / b['alone_p50']:.2f} | "
        f"{a['during_p50'] / a['alone_p50']:.2f} |",
        f"| p95 during / p95 alone | {b['during_p95'] / b['alone_p95']:.2f} | "
        f"{a['during_p95'] / a['alone_p95']:.2f} |",
        f"| flood seconds, by round | {b['flood_s']} | {a['flood_s']} |",
        f"| made-up tokens answered (status: count) | {b['statuses']} | {a['statuses']} |",
        f"| good reads during the floods | {b['reads_during']} | {a['reads_during']} |",
        f"| good reads per second during the floods | {b['reads_per_s_during']:.2f} | "
        f"{a['reads_per_s_during']:.2f} |",
        "",
        "Before, every made-up token costs one scrypt on the reader threads, so the good reads "
        "queue behind them. After, the hashes run on two threads of their own and an address "
        "that failed 10 times within a minute is answered 429 before any hashing (the good "
        "token, already known, is answered without one). The p50 during the flood counts the "
        "reads that got through: before, a few slip between the hashes and most wait seconds "
        "(the p95, the max, the reads per second); after, the flood is over in seconds and "
        "what slows the good reads is the 429 answers and the flooding clients sharing the "
        "machine's two cores (under the load the header gives, from other work).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
