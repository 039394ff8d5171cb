from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fts5_reference import fts5_index, fts5_top
from hypothesis import given, settings
from hypothesis import strategies as st

import stratamem
from stratamem.retrieval.index import bm25_file
from stratamem.retrieval.index.bm25 import BM25Index, Postings
from stratamem.retrieval.legs.keyword import (
    SparseKeywordIndex,
    keyword_leg,
    keyword_search,
    sparse_index,
)
from stratamem.retrieval.query import match_expression, query_terms
from stratamem.store.sqlite.fts_terms import decode_averages
from stratamem.types import Filters, RetrievalHit, SourceKind

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "workspace"

# Four rows, (content, title): "cat" is in row 1 only, "run" in rows 1 and 2.
TINY = [
    ("running cats", "cat"),
    ("dog runs", ""),
    ("bird", ""),
    ("fish", ""),
]


def write_docs(path: Path, docs: list[tuple[str, str]], *, source: str = "docs") -> Path:
    with path.open("w") as fh:
        for i, (text, title) in enumerate(docs):
            record = {"id": f"{source}-{i}", "text": text, "title": title, "source": source}
            fh.write(json.dumps(record | {"kind": "document"}) + "\n")
    return path


@pytest.fixture
def tiny(store_location: str, tmp_path: Path) -> Iterator[stratamem.Memory]:
    with stratamem.open(store_location, embedder=None) as mem:
        mem.ingest(write_docs(tmp_path / "tiny.jsonl", TINY))
        yield mem


@pytest.fixture(scope="module")
def built_workspace(module_location: str) -> str:
    """The example workspace ingested once per backend, and closed: copied for the tests."""
    with stratamem.open(module_location, embedder=None) as mem:
        for part in ("slack-export", "mail/team.mbox", "notes"):
            mem.ingest(EXAMPLES / part)
    return module_location


@pytest.fixture(scope="module")
def workspace(
    built_workspace: str, locations: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[stratamem.Memory]:
    """A copy of the workspace for the tests that only read it."""
    copy = locations.copy(built_workspace, tmp_path_factory.mktemp("workspace"), "w")
    with stratamem.open(copy, embedder=None) as mem:
        yield mem


@pytest.fixture
def own_workspace(
    built_workspace: str, locations: Any, tmp_path: Path
) -> Iterator[stratamem.Memory]:
    """A copy of the workspace of the test's own, for the tests that change it."""
    with stratamem.open(locations.copy(built_workspace, tmp_path, "w"), embedder=None) as mem:
        yield mem


def sparse(mem: stratamem.Memory, **kwargs: object) -> SparseKeywordIndex:
    return SparseKeywordIndex(mem.store, **kwargs)  # type: ignore[arg-type]


# -- the formula, worked by hand ------------------------------------------------------------


def hand_score(f: float, length: int, n: int, hits: int, avgdl: float) -> float:
    idf = max(math.log((n - hits + 0.5) / (hits + 0.5)), 0.0) or 1e-6
    return idf * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * length / avgdl))


def test_a_hand_worked_score_matches_fts5(tiny: stratamem.Memory) -> None:
    # Row 1 holds "run cat" in the body and "cat" in the title: f = 1 + 0.6, |d| = 3 tokens,
    # avgdl = 7 / 4, and "cat" is in 1 of 4 rows: idf = log(3.5 / 1.5).
    expected = math.log(3.5 / 1.5) * 1.6 * 2.2 / (1.6 + 1.2 * (0.25 + 0.75 * 3 / 1.75))
    assert expected == pytest.approx(0.866283, abs=1e-6)
    found = sparse(tiny).search(["cat"], Filters(), 10)
    assert found is not None
    assert list(found.values()) == pytest.approx([expected], rel=1e-6)
    assert list(fts5_top(tiny, "cat", 10).values()) == pytest.approx([expected], rel=1e-12)


def test_a_term_in_half_the_rows_weighs_the_idf_floor(tiny: stratamem.Memory) -> None:
    # "run" is in 2 of 4 rows: log(2.5 / 2.5) = 0, which FTS5 raises to 1e-6.
    found = sparse(tiny).search(["cat", "run"], Filters(), 10)
    assert found is not None
    theirs = fts5_top(tiny, "cat run", 10)
    assert list(found) == list(theirs)
    assert list(found.values()) == pytest.approx(list(theirs.values()), rel=1e-6)
    second = hand_score(1.0, 2, 4, 2, 1.75)
    assert list(found.values())[1] == pytest.approx(second, rel=1e-6)


def test_a_stem_named_twice_counts_twice_as_in_fts5(tiny: stratamem.Memory) -> None:
    found = sparse(tiny).search(["cat", "cats"], Filters(), 10)
    assert found is not None
    assert list(found.values()) == pytest.approx(list(fts5_top(tiny, "cat cats", 10).values()))
    assert next(iter(found.values())) == pytest.approx(2 * 0.866283, abs=1e-5)


