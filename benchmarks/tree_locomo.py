"""Summary-level retrieval on LoCoMo: session recall of the summary trees, and window covers.

Each LoCoMo conversation is ingested as one chat source (one chunk per dialog turn, stamped
with its session's date and time), embedded once with the bundled MiniLM and cached under
``--store`` without trees. Each tree configuration then builds the trees on a fresh copy of
that store (``build_trees`` then ``flush``; extractive summarizer; every summary embedded with
the same model) and is scored on its own:

* **Session recall@k.** For each question, ``query_source(source=<its conversation>,
  query=<question>)`` ranks the conversation's summaries (top 10). A summary stands for the
  sessions its leaves come from (its subtree walked with ``drill_down``; a leaf's
  ``source_ref`` is the turn id ``conv-26|D3:4``, session 3). Recall@k is the fraction of the
  question's evidence sessions covered by the top k summaries, averaged over questions.
  Also scored: the same call with ``filters`` kept to the conversation, the summary vectors'
  cosine alone, each kept to level-1 summaries, a random order of the conversation's
  summaries (the floor that coarse summaries set), and ``query_global`` over the
  conversation's time span restricted to its source.
* **Window covers.** ``cover_window`` over each conversation's busiest day and its busiest
  30 days (windows start at midnight UTC of a session day): nodes returned versus the
  turns (chunks) inside the window.

    OMP_NUM_THREADS=1 python benchmarks/tree_locomo.py [--store /tmp/stratamem-bench] [--threads 1]

Writes ``benchmarks/results/tree_locomo.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sqlite3
import statistics
import subprocess
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import stratamem
from stratamem.config import TreeConfig
from stratamem.embed.registry import get_embedder
from stratamem.embed.tokens import estimate_tokens
from stratamem.eval.datasets import Dataset
from stratamem.eval.locomo import CATEGORIES, load_locomo
from stratamem.eval.runner import WHOLE_DOCS, DatasetConnector, scope_of, store_path
from stratamem.retrieval import primitives
from stratamem.types import Filters, NodeKind, RetrievalHit

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
LOCOMO = DATA / "locomo"
RESULTS = ROOT / "benchmarks" / "results"

KS = (2, 5, 10)
# Maharana et al. 2024 (LoCoMo), retrieval-augmented QA with session summaries as the
# retrieval units: evidence recall at top-k 2, 5 and 10.
PAPER_BASELINE = {"R@2": 0.659, "R@5": 0.721, "R@10": 0.847}
ALL_SUMMARIES = 1_000
RANDOM_SHUFFLES = 20

# Chosen from the corpus's shape, not from the questions: every LoCoMo session lies on a day
# of its own (gaps of 1.17 to 58 days, all turns of a session share its timestamp) and holds
# 363 to 1,694 tokens, 762 at the median.
CONFIGS: dict[str, tuple[TreeConfig, str]] = {
    "default": (TreeConfig(), "the shipped defaults: 8,000 tokens or 7 days of source time"),
    "per-session": (
        TreeConfig(flush_age_days=1.0),
        "a buffer goes stale after a day, so each session seals on its own",
    ),
    "session-budget": (
        TreeConfig(input_token_budget=800),
        "about one median session of tokens per summary, cut wherever the budget falls",
    ),
}


@dataclass(slots=True)
class Question:
    id: str
    text: str
    category: str
    scope: str
    sessions: frozenset[str]


def log(message: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {message}", flush=True)


def session_of(ref: str) -> str:
    """``conv-26|D3:4`` → ``conv-26|S3``, the id the session qrels use."""
    sample, _, dia = ref.partition("|")
    return f"{sample}|S{int(dia[1:].partition(':')[0])}"


def open_memory(path: Path, threads: int, tree_config: TreeConfig | None = None) -> Any:
    return stratamem.open(
        path, embedder=get_embedder("minilm", threads=threads), tree_config=tree_config
    )


def cached_store(dataset: Dataset, store_dir: Path, threads: int) -> Path:
    """The ingested and embedded store without trees, made once and reused."""
    path = store_path(dataset, store_dir)
    with open_memory(path, threads) as mem:
        if mem.query_source(limit=1).total:
            raise SystemExit(
                f"{path} already holds summary trees; point --store at another directory"
            )
        if mem.store.stats()["chunks"] < len(dataset.docs):
            log(f"ingesting {len(dataset.docs):,} turns into {path}")
            mem.ingest(
                LOCOMO,
                connector=DatasetConnector(dataset),
                chunking=WHOLE_DOCS,
                parallel=False,
                trees=False,
            )
        pending = mem.store.count_pending_embeddings(mem.embedder.spec.signature)
        if pending:
            log(f"embedding {pending:,} turns with {mem.embedder.spec.name}")
            report = mem.indexes.embed()
            log(f"embedded {report.embedded:,} in {report.seconds:.0f}s")
        else:
            log(f"reusing {path}")
    return path


def copy_store(source: Path, target: Path) -> None:
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)


def questions(turns: Dataset, sessions: Dataset) -> list[Question]:
    out = []
    for query in turns.queries:
        evidence = sessions.qrels.get(query.id)
        if not evidence:
            continue
        category = int(query.meta["category"])
        out.append(
            Question(
                id=query.id,
                text=query.text,
                category=CATEGORIES.get(category, str(category)),
                scope=scope_of(turns, turns.group_of(query)),
                sessions=frozenset(evidence),
            )
        )
    return out


class SessionMap:
    """The sessions under each summary, read once per summary through ``drill_down``."""

    def __init__(self, mem: Any) -> None:
        self.mem = mem
        self.cache: dict[str, frozenset[str]] = {}

    def __call__(self, hit: RetrievalHit) -> frozenset[str]:
        if hit.node_id not in self.cache:
            below = self.mem.drill_down(hit.node_id, max_depth=32)
            self.cache[hit.node_id] = frozenset(
                session_of(h.source_ref) for h in below if h.node_kind is NodeKind.LEAF
            )
        return self.cache[hit.node_id]


def recall_at(ranked: Sequence[frozenset[str]], gold: frozenset[str]) -> dict[str, float]:
    out = {}
    for k in KS:
        found: set[str] = set().union(*ranked[:k]) if ranked[:k] else set()
        out[f"R@{k}"] = len(found & gold) / len(gold)
    return out


def mean_scores(rows: Iterable[dict[str, float]]) -> dict[str, float]:
    rows = list(rows)
    return {f"R@{k}": statistics.fmean(r[f"R@{k}"] for r in rows) for k in KS}


def tree_shape(mem: Any, scopes: Sequence[str], sessions_of: SessionMap) -> dict[str, Any]:
    by_level: Counter[int] = Counter()
    spans: dict[int, list[int]] = defaultdict(list)
    example = ""
    for scope in scopes:
        found = mem.query_source(source=scope, limit=ALL_SUMMARIES)
        if found.total > len(found.hits):
            raise SystemExit(f"{scope}: more than {ALL_SUMMARIES} summaries")
        for hit in found.hits:
            by_level[hit.level] += 1
            spans[hit.level].append(len(sessions_of(hit)))
            if not example and hit.level == 1:
                example = hit.content
    return {
        "summaries_by_level": {str(k): by_level[k] for k in sorted(by_level)},
        "mean_sessions_per_summary_by_level": {
            str(k): round(statistics.fmean(v), 2) for k, v in sorted(spans.items())
        },
        "level1_spanning_several_sessions": sum(1 for n in spans.get(1, []) if n > 1),
        "example_level1_summary": example,
    }


API = "query_source"
KEPT = "query_source, filters = its source"
COSINE = "summary cosine only"
LEVEL1 = ", level 1 only"
CHECKED_LIMIT_10 = 25


def score_config(
    mem: Any, qs: Sequence[Question], spans: dict[str, tuple[datetime, datetime]]
) -> dict[str, Any]:
    sessions_of = SessionMap(mem)
    rng = random.Random(13)
    per: dict[str, list[tuple[Question, dict[str, float]]]] = defaultdict(list)
    returned: dict[str, list[int]] = defaultdict(list)
    differing = {API: 0, KEPT: 0}
    pool: dict[str, list[frozenset[str]]] = {}
    api_ms = []
    for number, q in enumerate(qs, 1):
        # Each ranking covers all of the conversation's summaries (far fewer than the rerank
        # pool), so its first 10 are what limit=10 returns; checked on the first questions.
        started = time.perf_counter()
        rankings = {API: mem.query_source(source=q.scope, query=q.text, limit=ALL_SUMMARIES)}
        api_ms.append(1000 * (time.perf_counter() - started))
        rankings[KEPT] = mem.query_source(
            source=q.scope,
            query=q.text,
            limit=ALL_SUMMARIES,
            filters=Filters(sources=(q.scope,)),
        )
        rankings[COSINE] = primitives.query_source(
            mem.store,
            source=q.scope,
            query=q.text,
            embedder=mem.embedder,
            limit=ALL_SUMMARIES,
        )
        if number <= CHECKED_LIMIT_10:
            ten = mem.query_source(source=q.scope, query=q.text, limit=10).hits
            if [h.node_id for h in ten] != [h.node_id for h in rankings[API].hits[:10]]:
                raise SystemExit(f"{q.id}: limit=10 is not the head of the full ranking")
        for name, found in rankings.items():
            for label, hits in (
                (name, found.hits[:10]),
                (name + LEVEL1, [h for h in found.hits if h.level == 1][:10]),
            ):
                ranked = [sessions_of(h) for h in hits]
                per[label].append((q, recall_at(ranked, q.sessions)))
                returned[label] += [len(s) for s in ranked]

        since, until = spans[q.scope]
        window = mem.query_global(
            since=since,
            until=until,
            query=q.text,
            limit=10,
            filters=Filters(sources=(q.scope,)),
        ).hits
        for name in differing:
            if [h.node_id for h in window] != [h.node_id for h in rankings[name].hits[:10]]:
                differing[name] += 1
        per["query_global"].append((q, recall_at([sessions_of(h) for h in window], q.sessions)))

        if q.scope not in pool:
            everything = rankings[COSINE].hits
            pool[q.scope] = [sessions_of(h) for h in everything]
            pool[q.scope + LEVEL1] = [sessions_of(h) for h in everything if h.level == 1]
        for name, key in (("random order", q.scope), ("random order" + LEVEL1, q.scope + LEVEL1)):
            shuffles = [
                recall_at(rng.sample(pool[key], len(pool[key])), q.sessions)
                for _ in range(RANDOM_SHUFFLES)
            ]
            per[name].append((q, mean_scores(shuffles)))
        if number % 250 == 0:
            log(f"  {number:,}/{len(qs):,} questions")
    variants = {}
    for name, scored in per.items():
        by_category: dict[str, list[dict[str, float]]] = defaultdict(list)
        for q, s in scored:
            by_category[q.category].append(s)
        order = sorted(by_category, key=list(CATEGORIES.values()).index)
        variants[name] = {
            "overall": mean_scores(s for _, s in scored),
            "per_category": {c: mean_scores(by_category[c]) for c in order},
            "questions_per_category": {c: len(by_category[c]) for c in order},
            "mean_sessions_per_returned_summary": (
                round(statistics.fmean(returned[name]), 2) if returned.get(name) else None
            ),
        }
    return {
        "variants": variants,
        "query_global_rankings_differing": differing,
        "query_source_ms_median": round(statistics.median(api_ms), 1),
        "sessions_of": sessions_of,
    }


def day_start(ts: datetime) -> datetime:
    return ts.replace(hour=0, minute=0, second=0, microsecond=0)


def busiest_window(stamps: Sequence[datetime], days: int) -> tuple[datetime, datetime, int]:
    """The [midnight of a session day, + ``days``) window holding the most turns; ties go to
    the earliest."""
    best: tuple[datetime, datetime, int] | None = None
    for start in sorted({day_start(ts) for ts in stamps}):
        end = start + timedelta(days=days) - timedelta(milliseconds=1)
        inside = sum(1 for ts in stamps if start <= ts <= end)
        if best is None or inside > best[2]:
            best = (start, end, inside)
    if best is None:
        raise ValueError("no turns")
    return best


def covers(mem: Any, stamps: dict[str, list[datetime]], days: int) -> dict[str, Any]:
    rows = []
    for scope, ts in sorted(stamps.items()):
        since, until, chunks = busiest_window(ts, days)
        found = mem.cover_window(since=since, until=until, filters=Filters(sources=(scope,)))
        summaries = [h for h in found.hits if h.node_kind is NodeKind.SUMMARY]
        rows.append(
            {
                "scope": scope,
                "since": since.isoformat(),
                "chunks": chunks,
                "nodes": found.total,
                "summaries": len(summaries),
                "leaves": found.total - len(summaries),
                "summary_levels": sorted(h.level for h in summaries),
            }
        )
    return {
        "days": days,
        "conversations": rows,
        "chunks_mean": round(statistics.fmean(r["chunks"] for r in rows), 1),
        "chunks_median": statistics.median(r["chunks"] for r in rows),
        "nodes_mean": round(statistics.fmean(r["nodes"] for r in rows), 1),
        "nodes_median": statistics.median(r["nodes"] for r in rows),
        "summaries_mean": round(statistics.fmean(r["summaries"] for r in rows), 1),
        "leaves_mean": round(statistics.fmean(r["leaves"] for r in rows), 1),
    }


def corpus_shape(dataset: Dataset) -> dict[str, Any]:
    stamps: dict[tuple[str, int], datetime] = {}
    tokens: Counter[tuple[str, int]] = Counter()
    for doc in dataset.docs:
        key = (doc.meta["sample_id"], int(doc.meta["session"]))
        stamps[key] = datetime.fromisoformat(doc.meta["timestamp"])
        tokens[key] += estimate_tokens(doc.text)
    gaps = []
    for sample in {s for s, _ in stamps}:
        times = sorted(t for (s, _), t in stamps.items() if s == sample)
        gaps += [(b - a).total_seconds() / 86_400 for a, b in pairwise(times)]
    return {
        "sessions": len(stamps),
        "session_gap_days_min": round(min(gaps), 2),
        "session_gap_days_median": round(statistics.median(gaps), 2),
        "session_tokens_min": min(tokens.values()),
        "session_tokens_median": statistics.median(tokens.values()),
        "session_tokens_max": max(tokens.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[1:]),
    )
    parser.add_argument(
        "--store",
        type=Path,
        default=Path(tempfile.gettempdir()) / "stratamem-bench",
        help="directory of the cached, embedded store (made on the first run, then reused)",
    )
    parser.add_argument(
        "--configs",
        nargs="+",
        choices=sorted(CONFIGS),
        default=list(CONFIGS),
        help="tree configurations to build and score",
    )
    parser.add_argument(
        "--threads", type=int, default=1, help="onnxruntime threads for the embedder"
    )
    args = parser.parse_args()
    if not LOCOMO.is_dir():
        raise SystemExit(f"{LOCOMO} is missing: the benchmark needs the shared evaluation data")

    code = code_version()
    turns = load_locomo(LOCOMO)
    sessions = load_locomo(LOCOMO, level="session")
    qs = questions(turns, sessions)
    stamps: dict[str, list[datetime]] = defaultdict(list)
    for doc in turns.docs:
        when = datetime.fromisoformat(doc.meta["timestamp"]).replace(tzinfo=UTC)
        stamps[scope_of(turns, turns.group_of(doc))].append(when)
    spans = {scope: (min(ts), max(ts)) for scope, ts in stamps.items()}
    shape = corpus_shape(turns)
    log(f"{len(qs):,} questions with evidence over {len(stamps)} conversations; {shape}")

    cache = cached_store(turns, args.store, args.threads)
    configs = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.configs:
            tree_config, why = CONFIGS[name]
            path = Path(tmp) / f"{name}.db"
            copy_store(cache, path)
            with open_memory(path, args.threads, tree_config) as mem:
                log(f"{name}: building trees with {tree_config}")
                started = time.perf_counter()
                built = mem.trees.build()
                flushed = mem.trees.flush()
                seconds = time.perf_counter() - started
                if built.failed or flushed.failed:
                    raise SystemExit(f"{name}: sealing failed: {built.failed + flushed.failed}")
                scored = score_config(mem, qs, spans)
                shape_of = tree_shape(mem, sorted(stamps), scored.pop("sessions_of"))
                configs.append(
                    {
                        "name": name,
                        "why": why,
                        "tree_config": asdict(tree_config),
                        "build_seconds": round(seconds, 1),
                        "build": built.to_dict(),
                        "flush": flushed.to_dict(),
                        **shape_of,
                        **scored,
                        "cover_1_day": covers(mem, stamps, 1),
                        "cover_30_days": covers(mem, stamps, 30),
                    }
                )
            path.unlink()
            print_config(configs[-1])

    result = {
        "benchmark": "summary-tree retrieval on LoCoMo",
        "command": "OMP_NUM_THREADS=1 python benchmarks/tree_locomo.py "
        f"--configs {' '.join(args.configs)} --threads {args.threads}",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "stratamem": stratamem.__version__,
        "code": code,
        "embedder": "minilm (all-MiniLM-L6-v2, bundled ONNX)",
        "summarizer": "extractive",
        "dataset": {**turns.stats, **shape, "questions_scored": len(qs)},
        "baseline": {"name": "LoCoMo paper, session summaries", **PAPER_BASELINE},
        "configs": configs,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "tree_locomo.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "tree_locomo.md").write_text(markdown(result))
    log(f"wrote {RESULTS}/tree_locomo.md")


def code_version() -> dict[str, Any]:
    """The checkout the figures come from: HEAD and any uncommitted source files."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.rstrip("\n") if done.returncode == 0 else ""

    dirty = [line[3:] for line in git("status", "--porcelain", "--", "src").splitlines()]
    return {"commit": git("rev-parse", "--short", "HEAD") or "unknown", "dirty": dirty}


