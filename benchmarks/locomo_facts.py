"""Evidence recall on LoCoMo from asserted facts, from dialog turns, and from both fused.

The turns are the store ``stratamem eval`` builds and scores (one chat source per
conversation, one chunk per dialog turn cited by its doc id ``conv-26|D1:3``, embedded with
the default model, cached under ``--store``; built here when it is missing). A copy of it
receives the facts, so the cache is left as eval keeps it.

**Facts.** LoCoMo's ``observation`` field (per session and speaker, sentences each citing the
turn or turns they come from) is written as an agent would assert it: for each sentence,
``Memory.facts.remember(subject="person:<speaker>", predicate="observed", object=<sentence>,
valid_from=<the session's date, UTC>, evidence=<node ids of the cited turns>, many=True,
now=<2024-01-01 plus a millisecond per call>)``. A cited dialog id maps to its turn's chunk
through the chunk's ``source_ref`` (the doc id); ids that name no turn are dropped, and a
sentence left with no evidence is not written. The write rate counts every ``remember`` call
(reconcile and write).

Each question of a chosen conversation is answered three ways, each a ranked list of turns
of that conversation, cut to 100:

* **facts** (a): ``Memory.facts.search(question, sources=[<the conversation>],
  limit=<all>)``: BM25 over what each fact says fused with the cosine of its vector (facts
  are embedded when written, the store holding vectors of the default model), over the
  conversation's facts true now, each hit replaced by its evidence turns in rank order,
  repeats removed. Also scored: the same facts ranked by BM25 alone
  (``stratamem.memory.search.rank`` over the conversation's facts).
* **turns** (b): ``StoreRetriever(memory, dataset, "hybrid")``, exactly the ranking
  ``stratamem eval --mode hybrid`` scores.
* **fused** (c): reciprocal rank fusion, ``1 / (60 + rank)`` summed over (a) and (b)
  (``stratamem.retrieval.fusion.rrf``), ties by id.

**Speed.** Each question's facts search (a) is also run the way ``search_facts`` worked before
it kept an index per reader (:func:`search_facts_afresh`: every fact read back from the store
and scored for each query), the two interleaved, which goes first alternating by question; the
results record both times per question and how many questions got ranked facts or scores
that are not bit for bit the same. The BM25 scores are the same floats; the two paths embed
the query each for itself and stack the facts' vectors in another order, so a cosine may
differ in its last bits, and facts whose scores tie that closely may swap places.

Scored with ``stratamem.eval.locomo.evidence_recall`` at 5, 10, 25 and 50, beside the LoCoMo
paper's figures (Maharana et al. 2024, RAG table: retrieval over observations and over dialog
turns), which are the paper's, not measured here.

    python benchmarks/locomo_facts.py [--limit-conversations N]

Writes ``benchmarks/results/locomo_facts.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from run_info import git_state, machine
from stratamem.api import Memory
from stratamem.cli.common import cache_dir_from_environment
from stratamem.eval.datasets import Dataset, Query
from stratamem.eval.locomo import (
    CATEGORIES,
    LOCOMO_KS,
    EvidenceRecall,
    evidence_recall,
    load_locomo,
    parse_date_time,
    split_evidence,
)
from stratamem.eval.metrics import run_from_ranking
from stratamem.eval.runner import StoreRetriever, prepare, scope_of, store_path
from stratamem.memory.search import FactHit, rank
from stratamem.retrieval.fusion import minmax, ranking, rrf
from stratamem.retrieval.query import query_terms
from stratamem.store.facts import Fact

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
LOCOMO = ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json"
DEPTH = 100
RRF_K = 60
EVERY_FACT = 1_000_000
# Facts are recorded a millisecond apart from this instant, so that their ids (a digest that
# includes the recording time), and with them the order of facts that score the same, are
# the same in every run.
RECORDED = datetime(2024, 1, 1, tzinfo=UTC)
PAPER = {
    "observations (paper)": {"R@5": 0.562, "R@10": 0.613, "R@25": 0.675, "R@50": 0.712},
    "dialog turns (paper)": {"R@5": 0.567, "R@10": 0.662, "R@25": 0.767, "R@50": 0.827},
}
AFRESH = "facts, read afresh per query (before)"
DIFFER = "questions ranked differently by the two"
METHODS = {
    "facts": "(a) facts alone (BM25 and vectors)",
    "facts, conversation-scoped BM25": "(a') facts alone, BM25 only",
    "turns": "(b) turns alone (hybrid)",
    "fused": "(c) facts + turns, RRF k=60",
}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def copy_store(source: Path, folder: Path) -> Path:
    """The store and the index files beside it, copied into ``folder``."""
    target = folder / source.name
    for file in source.parent.glob(f"{source.name}*"):
        shutil.copyfile(file, folder / file.name)
    return target


def turn_nodes(memory: Memory, dataset: Dataset, samples: Sequence[str]) -> dict[str, str]:
    """Doc id (``conv-26|D1:3``) → the node id of its turn's chunk, for ``samples``."""
    nodes: dict[str, str] = {}
    for sample in samples:
        source = memory.store.resolve_source(scope_of(dataset, sample))
        for chunk in memory.store.iter_chunks(source.id):
            if chunk.source_ref in nodes:
                raise ValueError(f"two chunks cite {chunk.source_ref!r}")
            nodes[chunk.source_ref] = chunk.id
    return nodes


