"""LoCoMo: long multi-session conversations with QA whose evidence is dialog turns.

Reading (:func:`load_locomo`), from ``locomo10.json`` as published or, where only they
exist, from its flattened files (``corpus_turns.jsonl``/``corpus_sessions.jsonl``,
``queries.jsonl``, ``qrels_turns.tsv``/``qrels_sessions.tsv``):

* **Docs**: one per dialog turn, id ``<sample_id>|<dia_id>`` (``conv-26|D1:3``), text as
  the LoCoMo retrieval code indexes a turn, ``<speaker> said, "<text>"``, followed by
  `` [shares <blip_caption>]`` when the turn shared an image (the caption is the only
  trace of the image; LoCoMo's ``dpr_qa.py`` appends it the same way, and the flattened
  corpus carries it). The session date is *not* put into the text, which LoCoMo's code
  does as a ``(<date_time>)`` prefix: it is in ``meta["timestamp"]`` for a retriever that
  wants it. With ``level="session"``, one doc per session (``conv-26|S1``), its turns as
  ``<speaker>: <text>`` lines (the flattened ``corpus_sessions.jsonl``).
* **Queries**: one per QA item, id ``<sample_id>|q<index>``; meta ``sample_id``,
  ``category`` (:data:`CATEGORIES`), ``answer`` (``adversarial_answer`` for category 5)
  and ``adversarial``; the evidence is in the qrels.
* **Qrels** from the evidence ids. Malformed entries (``"D8:6; D9:17"``,
  ``"D9:1 D4:4 D4:6"``) are split at ``;``, ``,`` and whitespace; ids that name no turn of
  the conversation (``"D"``, ``"D:11:26"``, ``"D30:05"``) are dropped, not guessed at;
  repeats are removed. A question left without evidence cannot be scored and is not
  evaluated. ``Dataset.stats`` and ``Dataset.notes`` give the counts. Session qrels are
  the sessions of the resolved evidence turns.

Scoring (:func:`evidence_recall`): for each question, the fraction of its evidence found
in the top k, averaged over the questions of each category and over all questions
(LoCoMo, Maharana et al. 2024, §6 and ``task_eval/dpr_qa.py``). With binary qrels that is
trec_eval's ``recall_k`` (relevant retrieved in the top k / relevant), so it is computed
by :func:`stratamem.eval.metrics.evaluate_per_query`; a test checks the two agree.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from stratamem.errors import SourceFormatError
from stratamem.eval.datasets import (
    Dataset,
    Doc,
    Level,
    Qrels,
    Query,
    evaluation_splits,
    read_jsonl,
    read_qrels,
)
from stratamem.eval.metrics import Run, evaluate_per_query

CATEGORIES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
LOCOMO_KS = (5, 10, 25, 50)
SESSION_KS = (1, 3, 5, 10)
GROUP_KEY = "sample_id"

_JSON = "locomo10.json"
# The published file's name, and a plain one for other conversation sets in the same format.
_JSON_NAMES = (_JSON, "locomo.json")
_SESSION_KEY = re.compile(r"session_(\d+)")
_EVIDENCE_SEPARATORS = re.compile(r"[;,\s]+")
_CAPTION_SUFFIX = re.compile(r"(.*) \[shares ([^\[\]]*)\]", re.DOTALL)
_DATE_TIME = re.compile(
    r"\s*(\d{1,2}):(\d{2})\s*([ap])\.?m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*",
    re.IGNORECASE,
)
_MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}


def is_locomo(path: Path) -> bool:
    """Whether ``path`` is ``locomo10.json`` or a folder holding it or its flattened files."""
    if path.is_file():
        return path.name in _JSON_NAMES
    return (
        any((path / name).is_file() for name in _JSON_NAMES)
        or (path / "corpus_turns.jsonl").is_file()
    )


def load_locomo(path: Path, *, level: Level = "turn") -> Dataset:
    """LoCoMo as a :class:`Dataset` (``locomo`` or, with ``level="session"``, ``locomo-sessions``).

    ``locomo10.json`` is preferred over the flattened files when both are present: only
    it shows which evidence had to be split or dropped.
    """
    if level not in ("turn", "session"):
        raise ValueError(f"level must be 'turn' or 'session', not {level!r}")
    source = (
        path
        if path.is_file()
        else next((path / name for name in _JSON_NAMES if (path / name).is_file()), path / _JSON)
    )
    if source.is_file():
        return _from_json(source, level)
    return _from_flat(path, level)


def parse_date_time(text: str) -> datetime:
    """A LoCoMo session time such as ``1:56 pm on 8 May, 2023`` (no time zone given).

    Parsed by hand rather than ``strptime`` so month names do not depend on the locale.
    """
    match = _DATE_TIME.fullmatch(text)
    month = _MONTHS.get(match.group(5).lower()) if match else None
    if match is None or month is None:
        raise ValueError(f"cannot read {text!r} as a LoCoMo date, e.g. '1:56 pm on 8 May, 2023'")
    hour = int(match.group(1)) % 12 + (12 if match.group(3).lower() == "p" else 0)
    return datetime(int(match.group(6)), month, int(match.group(4)), hour, int(match.group(2)))


def turn_text(speaker: str, text: str, caption: str | None = None) -> str:
    """A turn as LoCoMo's retrieval indexes it: ``Caroline said, "..." [shares <caption>]``."""
    formatted = f'{speaker} said, "{text.strip()}"'
    return f"{formatted} [shares {caption}]" if caption else formatted


