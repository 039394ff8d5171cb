"""Where the PostgreSQL store's BM25 runs: in SQL over per-term rows, or in process.

Both compute FTS5's BM25 from the same tokens (FTS5's own ``porter unicode61`` tokenizer)
over the same chunks: SciFact's abstracts, each one chunk, repeated to ``--chunks`` chunks
(the texts of search_latency.py's corpus), and are timed on SciFact's test claims, one
after the other per query.

- **SQL**: a ``keyword_postings (term, rowid, freq)`` table with a b-tree on (term, rowid),
  each chunk's length in ``keyword_lengths``, and one statement per query that joins the
  query's terms to their postings, weighs them with idf (from the postings' counts) and the
  length norm, sums per chunk and keeps the best 10.
- **In process**: ``retrieval.index.bm25.BM25Index`` built from the same postings (what the
  store's keyword leg uses), queried for the best 10.

Reported: each side's p50/p95 per query, the SQL tables' size on disk, the in-process index's
memory, and whether both return the same top 10 with the same scores.

    python benchmarks/postgres_keyword.py [--chunks 100000] [--queries 300]

Writes ``benchmarks/results/postgres_keyword.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from run_info import git_state, machine
from search_latency import base_corpus, summary
from stratamem.retrieval.index.bm25 import K1, B, BM25Index
from stratamem.retrieval.query import query_terms
from stratamem.store.postgres.keyword import COLUMNS, WEIGHTS, Tokenizer, merge
from stratamem.store.postgres.server import PostgresServer
from stratamem.store.sqlite.fts_terms import TOKENIZERS

RESULTS = Path(__file__).resolve().parent / "results"

QUERY = f"""
WITH q AS (SELECT term, count(*) AS weight FROM unnest(%s::text[]) AS term GROUP BY term),
stats AS (SELECT count(*)::float8 AS n, avg(length)::float8 AS avgdl FROM keyword_lengths),
df AS (SELECT q.term, q.weight, count(p.rowid)::float8 AS n FROM q
       LEFT JOIN keyword_postings p ON p.term = q.term GROUP BY q.term, q.weight),
idf AS (SELECT df.term, df.weight, greatest(ln((stats.n - df.n + 0.5) / (df.n + 0.5)), 1e-6)
               AS idf FROM df, stats)
SELECT p.rowid, sum(idf.weight * idf.idf * p.freq * {K1 + 1}
                    / (p.freq + {K1} * (1 - {B} + {B} * l.length / stats.avgdl))) AS score
