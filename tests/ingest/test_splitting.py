from __future__ import annotations

import re

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


# -- the same spans as the exhaustive search it replaced ------------------------------------

_OLD_SENTENCE_END = re.compile(r"[.!?][\"')\]]?\s")
_OLD_HEADING = re.compile(r"^#{1,6}[ \t]", re.MULTILINE)


def _old_split_text(
    text: str, *, target: int, min_chars: int, max_chars: int, overlap: int
) -> list[tuple[int, int]]:
    """The splitter as it was: every candidate break of every kind scored, the best kept."""

    def candidates(lo: int, hi: int) -> list[list[int]]:
        segment = text[lo:hi]
        return [
            [lo + m.end() for m in re.finditer(r"\s+", segment)],
            [lo + m.end() for m in _OLD_SENTENCE_END.finditer(segment)],
            [lo + m.end() for m in re.finditer(r"\n", segment)],
            [lo + m.end() for m in re.finditer(r"\n[ \t]*\n", segment)],
            [lo + m.start() for m in _OLD_HEADING.finditer(segment) if lo + m.start() > lo],
        ]

    def best_break(start: int) -> tuple[int, bool]:
        window_lo, window_hi = start + min_chars, min(start + max_chars, len(text))
        aim = start + target
        best: tuple[float, int] | None = None
        best_rank = -1
        for rank, positions in enumerate(candidates(window_lo, window_hi)):
            for pos in positions:
                score = rank - abs(pos - aim) / max(max_chars, 1)
                if best is None or score > best[0]:
                    best, best_rank = (score, pos), rank
        if best is not None:
            return best[1], best_rank < 2
        return window_hi, False

    n = len(text)
    if n <= max_chars:
        return [(0, n)] if n else []
    spans: list[tuple[int, int]] = []
    start = 0
    while start < n:
        if n - start <= max_chars:
            spans.append((start, n))
            break
        end, soft = best_break(start)
        spans.append((start, end))
        next_start = end
        if soft and overlap:
            next_start = max(start + 1, end - overlap)
            while next_start < end and not text[next_start - 1].isspace():
                next_start += 1
        start = next_start
    return spans


def _spans(text: str, **sizes: int) -> list[tuple[int, int]]:
    return [(s.start, s.end) for s in split_text(text, **sizes)]


_EVEN = "word " * 400
_SAMPLES = [
    _EVEN,
    "Alpha beta. " * 200,
    ("a line of text\n" * 40 + "\n") * 6,
    ("# Title\n\n" + "Some words here. " * 60 + "\n") * 5,
    "x" * 3000 + " tail",
    "tie " * 100 + "\n" + "tie " * 400,  # equally near breaks on either side of the aim
    "  \n\n  ".join(["para " * 50] * 12),
    "Wörter mit Ümlauten, 数字 und Sätze! " * 80,
]


@pytest.mark.parametrize("text", _SAMPLES)
@pytest.mark.parametrize(
    "sizes",
    [
        {"target": 800, "min_chars": 200, "max_chars": 1200, "overlap": 80},
        {"target": 100, "min_chars": 100, "max_chars": 100, "overlap": 0},
        {"target": 2000, "min_chars": 1000, "max_chars": 4000, "overlap": 0},
    ],
)
def test_spans_are_those_of_the_exhaustive_search(text: str, sizes: dict[str, int]) -> None:
    assert _spans(text, **sizes) == _old_split_text(text, **sizes)


@settings(max_examples=300, deadline=None)
@given(documents(), st.integers(20, 120), st.integers(0, 60), st.integers(0, 40))
def test_any_document_splits_as_the_exhaustive_search_split_it(
    text: str, lo: int, more: int, overlap: int
) -> None:
    sizes = {"target": lo + more // 2, "min_chars": lo, "max_chars": lo + more, "overlap": overlap}
    assert _spans(text, **sizes) == _old_split_text(text, **sizes)


def test_of_two_breaks_as_near_the_aim_the_earlier_is_taken() -> None:
    # Word ends at 46 and 54, the aim at 50.
    text = "x" * 45 + " " + "y" * 7 + " " + "z" * 200
    sizes = {"target": 50, "min_chars": 20, "max_chars": 100, "overlap": 0}
    assert _spans(text, **sizes)[0] == (0, 46)
    assert _spans(text, **sizes) == _old_split_text(text, **sizes)
