"""The HTTP server under load: hybrid search throughput and latency at 1, 4 and 16 concurrent
clients, each request as the owner or one of two principals in turn; then the same while the
server itself ingests 20k new chunks into the store through its write route.

The store is a copy of one built by ``benchmarks/access_latency.py`` (SciFact abstracts over
150 sources, about 100k chunks, bundled MiniLM vectors plus noise; ``--db`` names it), whose
principals ``p10`` and ``p90`` read 10 % and 90 % of the sources; their tokens are rotated in
the copy. The server runs in a process of its own (``create_app`` on uvicorn, one worker,
loopback only, writes allowed; a call without a token reads as the owner); the clients are
asyncio tasks with httpx in this process, each sending ``POST /v1/search`` with a SciFact
test claim (the server embeds it) one request after another for ``--seconds``, request ``n``
as ``(owner, p10, p90)[n % 3]``. While ingesting: ``POST /v1/ingest`` of a JSONL file of
``--ingest-chunks`` documents (``embed`` and ``trees`` off: its write transactions, not the
minutes of model time sealing would add), forgotten again after each level.

``--profile`` samples the server with py-spy (if installed) during one extra 16-client run and
writes the functions that hold the most samples. Every figure is from this one run.

    python benchmarks/serve_load.py --db /tmp/acc/access-100000-150.db [--seconds 60]

Writes ``benchmarks/results/serve_load.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
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
service = Service(sys.argv[1], allow_writes=True)
service.warm()
app = create_app(service, tokens_required=False, timeout_s=600)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning", access_log=False)
"""
PRINCIPALS = ("p10", "p90")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def load(
    url: str, queries: list[str], clients: int, seconds: float, tokens: dict[str, str]
) -> dict[str, Any]:
    latencies: list[float] = []
    by_reader: dict[str, list[float]] = collections.defaultdict(list)
    errors: dict[str, int] = {}
    deadline = time.perf_counter() + seconds
    counter = 0
    readers = ["owner", *tokens]

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal counter
        while time.perf_counter() < deadline:
            query = queries[counter % len(queries)]
            reader = readers[counter % len(readers)]
            counter += 1
            headers = {"Authorization": f"Bearer {tokens[reader]}"} if reader in tokens else {}
            started = time.perf_counter()
            try:
                reply = await http.post(
                    "/v1/search", json={"query": query, "limit": 10}, headers=headers
                )
                if reply.status_code != 200:
                    errors[str(reply.status_code)] = errors.get(str(reply.status_code), 0) + 1
                    continue
            except httpx.HTTPError as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                continue
            latencies.append((time.perf_counter() - started) * 1000)
            by_reader[reader].append(latencies[-1])

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
        "p50_by_reader_ms": {
            name: round(float(np.percentile(found_, 50)), 1)
            for name, found_ in sorted(by_reader.items())
        },
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
    # SciFact abstracts make 1.77 chunks each: 11,300 of them about 20,000 chunks.
    parser.add_argument("--ingest-records", type=int, default=11_300)
    parser.add_argument("--profile", action="store_true", help="sample the server with py-spy")
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
    tokens = rotate_tokens(db)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(db), str(port)], env=env)
    runs: list[dict[str, Any]] = []
    profile: dict[str, Any] = {}
    try:
        for _ in range(600):
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        rss = {"started": rss_mb(server.pid)}
        asyncio.run(load(url, queries, 3, 15, tokens))  # warm-up: indexes loaded, model ready
        rss["warm"] = rss_mb(server.pid)
        for clients in args.levels:
            result = asyncio.run(load(url, queries, clients, args.seconds, tokens))
            print(result, flush=True)
            runs.append({"phase": "search only", **result})
        if args.profile:
            profile = sample(server.pid, url, queries, tokens, work)
        feed = work / "feed.jsonl"
        write_ingest_file(feed, texts, args.ingest_records)
        for clients in args.levels:
            result = asyncio.run(load_while_ingesting(url, queries, clients, args, tokens, feed))
            scopes = result.pop("ingest_scopes")
            print(result, flush=True)
            runs.append({"phase": "while ingesting", **result})
            for scope in scopes:
                httpx.delete(f"{url}/v1/sources/{scope}", timeout=600).raise_for_status()
        rss["end"] = rss_mb(server.pid)
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    report(args, runs, rss, profile, load_start, os.getloadavg())


def rotate_tokens(db: Path) -> dict[str, str]:
    """Fresh tokens of the store's principals (in the copy), made if missing."""
    import stratamem

    with stratamem.open(db, embedder=None) as memory:
        known = {p.name for p in memory.principals.list()}
        tokens = {}
        for name, scopes in zip(
            PRINCIPALS, ("g0", ",".join(f"g{i}" for i in range(9))), strict=True
        ):
            if name in known:
                tokens[name] = memory.principals.rotate(name)
            else:
                tokens[name] = memory.principals.add(name, scopes)
        return tokens


async def load_while_ingesting(
    url: str,
    queries: list[str],
    clients: int,
    args: argparse.Namespace,
    tokens: dict[str, str],
    feed: Path,
) -> dict[str, Any]:
    """Searches for ``args.seconds`` while the server ingests ``feed`` through its route."""

    def ingest() -> tuple[int, float, int, list[str]]:
        started = time.perf_counter()
        reply = httpx.post(
            f"{url}/v1/ingest",
            json={"path": str(feed), "embed": False, "trees": False},
            timeout=900,
        )
        reply.raise_for_status()
        found = reply.json()
        scopes = [source["scope"] for source in found["sources"]]
        return reply.status_code, time.perf_counter() - started, found["chunks"], scopes

    writer = asyncio.create_task(asyncio.to_thread(ingest))
    result = await load(url, queries, clients, args.seconds, tokens)
    status, seconds, chunks, scopes = await writer
    return {
        **result,
        "ingest_status": status,
        "ingest_s": round(seconds, 1),
        "ingest_chunks": chunks,
        "ingest_scopes": scopes,
    }