def write_facts(
    memory: Memory, conversations: Iterable[dict[str, Any]], nodes: Mapping[str, str]
) -> dict[str, Any]:
    """Each observation remembered as a fact of its speaker; counts and the write time."""
    counts: Counter[str] = Counter()
    seconds = 0.0
    for sample in conversations:
        sample_id, conversation = sample["sample_id"], sample["conversation"]
        for key, by_speaker in sample["observation"].items():
            session = key.removesuffix("_observation")
            when = parse_date_time(conversation[f"{session}_date_time"]).replace(tzinfo=UTC)
            for speaker, said in by_speaker.items():
                for sentence, cited in said:
                    counts["observations"] += 1
                    raw = cited if isinstance(cited, list) else [cited]
                    ids = [part for entry in raw for part in split_evidence(str(entry))]
                    if len(ids) > len(raw):
                        counts["observations_with_joined_ids"] += 1
                    counts["dialog_ids"] += len(ids)
                    evidence = [
                        nodes[f"{sample_id}|{i}"] for i in ids if f"{sample_id}|{i}" in nodes
                    ]
                    counts["dialog_ids_unresolved"] += sum(
                        1 for i in ids if f"{sample_id}|{i}" not in nodes
                    )
                    if len(evidence) < len(ids):
                        counts["observations_with_unresolved_ids"] += 1
                    if not evidence:
                        counts["observations_skipped_no_evidence"] += 1
                        continue
                    started = time.perf_counter()
                    written = memory.facts.remember(
                        f"person:{speaker}",
                        "observed",
                        sentence,
                        valid_from=when,
                        evidence=evidence,
                        many=True,
                        now=RECORDED + timedelta(milliseconds=counts["remember_calls"]),
                    )
                    seconds += time.perf_counter() - started
                    counts["remember_calls"] += 1
                    counts["facts_recorded"] += len(written.recorded)
                    counts["facts_expired"] += len(written.expired)
                    if not written.recorded:
                        counts["remember_unchanged"] += 1
    calls = counts["remember_calls"]
    return {
        **dict(counts),
        "write_seconds": round(seconds, 2),
        "remember_per_second": round(calls / seconds, 1) if seconds else None,
        "mean_remember_ms": round(1000 * seconds / calls, 2) if calls else None,
    }


def evidence_turns(hits: Iterable[Fact], doc_of: Mapping[str, str]) -> list[str]:
    """The turns the facts cite, in the facts' order, each once, cut to :data:`DEPTH`."""
    turns: dict[str, None] = {}
    for fact in hits:
        for node in fact.evidence:
            doc = doc_of.get(node)
            if doc is not None:
                turns.setdefault(doc)
        if len(turns) >= DEPTH:
            break
    return list(turns)[:DEPTH]