def pct(value: float) -> str:
    return f"{100 * value:.1f}"


def print_config(c: dict[str, Any]) -> None:
    print(f"\n{c['name']}: summaries by level {c['summaries_by_level']}")
    print(f"{'variant':<48} {'R@2':>6} {'R@5':>6} {'R@10':>6}  sessions/summary")
    for name, v in c["variants"].items():
        o = v["overall"]
        spread = v["mean_sessions_per_returned_summary"]
        print(
            f"{name:<48} {pct(o['R@2']):>6} {pct(o['R@5']):>6} {pct(o['R@10']):>6}  "
            f"{'' if spread is None else spread}"
        )
    for key in ("cover_1_day", "cover_30_days"):
        w = c[key]
        print(
            f"cover_window {w['days']} d: chunks mean {w['chunks_mean']} / median "
            f"{w['chunks_median']}, nodes mean {w['nodes_mean']} / median {w['nodes_median']}"
        )


def markdown(r: dict[str, Any]) -> str:
    d = r["dataset"]
    b = r["baseline"]
    lines = [
        "# Summary-tree retrieval on LoCoMo",
        "",
        f"`{r['command']}` on {r['date']}, {r['machine']['cpus']} CPUs (one used), Python "
        f"{r['machine']['python']}, stratamem at commit {r['code']['commit']}"
        + (
            f" with uncommitted changes to {', '.join(r['code']['dirty'])}"
            if r["code"]["dirty"]
            else ""
        )
        + f". Embedder {r['embedder']}, one onnxruntime thread; extractive summarizer.",
        "",
        f"Corpus: LoCoMo's {d['conversations']} conversations as one chat source each, one "
        f"chunk per turn ({d['turns']:,} turns, {d['sessions']} sessions), every turn stamped "
        f"with its session's date. Sessions lie {d['session_gap_days_min']} to "
        f"{d['session_gap_days_median']} (median) days apart and hold "
        f"{d['session_tokens_min']}–{d['session_tokens_max']} tokens, "
        f"{d['session_tokens_median']:g} at the median. {d['questions_scored']:,} questions with "
        "resolvable evidence are scored (all five categories).",
        "",
        "Each configuration builds the trees on a fresh copy of the embedded store "
        "(`build_trees()` then `flush()`); summaries are embedded with the same model.",
        "",
        "## Tree configurations",
        "",
        "| config | input_token_budget | flush_age_days | summary_fanout | why | summaries by "
        "level | level-1 summaries over > 1 session | build + flush s |",
        "| --- | ---: | ---: | ---: | --- | --- | ---: | ---: |",
    ]
    for c in r["configs"]:
        t = c["tree_config"]
        levels = ", ".join(f"L{k}: {v:,}" for k, v in c["summaries_by_level"].items())
        lines.append(
            f"| {c['name']} | {t['input_token_budget']:,} | {t['flush_age_days']:g} | "
            f"{t['summary_fanout']} | {c['why']} | {levels} | "
            f"{c['level1_spanning_several_sessions']} | {c['build_seconds']} |"
        )
    lines += [
        "",
        "Other settings are the defaults (`output_token_budget` 400, `max_depth` 32). Upper "
        "levels seal only at a full fan-out of 10, so a conversation's last sessions stay "
        "under no level-2 summary.",
        "",
        "## Session recall@k",
        "",
        "Recall@k: the fraction of a question's evidence sessions covered by the sessions "
        "under the top k summaries, averaged over questions. Every ranking orders all of the "
        "conversation's summaries, every level; its first 10 are what `limit=10` returns. "
        "Rankings:",
        "",
        "- `query_source`: the API as a caller uses it, `query_source(source=<conversation>, "
        "query=<question>)`: each summary scored by half its vector's cosine to the question "
        "and half the best hybrid-search hit among the leaves under it (the search's top "
        "100 leaves, normalised by the best);",
        "- `query_source, filters = its source`: the same with `filters=Filters(sources="
        "(<conversation>,))`, which also keeps that leaf search inside the conversation;",
        "- `summary cosine only`: the summary vectors' cosine alone "
        "(`primitives.query_source` without evidence);",
        "- `…, level 1 only`: the level-1 summaries of the same ranking;",
        f"- `random order`: the mean of {RANDOM_SHUFFLES} shuffles of the same summaries (all "
        "levels, or level 1 only): the recall their coverage alone gives.",
        "",
        "*Sessions per summary* is the mean number of sessions under a returned summary (top "
        "10): a summary is credited with every session under it, so coarse summaries score "
        "recall without pinpointing anything. The paper's row is the yardstick for the "
        "`level 1 only` rows of `per-session`, whose summaries are one session each.",
        "",
        "| config | ranking | R@2 | R@5 | R@10 | sessions per summary |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
        f"| — | {b['name']} (DRAGON over LLM-written session summaries) | {pct(b['R@2'])} | "
        f"{pct(b['R@5'])} | {pct(b['R@10'])} | 1 |",
    ]
    for c in r["configs"]:
        differ = c["query_global_rankings_differing"]
        for name, v in c["variants"].items():
            if name == "query_global" and not differ[KEPT]:
                continue
            o = v["overall"]
            spread = v["mean_sessions_per_returned_summary"]
            lines.append(
                f"| {c['name']} | {name} | {pct(o['R@2'])} | {pct(o['R@5'])} | "
                f"{pct(o['R@10'])} | {'—' if spread is None else spread} |"
            )
    total = d["questions_scored"]
    lines += [
        "",
        "`query_global` over each conversation's full time span with `filters` = its source "
        "returned a top 10 different from `query_source` in "
        + "; ".join(
            f"{c['name']}: {c['query_global_rankings_differing'][API]:,} of {total:,} "
            f"questions (from `filters = its source`: "
            f"{c['query_global_rankings_differing'][KEPT]:,})"
            for c in r["configs"]
        )
        + ". With the same filters both rank the same summaries by the same score; where "
        "they differ, `query_global` has its own row above. Median time of one "
        "`query_source` call (1 thread, query embedded, leaf search included): "
        + ", ".join(f"{c['name']} {c['query_source_ms_median']} ms" for c in r["configs"])
        + ".",
        "",
        "### Per category (all levels)",
        "",
        "| config | ranking | category | questions | R@2 | R@5 | R@10 |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for c in r["configs"]:
        for ranking in (API, COSINE):
            v = c["variants"][ranking]
            for category, s in v["per_category"].items():
                lines.append(
                    f"| {c['name']} | {ranking} | {category} | "
                    f"{v['questions_per_category'][category]} | "
                    f"{pct(s['R@2'])} | {pct(s['R@5'])} | {pct(s['R@10'])} |"
                )
    lines += [
        "",
        "## cover_window: nodes versus chunks",
        "",
        "Per conversation, the busiest day (a session day) and the busiest 30 days, each "
        "window starting at midnight UTC of a session day. *Nodes* is what `cover_window` "
        "returns for the conversation's source (summaries wholly inside the window whose "
        "parent is not, plus the in-window turns no such summary covers); *chunks* is the "
        "turns inside the window. Mean / median over the conversations.",
        "",
        "| config | window | chunks | nodes | of which summaries | of which leaves |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for c in r["configs"]:
        for key in ("cover_1_day", "cover_30_days"):
            w = c[key]
            lines.append(
                f"| {c['name']} | {w['days']} d | {w['chunks_mean']} / {w['chunks_median']:g} | "
                f"{w['nodes_mean']} / {w['nodes_median']:g} | {w['summaries_mean']} | "
                f"{w['leaves_mean']} |"
            )
    example = next((c for c in r["configs"] if c["name"] == "per-session"), r["configs"][0])
    lines += [
        "",
        "## Caveats",
        "",
        "- The `query_source` rows rank each summary half by the best hybrid-search hit "
        "among its leaves (dialog turns), so they largely measure turn search lifted to "
        "sessions; `summary cosine only` is the summaries' own retrieval, the like-for-like "
        "comparison with the paper's summaries.",
        "- A summary is credited with every session under it, so a level-2 summary (ten "
        "sessions) or a level-1 summary that straddles sessions covers evidence it may not "
        "mention; read recall with the sessions-per-summary column and the random-order row.",
        "- The paper's units are one LLM-written summary per session, retrieved by DRAGON; "
        "here they are extractive summaries (at most 400 tokens, of which MiniLM reads the "
        "first 256 word pieces), ranked by MiniLM cosine.",
        '- LoCoMo turns read `Name said, "…"` (the text the paper\'s retriever indexes), '
        "not `Name: …` chat lines, and carry no author, so the extractive summaries label "
        "lines with the date only: most picked sentences lose their speaker and keep a stray "
        "closing quote (see the example below).",
        "- The baseline figures are as reported in the paper; whether its question set and "
        "evidence cleaning match the 1,981 questions scored here (all five categories) is not "
        "checked, so compare the per-category rows too.",
        "- No configuration was chosen on these questions: the three are set from the "
        "corpus's session gaps and lengths, and all are reported.",
        "",
        f"A level-1 summary ({example['name']}), for a sense of what is ranked:",
        "",
        "```",
        example["example_level1_summary"],
        "```",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
