from __future__ import annotations

import os
import random
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratamem.errors import SourceFormatError
from stratamem.eval import Dataset, Doc, Query, hash_split, load_dataset


@pytest.fixture
def eval_fixtures(fixtures_dir: Path) -> Path:
    return fixtures_dir / "eval"


def test_beir_standard_layout(eval_fixtures: Path) -> None:
    dataset = load_dataset(eval_fixtures / "beir-standard")

    assert dataset.name == "beir-standard"
    assert dataset.kind == "beir"
    assert dataset.group_key is None
    assert len(dataset.docs) == 6
    assert dataset.docs[0] == Doc(
        id="4983",
        title="Growth of insulating tissue in young songbird brains.",
        text="Repeated scans followed insulating tissue in songbirds hatched early and on time.",
        meta={"metadata": {}},
    )
    assert dataset.docs[-1].id == "33370"  # an integer _id is read as text
    assert [q.id for q in dataset.queries] == ["1", "3", "5", "13", "36"]
    assert dataset.splits["test"] == ["3", "5", "13"]
    assert dataset.splits["train"] == ["1"]
    assert dataset.qrels["5"] == {"5836": 1, "33370": 1}
    assert dataset.qrels["1"] == {"19238": 1, "7912": 0}
    assert dataset.stats == {
        "docs": 6,
        "queries": 5,
        "test_queries": 3,
        "test_qrels": 4,
        "train_queries": 1,
        "train_qrels": 2,
    }


def test_beir_graded_qrels_keep_their_grades(eval_fixtures: Path) -> None:
    dataset = load_dataset(eval_fixtures / "beir-graded")

    assert dataset.qrels["1"] == {"2": 3, "3": 2, "1": 1}
    # Query 2's only judgement is 0 (non-relevant): nothing to find, so not evaluated.
    assert dataset.qrels["2"] == {"4": 0}
    assert dataset.splits["test"] == ["1", "3", "4"]
    assert "train" not in dataset.splits
    assert dataset.queries[0] == Query(
        id="1",
        text="what similarity laws must be obeyed when constructing aeroelastic models .",
        meta={"orig_id": "001"},
    )
    assert "1 queries have no relevant test judgement and are not evaluated" in dataset.notes


@pytest.mark.parametrize("qrels_name", ["qrels/test.tsv", "qrels_test.tsv", "qrels.tsv"])
def test_beir_test_qrels_in_any_known_place(
    eval_fixtures: Path, tmp_path: Path, qrels_name: str
) -> None:
    source = eval_fixtures / "beir-graded"
    folder = tmp_path / "graded"
    (folder / "qrels").mkdir(parents=True)
    for name in ("corpus.jsonl", "queries.jsonl"):
        shutil.copy(source / name, folder / name)
    shutil.copy(source / "qrels.tsv", folder / qrels_name)

    dataset = load_dataset(folder)

    assert dataset.qrels == load_dataset(source).qrels
    assert dataset.notes[0] == f"test qrels: {qrels_name}"


def test_tune_and_heldout_partition_test(eval_fixtures: Path) -> None:
    dataset = load_dataset(eval_fixtures / "beir-graded")
    tune, heldout = dataset.splits["tune"], dataset.splits["heldout"]

    assert sorted(tune + heldout) == sorted(dataset.splits["test"])
    assert not set(tune) & set(heldout)
    assert (len(tune), len(heldout)) == (2, 1)
    assert load_dataset(eval_fixtures / "beir-graded").splits == dataset.splits


@given(st.lists(st.text(min_size=1, max_size=8), unique=True, max_size=60), st.randoms())
def test_hash_split_is_an_even_order_independent_partition(
    ids: list[str], rng: random.Random
) -> None:
    tune, heldout = hash_split(ids)

    assert sorted(tune + heldout) == sorted(ids)
    assert len(tune) - len(heldout) in (0, 1)
    assert tune == [i for i in ids if i in set(tune)]  # keeps the input order
    shuffled = list(ids)
    rng.shuffle(shuffled)
    again_tune, _ = hash_split(shuffled)
    assert set(again_tune) == set(tune)


def test_unknown_split_names_the_known_ones(eval_fixtures: Path) -> None:
    dataset = load_dataset(eval_fixtures / "beir-graded")
    with pytest.raises(ValueError, match=r"no split 'dev'; known: heldout, test, tune"):
        dataset.queries_in("dev")


def test_queries_in_keeps_file_order(eval_fixtures: Path) -> None:
    dataset = load_dataset(eval_fixtures / "beir-standard")
    assert [q.id for q in dataset.queries_in()] == ["3", "5", "13"]


def test_ungrouped_dataset_has_one_group(eval_fixtures: Path) -> None:
    dataset = load_dataset(eval_fixtures / "beir-graded")
    assert dataset.group_of(dataset.queries[0]) is None
    assert dataset.doc_ids_by_group() == {None: ["1", "2", "3", "4", "5"]}


def test_unknown_layout_names_path_and_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "corpus.jsonl").write_text("{}\n")
    with pytest.raises(ValueError, match="not a dataset folder") as caught:
        load_dataset(tmp_path)
    assert str(tmp_path) in str(caught.value)
    assert "queries.jsonl" in str(caught.value)
    assert "locomo10.json" in str(caught.value)


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such file or folder"):
        load_dataset(tmp_path / "nowhere")


def test_beir_without_qrels(eval_fixtures: Path, tmp_path: Path) -> None:
    for name in ("corpus.jsonl", "queries.jsonl"):
        shutil.copy(eval_fixtures / "beir-graded" / name, tmp_path / name)
    with pytest.raises(ValueError, match=r"no test qrels; looked for qrels/test.tsv"):
        load_dataset(tmp_path)


