from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratamem.errors import SourceFormatError
from stratamem.eval import Doc, Query, evidence_recall, load_dataset, run_from_ranking
from stratamem.eval.locomo import parse_date_time, split_evidence, turn_text


@pytest.fixture
def locomo_json(fixtures_dir: Path) -> Path:
    return fixtures_dir / "eval" / "locomo-json"


@pytest.fixture
def locomo_flat(fixtures_dir: Path) -> Path:
    return fixtures_dir / "eval" / "locomo-flat"


def test_turn_docs(locomo_json: Path) -> None:
    dataset = load_dataset(locomo_json)

    assert (dataset.name, dataset.kind, dataset.group_key) == ("locomo", "locomo", "sample_id")
    assert [d.id for d in dataset.docs[:4]] == [
        "conv-1|D1:1",
        "conv-1|D1:2",
        "conv-1|D1:3",
        "conv-1|D2:1",
    ]
    assert dataset.docs[2] == Doc(
        id="conv-1|D1:3",
        text='Priya said, "Sure! Here\'s the harbour I drew." '
        "[shares a photo of a harbour at dusk]",
        meta={
            "sample_id": "conv-1",
            "session": 1,
            "speaker": "Priya",
            "timestamp": "2023-05-08T13:56:00",
            "date_time": "1:56 pm on 8 May, 2023",
            "dia_id": "D1:3",
        },
    )
    assert dataset.docs[3].meta["timestamp"] == "2023-09-13T00:09:00"
    assert dataset.docs[3].text == 'Tomas said, "I signed up for a woodworking class on Monday."'
    assert dataset.doc_ids_by_group() == {
        "conv-1": [f"conv-1|D{s}:{t}" for s in (1, 2) for t in (1, 2, 3)],
        "conv-2": ["conv-2|D1:1", "conv-2|D1:2"],
    }


def test_queries(locomo_json: Path) -> None:
    dataset = load_dataset(locomo_json)

    assert len(dataset.queries) == 9
    assert dataset.queries[1] == Query(
        id="conv-1|q1",
        text="When did Tomas sketch a lighthouse?",
        meta={"sample_id": "conv-1", "category": 2, "answer": "2022", "adversarial": False},
    )
    adversarial = dataset.queries[5]
    assert adversarial.meta["answer"] == "rest days matter"
    assert adversarial.meta["adversarial"] is True
    assert dataset.group_of(adversarial) == "conv-1"


def test_evidence_is_split_resolved_and_counted(locomo_json: Path) -> None:
    dataset = load_dataset(locomo_json)

    assert dataset.qrels["conv-1|q1"] == {"conv-1|D1:2": 1, "conv-1|D1:3": 1}  # "D1:2; D1:3"
    assert dataset.qrels["conv-1|q2"] == {"conv-1|D2:1": 1, "conv-1|D2:3": 1}  # split + repeat
    assert dataset.qrels["conv-1|q3"] == {"conv-1|D2:2": 1}  # "D9:9" and "D" dropped
    assert "conv-1|q4" not in dataset.qrels  # no evidence at all
    assert "conv-1|q6" not in dataset.qrels  # only "D:2:2", which names no turn
    assert dataset.splits["test"] == [
        "conv-1|q0",
        "conv-1|q1",
        "conv-1|q2",
        "conv-1|q3",
        "conv-1|q5",
        "conv-2|q0",
        "conv-2|q1",
    ]
    assert dataset.stats == {
        "conversations": 2,
        "sessions": 3,
        "turns": 8,
        "questions": 9,
        "questions_evaluated": 7,
        "questions_excluded": 2,
        "questions_excluded_no_evidence": 1,
        "questions_excluded_unresolved": 1,
        "evidence_entries_split": 2,
        "evidence_ids_from_splits": 4,
        "evidence_ids_dropped": 3,
        "evidence_ids_repeated": 1,
        "qrels": 10,
    }
    assert dataset.notes[-1] == (
        "dropped evidence ids: conv-1|q3 'D9:9', conv-1|q3 'D', conv-1|q6 'D:2:2'"
    )


