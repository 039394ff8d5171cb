"""BEIR: a folder of ``corpus.jsonl``, ``queries.jsonl`` and qrels (SciFact, Cranfield).

``corpus.jsonl`` holds ``_id``, ``title`` and ``text``, ``queries.jsonl`` ``_id`` and
``text``; the test qrels are ``qrels/test.tsv`` (BEIR's own layout), ``qrels_test.tsv`` or
``qrels.tsv``: tab-separated ``query-id corpus-id score`` with a header line.
``qrels/train.tsv``, ``qrels/dev.tsv`` (or ``qrels_train.tsv``, ``qrels_dev.tsv``) add
``train`` and ``dev`` splits. Only queries with a relevant test judgement are evaluated.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from stratamem.errors import SourceFormatError
from stratamem.eval.datasets import (
    TEST,
    Dataset,
    Doc,
    Qrels,
    Query,
    evaluation_splits,
    read_jsonl,
    read_qrels,
)

TEST_QRELS = ("qrels/test.tsv", "qrels_test.tsv", "qrels.tsv")
_EXTRA_SPLITS = ("train", "dev")


def is_beir(path: Path) -> bool:
    """Whether ``path`` is a folder holding ``corpus.jsonl`` and ``queries.jsonl``."""
    return (
        path.is_dir() and (path / "corpus.jsonl").is_file() and (path / "queries.jsonl").is_file()
    )


def load_beir(root: Path, *, name: str | None = None) -> Dataset:
    """A BEIR folder; only queries with a relevant test judgement are evaluated."""
    test_path = next((root / rel for rel in TEST_QRELS if (root / rel).is_file()), None)
    if test_path is None:
        raise ValueError(f"{root}: no test qrels; looked for {', '.join(TEST_QRELS)}")

    docs = [
        Doc(
            id=str(row["_id"]),
            text=str(row.get("text") or ""),
            title=str(row.get("title") or ""),
            meta={k: v for k, v in row.items() if k not in ("_id", "text", "title")},
        )
        for row in _rows(root / "corpus.jsonl", required=("_id",))
    ]
    queries = [
        Query(
            id=str(row["_id"]),
            text=str(row.get("text") or ""),
            meta={k: v for k, v in row.items() if k not in ("_id", "text")},
        )
        for row in _rows(root / "queries.jsonl", required=("_id", "text"))
    ]
    query_ids = {query.id for query in queries}
    doc_ids = {doc.id for doc in docs}

    qrels: Qrels = {}
    split_qrels = {TEST: read_qrels(test_path)}
    for split in _EXTRA_SPLITS:
        for rel in (f"qrels/{split}.tsv", f"qrels_{split}.tsv"):
            if (root / rel).is_file():
                split_qrels[split] = read_qrels(root / rel)
                break

    notes = [f"test qrels: {test_path.relative_to(root)}"]
    stats = {"docs": len(docs), "queries": len(queries)}
    splits: dict[str, list[str]] = {}
    for split, judged in split_qrels.items():
        missing = sorted(set(judged) - query_ids)
        if missing:
            notes.append(f"{split}: {len(missing)} judged query ids are not in queries.jsonl")
        unknown_docs = sum(1 for rels in judged.values() for d in rels if d not in doc_ids)
        if unknown_docs:
            notes.append(f"{split}: {unknown_docs} judgements name docs not in corpus.jsonl")
        for qid, rels in judged.items():
            qrels.setdefault(qid, {}).update(rels)
        ids = [q.id for q in queries if any(s > 0 for s in judged.get(q.id, {}).values())]
        splits[split] = ids
        stats[f"{split}_queries"] = len(ids)
        stats[f"{split}_qrels"] = sum(len(rels) for rels in judged.values())
    splits.update(evaluation_splits(splits[TEST]))
    unevaluated = len(queries) - len(splits[TEST])
    if unevaluated:
        notes.append(f"{unevaluated} queries have no relevant test judgement and are not evaluated")
    return Dataset(
        name=name or root.name,
        docs=docs,
        queries=queries,
        qrels=qrels,
        splits=splits,
        group_key=None,
        kind="beir",
        stats=stats,
        notes=notes,
    )


def _rows(path: Path, *, required: Iterable[str]) -> Iterator[dict[str, Any]]:
    for number, row in read_jsonl(path):
        for key in required:
            if key not in row:
                raise SourceFormatError(str(path), f"{number}", f"missing field {key!r}")
        yield row
