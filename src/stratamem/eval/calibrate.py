"""Fitting the relevance calibration on judged pairs, and measuring it.

**Judged pairs.** Each query of a dataset's ``tune`` half (:func:`~stratamem.eval.datasets.
hash_split`) is searched as ``stratamem eval`` searches it (hybrid, within its own
conversation for LoCoMo); each of its top ``k`` hits is a pair, relevant when its document is
in the query's qrels (LoCoMo: one of the question's evidence turns). Fact pairs come from
LoCoMo's observations written as facts (:func:`write_observations`, as
``benchmarks/locomo_facts.py`` writes them): each question's fact search within its
conversation, a fact relevant when one of its evidence turns is.

**Fit.** One logistic model per set of signals (:data:`~stratamem.retrieval.relevance.
MODELS`) over the hits' raw signals (``explain["signals"]``; a fact hit's
:meth:`~stratamem.memory.search.FactHit.signals`).

**Threshold.** The default floor of ``nothing_relevant`` is the value of the top hit's
relevance that best separates, on the ``tune`` half, queries searched where their answer is
(their own conversation or corpus) from the same queries searched where nothing is (the next
conversation; another corpus): the one with the highest balanced accuracy.

**Measures.** :func:`brier`, :func:`reliability` (a table of bins: mean predicted, share
relevant, count) and :func:`auroc` (Mann-Whitney: the chance a positive scores above a
negative, ties counting a half).
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from stratamem import Memory
from stratamem.config import SearchConfig
from stratamem.eval.datasets import Dataset, Query
from stratamem.eval.runner import prepare, scope_of
from stratamem.retrieval.relevance import MODELS, Calibration, fit_model

K = 10
# Facts are recorded a millisecond apart from this instant, so that their ids are the same in
# every run (as benchmarks/locomo_facts.py records them).
RECORDED = datetime(2024, 1, 1, tzinfo=UTC)
EVERY_FACT = 1_000_000


@dataclass(frozen=True, slots=True)
class Ranked:
    """One query's hits as searched: each hit's document, raw signals and relevance."""

    query: str
    docs: tuple[str, ...]
    signals: tuple[dict[str, float], ...]
    relevance: tuple[float, ...]

    @property
    def top(self) -> float:
        return self.relevance[0] if self.relevance else 0.0


def search_chunks(
    memory: Memory,
    queries: Sequence[Query],
    sources: Callable[[Query], Sequence[str]],
    *,
    k: int = K,
    config: SearchConfig | None = None,
) -> list[Ranked]:
    """Each query searched (hybrid) within ``sources(query)`` (none: the whole store)."""
    out = []
    for query in queries:
        response = memory.search(query.text, sources=sources(query), limit=k, config=config)
        out.append(
            Ranked(
                query.id,
                tuple(h.source_ref or h.node_id for h in response.hits),
                tuple(dict(h.explain.get("signals") or {}) for h in response.hits),
                tuple(h.relevance or 0.0 for h in response.hits),
            )
        )
    return out


def own_sources(dataset: Dataset) -> Callable[[Query], tuple[str, ...]]:
    """The query's own group (LoCoMo: its conversation), as ``stratamem eval`` searches."""
    if dataset.group_key is None:
        return lambda query: ()
    return lambda query: (scope_of(dataset, str(dataset.group_of(query))),)


def next_group_sources(dataset: Dataset) -> Callable[[Query], tuple[str, ...]]:
    """The group after the query's own (in sorted order, the last followed by the first):
    where nothing answers it."""
    groups = sorted({str(dataset.group_of(d)) for d in dataset.docs})
    after = {g: groups[(i + 1) % len(groups)] for i, g in enumerate(groups)}
    return lambda query: (scope_of(dataset, after[str(dataset.group_of(query))]),)


def judged(ranked: Iterable[Ranked], qrels: Mapping[str, Mapping[str, int]]) -> list[Pair]:
    """Every hit as a judged pair: its signals and whether its document is relevant."""
    pairs = []
    for found in ranked:
        wanted = {d for d, grade in qrels.get(found.query, {}).items() if grade > 0}
        for doc, signals, shown in zip(found.docs, found.signals, found.relevance, strict=True):
            pairs.append(Pair(signals, doc in wanted, shown))
    return pairs


@dataclass(frozen=True, slots=True)
class Pair:
    signals: dict[str, float]
    relevant: bool
    relevance: float = 0.0