def split_evidence(raw: str) -> list[str]:
    """The dia ids in one evidence entry: ``"D8:6; D9:17"`` → ``["D8:6", "D9:17"]``."""
    return [part for part in _EVIDENCE_SEPARATORS.split(raw.strip()) if part]


@dataclass(frozen=True, slots=True)
class EvidenceRecall:
    """Evidence recall@k as fractions, keyed ``R@<k>``: overall, per category, per question."""

    overall: dict[str, float]
    per_category: dict[str, dict[str, float]]
    counts: dict[str, int]
    per_query: dict[str, dict[str, float]]


def evidence_recall(
    qrels: Qrels,
    run: Run,
    categories: Mapping[str, int],
    *,
    ks: Sequence[int] = LOCOMO_KS,
) -> EvidenceRecall:
    """For each question in ``qrels``, found evidence / all evidence in the top k.

    ``categories`` maps question id → LoCoMo category (1–5). The overall value is the
    mean over all questions (not over categories); ``counts`` gives the number of
    questions overall (``questions``) and per category name. A question missing from
    ``run`` scores 0.
    """
    if not ks or any(k <= 0 for k in ks):
        raise ValueError(f"ks must be positive cut-offs, not {tuple(ks)!r}")
    labels = {f"recall_{k}": f"R@{k}" for k in ks}
    scored = evaluate_per_query(qrels, run, tuple(labels))
    per_query = {
        qid: {labels[name]: value for name, value in values.items()}
        for qid, values in scored.items()
    }
    names = list(labels.values())
    by_category: dict[str, list[str]] = {}
    for qid in per_query:
        category = categories.get(qid)
        if category is None:
            raise ValueError(f"question {qid!r} has no category")
        by_category.setdefault(CATEGORIES.get(category, str(category)), []).append(qid)
    ordered = sorted(by_category, key=_category_order)
    return EvidenceRecall(
        overall=_means(per_query, list(per_query), names),
        per_category={name: _means(per_query, by_category[name], names) for name in ordered},
        counts={"questions": len(per_query)} | {name: len(by_category[name]) for name in ordered},
        per_query=per_query,
    )


def _category_order(name: str) -> tuple[int, str]:
    numbers = {label: number for number, label in CATEGORIES.items()}
    return numbers.get(name, len(numbers) + 1), name


def _means(
    per_query: Mapping[str, Mapping[str, float]], qids: Sequence[str], names: Sequence[str]
) -> dict[str, float]:
    if not qids:
        return dict.fromkeys(names, 0.0)
    return {name: sum(per_query[q][name] for q in qids) / len(qids) for name in names}


@dataclass(slots=True)
class _Collected:
    """What reading ``locomo10.json`` gathers, conversation by conversation."""

    turns: list[Doc] = field(default_factory=list)
    sessions: list[Doc] = field(default_factory=list)
    queries: list[Query] = field(default_factory=list)
    turn_qrels: Qrels = field(default_factory=dict)
    session_qrels: Qrels = field(default_factory=dict)
    stats: Counter[str] = field(default_factory=Counter)
    dropped: list[str] = field(default_factory=list)


