"""The HTTP server under load: hybrid search throughput and latency at 1, 4 and 16 concurrent
clients, then the same while another process ingests 20k new chunks into the same store (its write
transactions; the summary trees an ingest then seals are left queued).

The store is a copy of one built by ``benchmarks/access_latency.py`` (SciFact abstracts over
150 sources, about 100k chunks, bundled MiniLM vectors plus noise; ``--db`` names it). The
server runs in a process of its own (``create_app`` on uvicorn, one worker, the owner without
tokens, loopback only); the clients are asyncio tasks with httpx in this process, each sending
``POST /v1/search`` with a SciFact test claim (the server embeds it) one request after another
for ``--seconds``. Every figure is from this one run, the levels one after the other.

    python benchmarks/serve_load.py --db /tmp/acc/access-100000-150.db [--seconds 60]

Writes ``benchmarks/results/serve_load.md`` and ``.json``.
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
import numpy as np

from run_info import git_state, machine
from search_latency import base_corpus

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SERVER = """
import sys, uvicorn
from stratamem.server.http import create_app
from stratamem.server.service import Service
app = create_app(Service(sys.argv[1]), tokens_required=False)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning", access_log=False)
"""

# The ingest's write transactions, without the summary trees it would then seal and embed
# (minutes of model time on two cores, which would measure sharing the CPU, not the store).
INGEST = """
import sys, stratamem
with stratamem.open(sys.argv[1]) as mem:
    mem.ingest(sys.argv[2], trees=False)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def load(url: str, queries: list[str], clients: int, seconds: float) -> dict[str, Any]:
    latencies: list[float] = []
    errors: dict[str, int] = {}
    deadline = time.perf_counter() + seconds
    counter = 0

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal counter
        while time.perf_counter() < deadline:
            query = queries[counter % len(queries)]
            counter += 1
            started = time.perf_counter()
            try:
                reply = await http.post("/v1/search", json={"query": query, "limit": 10})
                if reply.status_code != 200:
                    errors[str(reply.status_code)] = errors.get(str(reply.status_code), 0) + 1
                    continue
            except httpx.HTTPError as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                continue
            latencies.append((time.perf_counter() - started) * 1000)

    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        elapsed = time.perf_counter() - started
    found = np.asarray(latencies) if latencies else np.zeros(1)
    return {
        "clients": clients,
        "requests": len(latencies),
        "errors": errors,
        "per_s": round(len(latencies) / elapsed, 1),
        "p50_ms": round(float(np.percentile(found, 50)), 1),
        "p95_ms": round(float(np.percentile(found, 95)), 1),
        "p99_ms": round(float(np.percentile(found, 99)), 1),
        "max_ms": round(float(found.max()), 1),
    }


def write_ingest_file(path: Path, texts: list[tuple[str, str]], chunks: int) -> None:
    with path.open("w") as fh:
        for i in range(chunks):
            title, text = texts[(i * 7919) % len(texts)]
            record = {"id": f"load-{i}", "title": title, "text": text, "kind": "document"}
            fh.write(json.dumps({**record, "source": "load-ingest"}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--ingest-chunks", type=int, default=20_000)
    args = parser.parse_args()
    texts, _, queries = base_corpus()
    load_start = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="serve-load-"))
    db = work / "store.db"
    for suffix in ("", ".bm25.idx"):
        if Path(f"{args.db}{suffix}").exists():
            shutil.copy(f"{args.db}{suffix}", f"{db}{suffix}")
    for index in args.db.parent.glob(f"{args.db.name}.vectors-*.idx"):
        shutil.copy(index, work / index.name.replace(args.db.name, db.name))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(db), str(port)], env=env)
    runs: list[dict[str, Any]] = []
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        rss = {"started": rss_mb(server.pid)}
        asyncio.run(load(url, queries, 1, 10))  # warm-up: indexes loaded, model ready
        rss["warm"] = rss_mb(server.pid)
        for clients in args.levels:
            result = asyncio.run(load(url, queries, clients, args.seconds))
            print(result, flush=True)
            runs.append({"phase": "search only", **result})
        feed = work / "feed.jsonl"
        write_ingest_file(feed, texts, args.ingest_chunks)
        for clients in args.levels:
            ingest = subprocess.Popen([sys.executable, "-c", INGEST, str(db), str(feed)], env=env)
            started = time.perf_counter()
            result = asyncio.run(load(url, queries, clients, args.seconds))
            ingest_rc = ingest.wait()
            result["ingest_s"] = round(time.perf_counter() - started, 1)
            result["ingest_rc"] = ingest_rc
            print(result, flush=True)
            runs.append({"phase": "while ingesting", **result})
            subprocess.run(
                [sys.executable, "-m", "stratamem", "--db", str(db), "forget", "jsonl:load-ingest"],
                env=env,
                check=False,
                capture_output=True,
            )
        rss["end"] = rss_mb(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    report(args, runs, rss, load_start, os.getloadavg())


def report(
    args: argparse.Namespace,
    runs: list[dict[str, Any]],
    rss: dict[str, float],
    load_start: tuple[float, ...],
    load_end: tuple[float, ...],
) -> None:
    info = {"machine": machine(load_start, load_end), "git": git_state()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {**info, "runs": runs, "rss_mb": rss, "seconds": args.seconds}
    (RESULTS / "serve_load.json").write_text(json.dumps(payload, indent=2) + "\n")
    m = info["machine"]
    lines = [
        "# The HTTP server under load",
        "",
        f"`python benchmarks/serve_load.py --db {args.db.name} --seconds {args.seconds:g}`, "
        f"{m['cpus_used']} of {m['cpus']} CPUs, Python {m['python']}, load {m['load_start']} → "
        f"{m['load_end']}; commit {info['git']['head'][:12]}"
        f"{' with src/ modified' if info['git']['modified'] else ''}.",
        "",
        "One uvicorn worker serving the owner (no tokens) on loopback; clients send "
        "`POST /v1/search` (limit 10, hybrid, the claim embedded by the server) back to back. "
        f"While ingesting: another process ingests {args.ingest_chunks:,} new chunks into the "
        "same store (`Memory.ingest(path, trees=False)`: its write transactions, not the "
        "summaries it would seal and embed after), forgotten again after each level.",
        "",
        "| phase | clients | requests/s | p50 ms | p95 ms | p99 ms | max ms | errors | ingest |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for run in runs:
        ingest = ""
        if "ingest_s" in run:
            ingest = f"rc {run['ingest_rc']}"
        lines.append(
            f"| {run['phase']} | {run['clients']} | {run['per_s']} | {run['p50_ms']} | "
            f"{run['p95_ms']} | {run['p99_ms']} | {run['max_ms']} | "
            f"{sum(run['errors'].values()) or 0} | {ingest} |"
        )
    lines += [
        "",
        f"Server memory (RSS): {rss['started']:.0f} MB started, {rss['warm']:.0f} MB after the "
        f"warm-up, {rss['end']:.0f} MB at the end.",
        "",
        "Where the time goes: the calls of one principal (here every call is the owner's) take "
        "turns on its memory, which has one store connection; so throughput stays where one "
        "client puts it and latency grows with the queue. The embedding of queries runs one "
        "batch at a time by design. The slowest read while ingesting is the first after the "
        "ingest commits, which brings the in-memory indexes up to the new chunks.",
    ]
    (RESULTS / "serve_load.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