def test_session_level(locomo_json: Path) -> None:
    dataset = load_dataset(locomo_json, level="session")

    assert (dataset.name, dataset.kind) == ("locomo-sessions", "locomo-sessions")
    assert [d.id for d in dataset.docs] == ["conv-1|S1", "conv-1|S2", "conv-2|S1"]
    assert dataset.docs[2].text == (
        "Jon: The bakery closed, so I'm opening a bike repair shop.\n"
        "Gina: Same here, the print shop let me go this month."
    )
    assert dataset.docs[2].meta == {
        "sample_id": "conv-2",
        "session": 1,
        "timestamp": "2023-01-20T16:04:00",
        "date_time": "4:04 pm on 20 January, 2023",
    }
    assert dataset.qrels["conv-1|q1"] == {"conv-1|S1": 1}
    assert dataset.qrels["conv-2|q1"] == {"conv-2|S1": 1}
    assert dataset.stats["qrels"] == 7


@pytest.mark.parametrize("level", ["turn", "session"])
def test_flattened_files_read_the_same(locomo_json: Path, locomo_flat: Path, level: str) -> None:
    from_json = load_dataset(locomo_json, level=level)  # type: ignore[arg-type]
    from_flat = load_dataset(locomo_flat, level=level)  # type: ignore[arg-type]

    assert from_flat.docs == from_json.docs
    assert from_flat.queries == from_json.queries
    assert from_flat.qrels == from_json.qrels
    assert from_flat.splits == from_json.splits
    assert from_flat.stats["questions_excluded"] == 2
    assert "split/dropped counts come only from locomo10.json" in from_flat.notes[0]


def test_the_json_file_itself_can_be_given(locomo_json: Path) -> None:
    assert load_dataset(locomo_json / "locomo.json").qrels == load_dataset(locomo_json).qrels


def test_flattened_layout_names_missing_files(locomo_flat: Path, tmp_path: Path) -> None:
    shutil.copy(locomo_flat / "corpus_turns.jsonl", tmp_path)
    with pytest.raises(ValueError, match=r"needs locomo10.json or queries.jsonl, qrels_turns.tsv"):
        load_dataset(tmp_path)


def test_malformed_conversation_is_named(tmp_path: Path) -> None:
    (tmp_path / "locomo10.json").write_text(
        '[{"sample_id": "conv-9", "conversation": {"session_1": [{"speaker": "A"}],'
        ' "session_1_date_time": "1:56 pm on 8 May, 2023"}, "qa": []}]'
    )
    with pytest.raises(SourceFormatError, match=r"locomo10.json:conv-9: malformed .*dia_id"):
        load_dataset(tmp_path)


def test_unreadable_session_date_is_named(tmp_path: Path) -> None:
    (tmp_path / "locomo10.json").write_text(
        '[{"sample_id": "conv-9", "conversation": {"session_2": [{"speaker": "A", '
        '"dia_id": "D2:1", "text": "hi"}], "session_2_date_time": "yesterday"}, "qa": []}]'
    )
    with pytest.raises(SourceFormatError, match=r"conv-9 session_2: cannot read 'yesterday'"):
        load_dataset(tmp_path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56)),
        ("12:09 am on 13 September, 2023", datetime(2023, 9, 13, 0, 9)),
        ("12:30 pm on 1 Jan, 2024", datetime(2024, 1, 1, 12, 30)),
        ("9:55 AM on 22 October 2023", datetime(2023, 10, 22, 9, 55)),
    ],
)
def test_parse_date_time(text: str, expected: datetime) -> None:
    assert parse_date_time(text) == expected


@pytest.mark.parametrize("text", ["", "8 May 2023", "1:56 pm on 8 Maybe, 2023"])
def test_parse_date_time_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="cannot read"):
        parse_date_time(text)