def test_the_kernel_alone_on_hand_made_postings() -> None:
    # Two documents, one column of weight 1: "a" twice in doc 0 (length 2), once in doc 1
    # (length 1). N = 2, n("a") = 2, so idf = 1e-6; avgdl = 1.5.
    index = BM25Index(("content",), (1.0,))
    postings = Postings(
        terms=["a"],
        term=np.array([0, 0]),
        doc=np.array([0, 1]),
        freq=np.array([2.0, 1.0]),
        lengths=np.array([[2], [1]]),
    )
    index.append(np.array([10, 11]), ["x", "y"], postings)
    positions, scores = index.top(["a", "missing"], 5)
    assert positions.tolist() == [0, 1]
    assert scores.tolist() == pytest.approx(
        [hand_score(2.0, 2, 2, 2, 1.5), hand_score(1.0, 1, 2, 2, 1.5)]
    )


def test_ties_are_broken_by_rowid_after_the_cut() -> None:
    index = BM25Index(("content",), (1.0,))
    n = 6
    postings = Postings(
        terms=["a", "b"],
        term=np.array([0] * n + [1]),
        doc=np.array([*range(n), 5]),
        freq=np.ones(n + 1),
        lengths=np.ones((n, 1), np.int64),
    )
    index.append(np.arange(1, n + 1), [str(i) for i in range(n)], postings)
    positions, _ = index.top(["a", "b"], 3)
    assert positions.tolist() == [5, 0, 1]


def test_append_then_remove_equals_a_fresh_build() -> None:
    rng = np.random.default_rng(3)
    docs = [rng.choice(["a", "b", "c", "d", "e"], size=rng.integers(1, 6)) for _ in range(30)]

    def postings_of(part: list[np.ndarray]) -> Postings:
        terms = sorted({str(t) for d in part for t in d})
        rows = sorted(
            {(terms.index(str(t)), i, int((d == t).sum())) for i, d in enumerate(part) for t in d}
        )
        return Postings(
            terms=terms,
            term=np.array([r[0] for r in rows]),
            doc=np.array([r[1] for r in rows]),
            freq=np.array([r[2] for r in rows], dtype=np.float64),
            lengths=np.array([[len(d)] for d in part]),
        )

    grown = BM25Index(("content",), (1.0,))
    grown.append(np.arange(1, 21), [str(i) for i in range(20)], postings_of(docs[:20]))
    grown.append(np.arange(21, 31), [str(i) for i in range(20, 30)], postings_of(docs[20:]))
    keep = np.ones(30, np.bool_)
    keep[[0, 7, 22]] = False
    grown.remove(keep)
    kept = [d for d, k in zip(docs, keep, strict=True) if k]
    fresh = BM25Index(("content",), (1.0,))
    fresh.append(np.arange(1, 31)[keep], [str(i) for i in range(30) if keep[i]], postings_of(kept))
    for query in (["a"], ["b", "e"], ["c", "d", "a"]):
        assert np.allclose(grown.scores(query), fresh.scores(query))
    assert grown.ids == fresh.ids


# -- agreement with FTS5 ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "why did we drop Redis for the SQLite queue?",
        "release date slipped",
        "queue stalled after deploy",
        "who owns the incident review",
        "alice bob",
    ],
)
def test_ranking_and_scores_agree_with_fts5(workspace: stratamem.Memory, query: str) -> None:
    found = sparse(workspace).search(query_terms(query), Filters(), 20)
    theirs = fts5_top(workspace, query, 20)
    assert found is not None
    assert list(found) == list(theirs)
    assert list(found.values()) == pytest.approx(list(theirs.values()), rel=1e-6)


@pytest.mark.parametrize(
    "filters",
    [
        Filters(),
        Filters(sources=("slack:*",)),
        Filters(kinds=(SourceKind.EMAIL,)),
        Filters(since=datetime(2024, 3, 15, tzinfo=UTC)),
    ],
    ids=["all", "slack", "email", "since"],
)
@pytest.mark.parametrize("query", ["why did we drop Redis for the SQLite queue?", "release"])
def test_keyword_mode_ranks_as_fts5_and_under_a_filter_as_the_leg(
    workspace: stratamem.Memory, filters: Filters, query: str
) -> None:
    expression = match_expression(query)
    assert expression is not None
    # The sparse index answers (this compares it with FTS5, not FTS5 with itself).
    ranked = sparse_index(workspace.store).rank(query_terms(query), filters, 5)
    assert ranked is not None
    fast = keyword_search(workspace.store, query, filters=filters, limit=5)
    hits, total = workspace.store.fts_search(expression, filters, 5)
    assert fast.total == total
    assert fast.hits
    if filters != Filters():
        # Under a filter keyword mode weighs a word by how rare it is among what the filter
        # admits (FTS5 counts the whole store): the hybrid leg's ranking, with FTS5's matches.
        assert [h.node_id for h in fast.hits] == [node for _, node, _ in ranked[0]]
        assert [h.score for h in fast.hits] == pytest.approx([s for _, _, s in ranked[0]])
        matched = workspace.store.fts_search(expression, filters, 1000)[0]
        assert {h.node_id for h in fast.hits} <= {h.node_id for h in matched}
        return
    assert [h.node_id for h in fast.hits] == [h.node_id for h in hits]
    assert [h.score for h in fast.hits] == pytest.approx([h.score for h in hits], rel=1e-6)
    assert [h.snippet for h in fast.hits] == [h.snippet for h in hits]