def test_beir_has_no_session_level(eval_fixtures: Path) -> None:
    with pytest.raises(ValueError, match="no 'session' level"):
        load_dataset(eval_fixtures / "beir-graded", level="session")


def _graded_copy(eval_fixtures: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "graded"
    shutil.copytree(eval_fixtures / "beir-graded", folder)
    return folder


def test_malformed_jsonl_names_file_and_line(eval_fixtures: Path, tmp_path: Path) -> None:
    folder = _graded_copy(eval_fixtures, tmp_path)
    with (folder / "corpus.jsonl").open("a") as handle:
        handle.write("\n{not json\n")
    with pytest.raises(SourceFormatError, match=r"corpus.jsonl:7: invalid JSON"):
        load_dataset(folder)


def test_jsonl_row_without_id(eval_fixtures: Path, tmp_path: Path) -> None:
    folder = _graded_copy(eval_fixtures, tmp_path)
    (folder / "queries.jsonl").write_text('{"text": "no id"}\n')
    with pytest.raises(SourceFormatError, match=r"queries.jsonl:1: missing field '_id'"):
        load_dataset(folder)


@pytest.mark.parametrize(
    ("line", "reason"),
    [("1\t2\n", "expected 3 tab-separated fields, got 2"), ("1\t2\thigh\n", "not an integer")],
)
def test_malformed_qrels(eval_fixtures: Path, tmp_path: Path, line: str, reason: str) -> None:
    folder = _graded_copy(eval_fixtures, tmp_path)
    with (folder / "qrels.tsv").open("a") as handle:
        handle.write(line)
    with pytest.raises(SourceFormatError, match=rf"qrels.tsv:9: .*{reason}"):
        load_dataset(folder)


# Real data (../shared/data); each test skips where it is absent.


def test_real_scifact(shared_data: Path) -> None:
    dataset = load_dataset(shared_data / "scifact")

    assert len(dataset.docs) == 5183
    assert len(dataset.splits["test"]) == 300
    assert sum(len(rels) for rels in dataset.qrels.values()) == 339
    assert {s for rels in dataset.qrels.values() for s in rels.values()} == {1}
    assert len(dataset.splits["tune"]) == len(dataset.splits["heldout"]) == 150


def test_real_cranfield_grades(shared_data: Path) -> None:
    dataset = load_dataset(shared_data / "cranfield")

    assert len(dataset.docs) == 1400
    assert len(dataset.queries) == len(dataset.splits["test"]) == 225
    grades = Counter(s for rels in dataset.qrels.values() for s in rels.values())
    assert sum(grades.values()) == 1612
    # Graded 1 (least) to 4 (most relevant); none <= 0, so every judged pair is relevant
    # to trec_eval and the grade is nDCG's gain.
    assert grades == {1: 363, 2: 734, 3: 387, 4: 128}
    assert dataset.queries[0].meta == {"orig_id": "001"}


def _without_json(locomo: Path, tmp_path: Path) -> Path:
    flat = tmp_path / "locomo-flat"
    flat.mkdir()
    for path in locomo.iterdir():
        if path.name != "locomo10.json":
            os.symlink(path.resolve(), flat / path.name)
    return flat


def test_real_locomo(shared_data: Path) -> None:
    dataset = load_dataset(shared_data / "locomo")

    assert dataset.name == "locomo"
    assert dataset.group_key == "sample_id"
    assert len(dataset.doc_ids_by_group()) == 10
    assert len(dataset.docs) == 5882
    assert len(dataset.queries) == 1986
    assert dataset.stats == {
        "conversations": 10,
        "sessions": 272,
        "turns": 5882,
        "questions": 1986,
        "questions_evaluated": 1981,
        "questions_excluded": 5,
        "questions_excluded_no_evidence": 4,
        "questions_excluded_unresolved": 1,
        "evidence_entries_split": 4,
        "evidence_ids_from_splits": 13,
        "evidence_ids_dropped": 5,
        "evidence_ids_repeated": 1,
        "qrels": 2818,
    }
    assert Counter(q.meta["category"] for q in dataset.queries_in()) == {
        1: 282,
        2: 320,
        3: 92,
        4: 841,
        5: 446,
    }
    assert dataset.qrels["conv-26|q37"] == {"conv-26|D8:6": 1, "conv-26|D9:17": 1}
    # The paper's turn format, with the shared image's caption after the quote.
    assert re.fullmatch(r'Caroline said, ".+" \[shares .+\]', dataset.docs[4].text, re.DOTALL)
    assert dataset.docs[4].meta["timestamp"] == "2023-05-08T13:56:00"


@pytest.mark.parametrize("level", ["turn", "session"])
def test_real_locomo_json_and_flattened_files_agree(
    shared_data: Path, tmp_path: Path, level: str
) -> None:
    from_json = load_dataset(shared_data / "locomo", level=level)  # type: ignore[arg-type]
    flat = _without_json(shared_data / "locomo", tmp_path)
    from_flat = load_dataset(flat, level=level)  # type: ignore[arg-type]

    assert from_flat.docs == from_json.docs
    assert from_flat.queries == from_json.queries
    assert from_flat.qrels == from_json.qrels
    assert from_flat.splits == from_json.splits


def test_real_locomo_sessions(shared_data: Path) -> None:
    dataset: Dataset = load_dataset(shared_data / "locomo", level="session")

    assert dataset.name == dataset.kind == "locomo-sessions"
    assert len(dataset.docs) == 272
    assert dataset.stats["qrels"] == 2556
    assert dataset.qrels["conv-26|q37"] == {"conv-26|S8": 1, "conv-26|S9": 1}