def fuse(first: Sequence[str], second: Sequence[str]) -> list[str]:
    """Reciprocal rank fusion (k = 60) of two rankings, ties by id, cut to :data:`DEPTH`."""
    legs = {
        "facts": run_from_ranking({"q": first}).get("q", {}),
        "turns": run_from_ranking({"q": second}).get("q", {}),
    }
    totals = {doc: sum(parts.values()) for doc, parts in rrf(legs, k=RRF_K).items()}
    return ranking(totals)[:DEPTH]


def in_group(returned: Iterable[str], allowed: set[str]) -> list[str]:
    """``returned`` kept to the conversation's turns, each once, cut to :data:`DEPTH` (as
    ``run_retriever`` cleans a ranking)."""
    kept: dict[str, None] = {}
    for doc in returned:
        if doc in allowed:
            kept.setdefault(doc)
    return list(kept)[:DEPTH]


def search_facts_afresh(memory: Memory, query: str, source: str) -> list[FactHit]:
    """``Memory.facts.search(query, sources=[source], limit=<all>)`` as it ran before the
    reader's index: the facts true now read back from the store, BM25 over them (``rank``)
    fused with the cosines of their vectors, read and stacked for this query alone."""
    terms = query_terms(query)
    if not terms:
        return []
    home = memory.store.resolve_source(source).id
    facts = [f for f in memory.facts.recall(limit=EVERY_FACT) if f.source_id == home]
    embedder = memory._query_embedder(query)
    if embedder is None:
        return rank(facts, terms, limit=EVERY_FACT)
    lexical = {h.fact.id: h.score for h in rank(facts, terms, limit=len(facts) or 1)}
    stored = memory.store.fact_vectors(embedder.spec.signature, [f.id for f in facts])
    semantic: dict[str, float] = {}
    if stored:
        query_vector = np.asarray(embedder.embed_batch([query], role="query")[0], np.float32)
        ids = list(stored)
        matrix = np.stack([np.frombuffer(stored[i], dtype="<f4") for i in ids])
        semantic = dict(zip(ids, (matrix @ query_vector).astype(float).tolist(), strict=True))
    totals: dict[str, float] = {}
    for scores in (lexical, semantic):
        for fact, value in minmax(scores).items():
            totals[fact] = totals.get(fact, 0.0) + value / 2
    by_id = {f.id: f for f in facts}
    ranked = sorted(totals.items(), key=lambda pair: (-pair[1], pair[0]))
    return [FactHit(by_id[i], value) for i, value in ranked[:EVERY_FACT]]


def score(
    memory: Memory,
    dataset: Dataset,
    queries: Sequence[Query],
    nodes: Mapping[str, str],
) -> tuple[dict[str, dict[str, list[str]]], dict[str, float]]:
    """Each method's ranking per question, and the seconds each took in all."""
    doc_of = {node: doc for doc, node in nodes.items()}
    groups: dict[str, set[str]] = {}
    for doc in dataset.docs:
        groups.setdefault(str(dataset.group_of(doc)), set()).add(doc.id)
    source_of = {
        sample: memory.store.resolve_source(scope_of(dataset, sample)).id
        for sample in {str(dataset.group_of(q)) for q in queries}
    }
    every = memory.facts.recall(limit=EVERY_FACT)
    by_source: dict[str, list[Fact]] = {}
    for fact in every:
        by_source.setdefault(fact.source_id, []).append(fact)
    turns = StoreRetriever(memory, dataset, "hybrid")
    rankings: dict[str, dict[str, list[str]]] = {name: {} for name in METHODS}
    seconds = dict.fromkeys([*METHODS, AFRESH], 0.0)
    differ = [0]
    for done, query in enumerate(queries, 1):
        sample = str(dataset.group_of(query))
        allowed, home = groups[sample], source_of[sample]

        for turn in (0, 1) if done % 2 else (1, 0):
            started = time.perf_counter()
            if turn == 0:
                hits = memory.facts.search(query.text, sources=[home], limit=EVERY_FACT)
                facts = evidence_turns((h.fact for h in hits), doc_of)
                rankings["facts"][query.id] = in_group(facts, allowed)
                seconds["facts"] += time.perf_counter() - started
            else:
                before = search_facts_afresh(memory, query.text, home)
                seconds[AFRESH] += time.perf_counter() - started
        if [(h.fact.id, h.score) for h in hits] != [(h.fact.id, h.score) for h in before]:
            differ[0] += 1

        started = time.perf_counter()
        scoped = rank(by_source.get(home, []), query_terms(query.text), limit=EVERY_FACT)
        rankings["facts, conversation-scoped BM25"][query.id] = in_group(
            evidence_turns((h.fact for h in scoped), doc_of), allowed
        )
        seconds["facts, conversation-scoped BM25"] += time.perf_counter() - started

        started = time.perf_counter()
        rankings["turns"][query.id] = in_group(turns.retrieve(query, DEPTH), allowed)
        seconds["turns"] += time.perf_counter() - started

        started = time.perf_counter()
        rankings["fused"][query.id] = fuse(rankings["facts"][query.id], rankings["turns"][query.id])
        seconds["fused"] += time.perf_counter() - started
        if done % 250 == 0:
            log(f"{done}/{len(queries)} questions")
    timing = {name: round(s, 1) for name, s in seconds.items()}
    timing[DIFFER] = differ[0]
    return rankings, timing