def keyword_answers(mem: stratamem.Memory) -> list[tuple[object, ...]]:
    """What the sparse index, the keyword search and the store's full-text query answer to a
    few queries, with and without a filter: (ids, scores, snippets) of each, and the totals."""

    def shown(hits: Sequence[RetrievalHit]) -> tuple[object, ...]:
        return [h.node_id for h in hits], [h.score for h in hits], [h.snippet for h in hits]

    out: list[tuple[object, ...]] = []
    for query in (
        "why did we drop Redis for the SQLite queue?",
        "release date slipped",
        "running cats",
        "alice bob",
        "job_queue",
    ):
        expression = match_expression(query)
        assert expression is not None
        for filters in (Filters(), Filters(sources=("slack:*",))):
            found = sparse(mem).search(query_terms(query), filters, 8)
            ranked = None if found is None else (list(found), list(found.values()), [])
            fast = keyword_search(mem.store, query, filters=filters, limit=8)
            hits, total = mem.store.fts_search(expression, filters, 8)
            out += [ranked, (*shown(fast.hits), fast.total), (*shown(hits), total)]
    return out


@pytest.mark.parametrize("tokenizer", ["stemmed", "plain"])
def test_postgresql_ranks_as_sqlite_does(
    both_backends: tuple[str, str], tmp_path: Path, tokenizer: str
) -> None:
    # The same documents on both backends: the same hits, BM25 scores and snippets.
    answers = []
    for location in both_backends:
        with stratamem.open(location, embedder=None) as mem:
            for part in ("slack-export", "mail/team.mbox", "notes"):
                mem.ingest(EXAMPLES / part)
            mem.ingest(write_docs(tmp_path / "tiny.jsonl", TINY))
            mem.indexes.set_keyword_tokenizer(tokenizer)
            answers.append(keyword_answers(mem))
    sqlite, postgresql = answers
    assert len(sqlite) == len(postgresql)
    assert any(answer is None for answer in sqlite)  # the phrase: the full-text query answers
    for ours, theirs in zip(sqlite, postgresql, strict=True):
        if ours is None or theirs is None:
            assert ours is theirs
            continue
        ids, scores, snippets, *total = ours
        assert (ids, snippets, *total) == (theirs[0], theirs[2], *theirs[3:])
        assert scores == pytest.approx(theirs[1], rel=1e-6)
    assert sum(len(answer[0]) for answer in sqlite if answer) > 50  # type: ignore[arg-type]


def test_the_hybrid_keyword_leg_runs_on_the_sparse_index(workspace: stratamem.Memory) -> None:
    found, status = keyword_leg(workspace.store, "queue stalled", Filters(), 10)
    assert found is not None
    assert status == f"ok: {len(found)} matches"
    response = workspace.search("queue stalled", limit=5, mode="hybrid")
    assert response.legs["keyword"].startswith("ok")
    assert "FTS5" not in response.legs["keyword"]


def test_a_term_fts5_reads_as_a_phrase_falls_back_to_fts5(workspace: stratamem.Memory) -> None:
    # unicode61 splits on "_", so FTS5 matches "job_queue" as the phrase "job queue".
    found, status = keyword_leg(workspace.store, "job_queue", Filters(), 10)
    assert "FTS5" in status
    assert "phrase" in status
    assert found is not None


def test_a_query_without_words_leaves_the_leg_off(workspace: stratamem.Memory) -> None:
    found, status = keyword_leg(workspace.store, "?!", Filters(), 10)
    assert found is None
    assert status.startswith("off")


def test_inside_a_write_transaction_the_fts5_query_answers(tiny: stratamem.Memory) -> None:
    with tiny.store.transaction():
        found, status = keyword_leg(tiny.store, "cat", Filters(), 10)
    assert "FTS5" in status
    assert found is not None
    assert len(found) == 1


# -- the access gate -------------------------------------------------------------------------