FROM idf JOIN keyword_postings p ON p.term = idf.term
JOIN keyword_lengths l ON l.rowid = p.rowid, stats
GROUP BY p.rowid ORDER BY score DESC, p.rowid LIMIT 10
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    load_start = os.getloadavg()
    texts, _, queries = base_corpus()
    queries = queries[: args.queries]
    n = args.chunks
    tokenizer = Tokenizer(TOKENIZERS["stemmed"])
    rows = [(i + 1, texts[i % len(texts)][1], texts[i % len(texts)][0]) for i in range(n)]
    started = time.perf_counter()
    parts = []
    for at in range(0, n, 2000):
        batch = rows[at : at + 2000]
        parts.append((np.asarray([r[0] for r in batch], np.int64), tokenizer.postings(batch)))
    rowids, postings = merge(parts)
    tokenize_s = time.perf_counter() - started
    index = BM25Index(COLUMNS, WEIGHTS)
    index.append(rowids, [str(r) for r in rowids.tolist()], postings)
    work = Path(tempfile.mkdtemp(prefix="stratamem-pgkw-"))
    server = PostgresServer.start(str(work / "pg"))
    try:
        import psycopg

        url = server.new_database("keyword")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                """CREATE TABLE keyword_postings (term text COLLATE "C", rowid bigint,
                   freq float8, PRIMARY KEY (term, rowid))"""
            )
            conn.execute("CREATE TABLE keyword_lengths (rowid bigint PRIMARY KEY, length int)")
            started = time.perf_counter()
            with conn.cursor().copy("COPY keyword_postings FROM STDIN") as copy:
                buffer = io.StringIO()
                terms = postings.terms
                for t, d, f in zip(
                    postings.term.tolist(),
                    postings.doc.tolist(),
                    postings.freq.tolist(),
                    strict=True,
                ):
                    buffer.write(f"{terms[t]}\t{int(rowids[d])}\t{f!r}\n")
                copy.write(buffer.getvalue())
            lengths = postings.lengths.sum(axis=1)
            with conn.cursor().copy("COPY keyword_lengths FROM STDIN") as copy:
                copy.write(
                    "".join(
                        f"{r}\t{int(x)}\n" for r, x in zip(rowids.tolist(), lengths, strict=True)
                    )
                )
            conn.execute("ANALYZE keyword_postings")
            conn.execute("ANALYZE keyword_lengths")
            load_s = time.perf_counter() - started
            size = conn.execute(
                "SELECT pg_total_relation_size('keyword_postings')"
                " + pg_total_relation_size('keyword_lengths')"
            ).fetchone()
            assert size is not None
            sql_ms: list[float] = []
            process_ms: list[float] = []
            same = 0
            for i, query in enumerate(queries):
                tokens = [t for p in tokenizer.phrases(query_terms(query)) for t in p]
                for side in ("sql", "process") if i % 2 == 0 else ("process", "sql"):
                    started = time.perf_counter()
                    if side == "sql":
                        found = conn.execute(QUERY, (tokens,)).fetchall()
                        sql_ms.append((time.perf_counter() - started) * 1000)
                        in_sql = [(int(r), round(float(s), 3)) for r, s in found]
                    else:
                        positions, scores, _ = index.ranked(tokens, 10)
                        process_ms.append((time.perf_counter() - started) * 1000)
                        in_process = [
                            (int(index.rowids[p]), round(float(s), 3))
                            for p, s in zip(positions.tolist(), scores.tolist(), strict=True)
                        ]
                same += in_sql == in_process
    finally:
        server.stop()
    result: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start, os.getloadavg()),
        "code": git_state(),
        "chunks": n,
        "postings": len(postings.term),
        "queries": len(queries),
        "tokenize_s": round(tokenize_s, 1),
        "sql": {**summary(sql_ms), "load_s": round(load_s, 1), "mb": round(size[0] / 1e6, 1)},
        "process": {**summary(process_ms), "mb": round(index_bytes(index) / 1e6, 1)},
        "same_top10": same,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "postgres_keyword.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "postgres_keyword.md").write_text(report(result))
    print(report(result))


def index_bytes(index: BM25Index) -> int:
    values = (getattr(index, name, None) for name in dir(index) if not name.startswith("__"))
    return sum(v.nbytes for v in values if isinstance(v, np.ndarray))


def report(r: dict[str, Any]) -> str:
    s, p = r["sql"], r["process"]
    return "\n".join(
        [
            f"# BM25 on the PostgreSQL store: in SQL or in process ({r['chunks']:,} chunks)",
            "",
            f"{r['date']}, load {r['machine']['load_start'][0]} → {r['machine']['load_end'][0]};"
            f" `python benchmarks/postgres_keyword.py --chunks {r['chunks']}"
            f" --queries {r['queries']}`. {r['postings']:,} postings from FTS5's tokenizer.",
            "",
            "| | p50 ms | p95 ms | size MB |",
            "| --- | ---: | ---: | ---: |",
            f"| SQL over per-term rows | {s['p50_ms']} | {s['p95_ms']} | {s['mb']} |",
            f"| in-process index | {p['p50_ms']} | {p['p95_ms']} | {p['mb']} (memory) |",
            "",
            f"Same top 10 with the same scores (3 places) on {r['same_top10']} of "
            f"{r['queries']} queries. Loading the SQL tables took {s['load_s']} s "
            f"(COPY and ANALYZE), tokenizing {r['tokenize_s']} s.",
            "",
        ]
    )


if __name__ == "__main__":
    main()
