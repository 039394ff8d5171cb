"""Evaluation: datasets (BEIR, LoCoMo), trec_eval metrics, and reports of scored runs."""

from stratamem.eval.beir import load_beir
from stratamem.eval.datasets import (
    Dataset,
    Doc,
    Query,
    Retriever,
    hash_split,
)
from stratamem.eval.loading import load_dataset
from stratamem.eval.locomo import (
    CATEGORIES,
    LOCOMO_KS,
    SESSION_KS,
    EvidenceRecall,
    evidence_recall,
    load_locomo,
)
from stratamem.eval.metrics import (
    BEIR_METRICS,
    evaluate,
    evaluate_per_query,
    run_from_ranking,
)
from stratamem.eval.report import Baseline, EvalResult, run_retriever, write_report

__all__ = [
    "BEIR_METRICS",
    "CATEGORIES",
    "LOCOMO_KS",
    "SESSION_KS",
    "Baseline",
    "Dataset",
    "Doc",
    "EvalResult",
    "EvidenceRecall",
    "Query",
    "Retriever",
    "evaluate",
    "evaluate_per_query",
    "evidence_recall",
    "hash_split",
    "load_beir",
    "load_dataset",
    "load_locomo",
    "run_from_ranking",
    "run_retriever",
    "write_report",
]
