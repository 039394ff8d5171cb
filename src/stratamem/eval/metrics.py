"""Ranking metrics with trec_eval's definitions, through ``pytrec_eval`` (the ``eval`` extra,
imported when a run is first scored: reading datasets needs none of it).

Metrics are named as ``pytrec_eval`` reports them: ``ndcg_cut_10``, ``recall_100``,
``recip_rank`` (MRR), ``P_5``, ``map``. The ones we use:

* ``ndcg_cut_k``: DCG@k / ideal DCG@k with DCG = Σ rel_i / log2(i + 1) over ranks
  i = 1..k. trec_eval's gain is the relevance grade itself (linear, not 2^rel − 1), and
  grades <= 0 add nothing.
* ``recall_k``: relevant docs in the top k / all relevant docs of the query.
* ``recip_rank``: 1 / rank of the first relevant doc (0 when none is retrieved).
* ``P_k``: relevant docs in the top k / k.

A doc is relevant when its qrels score is >= 1. Means are over every query in the qrels
that has a relevant doc; a query the run lacks scores 0 (trec_eval's ``-c``;
``pytrec_eval`` itself would leave it out of the mean).

Ties: trec_eval ranks a run by score, descending, and breaks ties by doc id, descending
as strings, not by the order the run lists them. :func:`run_from_ranking` turns a ranked
list into strictly decreasing scores so that the ranking we produced is the one scored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import cache
from types import ModuleType

from stratamem.extras import require

Run = dict[str, dict[str, float]]

BEIR_METRICS = ("ndcg_cut_10", "recall_100", "recip_rank")

_CUT = re.compile(r"(?P<base>.+)_(?P<k>\d+)")
# Measures trec_eval computes at cut-offs, asked for as "<base>.<k>".
_WITH_CUTOFF = frozenset({"P", "map_cut", "ndcg_cut", "recall", "relative_P", "success"})
# Fractional cut-offs (Rprec_mult_0.20) and text-valued measures: not offered.
_NOT_OFFERED = frozenset({"Rprec_mult", "iprec_at_recall", "relstring", "runid"})


def run_from_ranking(rankings: Mapping[str, Sequence[str]]) -> Run:
    """A run whose scores reproduce each query's order: n, n − 1, …, 1 for n docs.

    A doc listed twice for one query is a ``ValueError``: trec_eval would keep only one
    of the two places, silently.
    """
    run: Run = {}
    for qid, ranking in rankings.items():
        scores: dict[str, float] = {}
        for position, doc_id in enumerate(ranking):
            if doc_id in scores:
                raise ValueError(f"query {qid!r}: doc {doc_id!r} is ranked twice")
            scores[doc_id] = float(len(ranking) - position)
        run[qid] = scores
    return run


def evaluate_per_query(
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]],
    metrics: Sequence[str] = BEIR_METRICS,
) -> dict[str, dict[str, float]]:
    """Each metric for each query of ``qrels`` that has a relevant doc (see the module doc)."""
    measures = {name: _measure(name) for name in metrics}
    judged = {
        qid: {doc: int(score) for doc, score in rels.items()}
        for qid, rels in qrels.items()
        if any(score >= 1 for score in rels.values())
    }
    if not judged:
        return {}
    complete = {qid: {doc: float(s) for doc, s in run.get(qid, {}).items()} for qid in judged}
    evaluator = trec_eval().RelevanceEvaluator(judged, set(measures.values()))
    scored = evaluator.evaluate(complete)
    # pytrec_eval reports "ndcg_cut.10" as "ndcg_cut_10".
    keys = {name: measure.replace(".", "_") for name, measure in measures.items()}
    return {qid: {name: float(scored[qid][keys[name]]) for name in metrics} for qid in judged}


def evaluate(
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]],
    metrics: Sequence[str] = BEIR_METRICS,
) -> dict[str, float]:
    """The mean of each metric over the judged queries (0.0 each when there are none)."""
    return mean_scores(evaluate_per_query(qrels, run, metrics), metrics)


def mean_scores(
    per_query: Mapping[str, Mapping[str, float]], metrics: Sequence[str]
) -> dict[str, float]:
    """The arithmetic mean of each metric over the queries given."""
    if not per_query:
        return dict.fromkeys(metrics, 0.0)
    count = len(per_query)
    return {name: sum(values[name] for values in per_query.values()) / count for name in metrics}


def _measure(name: str) -> str:
    """``ndcg_cut_10`` → ``ndcg_cut.10``, the spelling ``pytrec_eval`` takes as input."""
    match = _CUT.fullmatch(name)
    if match and match.group("base") in _WITH_CUTOFF and int(match.group("k")) > 0:
        return f"{match.group('base')}.{int(match.group('k'))}"
    if name in _WITH_CUTOFF:
        raise ValueError(f"metric {name!r} needs a cut-off, e.g. {name}_10")
    if name in _supported() - _NOT_OFFERED:
        return name
    raise ValueError(
        f"unknown metric {name!r}; use a trec_eval measure such as ndcg_cut_10, recall_100, "
        f"recip_rank, P_10 (known: {', '.join(sorted(_supported() - _NOT_OFFERED))})"
    )


@cache
def _supported() -> frozenset[str]:
    return frozenset(trec_eval().supported_measures)


def trec_eval(what: str = "scoring with trec_eval's metrics") -> ModuleType:
    """``pytrec_eval``; a :class:`~stratamem.errors.MissingExtraError` saying that ``what``
    needs the ``eval`` extra when it is not installed."""
    return require("pytrec_eval", "eval", what)