@pytest.mark.parametrize(
    ("raw", "ids"),
    [
        ("D1:3", ["D1:3"]),
        ("D8:6; D9:17", ["D8:6", "D9:17"]),
        ("D9:1 D4:4 D4:6", ["D9:1", "D4:4", "D4:6"]),
        (" D1:1,D1:2 ", ["D1:1", "D1:2"]),
        ("", []),
    ],
)
def test_split_evidence(raw: str, ids: list[str]) -> None:
    assert split_evidence(raw) == ids


def test_turn_text() -> None:
    assert turn_text("Jon", " Hi! ") == 'Jon said, "Hi!"'
    shared = turn_text("Jon", "Look", "a photo of a dog")
    assert shared == 'Jon said, "Look" [shares a photo of a dog]'


def test_evidence_recall_by_hand() -> None:
    qrels = {
        "a": {"t1": 1, "t9": 1},  # found at rank 2 and rank 9
        "b": {"t3": 1},  # found at rank 6
        "c": {"t4": 1, "t5": 1, "t6": 1, "t7": 1},  # two of four in the top 5
        "d": {"t1": 1},  # not retrieved at all
    }
    ranking = [f"x{i}" for i in range(1, 60)]
    run = run_from_ranking(
        {
            "a": ["x", "t1", "y", "z", "w", "v", "u", "s", "t9"],
            "b": ["x1", "x2", "x3", "x4", "x5", "t3"],
            "c": ["t4", "t5", *ranking],
            "d": ranking,
        }
    )
    categories = {"a": 1, "b": 1, "c": 4, "d": 5}

    recall = evidence_recall(qrels, run, categories, ks=(5, 10))

    assert recall.per_query["a"] == {"R@5": 0.5, "R@10": 1.0}
    assert recall.per_query["b"] == {"R@5": 0.0, "R@10": 1.0}
    assert recall.per_query["c"] == {"R@5": 0.5, "R@10": 0.5}
    assert recall.per_query["d"] == {"R@5": 0.0, "R@10": 0.0}
    assert recall.per_category == {
        "multi-hop": {"R@5": 0.25, "R@10": 1.0},
        "single-hop": {"R@5": 0.5, "R@10": 0.5},
        "adversarial": {"R@5": 0.0, "R@10": 0.0},
    }
    assert recall.overall == {"R@5": 0.25, "R@10": 0.625}  # mean over questions
    assert recall.counts == {"questions": 4, "multi-hop": 2, "single-hop": 1, "adversarial": 1}


def test_evidence_recall_needs_categories() -> None:
    with pytest.raises(ValueError, match="question 'q' has no category"):
        evidence_recall({"q": {"d": 1}}, {}, {})
    with pytest.raises(ValueError, match="positive cut-offs"):
        evidence_recall({"q": {"d": 1}}, {}, {"q": 1}, ks=(0,))


@given(
    evidence=st.sets(st.integers(0, 30), min_size=1, max_size=8),
    ranking=st.lists(st.integers(0, 30), unique=True, max_size=31),
    k=st.integers(1, 32),
)
def test_trec_recall_is_locomo_evidence_recall(
    evidence: set[int], ranking: list[int], k: int
) -> None:
    # LoCoMo's definition, as in its dpr_qa.py: found evidence in the top k / all evidence.
    by_hand = len(evidence & set(ranking[:k])) / len(evidence)
    qrels = {"q": {f"d{e}": 1 for e in evidence}}
    run = run_from_ranking({"q": [f"d{d}" for d in ranking]})

    recall = evidence_recall(qrels, run, {"q": 2}, ks=(k,))

    assert recall.overall[f"R@{k}"] == pytest.approx(by_hand)


def test_flattened_question_without_category(locomo_flat: Path, tmp_path: Path) -> None:
    for path in locomo_flat.iterdir():
        shutil.copy(path, tmp_path)
    (tmp_path / "queries.jsonl").write_text('{"_id": "conv-1|q0", "sample_id": "conv-1"}\n')
    with pytest.raises(SourceFormatError, match=r"queries.jsonl:1: bad question: KeyError"):
        load_dataset(tmp_path)