def test_filters_apply_before_the_limit(store_location: str, tmp_path: Path) -> None:
    strong = [("redis redis redis queue", "redis")] * 30
    weak = [(f"a note that mentions redis once, number {i}", "") for i in range(5)]
    with stratamem.open(store_location, embedder=None) as mem:
        mem.ingest(write_docs(tmp_path / "strong.jsonl", strong, source="strong"))
        mem.ingest(write_docs(tmp_path / "weak.jsonl", weak, source="weak"))
        index = sparse(mem)
        unfiltered = index.search(["redis"], Filters(), 5)
        assert unfiltered is not None
        strong_ids = {
            c.id for c in mem.store.iter_chunks(mem.store.resolve_source("jsonl:strong").id)
        }
        assert set(unfiltered) <= strong_ids
        only_weak = index.search(["redis"], Filters(sources=("jsonl:weak",)), 5)
        assert only_weak is not None
        assert len(only_weak) == 5
        assert not set(only_weak) & strong_ids
        assert index.search(["redis"], Filters(sources=("nowhere",)), 5) == {}


def test_under_a_gate_the_idf_counts_only_the_admitted_documents() -> None:
    # Docs 0-1 (admitted) hold "a"; doc 1 also "b"; docs 2-4 (not admitted) hold "b".
    # Admitted: N = 2, n(a) = 2 → idf floor, n(b) = 1 → log(1.5 / 1.5) = 0 → floor too.
    # Whole index: N = 5, n(a) = 2 → log(3.5 / 2.5), n(b) = 4 → floor.
    index = BM25Index(("content",), (1.0,))
    postings = Postings(
        terms=["a", "b"],
        term=np.array([0, 0, 1, 1, 1, 1]),
        doc=np.array([0, 1, 1, 2, 3, 4]),
        freq=np.ones(6),
        lengths=np.array([[1], [2], [1], [1], [1]]),
    )
    index.append(np.arange(1, 6), [str(i) for i in range(5)], postings)
    allow = np.array([True, True, False, False, False])
    assert index.idf([0, 1]).tolist() == pytest.approx([math.log(3.5 / 2.5), 1e-6])
    assert index.idf([0, 1], allow=allow).tolist() == [1e-6, 1e-6]
    positions, scores = index.top(["a", "b"], 5, allow=allow)
    assert positions.tolist() == [1, 0]
    avgdl = 6 / 5  # the whole index's
    assert scores.tolist() == pytest.approx(
        [2 * hand_score(1.0, 2, 2, 2, avgdl), hand_score(1.0, 1, 2, 2, avgdl)]
    )


def test_a_name_in_every_turn_of_its_conversation_weighs_nothing_there(
    store_location: str, tmp_path: Path
) -> None:
    ours = [("gina said hello", "")] * 6 + [("gina said she loves to dance", "")]
    others = [(f"talk about topic {i} with nobody named", "") for i in range(30)]
    with stratamem.open(store_location, embedder=None) as mem:
        mem.ingest(write_docs(tmp_path / "ours.jsonl", ours, source="ours"))
        mem.ingest(write_docs(tmp_path / "others.jsonl", others, source="others"))
        index = sparse(mem)
        scoped = index.search(["gina", "dance"], Filters(sources=("jsonl:ours",)), 3)
        assert scoped is not None
        top, *rest = scoped.values()
        assert top > 100 * max(rest)  # only "dance" counts inside the conversation
        whole = index.search(["gina"], Filters(), 3)
        assert whole is not None
        assert min(whole.values()) > 0.5  # across the store "gina" is rare


Doc = tuple[list[str], list[str]]  # (content tokens, title tokens)

_DOCS = st.lists(
    st.tuples(
        st.lists(st.sampled_from("abcdef"), max_size=6),
        st.lists(st.sampled_from("abc"), max_size=2),
    ),
    min_size=1,
    max_size=25,
)


def postings_of(docs: list[Doc]) -> Postings:
    """The postings of ``docs``: content weighs 1, title 0.5."""
    terms = sorted({t for body, title in docs for t in (*body, *title)})
    rows = sorted(
        (terms.index(t), i, body.count(t) + 0.5 * title.count(t))
        for i, (body, title) in enumerate(docs)
        for t in set(body) | set(title)
    )
    return Postings(
        terms=terms,
        term=np.array([r[0] for r in rows], dtype=np.int64),
        doc=np.array([r[1] for r in rows], dtype=np.int64),
        freq=np.array([r[2] for r in rows], dtype=np.float64),
        lengths=np.array([[len(b), len(t)] for b, t in docs], dtype=np.int64).reshape(-1, 2),
    )


def index_of(docs: list[Doc], rowids: list[int]) -> BM25Index:
    index = BM25Index(("content", "title"), (1.0, 0.5))
    index.append(np.asarray(rowids, dtype=np.int64), [f"d{r}" for r in rowids], postings_of(docs))
    return index


