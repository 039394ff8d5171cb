"""An agent's writes over the doors: ``add`` until hybrid search finds the item, over HTTP and
over MCP, and ``add_messages`` throughput — with the same calls in Python as the reference.

The store is the one ``benchmarks/add_latency.py`` builds (the ``til`` notes of
``../shared/data``, about 2,600 chunks, embedded with the bundled MiniLM; kept at ``--keep``
and copied for each run, so that the kept store never changes). A server runs in a process
of its own (``create_app`` on uvicorn, loopback, writes allowed, no tokens: the owner) over
the copy. Then, ``--n`` times, in turn for each door (interleaved, so that the shared
machine's noise falls on all of them alike):

    t0; add(text) → item id and chunk id; search(query, mode=hybrid, limit=10); t1

and the item's chunk must be among the hits (a miss is counted). Python runs the same two
calls through the operation table in this process, on its own copy. Items and queries are
``add_latency.make_items``: a distinct sentence each, found by five of its words in another
order.

``add_messages``: ``--batches`` calls of ``--turns`` chat turns each (one session per call)
over HTTP, MCP and Python, interleaved; turns written per second.

    python benchmarks/agent_writes.py [--n 200] [--keep /tmp/agent_writes_base.db]

Writes ``benchmarks/results/agent_writes.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

import stratamem
from add_latency import build_store, make_items, summary
from run_info import CPUS, git_state, machine
from stratamem.ops import MemoryContext, call

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SERVER = """
import sys, uvicorn
from stratamem.server.http import create_app
from stratamem.server.service import Service
service = Service(sys.argv[1], allow_writes=True)
service.warm()
uvicorn.run(create_app(service, tokens_required=False), host="127.0.0.1",
            port=int(sys.argv[2]), log_level="warning")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(path: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(path), str(port)])
    url = f"http://127.0.0.1:{port}"
    for _ in range(1200):
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.25)
    proc.kill()
    raise RuntimeError("the server did not start")


def messages(batch: int, turns: int) -> list[dict[str, str]]:
    return [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"turn {i} of batch {batch}: the deploy of service {batch * 7 + i} "
            f"moved to {('monday', 'tuesday', 'friday')[i % 3]}",
        }
        for i in range(turns)
    ]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    keep = Path(args.keep)
    built = build_store(keep)
    work = Path(tempfile.mkdtemp(prefix="agent-writes-"))
    served, local = work / "served.db", work / "local.db"
    for target in (served, local):
        shutil.copy(keep, target)
    items = make_items(args.n * 3 + 3, seed=7)
    load_start = os.getloadavg()
    proc, url = start_server(served)
    doors: dict[str, list[float]] = {"python": [], "http": [], "mcp": []}
    misses = dict.fromkeys(doors, 0)
    memory = stratamem.open(local)
    context = MemoryContext(memory)
    try:
        async with (
            httpx.AsyncClient(base_url=url, timeout=120) as client,
            httpx2.AsyncClient(timeout=120) as mcp_http,
            streamable_http_client(f"{url}/mcp", http_client=mcp_http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()

            async def over_http(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
                response = await client.post(f"/v1/{name}", json=arguments)
                response.raise_for_status()
                found: dict[str, Any] = response.json()
                return found

            async def over_mcp(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
                result = await session.call_tool(name, arguments)
                if result.is_error:
                    raise RuntimeError(str(result.content))
                found: dict[str, Any] = result.structured_content or {}
                return found

            async def in_python(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
                return call(context, name, arguments)

            callers = {"python": in_python, "http": over_http, "mcp": over_mcp}
            # Warm-up: one add and search on each door, not counted.
            for caller in callers.values():
                warm = items.pop()
                await caller("add", {"text": warm.text})
                await caller("search", {"query": warm.query, "limit": 10})
            for n in range(args.n):
                for name, caller in callers.items():
                    item = items.pop()
                    started = time.perf_counter()
                    added = await caller("add", {"text": item.text})
                    found = await caller("search", {"query": item.query, "limit": 10})
                    doors[name].append((time.perf_counter() - started) * 1000)
                    chunk = added["chunks_added"][0]
                    if chunk not in {h["node_id"] for h in found["hits"]}:
                        misses[name] += 1
                if n % 50 == 49:
                    print(f"{n + 1} adds per door", file=sys.stderr)
            throughput: dict[str, dict[str, float]] = {}
            if args.batches:
                spent = dict.fromkeys(callers, 0.0)
                written = dict.fromkeys(callers, 0)
                for batch in range(args.batches):
                    for name, caller in callers.items():
                        turns = messages(batch, args.turns)
                        started = time.perf_counter()
                        done = await caller(
                            "add_messages",
                            {"messages": turns, "user": "bench", "session": f"{name}-{batch}"},
                        )
                        spent[name] += time.perf_counter() - started
                        written[name] += int(done.get("added", 0))
                throughput = {
                    name: {
                        "turns": written[name],
                        "seconds": round(spent[name], 2),
                        "turns_per_s": round(written[name] / spent[name], 1),
                    }
                    for name in callers
                }
    finally:
        memory.close()
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(work, ignore_errors=True)
    return {
        "n": args.n,
        "store": built,
        "add_then_found_ms": {name: summary(v) for name, v in doors.items()},
        "misses": misses,
        "add_messages": throughput,
        "turns_per_batch": args.turns,
        "batches": args.batches,
        "machine": machine(load_start, os.getloadavg()),
        "cpus": CPUS,
        "git": git_state(),
    }


def markdown(result: dict[str, Any]) -> str:
    python = result["add_then_found_ms"]["python"]
    lines = [
        "# An agent's writes over the doors",
        "",
        f"`python benchmarks/agent_writes.py --n {result['n']}` at "
        f"{result['git']['head'][:7]}, {result['cpus']} cores, load "
        f"{result['machine']['load_start']} → {result['machine']['load_end']}. "
        "Store: the `til` notes, embedded "
        "with the bundled MiniLM. Doors interleaved in one run.",
        "",
        "`add` then hybrid `search` (limit 10) until the item is among the hits, ms:",
        "",
        "| door | p50 | p95 | mean | × Python p50 | misses |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, stats in result["add_then_found_ms"].items():
        ratio = stats["p50_ms"] / python["p50_ms"] if python["p50_ms"] else float("nan")
        lines.append(
            f"| {name} | {stats['p50_ms']:.1f} | {stats['p95_ms']:.1f} | {stats['mean_ms']:.1f} | "
            f"{ratio:.2f} | {result['misses'][name]} |"
        )
    if result["add_messages"]:
        lines += [
            "",
            f"`add_messages`: {result['batches']} calls of {result['turns_per_batch']} turns "
            "per door (one session each):",
            "",
            "| door | turns | seconds | turns/s |",
            "| --- | ---: | ---: | ---: |",
        ]
        for name, stats in result["add_messages"].items():
            lines.append(
                f"| {name} | {stats['turns']} | {stats['seconds']} | {stats['turns_per_s']} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument(
        "--keep", default=os.path.join(tempfile.gettempdir(), "agent_writes_base.db")
    )
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--turns", type=int, default=100)
    args = parser.parse_args()
    result = asyncio.run(run(args))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "agent_writes.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "agent_writes.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
