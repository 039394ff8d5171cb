from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratamem.retrieval.query import match_expression, query_terms, term_weight, weighted_terms


def test_terms_drop_stopwords_and_duplicates() -> None:
    assert query_terms("Why did we drop Redis? redis") == ["drop", "redis"]


def test_stopword_only_query_keeps_its_words() -> None:
    assert query_terms("what is it") == ["what", "is", "it"]


@pytest.mark.parametrize("text", ["", "   ", "?!", "---"])
def test_nothing_searchable_gives_none(text: str) -> None:
    assert match_expression(text) is None


def test_expression_quotes_and_ors() -> None:
    assert match_expression('NEAR(a b) OR "x" AND title:y') == (
        '"near" OR "b" OR "x" OR "title" OR "y"'
    )


@given(st.text(max_size=300))
def test_no_user_text_breaks_fts_syntax(text: str) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(body)")
    conn.execute("INSERT INTO t VALUES ('some body text')")
    expression = match_expression(text)
    if expression is not None:
        conn.execute("SELECT * FROM t WHERE t MATCH ?", (expression,)).fetchall()


def test_weighted_terms_count_repeats_and_drop_stopwords() -> None:
    assert weighted_terms("The pump, the PUMP and the valve") == [("pump", 2), ("valve", 1)]


def test_weighted_terms_of_a_stopword_query_keep_its_words() -> None:
    assert weighted_terms("the the") == [("the", 2)]


def test_term_weight_saturates() -> None:
    assert term_weight(1) == 1.0
    assert term_weight(0) == 0.0
    assert term_weight(2) == pytest.approx(2 * 9 / 10)
    assert 1.0 < term_weight(4) < term_weight(40) < 9.0
