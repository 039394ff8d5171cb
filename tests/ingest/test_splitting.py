from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratamem.ingest.splitting import split_text

words = st.text(alphabet="abcdefghij", min_size=1, max_size=12)
separators = st.sampled_from([" ", " ", " ", "\n", "\n\n", ". ", "\n## Heading\n", "\t"])


@st.composite
def documents(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.tuples(words, separators), min_size=0, max_size=600))
    return "".join(w + s for w, s in parts)


@settings(max_examples=200, deadline=None)
@given(documents())
def test_every_character_lands_in_a_span_in_order(text: str) -> None:
    spans = split_text(text, target=120, min_chars=40, max_chars=200, overlap=20)
    covered = 0
    previous_start = -1
    for span in spans:
        assert span.start > previous_start
        assert span.start <= covered, "a gap between spans"
        assert span.end > span.start
        covered = max(covered, span.end)
        previous_start = span.start
    assert covered == len(text)


@settings(max_examples=200, deadline=None)
@given(documents())
def test_spans_never_cut_a_word(text: str) -> None:
    for span in split_text(text, target=120, min_chars=40, max_chars=200, overlap=20):
        if span.start > 0:
            assert text[span.start - 1].isspace() or not text[span.start].isalpha()
        if span.end < len(text):
            assert text[span.end - 1].isspace() or text[span.end] == "#"


@given(documents())
def test_spans_are_stable(text: str) -> None:
    assert split_text(text, target=120, min_chars=40, max_chars=200) == split_text(
        text, target=120, min_chars=40, max_chars=200
    )


def test_prefers_heading_breaks() -> None:
    first = "# Intro\n\n" + "alpha beta gamma. " * 30 + "\n\n"
    second = "## Design\n\n" + "delta epsilon zeta. " * 30
    text = first + second
    spans = split_text(text, target=600, min_chars=200, max_chars=900)
    assert [text[s.start : s.end] for s in spans][1].startswith("## Design")
    assert spans[1].start == len(first)


def test_short_text_is_one_span_and_empty_is_none() -> None:
    assert [(s.start, s.end) for s in split_text("hello world")] == [(0, 11)]
    assert split_text("") == []


def test_word_longer_than_window_is_cut_hard() -> None:
    text = "x" * 5000
    spans = split_text(text, target=800, min_chars=200, max_chars=1200)
    assert spans[0].end == 1200
    assert spans[-1].end == 5000


def test_bad_sizes_are_rejected() -> None:
    with pytest.raises(ValueError, match="min_chars"):
        split_text("abc", target=100, min_chars=200, max_chars=300)