def ranked_rows(
    index: BM25Index, query: list[str], k: int, **kwargs: object
) -> tuple[list[int], list[float], int]:
    positions, scores, total = index.ranked(query, k, **kwargs)  # type: ignore[arg-type]
    return index.rowids[positions].tolist(), scores.tolist(), total


@settings(max_examples=150, deadline=None)
@given(
    docs=_DOCS,
    seen=st.lists(st.booleans(), min_size=25, max_size=25),
    within=st.lists(st.booleans(), min_size=25, max_size=25),
    query=st.lists(st.sampled_from("abcdefg"), min_size=1, max_size=3),
    k=st.integers(1, 8),
    scoped_idf=st.booleans(),
)
def test_gated_scores_equal_those_of_an_index_of_the_visible_documents_only(
    docs: list[Doc],
    seen: list[bool],
    within: list[bool],
    query: list[str],
    k: int,
    scoped_idf: bool,
) -> None:
    # N, n(q) and avgdl all count what the gate admits: to the last bit, the scores of an
    # index that never held the rest, with or without a filter inside the gate.
    rowids = list(range(1, len(docs) + 1))
    base = np.array(seen[: len(docs)])
    whole = index_of(docs, rowids)
    alone = index_of(
        [d for d, v in zip(docs, base, strict=True) if v],
        [r for r, v in zip(rowids, base, strict=True) if v],
    )
    assert ranked_rows(whole, query, k, base=base) == ranked_rows(alone, query, k)
    allow = np.array(within[: len(docs)])
    assert ranked_rows(
        whole, query, k, allow=allow, base=base, scoped_idf=scoped_idf
    ) == ranked_rows(alone, query, k, allow=allow[base], scoped_idf=scoped_idf)
    # Asked again, the gains kept for the gate give the same.
    assert ranked_rows(whole, query, k, base=base) == ranked_rows(alone, query, k)


@settings(max_examples=150, deadline=None)
@given(
    first=_DOCS,
    later=st.lists(_DOCS, min_size=1, max_size=4),
    seen=st.lists(st.booleans(), min_size=125, max_size=125),
    query=st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=3),
    k=st.integers(1, 8),
)
def test_appends_held_apart_score_as_one_index_of_them_all(
    first: list[Doc], later: list[list[Doc]], seen: list[bool], query: list[str], k: int
) -> None:
    # Documents appended after the first are held in a tail of their own until it is merged;
    # to the last bit, scores and counts are those of one index built from every document,
    # before the merge and after it, gated or not.
    docs = [*first, *(d for part in later for d in part)]
    rowids = list(range(1, len(docs) + 1))
    grown = index_of(first, rowids[: len(first)])
    done = len(first)
    for part in later:
        grown.append(
            np.asarray(rowids[done : done + len(part)], dtype=np.int64),
            [f"d{r}" for r in rowids[done : done + len(part)]],
            postings_of(part),
        )
        done += len(part)
    whole = index_of(docs, rowids)
    base = np.array(seen[: len(docs)])
    expected = [ranked_rows(whole, query, k), ranked_rows(whole, query, k, base=base)]
    assert [ranked_rows(grown, query, k), ranked_rows(grown, query, k, base=base)] == expected
    assert grown.nnz == whole.nnz
    grown.merge()
    assert grown._tail is None
    assert [ranked_rows(grown, query, k), ranked_rows(grown, query, k, base=base)] == expected
    for term, tid in whole.vocab.items():
        ((doc, freq),) = grown._postings(np.array([grown.vocab[term]]))
        ((want_doc, want_freq),) = whole._postings(np.array([tid]))
        assert doc.tolist() == want_doc.tolist()
        assert freq.tolist() == want_freq.tolist()


def test_an_append_small_against_the_index_is_held_apart_until_it_grows() -> None:
    docs: list[Doc] = [([f"w{i % 50}", "common"], []) for i in range(400)]
    index = index_of(docs, list(range(1, 401)))
    assert index._tail is None
    index.append(np.array([401]), ["d401"], postings_of([(["common", "new"], [])]))
    assert index._tail is not None  # a copy of every posting avoided
    held = index._tail
    for rowid in range(402, 452):  # a hundred postings: past an eighth of the 800
        index.append(np.array([rowid]), [f"d{rowid}"], postings_of([(["common", "w1"], [])]))
    assert index._tail is None or index._tail is not held
    assert index.nnz == 800 + 2 + 100
    assert ranked_rows(index, ["new"], 3)[0] == [401]


