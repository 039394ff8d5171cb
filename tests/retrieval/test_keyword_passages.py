"""The keyword leg on passages (a pasted paragraph as the query) and on keywords."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

import numpy as np
import pytest

import stratamem
from stratamem.retrieval.index.bm25 import BM25Index, Postings
from stratamem.retrieval.legs import keyword as leg
from stratamem.retrieval.legs.keyword import keyword_leg, keyword_search, query_tokens
from stratamem.types import Filters

DOCS = {
    "turbine": "turbine blades crack under heat",
    "valve": "valve seals leak under heat",
    "words": "the and of with this that from",
    "pump": "the pump of the plant runs",
    "f1": "copper wire gauge",
    "f2": "granite quarry dust",
    "f3": "harbour crane cable",
    "f4": "orchard apple heat",
}
# More distinct words than LONG_QUERY_TOKENS, none of them in any document but the first two.
FILLER = (
    "alpha beta gamma delta epsilon zeta theta iota kappa lambda omicron sigma tau upsilon "
    "phi chi psi omega"
)


@pytest.fixture(scope="module")
def memory(
    module_location: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[stratamem.Memory]:
    path = tmp_path_factory.mktemp("passages") / "docs.jsonl"
    with path.open("w") as fh:
        for name, text in DOCS.items():
            fh.write(json.dumps({"id": name, "text": text, "source": "docs"}) + "\n")
    with stratamem.open(module_location, embedder=None) as mem:
        mem.ingest(path)
        yield mem


def test_a_passage_weighs_the_word_it_repeats(memory: stratamem.Memory) -> None:
    # "turbine" and "valve" are each in one document of the same length: said once each they
    # tie; said four times, "turbine" ranks its document first.
    passage = f"turbine turbine turbine turbine valve {FILLER}"
    found = keyword_search(memory.store, passage, limit=5, snippets=False)
    assert [h.content for h in found.hits[:2]] == [DOCS["turbine"], DOCS["valve"]]
    assert found.hits[0].score > found.hits[1].score


def test_keywords_do_not_weigh_repetition(memory: stratamem.Memory) -> None:
    # A keyword query ranks as FTS5 does the OR of its distinct words: the same scores.
    once = keyword_search(memory.store, "turbine valve", limit=5, snippets=False)
    again = keyword_search(memory.store, "turbine turbine turbine valve", limit=5, snippets=False)
    assert [h.score for h in again.hits] == pytest.approx([h.score for h in once.hits])
    assert once.hits[0].score == pytest.approx(once.hits[1].score)


def test_a_passages_function_words_do_not_score(memory: stratamem.Memory) -> None:
    passage = f"the pump and this of that with from the {FILLER}"
    contents = [h.content for h in keyword_search(memory.store, passage, limit=10).hits]
    assert contents == [DOCS["pump"]]


def test_a_stopword_query_still_finds_its_documents(memory: stratamem.Memory) -> None:
    contents = {h.content for h in keyword_search(memory.store, "the", limit=10).hits}
    assert contents == {DOCS["words"], DOCS["pump"]}
    scores, status, _ = leg.keyword_leg_scored(memory.store, "the", Filters(), 10)
    assert scores is not None, status
    assert len(scores) == 2


def test_a_long_passage_scores_its_rarest_words(
    memory: stratamem.Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "heat" is in three documents, "turbine" in one: with one token scored, the rarer.
    monkeypatch.setattr(leg, "MAX_SCORED_TOKENS", 1)
    scores, _ = keyword_leg(memory.store, "heat turbine", Filters(), 10)
    assert scores is not None
    contents = {h.content for h in memory.store.chunks(list(scores))}
    assert contents == {DOCS["turbine"]}


def one_term_index() -> BM25Index:
    # Five rows of lengths 2, 4, 1, 1, 2 (avgdl 2): "a" twice in row 0 and once in row 1
    # (idf log(3.5 / 2.5)), "b" once in row 2.
    index = BM25Index(("content",), (1.0,))
    postings = Postings(
        terms=["a", "b"],
        term=np.array([0, 0, 1]),
        doc=np.array([0, 1, 2]),
        freq=np.array([2.0, 1.0, 1.0]),
        lengths=np.array([[2], [4], [1], [1], [2]]),
    )
    index.append(np.arange(1, 6), ["d0", "d1", "d2", "d3", "d4"], postings)
    return index


@pytest.mark.parametrize("k1", [1.2, 3.0])
def test_scores_under_another_k1_follow_the_formula(k1: float) -> None:
    index = one_term_index()
    avgdl = 10 / 5
    idf = math.log((5 - 2 + 0.5) / (2 + 0.5))

    def hand(f: float, length: int) -> float:
        return idf * f * (k1 + 1) / (f + k1 * (0.25 + 0.75 * length / avgdl))

    scores = index.scores(["a"], k1=k1)
    assert scores[:2].tolist() == pytest.approx([hand(2.0, 2), hand(1.0, 4)], rel=1e-6)
    weighted = index.scores(["a"], k1=k1, weights=[2.5])
    assert weighted[:2].tolist() == pytest.approx([2.5 * hand(2.0, 2), 2.5 * hand(1.0, 4)])
    assert index.idf_total(["a", "b"], weights=[2.0, 1.0]) == pytest.approx(
        2 * idf + math.log((5 - 1 + 0.5) / 1.5)
    )


def test_query_tokens_count_stems_and_mark_passages() -> None:
    index = one_term_index()
    # Keywords: a stem named by two distinct terms weighs 2, as in FTS5's OR of the two.
    tokens, weights, passage = query_tokens(index, [("a",), ("a",), ("b",)], None)
    assert (tokens, weights, passage) == (["a", "b"], [2.0, 1.0], False)
    # A passage: each token's weight is the saturating weight of how often it is said.
    many = [("a",), ("b",), *[(f"w{i}",) for i in range(leg.LONG_QUERY_TOKENS)]]
    tokens, weights, passage = query_tokens(index, many, [3, 1, *[1] * leg.LONG_QUERY_TOKENS])
    assert passage
    assert weights[:2] == pytest.approx([3 * 9 / 11, 1.0])


def test_a_passages_snippet_marks_its_rarest_words(
    memory: stratamem.Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(leg, "SNIPPET_TOKENS", 1)
    found = keyword_search(memory.store, f"heat turbine {FILLER}", limit=1)
    assert found.hits[0].content == DOCS["turbine"]
    assert "[turbine]" in found.hits[0].snippet
    assert "[heat]" not in found.hits[0].snippet
    keywords = keyword_search(memory.store, "heat turbine", limit=1)
    assert "[heat]" in keywords.hits[0].snippet