def recall_of(
    dataset: Dataset, queries: Sequence[Query], ranked: Mapping[str, list[str]]
) -> EvidenceRecall:
    qrels = {q.id: dataset.qrels[q.id] for q in queries}
    categories = {q.id: int(q.meta["category"]) for q in queries}
    return evidence_recall(qrels, run_from_ranking(ranked), categories, ks=LOCOMO_KS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--limit-conversations", type=int, help="score only the first N conversations"
    )
    parser.add_argument("--data", type=Path, default=LOCOMO, help="locomo10.json")
    parser.add_argument(
        "--store",
        type=Path,
        help="where eval keeps its stores (default: stratamem's cache, as `stratamem eval`)",
    )
    args = parser.parse_args()
    load_start = os.getloadavg()
    git = git_state()
    started = time.perf_counter()

    dataset = load_locomo(args.data)
    samples = json.loads(args.data.read_text(encoding="utf-8"))
    chosen = samples[: args.limit_conversations] if args.limit_conversations else samples
    chosen_ids = [str(s["sample_id"]) for s in chosen]
    queries = [q for q in dataset.queries_in() if str(dataset.group_of(q)) in chosen_ids]

    cache = store_path(dataset, args.store or cache_dir_from_environment() / "eval")
    cache.parent.mkdir(parents=True, exist_ok=True)
    prepared = time.perf_counter()
    with Memory(cache) as memory:
        reused = memory.stats()["chunks"] >= len(dataset.docs) and not memory.indexes.pending()
        prepare(memory, dataset, progress=log)
    prepare_s = round(time.perf_counter() - prepared, 1)
    log(f"turn store {'reused' if reused else 'built'}: {cache}")

    with tempfile.TemporaryDirectory() as tmp, Memory(copy_store(cache, Path(tmp))) as memory:
        nodes = turn_nodes(memory, dataset, chosen_ids)
        log(f"writing the observations of {len(chosen)} conversations as facts")
        writes = write_facts(memory, chosen, nodes)
        log(f"facts: {writes}")
        visible = len(memory.facts.recall(limit=EVERY_FACT))
        embedder = memory.embedder.spec.name if memory.embedder is not None else None
        log(f"facts visible to a search: {visible}; scoring {len(queries)} questions")
        rankings, seconds = score(memory, dataset, queries, nodes)
        doc_of = {node: doc for doc, node in nodes.items()}
        cited = {
            doc_of[node]
            for fact in memory.facts.recall(limit=EVERY_FACT)
            for node in fact.evidence
            if node in doc_of
        }
    # The most a ranking of the facts' evidence can find: the question's evidence turns that
    # some fact cites.
    reachable = {q.id: [d for d in dataset.qrels[q.id] if d in cited] for q in queries}
    ceiling = recall_of(dataset, queries, reachable)

    results = {name: recall_of(dataset, queries, ranked) for name, ranked in rankings.items()}
    lengths = {
        name: {
            "mean": round(sum(map(len, ranked.values())) / max(1, len(ranked)), 1),
            "under_50": sum(1 for r in ranked.values() if len(r) < 50),
            "empty": sum(1 for r in ranked.values() if not r),
        }
        for name, ranked in rankings.items()
    }
    for name, found in results.items():
        log(f"{name}: " + " ".join(f"{k} {100 * v:.1f}" for k, v in found.overall.items()))
    command = "python benchmarks/locomo_facts.py"
    if args.limit_conversations:
        command += f" --limit-conversations {args.limit_conversations}"
    result = {
        "benchmark": "LoCoMo evidence recall from facts, turns and both",
        "command": command,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(load_start, os.getloadavg()),
        "git": git,
        "git_end": git_state(),
        "wall_s": round(time.perf_counter() - started),
        "embedder": embedder,
        "conversations": chosen_ids,
        "all_conversations": len(chosen) == len(samples),
        "questions": len(queries),
        "turn_store": {"reused": reused, "prepare_s": prepare_s, "docs": len(dataset.docs)},
        "writes": writes,
        "facts_visible": visible,
        "seconds": seconds,
        "ranking_lengths": lengths,
        "turns_cited_by_facts": len(cited),
        "facts_ceiling": {
            "overall": ceiling.overall["R@50"],
            "per_category": {c: v["R@50"] for c, v in ceiling.per_category.items()},
        },
        "methods": {
            name: {
                "label": METHODS[name],
                "overall": found.overall,
                "per_category": found.per_category,
                "counts": found.counts,
            }
            for name, found in results.items()
        },
        "paper": PAPER,
        "dataset_notes": dataset.notes,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "locomo_facts.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "locomo_facts.md").write_text(markdown(result))
    log(f"wrote {RESULTS}/locomo_facts.md in {result['wall_s']} s")


def pct(value: float) -> str:
    return f"{100 * value:.1f}"


def markdown(r: dict[str, Any]) -> str:
    m, w, methods = r["machine"], r["writes"], r["methods"]
    ks = [f"R@{k}" for k in LOCOMO_KS]
    header = "| " + " | ".join(f"{k} (%)" for k in ks)
    scope = (
        f"all {len(r['conversations'])} conversations"
        if r["all_conversations"]
        else f"the first {len(r['conversations'])} of LoCoMo's conversations only "
        f"({', '.join(r['conversations'])})"
    )
    lines = [
        "# LoCoMo evidence recall: facts, turns, and both",
        "",
        f"`{r['command']}` on {r['date']}, {m['cpus_used']} of {m['cpus']} CPUs, Python "
        f"{m['python']}; 1-minute load average {m['load_start'][0]} at the start and "
        f"{m['load_end'][0]} at the end (the machine is shared). Code: {r['git']['head'][:12]}"
        + (" with uncommitted changes under `src/`." if r["git"]["modified"] else ".")
        + (
            ""
            if r["git_end"] == r["git"]
            else f" The checkout changed during the run (at the end: {r['git_end']['head'][:12]}"
            f"{', modified' if r['git_end']['modified'] else ''}); the process ran the code "
            "it imported at the start."
        )
        + f" Run time {r['wall_s']} s.",
        "",
        f"Scored: {scope}, {r['questions']:,} questions with evidence (every category, "
        "adversarial included). Turns: the store `stratamem eval` builds "
        f"({r['turn_store']['docs']:,} turns, embedder {r['embedder']}, "
        + ("reused from its cache" if r["turn_store"]["reused"] else "built in this run")
        + f", {r['turn_store']['prepare_s']} s); the facts are written to a copy of it. "
        "See the script's docstring for each method.",
        "",
        "## Overall",
        "",
        "| method " + header + " | seconds | ms/question |",
        "| --- " + "| ---: " * len(ks) + "| ---: | ---: |",
    ]
    for name, v in methods.items():
        cells = " | ".join(pct(v["overall"][k]) for k in ks)
        per = 1000 * r["seconds"][name] / max(1, r["questions"])
        lines.append(f"| {v['label']} | {cells} | {r['seconds'][name]} | {per:.1f} |")
    for name, values in r["paper"].items():
        cells = " | ".join(pct(values[k]) for k in ks)
        lines.append(f"| {name} | {cells} | – | – |")
    lines += [
        "",
        "The paper's rows are Maharana et al. 2024 (LoCoMo), RAG table, retrieval over "
        "observations and over dialog turns (DRAGON), as published, not measured here. "
        "*seconds*: the time spent on that method over all questions (the fused row: the "
        "fusion alone); *ms/question* the same divided by the questions.",
        "",
        "## Speed of the facts search",
        "",
        "| facts search (a) | seconds | ms/question |",
        "| --- | ---: | ---: |",
        f"| before: every fact read and scored afresh per query | {r['seconds'][AFRESH]} | "
        f"{1000 * r['seconds'][AFRESH] / max(1, r['questions']):.1f} |",
        f"| now: the reader's index, kept while the store is unchanged | {r['seconds']['facts']} | "
        f"{1000 * r['seconds']['facts'] / max(1, r['questions']):.1f} |",
        "",
        "Both ran for every question in this run, interleaved (which went first alternating by "
        f"question); questions whose ranked facts or scores differ between the two: "
        f"{r['seconds'][DIFFER]}. Each includes the query's embedding (the same model call).",
        "",
        "## By category",
        "",
        "| category | questions | method " + header + " |",
        "| --- | ---: | --- " + "| ---: " * len(ks) + "|",
    ]
    first = next(iter(methods.values()))
    for category in first["per_category"]:
        for v in methods.values():
            cells = " | ".join(pct(v["per_category"][category][k]) for k in ks)
            lines.append(f"| {category} | {first['counts'][category]} | {v['label']} | {cells} |")
    visible = r["facts_visible"]
    lines += [
        "",
        f"Categories: {', '.join(f'{n} {name}' for n, name in CATEGORIES.items())}.",
        "",
        "## Writing the facts",
        "",
        f"{w['observations']:,} observations; {w['remember_calls']:,} `remember` calls "
        f"in {w['write_seconds']} s: **{w['remember_per_second']} facts/s** "
        f"({w['mean_remember_ms']} ms per call, reconcile and write, one transaction each). "
        f"Facts recorded: {w.get('facts_recorded', 0):,}; expired: {w.get('facts_expired', 0)}; "
        f"calls that changed nothing (the same sentence already said by the same speaker): "
        f"{w.get('remember_unchanged', 0)}.",
        "",
        "## What was mapped and dropped",
        "",
        f"- Dialog ids cited: {w['dialog_ids']:,}; {w.get('dialog_ids_unresolved', 0)} name no "
        f"turn of the conversation and were dropped "
        f"({w.get('observations_with_unresolved_ids', 0)} observations lost one or more, "
        f"{w.get('observations_skipped_no_evidence', 0)} were left with none and not written).",
        f"- {w.get('observations_with_joined_ids', 0)} observations cite several ids in one "
        'string (`"D26:14, D26:34, D26:42"`); they were split as LoCoMo\'s evidence is '
        "(`split_evidence`).",
        "- A dialog id maps to its turn's chunk by the chunk's `source_ref` (the doc id), one "
        "chunk per turn in the eval store.",
        f"- Facts a search ranks: `recall()` returns {visible:,} of the "
        f"{w.get('facts_recorded', 0):,} recorded; `search_facts` ranks what it returns.",
        "- (a) and (a') rank the question's conversation's facts alone; (a) fuses BM25 with "
        "the cosine of each fact's vector (mean of the two, each min-max scaled), (a') is "
        "BM25 alone.",
    ]
    for name, n in r["ranking_lengths"].items():
        lines.append(
            f"- {methods[name]['label']}: {n['mean']} turns returned per question on average, "
            f"fewer than 50 for {n['under_50']} questions, none for {n['empty']}."
        )
    top = r["facts_ceiling"]
    lines += [
        f"- The facts cite {r['turns_cited_by_facts']:,} distinct turns. The question "
        "evidence they cite at all, the most (a) could find at any k: "
        f"{pct(top['overall'])} % overall; "
        + ", ".join(f"{c} {pct(v)} %" for c, v in top["per_category"].items())
        + ".",
        "- A ranking shorter than k scores what it holds: a question whose words match few "
        "facts gets a short facts list.",
    ]
    lines += ["", "Dataset notes:", ""] + [f"- {note}" for note in r["dataset_notes"]] + [""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