def test_the_gains_kept_for_a_gate_follow_the_gate_and_the_documents() -> None:
    docs: list[Doc] = [(["a", "b"], []), (["a"], ["a"]), (["b", "c", "c"], []), (["a", "c"], [])]
    base = np.array([True, True, False, True])
    whole = index_of(docs, [1, 2, 3, 4])
    first = ranked_rows(whole, ["a", "c"], 4, base=base)
    assert first == ranked_rows(index_of([docs[0], docs[1], docs[3]], [1, 2, 4]), ["a", "c"], 4)
    # The same array, changed in place: compared by value, not kept by identity.
    base[:] = [False, True, True, True]
    assert ranked_rows(whole, ["a", "c"], 4, base=base) == ranked_rows(
        index_of(docs[1:], [2, 3, 4]), ["a", "c"], 4
    )
    # New documents move avgdl: what was kept for the gate is dropped.
    more: list[Doc] = [(["c"] * 9, [])]
    whole.append(np.array([5]), ["d5"], postings_of(more))
    grown = np.array([False, True, True, True, True])
    assert ranked_rows(whole, ["a", "c"], 5, base=grown) == ranked_rows(
        index_of([*docs[1:], *more], [2, 3, 4, 5]), ["a", "c"], 5
    )


def test_a_principal_ranks_as_a_store_of_only_what_it_may_see(
    store_location: str, locations: Any, tmp_path: Path
) -> None:
    parts = {
        "ours": [("redis queue stalled", "queue"), ("redis again", ""), ("a long note " * 9, "")],
        "theirs": [("redis redis redis", "redis"), ("queue queue", "")] * 5,
        "shared": [(f"note {i} on the redis queue", "") for i in range(6)],
    }
    seen = ("ours", "shared")
    everything, alone_at = store_location, locations.new(store_location, tmp_path, "seen")
    with stratamem.open(everything, embedder=None) as mem:
        for name, docs in parts.items():
            mem.ingest(write_docs(tmp_path / f"{name}.jsonl", docs, source=name))
            mem.sources.set_access(f"jsonl:{name}", scopes="team" if name in seen else "private")
        mem.principals.add("reader", "team")
    with stratamem.open(alone_at, embedder=None) as mem:
        for name in seen:
            mem.ingest(tmp_path / f"{name}.jsonl")
    for query in (["redis"], ["redis", "queue"], ["note", "queue", "stalled"]):
        with (
            stratamem.open(everything, embedder=None, principal="reader") as gated,
            stratamem.open(alone_at, embedder=None) as alone,
        ):
            found = sparse(gated).search(query, Filters(), 10)
            assert found
            assert found == sparse(alone).search(query, Filters(), 10)


# -- change, persistence, corruption -------------------------------------------------------


def test_chunks_added_later_are_found(tiny: stratamem.Memory, tmp_path: Path) -> None:
    index = sparse(tiny)
    assert index.search(["otter"], Filters(), 10) == {}
    tiny.ingest(write_docs(tmp_path / "more.jsonl", [("an otter swims", "")], source="more"))
    found = index.search(["otter", "cat"], Filters(), 10)
    assert found is not None
    theirs = fts5_top(tiny, "otter cat", 10)
    assert list(found) == list(theirs)
    assert list(found.values()) == pytest.approx(list(theirs.values()), rel=1e-6)


def test_deleted_chunks_never_appear(own_workspace: stratamem.Memory) -> None:
    index = sparse(own_workspace)
    before = index.search(["redis"], Filters(), 50)
    assert before
    mail = own_workspace.store.resolve_source(
        next(s.id for s in own_workspace.store.sources() if s.kind.value == "email")
    )
    gone = {c.id for c in own_workspace.store.iter_chunks(mail.id)}
    assert gone & set(before)
    own_workspace.store.delete_source(mail.id)
    after = index.search(["redis"], Filters(), 50)
    assert after is not None
    assert not gone & set(after)
    assert list(after.values()) == pytest.approx(
        list(fts5_top(own_workspace, "redis", 50).values())
    )


def test_the_index_is_saved_beside_the_database_and_reused(tiny: stratamem.Memory) -> None:
    first = sparse(tiny, persist_min_docs=0)
    found = first.search(["cat"], Filters(), 10)
    first.saver.flush()
    path = first.index_path()
    assert path is not None
    assert path.exists()
    second = sparse(tiny, persist_min_docs=0)
    assert second.search(["cat"], Filters(), 10) == found
    assert second.note == ""