def fit(
    chunks: Sequence[Pair],
    facts: Sequence[Pair],
    *,
    name: str,
    threshold: float,
    fitted_on: Mapping[str, Any],
) -> Calibration:
    """Every model of :data:`MODELS` fitted on the pairs of its kind (a kind without pairs
    keeps no model)."""
    models = []
    for model, kind, features in MODELS:
        pairs = chunks if kind == "chunk" else facts
        if not pairs:
            continue
        models.append(
            fit_model(
                model, kind, features, [p.signals for p in pairs], [p.relevant for p in pairs]
            )
        )
    return Calibration(name, tuple(models), threshold, dict(fitted_on))


def choose_threshold(answered: Sequence[float], unanswered: Sequence[float]) -> float:
    """The top relevance that best tells ``answered`` queries from ``unanswered`` ones (the
    highest balanced accuracy; of equals, the lowest), a midpoint between two values seen."""
    if not answered or not unanswered:
        raise ValueError("choosing a threshold needs queries of both kinds")
    values = sorted(set(answered) | set(unanswered))
    cuts = [(a + b) / 2 for a, b in itertools.pairwise(values)] or values
    best = (-1.0, 0.5)
    for cut in cuts:
        tpr = sum(1 for v in answered if v >= cut) / len(answered)
        tnr = sum(1 for v in unanswered if v < cut) / len(unanswered)
        score = (tpr + tnr) / 2
        if score > best[0] + 1e-12:
            best = (score, cut)
    return round(best[1], 4)


# -- measures ------------------------------------------------------------------------------


def brier(predicted: Sequence[float], relevant: Sequence[bool]) -> float:
    """The mean squared difference of each prediction and its 0/1 outcome."""
    if not predicted:
        return math.nan
    return sum((p - float(r)) ** 2 for p, r in zip(predicted, relevant, strict=True)) / len(
        predicted
    )


def reliability(
    predicted: Sequence[float], relevant: Sequence[bool], *, bins: int = 10
) -> list[dict[str, Any]]:
    """Per bin of width ``1/bins``: its range, how many, mean predicted, share relevant."""
    rows = []
    for b in range(bins):
        low, high = b / bins, (b + 1) / bins
        inside = [
            (p, r)
            for p, r in zip(predicted, relevant, strict=True)
            if low <= p < high or (b == bins - 1 and p == 1.0)
        ]
        rows.append(
            {
                "bin": f"{low:.1f}-{high:.1f}",
                "count": len(inside),
                "mean_predicted": round(sum(p for p, _ in inside) / len(inside), 4)
                if inside
                else None,
                "share_relevant": round(sum(1 for _, r in inside if r) / len(inside), 4)
                if inside
                else None,
            }
        )
    return rows


def expected_calibration_error(predicted: Sequence[float], relevant: Sequence[bool]) -> float:
    """Σ over the 10 bins of (count / n) · |mean predicted − share relevant|."""
    n = len(predicted)
    if not n:
        return math.nan
    total = 0.0
    for row in reliability(predicted, relevant):
        if row["count"]:
            total += row["count"] / n * abs(row["mean_predicted"] - row["share_relevant"])
    return total