def _from_json(source: Path, level: Level) -> Dataset:
    try:
        samples = json.loads(source.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise SourceFormatError(str(source), f"{exc.lineno}", f"invalid JSON: {exc.msg}") from None
    if not isinstance(samples, list):
        raise SourceFormatError(str(source), "", "expected a list of conversations")

    found = _Collected()
    for position, sample in enumerate(samples):
        if not isinstance(sample, dict):
            raise SourceFormatError(str(source), f"conversation {position}", "not an object")
        where = str(sample.get("sample_id", f"conversation {position}"))
        try:
            _read_sample(source, sample, found)
        except (KeyError, TypeError, ValueError) as exc:
            raise SourceFormatError(str(source), where, f"malformed conversation: {exc!r}") from exc

    stats = found.stats
    no_evidence = stats["questions_excluded_no_evidence"]
    unresolved = stats["questions_excluded_unresolved"]
    qrels = found.turn_qrels if level == "turn" else found.session_qrels
    counts = {
        "conversations": len(samples),
        "sessions": len(found.sessions),
        "turns": len(found.turns),
        "questions": len(found.queries),
        "questions_evaluated": len(qrels),
        "questions_excluded": no_evidence + unresolved,
        "questions_excluded_no_evidence": no_evidence,
        "questions_excluded_unresolved": unresolved,
        "evidence_entries_split": stats["evidence_entries_split"],
        "evidence_ids_from_splits": stats["evidence_ids_from_splits"],
        "evidence_ids_dropped": stats["evidence_ids_dropped"],
        "evidence_ids_repeated": stats["evidence_ids_repeated"],
        "qrels": sum(len(rels) for rels in qrels.values()),
    }
    notes = [
        f"evidence: {counts['evidence_entries_split']} entries held several ids and were split "
        f"into {counts['evidence_ids_from_splits']}; {counts['evidence_ids_dropped']} ids name "
        f"no turn and were dropped; {counts['evidence_ids_repeated']} repeated ids removed",
        f"{no_evidence + unresolved} of {len(found.queries)} questions are not evaluated: "
        f"{no_evidence} list no evidence, {unresolved} list only evidence that names no turn",
    ]
    if found.dropped:
        notes.append("dropped evidence ids: " + ", ".join(found.dropped))
    docs = found.turns if level == "turn" else found.sessions
    return _dataset(level, docs, found.queries, qrels, counts, notes)


def _read_sample(source: Path, sample: dict[str, Any], found: _Collected) -> None:
    sample_id = str(sample["sample_id"])
    turn_ids: set[str] = set()
    for number, date_time, dialog in _sessions(source, sample):
        timestamp = _timestamp(source, sample_id, number, date_time)
        lines = []
        for turn in dialog:
            dia_id, speaker, said = str(turn["dia_id"]), str(turn["speaker"]), str(turn["text"])
            caption = turn.get("blip_caption") or None
            turn_ids.add(dia_id)
            meta = {GROUP_KEY: sample_id, "session": number, "speaker": speaker}
            meta |= {"timestamp": timestamp, "date_time": date_time, "dia_id": dia_id}
            text = turn_text(speaker, said, caption)
            found.turns.append(Doc(id=f"{sample_id}|{dia_id}", text=text, meta=meta))
            shared = f" [shares {caption}]" if caption else ""
            lines.append(f"{speaker}: {said}{shared}")
        meta = {GROUP_KEY: sample_id, "session": number}
        meta |= {"timestamp": timestamp, "date_time": date_time}
        found.sessions.append(Doc(id=f"{sample_id}|S{number}", text="\n".join(lines), meta=meta))

    for index, qa in enumerate(sample.get("qa", [])):
        qid = f"{sample_id}|q{index}"
        raw_entries = qa.get("evidence") or []
        evidence = _resolve_evidence(qid, raw_entries, turn_ids, found)
        category = int(qa["category"])
        answer = qa.get("answer", qa.get("adversarial_answer", ""))
        meta = {GROUP_KEY: sample_id, "category": category}
        meta |= {"answer": str(answer), "adversarial": category == 5}
        found.queries.append(Query(id=qid, text=str(qa["question"]), meta=meta))
        if evidence:
            found.turn_qrels[qid] = {f"{sample_id}|{e}": 1 for e in evidence}
            found.session_qrels[qid] = {f"{sample_id}|S{_session_number(e)}": 1 for e in evidence}
        elif raw_entries:
            found.stats["questions_excluded_unresolved"] += 1
        else:
            found.stats["questions_excluded_no_evidence"] += 1


def _resolve_evidence(
    qid: str, raw_entries: Sequence[object], turn_ids: set[str], found: _Collected
) -> list[str]:
    evidence: list[str] = []
    for raw in raw_entries:
        parts = split_evidence(str(raw))
        if len(parts) > 1:
            found.stats["evidence_entries_split"] += 1
            found.stats["evidence_ids_from_splits"] += len(parts)
        for part in parts:
            if part not in turn_ids:
                found.stats["evidence_ids_dropped"] += 1
                found.dropped.append(f"{qid} {part!r}")
            elif part in evidence:
                found.stats["evidence_ids_repeated"] += 1
            else:
                evidence.append(part)
    return evidence


def _from_flat(root: Path, level: Level) -> Dataset:
    corpus = root / ("corpus_turns.jsonl" if level == "turn" else "corpus_sessions.jsonl")
    qrels_path = root / ("qrels_turns.tsv" if level == "turn" else "qrels_sessions.tsv")
    needed = (corpus, root / "queries.jsonl", qrels_path)
    missing = [p.name for p in needed if not p.is_file()]
    if missing:
        raise ValueError(f"{root}: LoCoMo {level} level needs {_JSON} or {', '.join(missing)}")

    docs = [_flat_doc(corpus, number, row, level) for number, row in read_jsonl(corpus)]
    queries_path = root / "queries.jsonl"
    queries = [_flat_query(queries_path, number, row) for number, row in read_jsonl(queries_path)]
    qrels = read_qrels(qrels_path)
    excluded = sum(1 for q in queries if q.id not in qrels)
    counts = {
        "conversations": len({q.meta[GROUP_KEY] for q in queries}),
        "turns" if level == "turn" else "sessions": len(docs),
        "questions": len(queries),
        "questions_evaluated": len(queries) - excluded,
        "questions_excluded": excluded,
        "qrels": sum(len(rels) for rels in qrels.values()),
    }
    notes = [
        f"read from the flattened files ({corpus.name}, {qrels_path.name}); their evidence was "
        f"cleaned when they were made, so split/dropped counts come only from {_JSON}",
        f"{excluded} of {len(queries)} questions have no qrels and are not evaluated",
    ]
    return _dataset(level, docs, queries, qrels, counts, notes)


def _flat_query(path: Path, number: int, row: dict[str, Any]) -> Query:
    try:
        category = int(row["category"])
        meta = {GROUP_KEY: str(row[GROUP_KEY]), "category": category}
        meta |= {"answer": str(row.get("answer", "")), "adversarial": category == 5}
        return Query(id=str(row["_id"]), text=str(row["text"]), meta=meta)
    except (KeyError, ValueError) as exc:
        raise SourceFormatError(str(path), f"{number}", f"bad question: {exc!r}") from None


def _flat_doc(path: Path, number: int, row: dict[str, Any], level: Level) -> Doc:
    try:
        doc_id, text, sample_id = str(row["_id"]), str(row["text"]), str(row[GROUP_KEY])
        session, date_time, timestamp = int(row["session"]), row["date_time"], row["timestamp"]
        if level == "session":
            meta = {GROUP_KEY: sample_id, "session": session}
            meta |= {"timestamp": timestamp, "date_time": date_time}
            return Doc(id=doc_id, text=text, meta=meta)
        speaker = str(row["speaker"])
    except (KeyError, ValueError) as exc:
        raise SourceFormatError(str(path), f"{number}", f"bad turn or session: {exc!r}") from None
    # The flattened corpus appends the caption to the spoken text; take it back off so the
    # doc reads exactly as one made from locomo10.json.
    captioned = _CAPTION_SUFFIX.fullmatch(text)
    spoken, caption = captioned.groups() if captioned else (text, None)
    meta = {GROUP_KEY: sample_id, "session": session, "speaker": speaker}
    meta |= {"timestamp": timestamp, "date_time": date_time, "dia_id": doc_id.partition("|")[2]}
    return Doc(id=doc_id, text=turn_text(speaker, spoken, caption), meta=meta)


def _dataset(
    level: Level,
    docs: list[Doc],
    queries: list[Query],
    qrels: Qrels,
    counts: dict[str, int],
    notes: list[str],
) -> Dataset:
    evaluated = [q.id for q in queries if q.id in qrels]
    return Dataset(
        name="locomo" if level == "turn" else "locomo-sessions",
        docs=docs,
        queries=queries,
        qrels=qrels,
        splits=evaluation_splits(evaluated),
        group_key=GROUP_KEY,
        kind="locomo" if level == "turn" else "locomo-sessions",
        stats=counts,
        notes=notes,
    )


def _sessions(source: Path, sample: dict[str, Any]) -> list[tuple[int, str, list[Any]]]:
    """(number, date_time, turns) for each non-empty session, in session order."""
    conversation = sample.get("conversation", {})
    found = []
    for key, dialog in conversation.items():
        match = _SESSION_KEY.fullmatch(key)
        if match and isinstance(dialog, list) and dialog:
            date_time = conversation.get(f"{key}_date_time")
            if not isinstance(date_time, str):
                where = f"{sample.get('sample_id')} {key}"
                raise SourceFormatError(str(source), where, "session has no date_time")
            found.append((int(match.group(1)), date_time, dialog))
    return sorted(found, key=lambda item: item[0])


def _timestamp(source: Path, sample_id: str, number: int, date_time: str) -> str:
    try:
        return parse_date_time(date_time).isoformat()
    except ValueError as exc:
        raise SourceFormatError(str(source), f"{sample_id} session_{number}", str(exc)) from None


def _session_number(dia_id: str) -> int:
    return int(dia_id[1:].partition(":")[0])
