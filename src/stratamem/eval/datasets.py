"""Evaluation datasets: documents, queries, relevance judgements and query splits.

This module is the model every reader fills in (:class:`Dataset` and its parts, the splits,
the qrels and JSON Lines readers); the layouts are read in :mod:`stratamem.eval.beir` and
:mod:`stratamem.eval.locomo`, and :func:`stratamem.eval.loading.load_dataset` tells them
apart.

Splits name query ids. ``test`` holds every query with at least one relevant judgement
(score > 0) in the test qrels: it is what a reported number is computed on. ``tune`` and
``heldout`` are a deterministic 50/50 partition of ``test`` (see :func:`hash_split`) for
a step that fits weights: it fits on ``tune`` and reports on ``heldout``, never on the
queries it saw. Qrels hold every judgement read, scores as written (trec_eval counts a
score <= 0 as judged non-relevant).
"""

from __future__ import annotations

import csv
import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from stratamem.errors import SourceFormatError

Qrels = dict[str, dict[str, int]]
Level = Literal["turn", "session"]
Kind = Literal["beir", "locomo", "locomo-sessions"]

TEST = "test"
TUNE = "tune"
HELDOUT = "heldout"


@dataclass(frozen=True, slots=True)
class Doc:
    """One retrievable unit: a BEIR document, a LoCoMo dialog turn or session."""

    id: str
    text: str
    title: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Query:
    """One question; ``meta`` carries e.g. LoCoMo's ``sample_id``, ``category``, ``answer``."""

    id: str
    text: str
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Dataset:
    """A corpus with its queries, qrels (query id → doc id → score) and splits.

    ``group_key`` names the ``Query.meta`` / ``Doc.meta`` key that confines retrieval:
    a query may only be answered from docs with the same value (LoCoMo: ``sample_id``,
    one conversation). ``kind`` picks the metrics (``beir``: nDCG@10, recall@100, MRR;
    ``locomo`` and ``locomo-sessions``: evidence recall@k per category). ``stats`` and
    ``notes`` record what the loader counted, repaired or left out.
    """

    name: str
    docs: list[Doc]
    queries: list[Query]
    qrels: Qrels
    splits: dict[str, list[str]]
    group_key: str | None = None
    kind: Kind = "beir"
    stats: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def split_ids(self, split: str = TEST) -> list[str]:
        """The query ids of ``split``; a clear ``ValueError`` names the known splits."""
        try:
            return self.splits[split]
        except KeyError:
            known = ", ".join(sorted(self.splits))
            raise ValueError(
                f"dataset {self.name!r} has no split {split!r}; known: {known}"
            ) from None

    def queries_in(self, split: str = TEST) -> list[Query]:
        """The queries of ``split``, in the order they were read."""
        wanted = set(self.split_ids(split))
        return [query for query in self.queries if query.id in wanted]

    def group_of(self, item: Doc | Query) -> str | None:
        """The group a doc or query belongs to, or ``None`` where retrieval is not grouped."""
        if self.group_key is None:
            return None
        value = item.meta.get(self.group_key)
        return None if value is None else str(value)

    def doc_ids_by_group(self) -> dict[str | None, list[str]]:
        """Doc ids per group value (a single ``None`` group where ``group_key`` is unset)."""
        groups: dict[str | None, list[str]] = {}
        for doc in self.docs:
            groups.setdefault(self.group_of(doc), []).append(doc.id)
        return groups


class Retriever(Protocol):
    """What an evaluation runs: ranked doc ids for a query, best first, at most ``k``.

    Where the dataset has a ``group_key``, the retriever must answer only from docs of the
    query's group (:meth:`Dataset.group_of`); the harness drops, and counts, any others.
    """

    def retrieve(self, query: Query, k: int) -> list[str]: ...


def hash_split(ids: Sequence[str], *, salt: str = "stratamem") -> tuple[list[str], list[str]]:
    """A deterministic 50/50 partition of ``ids`` into (``tune``, ``heldout``).

    Ids are ordered by ``sha256(salt + id)`` and the first half (the larger one when the
    count is odd) is ``tune``. The result depends only on the set of ids, not on their
    order, the platform or ``PYTHONHASHSEED``; each part keeps the input order.
    """
    ranked = sorted(set(ids), key=lambda i: hashlib.sha256(f"{salt}{i}".encode()).hexdigest())
    tune = set(ranked[: (len(ranked) + 1) // 2])
    return [i for i in ids if i in tune], [i for i in ids if i not in tune]


def evaluation_splits(evaluated: Sequence[str]) -> dict[str, list[str]]:
    """``test`` (every evaluated query) plus its ``tune``/``heldout`` halves."""
    tune, heldout = hash_split(evaluated)
    return {TEST: list(evaluated), TUNE: tune, HELDOUT: heldout}


def read_qrels(path: Path) -> Qrels:
    """A ``query-id<TAB>corpus-id<TAB>score`` file; a header line is skipped."""
    qrels: Qrels = {}
    with path.open(encoding="utf-8", newline="") as handle:
        for number, row in enumerate(csv.reader(handle, delimiter="\t"), start=1):
            if not row or (number == 1 and row[0] == "query-id"):
                continue
            if len(row) != 3:
                raise SourceFormatError(
                    str(path), f"{number}", f"expected 3 tab-separated fields, got {len(row)}"
                )
            qid, doc_id, score = row
            try:
                qrels.setdefault(qid, {})[doc_id] = int(score)
            except ValueError:
                raise SourceFormatError(
                    str(path), f"{number}", f"score {score!r} is not an integer"
                ) from None
    return qrels


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; anything else is a format error."""
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SourceFormatError(str(path), f"{number}", f"invalid JSON: {exc}") from None
            if not isinstance(row, dict):
                raise SourceFormatError(str(path), f"{number}", "expected a JSON object")
            yield number, row