def test_a_saved_index_of_an_older_state_is_brought_up_to_date(
    tiny: stratamem.Memory, tmp_path: Path
) -> None:
    first = sparse(tiny, persist_min_docs=0)
    first.search(["cat"], Filters(), 10)
    first.saver.flush()
    tiny.ingest(write_docs(tmp_path / "more.jsonl", [("a cat and an otter", "")], source="more"))
    tiny.store.delete_source(tiny.store.resolve_source("jsonl:docs").id)
    reopened = sparse(tiny, persist_min_docs=0)
    found = reopened.search(["cat", "otter"], Filters(), 10)
    assert found is not None
    assert list(found.values()) == pytest.approx(list(fts5_top(tiny, "cat otter", 10).values()))
    assert len(found) == 1


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],
        lambda data: data[:40] + bytes([data[40] ^ 0xFF]) + data[41:],
        lambda data: b"not an index at all",
        lambda data: b"",
    ],
)
def test_a_corrupt_file_is_rebuilt_and_says_so(tiny: stratamem.Memory, damage) -> None:  # type: ignore[no-untyped-def]
    first = sparse(tiny, persist_min_docs=0)
    expected = first.search(["cat"], Filters(), 10)
    first.saver.flush()
    path = first.index_path()
    assert path is not None
    path.write_bytes(damage(path.read_bytes()))
    second = sparse(tiny, persist_min_docs=0)
    assert second.search(["cat"], Filters(), 10) == expected
    assert "rebuilt" in second.note


def saved_file(mem: stratamem.Memory) -> Path:
    """Where a fresh index of ``mem`` is saved, once it is."""
    index = sparse(mem, persist_min_docs=0)
    index.search(["cat"], Filters(), 10)
    index.saver.flush()
    path = index.index_path()
    assert path is not None
    return path


def test_a_file_built_with_other_weights_is_rejected(tiny: stratamem.Memory) -> None:
    path = saved_file(tiny)
    schema = replace(tiny.store.keyword_schema(), weights=(1.0, 1.0))
    with pytest.raises(bm25_file.Rejected, match="weights"):
        bm25_file.read_file(path, schema, store_id=tiny.store.store_id())


def test_the_file_records_the_statistics_as_fts5_keeps_them(tiny: stratamem.Memory) -> None:
    path = saved_file(tiny)
    data = path.read_bytes()
    header = json.loads(data[12 : 12 + int.from_bytes(data[8:12], "little")])
    with fts5_index(tiny) as conn:
        (blob,) = conn.execute("SELECT block FROM chunks_fts_data WHERE id = 1").fetchone()
    assert bytes.fromhex(header["averages"]) == bytes(blob)
    _, state = bm25_file.read_file(
        path, tiny.store.keyword_schema(), store_id=tiny.store.store_id()
    )
    assert state == tiny.store.keyword_state()


def test_frequencies_are_saved_as_whole_counts_and_read_back_exactly(
    tiny: stratamem.Memory,
) -> None:
    """With the title weighing 0.6, every frequency is a whole number of fifths: the file
    keeps each in one byte and reads back the very float32 the index held."""
    index = sparse(tiny, persist_min_docs=0)
    index.search(["cat"], Filters(), 10)
    held = index._index
    assert held is not None
    assert not np.array_equal(held.freq, np.rint(held.freq))  # a title's 0.6 is in there
    index.saver.flush()
    path = index.index_path()
    assert path is not None
    data = path.read_bytes()
    header = json.loads(data[12 : 12 + int.from_bytes(data[8:12], "little")])
    assert header["freq_scale"] == 5
    assert (header["freq_width"], header["freq_overflow"]) == (1, 0)
    read, _ = bm25_file.read_file(path, tiny.store.keyword_schema(), store_id=tiny.store.store_id())
    assert read.freq.dtype == np.float32
    assert np.array_equal(read.freq, held.freq)


@pytest.mark.parametrize(("repeats", "width", "overflow"), [(60, 1, 1), (1, 1, 0)])
def test_a_count_too_big_for_a_byte_is_listed_apart_and_read_back_exactly(
    store_location: str, tmp_path: Path, repeats: int, width: int, overflow: int
) -> None:
    """A word 60 times in a text is a count of 300 fifths: the byte holds 255 and the count
    is listed apart; every frequency reads back as the index held it."""
    words = " ".join(f"word{i}" for i in range(200))
    docs = [(f"{words} {'again ' * repeats}", "long"), *[(f"cat {i}", f"t{i}") for i in range(5)]]
    with stratamem.open(store_location, embedder=None) as mem:
        mem.ingest(write_docs(tmp_path / "docs.jsonl", docs))
        index = sparse(mem, persist_min_docs=0)
        index.search(["again"], Filters(), 10)
        held = index._index
        assert held is not None
        index.saver.flush()
        path = index.index_path()
        assert path is not None
        data = path.read_bytes()
        header = json.loads(data[12 : 12 + int.from_bytes(data[8:12], "little")])
        assert (header["freq_width"], header["freq_overflow"]) == (width, overflow)
        read, _ = bm25_file.read_file(
            path, mem.store.keyword_schema(), store_id=mem.store.store_id()
        )
        assert np.array_equal(read.freq, held.freq)
        assert (float(held.freq.max()) == 60.0) == (repeats == 60)