def sample(
    pid: int, url: str, queries: list[str], tokens: dict[str, str], work: Path
) -> dict[str, Any]:
    """py-spy samples of the server over a 20 s, 16-client run: the functions holding the most
    samples, by themselves and with what they call."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        print("py-spy is not installed: no profile", flush=True)
        return {}
    out = work / "profile.txt"
    recorder = subprocess.Popen(
        [
            spy,
            "record",
            "--pid",
            str(pid),
            "--duration",
            "20",
            "--rate",
            "200",
            "--format",
            "raw",
            "--output",
            str(out),
            "--threads",
            "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    asyncio.run(load(url, queries, 16, 22, tokens))
    recorder.wait(timeout=60)
    if not out.exists():
        return {}
    own: collections.Counter[str] = collections.Counter()
    within: collections.Counter[str] = collections.Counter()
    total = 0
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [f for f in stack.split(";") if f and not f.startswith("thread")]
        if not frames or not count.isdigit():
            continue
        n = int(count)
        total += n
        own[_short(frames[-1])] += n
        for name in {_short(f) for f in frames}:
            within[name] += n

    def top(counter: collections.Counter[str], k: int) -> list[tuple[str, float]]:
        return [(name, round(100 * n / total, 1)) for name, n in counter.most_common(k)]

    wanted = [
        name
        for name, _ in within.most_common()
        if "stratamem" in name or "onnxruntime" in name or "sqlite" in name
    ][:25]
    return {
        "samples": total,
        "self_pct": top(own, 15),
        "within_pct": [(name, round(100 * within[name] / total, 1)) for name in wanted],
    }


def _short(frame: str) -> str:
    """``function (path/to/module.py:line)`` → ``function (module.py)``."""
    name, _, where = frame.partition(" (")
    file = where.rstrip(")").rsplit(":", 1)[0]
    parts = Path(file).parts
    tail = "/".join(parts[-3:]) if "stratamem" in parts else Path(file).name
    return f"{name} ({tail})"


def report(
    args: argparse.Namespace,
    runs: list[dict[str, Any]],
    rss: dict[str, float],
    profile: dict[str, Any],
    load_start: tuple[float, ...],
    load_end: tuple[float, ...],
) -> None:
    info = {"machine": machine(load_start, load_end), "git": git_state()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {**info, "runs": runs, "rss_mb": rss, "seconds": args.seconds, "profile": profile}
    (RESULTS / "serve_load.json").write_text(json.dumps(payload, indent=2) + "\n")
    m = info["machine"]
    lines = [
        "# The HTTP server under load",
        "",
        f"`python benchmarks/serve_load.py --db {args.db.name} --seconds {args.seconds:g}"
        f"{' --profile' if args.profile else ''}`, "
        f"{m['cpus_used']} of {m['cpus']} CPUs, Python {m['python']}, load {m['load_start']} → "
        f"{m['load_end']}; commit {info['git']['head'][:12]}"
        f"{' with src/ modified' if info['git']['modified'] else ''}.",
        "",
        "One uvicorn worker on loopback, reads on its pool of threads (a connection each, the "
        "in-memory indexes shared); clients send `POST /v1/search` (limit 10, hybrid, the "
        "claim embedded by the server) back to back, request n as the owner, `p10` (10 % of "
        "the sources) or `p90` (90 %) in turn. While ingesting: the same server ingests "
        f"{args.ingest_records:,} SciFact abstracts (the chunks are in the table) through "
        "`POST /v1/ingest` (embed and trees off: "
        "its write transactions on the writer thread), forgotten again after each level.",
        "",
        "| phase | clients | requests/s | p50 ms | p95 ms | p99 ms | max ms "
        "| p50 owner / p10 / p90 | errors | ingest |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |",
    ]
    for run in runs:
        ingest = ""
        if "ingest_s" in run:
            ingest = (
                f"{run['ingest_status']}: {run['ingest_chunks']:,} chunks in {run['ingest_s']} s"
            )
        readers = run["p50_by_reader_ms"]
        lines.append(
            f"| {run['phase']} | {run['clients']} | {run['per_s']} | {run['p50_ms']} | "
            f"{run['p95_ms']} | {run['p99_ms']} | {run['max_ms']} | "
            f"{' / '.join(str(readers.get(r, '-')) for r in ('owner', *PRINCIPALS))} | "
            f"{sum(run['errors'].values()) or 0} | {ingest} |"
        )
    lines += [
        "",
        f"Server memory (RSS): {rss['started']:.0f} MB started, {rss['warm']:.0f} MB after the "
        f"warm-up, {rss['end']:.0f} MB at the end.",
    ]
    if profile:
        lines += [
            "",
            f"## Where the time goes (py-spy, {profile['samples']:,} samples over 20 s at 16 "
            "clients, every thread, on CPU only)",
            "",
            "Share of samples inside each function (with what it calls):",
            "",
            *[f"- {pct} % {name}" for name, pct in profile["within_pct"]],
            "",
            "Share of samples in each function itself:",
            "",
            *[f"- {pct} % {name}" for name, pct in profile["self_pct"]],
        ]
    (RESULTS / "serve_load.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
