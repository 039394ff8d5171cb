"""Hybrid search over HTTP, before and after the changes at the server's edge (Host and Origin
checks, token checks off the reader threads, errors without echo), measured side by side.

A store of the first ``--docs`` SciFact abstracts (``/work/shared/data/scifact``, Markdown
files, one source readable by one principal; vectors from the ``hashing`` embedder, so the
servers embed a query in microseconds and what is compared is the server around the search)
is served twice at once: by the base commit's code (``--base``, checked out in a throwaway
worktree) and by this checkout's, each in a process of its own (``create_app`` on uvicorn,
tokens required). One client sends each SciFact test claim as ``POST /v1/search`` (hybrid,
limit 10, with the principal's token) to one server then the other, the order alternating
from one request to the next, for ``--passes`` passes over the claims, after a warm-up.

    python benchmarks/serve_ab.py [--base 67d129d] [--docs 3000] [--passes 3]

Writes ``benchmarks/results/serve_ab.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from ab_servers import ROOT, base_checkout, percentile, serving
from run_info import git_state, machine

RESULTS = ROOT / "benchmarks" / "results"
SCIFACT = ROOT.parent / "shared" / "data" / "scifact"


def build(path: Path, docs: int, folder: Path) -> tuple[str, int]:
    """The store; returns the principal's token and the number of chunks."""
    sys.path.insert(0, str(ROOT / "src"))
    import stratamem

    notes = folder / "scifact"
    notes.mkdir()
    with (SCIFACT / "corpus.jsonl").open() as lines:
        for n, line in enumerate(lines):
            if n >= docs:
                break
            doc = json.loads(line)
            (notes / f"{doc['_id']}.md").write_text(f"# {doc['title']}\n\n{doc['text']}\n")
    with stratamem.open(path, embedder="hashing") as memory:
        memory.ingest(notes, scope="notes:scifact")
        memory.sources.set_access("notes:scifact", scopes="team")
        memory.indexes.embed()
        token = memory.principals.add("reader", ["team"])
        return token, memory.store.chunk_count()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="67d129d")
    parser.add_argument("--docs", type=int, default=3000)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=30)
    args = parser.parse_args()
    claims = [
        json.loads(line)["text"] for line in (SCIFACT / "queries.jsonl").read_text().splitlines()
    ]
    load_start = os.getloadavg()
    took: dict[str, list[float]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as folder, base_checkout(args.base) as base_src:
        stores = {name: Path(folder) / f"{name}.db" for name in took}
        token, chunks = build(stores["before"], args.docs, Path(folder))
        for suffix in ("", "-wal", "-shm"):
            source = Path(str(stores["before"]) + suffix)
            if source.exists():
                Path(str(stores["after"]) + suffix).write_bytes(source.read_bytes())
        headers = {"Authorization": f"Bearer {token}"}
        with (
            serving("before", base_src, stores["before"], embedder="hashing") as before,
            serving("after", ROOT / "src", stores["after"], embedder="hashing") as after,
            httpx.Client(timeout=600, headers=headers) as client,
        ):

            def search(url: str, claim: str) -> float:
                started = time.perf_counter()
                answer = client.post(f"{url}/v1/search", json={"query": claim, "limit": 10})
                elapsed = (time.perf_counter() - started) * 1000
                assert answer.status_code == 200, answer.text
                return elapsed

            for claim in claims[: args.warmup]:
                search(before.url, claim)
                search(after.url, claim)
            n = 0
            for _ in range(args.passes):
                for claim in claims:
                    pair = (before, after) if n % 2 == 0 else (after, before)
                    for server in pair:
                        took[server.name].append(search(server.url, claim))
                    n += 1
    result = {
        "command": " ".join(["python", "benchmarks/serve_ab.py", *sys.argv[1:]]),
        "base": args.base,
        "machine": machine(load_start, os.getloadavg()),
        "git": git_state(),
        "settings": vars(args),
        "chunks": chunks,
        "requests": {name: len(found) for name, found in took.items()},
        "p50": {name: percentile(found, 50) for name, found in took.items()},
        "p95": {name: percentile(found, 95) for name, found in took.items()},
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "serve_ab.json").write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / "serve_ab.md").write_text(report(result))
    print(report(result))


def report(result: dict[str, Any]) -> str:
    m, s = result["machine"], result["settings"]
    p50, p95 = result["p50"], result["p95"]
    return "\n".join(
        [
            "# Hybrid search over HTTP, before and after the edge changes",
            "",
            f"`{result['command']}`, {m['cpus_used']} of {m['cpus']} CPUs, Python "
            f"{m['python']}, load {m['load_start']} → {m['load_end']}; commit "
            f"{result['git']['head'][:12]}{' (modified)' if result['git']['modified'] else ''}"
            f" against {result['base']}.",
            "",
            f"{s['docs']:,} SciFact abstracts ({result['chunks']:,} chunks, hashing vectors), "
            "served by both versions at once with tokens required; each claim sent as "
            "`POST /v1/search` (hybrid, limit 10, a principal's token) to one then the other, "
            f"the order alternating, {s['passes']} passes ({result['requests']['after']:,} "
            "requests each) after a warm-up.",
            "",
            "| | before | after | after / before |",
            "| --- | ---: | ---: | ---: |",
            f"| p50 ms | {p50['before']:.2f} | {p50['after']:.2f} | "
            f"{p50['after'] / p50['before']:.3f} |",
            f"| p95 ms | {p95['before']:.2f} | {p95['after']:.2f} | "
            f"{p95['after'] / p95['before']:.3f} |",
            "",
        ]
    )


if __name__ == "__main__":
    main()