@pytest.mark.parametrize(
    ("counts", "width", "listed"),
    [
        ([1, 5, 254] * 30, 1, []),
        ([1, 5, 255] + [3] * 200, 1, [2]),
        ([300, 7, 65535] + [3] * 200, 1, [0, 2]),
        ([300, 256, 255] + [3] * 100, 2, []),  # more than one count in 64 too big: two bytes
    ],
)
def test_counts_go_in_a_byte_while_few_are_too_big(
    counts: list[int], width: int, listed: list[int]
) -> None:
    given = np.asarray(counts, dtype=np.uint16)
    found, written, at, big = bm25_file._narrowed(5, given)
    assert found == width
    assert at.tolist() == listed
    assert big.tolist() == [counts[i] for i in listed]
    if width == 1:
        assert int(written.max()) <= 255
        restored = written.astype(np.int64)
        restored[at] = big
        assert restored.tolist() == counts
    assert bm25_file._narrowed(0, given)[0] == 4


@pytest.mark.parametrize(
    ("weights", "freq", "scale"),
    [
        ((1.0, 0.6), [1.0, 1.6, 2.2, 3.0], 5),
        ((1.0, 0.5), [1.0, 1.5, 4000.5], 2),
        ((1.0, 1 / 3), [1.0, 4 / 3], 0),  # no S makes a third whole
        ((1.0, 0.6), [1.0, 13107.2], 0),  # 65,536 fifths do not fit in two bytes
        ((1.0, 0.6), [1.0, 0.123], 0),  # not a sum of the weights: kept as it is
    ],
)
def test_frequencies_that_cannot_be_packed_exactly_stay_float32(
    weights: tuple[float, ...], freq: list[float], scale: int
) -> None:
    given = np.asarray(freq, dtype=np.float32)
    found, packed = bm25_file._packed_frequencies(given, weights)
    assert found == scale
    if scale:
        assert packed.dtype == np.uint16
        assert np.array_equal(packed.astype(np.float32) / np.float32(scale), given)
    else:
        assert packed is given


def test_a_missing_file_is_rebuilt(tiny: stratamem.Memory) -> None:
    first = sparse(tiny, persist_min_docs=0)
    expected = first.search(["cat"], Filters(), 10)
    first.saver.flush()
    path = first.index_path()
    assert path is not None
    path.unlink()
    second = sparse(tiny, persist_min_docs=0)
    assert second.search(["cat"], Filters(), 10) == expected
    second.saver.flush()
    assert path.exists()


def test_small_and_in_memory_stores_write_no_file(tiny: stratamem.Memory) -> None:
    index = sparse(tiny)
    index.search(["cat"], Filters(), 10)
    index.saver.flush()
    path = index.index_path()
    assert path is not None
    assert not path.exists()
    with stratamem.open(":memory:", embedder=None) as mem:
        assert sparse(mem).index_path() is None


def test_one_index_per_open_store(tiny: stratamem.Memory) -> None:
    assert sparse_index(tiny.store) is sparse_index(tiny.store)


def test_the_averages_record_decodes_to_fts5_totals(tiny: stratamem.Memory) -> None:
    with fts5_index(tiny) as conn:
        (blob,) = conn.execute("SELECT block FROM chunks_fts_data WHERE id = 1").fetchone()
    assert decode_averages(blob) == (4, (6, 1))
    state = tiny.store.keyword_state()
    assert (state.docs, state.totals) == (4, (6, 1))


def test_an_empty_store_matches_nothing(store_location: str) -> None:
    with stratamem.open(store_location, embedder=None) as mem:
        assert sparse(mem).search(["anything"], Filters(), 10) == {}
        assert keyword_leg(mem.store, "anything", Filters(), 10) == ({}, "ok: 0 matches")


def test_the_top_of_many_matches_is_every_best_document_ties_by_rowid() -> None:
    # Enough matches that the cut is first taken on a sample of them; scores repeat (ties).
    rng = np.random.default_rng(3)
    n = 4000
    index = BM25Index(("content",), (1.0,))
    doc = np.concatenate([np.arange(n), np.flatnonzero(rng.random(n) < 0.1)])
    term = np.concatenate([np.zeros(n, np.int64), np.ones(len(doc) - n, np.int64)])
    postings = Postings(
        terms=["a", "b"],
        term=term,
        doc=doc,
        freq=rng.integers(1, 4, len(doc)).astype(np.float64),
        lengths=rng.integers(1, 6, (n, 1)),
    )
    index.append(np.arange(1, n + 1), [str(i) for i in range(n)], postings)
    for k in (1, 10, 100):
        scores = index.scores(["a", "b"])
        expected = sorted(range(n), key=lambda i: (-scores[i], i))[:k]
        positions, values, total = index.ranked(["a", "b"], k)
        assert positions.tolist() == expected
        assert values.tolist() == scores[expected].tolist()
        assert total == n