def auroc(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """The chance a positive scores above a negative (ties count a half)."""
    if not positives or not negatives:
        return math.nan
    ordered = sorted(negatives)
    wins = 0.0
    for value in positives:
        below = bisect.bisect_left(ordered, value)
        ties = bisect.bisect_right(ordered, value) - below
        wins += below + ties / 2
    return wins / (len(positives) * len(negatives))


# -- LoCoMo's observations as facts ----------------------------------------------------------------


def turn_nodes(memory: Memory, dataset: Dataset) -> dict[str, str]:
    """Doc id (``conv-26|D1:3``) → the node id of its turn's chunk."""
    nodes: dict[str, str] = {}
    for sample in sorted({str(dataset.group_of(d)) for d in dataset.docs}):
        source = memory.store.resolve_source(scope_of(dataset, sample))
        for chunk in memory.store.iter_chunks(source.id):
            if chunk.source_ref:
                nodes[chunk.source_ref] = chunk.id
    return nodes


def write_observations(memory: Memory, locomo_json: Path, nodes: Mapping[str, str]) -> int:
    """Each LoCoMo observation remembered as a fact of its speaker (predicate ``observed``,
    valid from its session's date, its cited turns as evidence), as
    ``benchmarks/locomo_facts.py`` writes them; how many were written."""
    from stratamem.eval.locomo import parse_date_time, split_evidence

    samples = json.loads(locomo_json.read_text(encoding="utf-8"))
    calls = 0
    for sample in samples:
        sample_id, conversation = sample["sample_id"], sample["conversation"]
        for key, by_speaker in sample["observation"].items():
            session = key.removesuffix("_observation")
            when = parse_date_time(conversation[f"{session}_date_time"]).replace(tzinfo=UTC)
            for speaker, said in by_speaker.items():
                for sentence, cited in said:
                    raw = cited if isinstance(cited, list) else [cited]
                    ids = [part for entry in raw for part in split_evidence(str(entry))]
                    evidence = [
                        nodes[f"{sample_id}|{i}"] for i in ids if f"{sample_id}|{i}" in nodes
                    ]
                    if not evidence:
                        continue
                    memory.facts.remember(
                        f"person:{speaker}",
                        "observed",
                        sentence,
                        valid_from=when,
                        evidence=evidence,
                        many=True,
                        now=RECORDED + timedelta(milliseconds=calls),
                    )
                    calls += 1
    return calls


def search_facts(
    memory: Memory,
    dataset: Dataset,
    queries: Sequence[Query],
    sources: Callable[[Query], Sequence[str]],
    doc_of: Mapping[str, str],
    *,
    k: int = K,
) -> list[Ranked]:
    """Each question's fact search within ``sources(query)``; a fact's "document" is the
    ``|``-joined docs of its evidence turns (see :func:`judged_facts`)."""
    out = []
    for query in queries:
        hits = memory.facts.search(query.text, sources=list(sources(query)), limit=k)
        out.append(
            Ranked(
                query.id,
                tuple("\t".join(doc_of[n] for n in h.fact.evidence if n in doc_of) for h in hits),
                tuple(h.signals() for h in hits),
                tuple(h.relevance or 0.0 for h in hits),
            )
        )
    return out


def judged_facts(ranked: Iterable[Ranked], qrels: Mapping[str, Mapping[str, int]]) -> list[Pair]:
    """Each fact hit as a pair: relevant when one of its evidence turns is."""
    pairs = []
    for found in ranked:
        wanted = {d for d, grade in qrels.get(found.query, {}).items() if grade > 0}
        for docs, signals, shown in zip(found.docs, found.signals, found.relevance, strict=True):
            pairs.append(Pair(signals, bool(set(docs.split("\t")) & wanted), shown))
    return pairs


# -- the whole fit ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Judging:
    """What one split of the datasets gave: chunk and fact pairs, and each query's top
    relevance where its answer is and where nothing is."""

    chunks: list[Pair]
    facts: list[Pair]
    answered: list[float]
    unanswered: list[float]
    per_dataset: dict[str, dict[str, list[float]]]
    # The searches themselves, by dataset: where the answer is and where nothing is.
    own: dict[str, list[Ranked]]
    elsewhere: dict[str, list[Ranked]]
    fact_searches: list[Ranked]
    fact_elsewhere: list[Ranked]


def judge(
    stores: Sequence[tuple[Dataset, Memory]],
    split: str,
    *,
    facts: Memory | None = None,
    k: int = K,
    config: SearchConfig | None = None,
    progress: Callable[[str], None] | None = None,
) -> Judging:
    """Search every query of ``split`` of each dataset in its own store (and group), and
    again where nothing answers it: the next conversation for a dataset of groups, the next
    dataset's store (the last's being the first's) otherwise. ``facts``: a copy of the
    LoCoMo store holding its observations as facts (:func:`write_observations`)."""
    say = progress or (lambda _: None)
    out = Judging([], [], [], [], {}, {}, {}, [], [])
    ungrouped = [i for i, (d, _) in enumerate(stores) if d.group_key is None]
    for position, (dataset, memory) in enumerate(stores):
        queries = [q for q in dataset.queries_in(split) if dataset.qrels.get(q.id)]
        say(f"{dataset.name} {split}: {len(queries)} queries")
        own = search_chunks(memory, queries, own_sources(dataset), k=k, config=config)
        out.chunks.extend(judged(own, dataset.qrels))
        tops = {"answered": [r.top for r in own], "unanswered": []}
        if dataset.group_key is not None:
            elsewhere = search_chunks(
                memory, queries, next_group_sources(dataset), k=k, config=config
            )
            tops["unanswered"] = [r.top for r in elsewhere]
        elif len(ungrouped) > 1:
            other = stores[ungrouped[(ungrouped.index(position) + 1) % len(ungrouped)]][1]
            elsewhere = search_chunks(other, queries, lambda q: (), k=k, config=config)
            tops["unanswered"] = [r.top for r in elsewhere]
        out.own[dataset.name] = own
        if tops["unanswered"]:
            out.elsewhere[dataset.name] = elsewhere
            # A hit where nothing answers the query is judged too: not relevant.
            out.chunks.extend(judged(elsewhere, {}))
        out.answered.extend(tops["answered"])
        out.unanswered.extend(tops["unanswered"])
        out.per_dataset[dataset.name] = tops
        if facts is not None and dataset.group_key is not None:
            doc_of = {node: doc for doc, node in turn_nodes(facts, dataset).items()}
            found = search_facts(facts, dataset, queries, own_sources(dataset), doc_of, k=k)
            out.fact_searches.extend(found)
            out.facts.extend(judged_facts(found, dataset.qrels))
            away = next_group_sources(dataset)
            found = search_facts(facts, dataset, queries, away, doc_of, k=k)
            out.fact_elsewhere.extend(found)
            out.facts.extend(judged_facts(found, {}))
    return out


def facts_store(dataset: Dataset, turns: Path, locomo_json: Path) -> Path:
    """A copy of LoCoMo's turn store (``turns``) holding its observations as facts, kept
    beside it as ``<name>-facts.db`` and made the first time it is asked for (the turn store
    itself is left as ``stratamem eval`` keeps it)."""
    import shutil

    target = turns.with_name(turns.stem + "-facts.db")
    if target.exists():
        return target
    building = turns.with_name(turns.stem + "-facts.building.db")
    for file in turns.parent.glob(f"{building.name}*"):
        file.unlink()
    for file in turns.parent.glob(f"{turns.name}*"):
        if file.name.endswith("-shm"):
            continue  # shared memory of the open store, rebuilt by whoever opens the copy
        shutil.copy2(file, building.parent / (building.name + file.name[len(turns.name) :]))
    with Memory(building) as memory:
        write_observations(memory, locomo_json, turn_nodes(memory, dataset))
    for file in sorted(building.parent.glob(f"{building.name}*")):
        file.rename(target.parent / (target.name + file.name[len(building.name) :]))
    return target


def fit_calibration(
    stores: Sequence[tuple[Dataset, Memory]],
    *,
    facts: Memory | None = None,
    name: str,
    k: int = K,
    config: SearchConfig | None = None,
    progress: Callable[[str], None] | None = None,
) -> tuple[Calibration, Judging]:
    """The calibration fitted on the ``tune`` halves of ``stores`` (each prepared first: its
    dataset ingested and embedded where it is not yet; see :func:`judge`), and the judging it
    was fitted on."""
    from stratamem.eval.datasets import TUNE

    for dataset, memory in stores:
        prepare(memory, dataset, progress=progress)
    judging = judge(stores, TUNE, facts=facts, k=k, config=config, progress=progress)
    provisional = fit(judging.chunks, judging.facts, name=name, threshold=0.5, fitted_on={})
    answered = [_top(provisional, r) for rs in judging.own.values() for r in rs]
    unanswered = [_top(provisional, r) for rs in judging.elsewhere.values() for r in rs]
    threshold = choose_threshold(answered, unanswered) if unanswered else 0.5
    fitted_on = {
        "split": TUNE,
        "datasets": [d.name for d, _ in stores],
        "hits_per_query": k,
        "chunk_pairs": len(judging.chunks),
        "chunk_relevant": sum(1 for p in judging.chunks if p.relevant),
        "fact_pairs": len(judging.facts),
        "fact_relevant": sum(1 for p in judging.facts if p.relevant),
        "threshold": "the top relevance best telling own-corpus from other-corpus searches",
    }
    calibration = fit(
        judging.chunks, judging.facts, name=name, threshold=threshold, fitted_on=fitted_on
    )
    return calibration, judging


def _top(calibration: Calibration, ranked: Ranked) -> float:
    """The relevance ``calibration`` gives the first hit of a search (0 for none)."""
    return calibration.chunk(ranked.signals[0]) if ranked.signals else 0.0
