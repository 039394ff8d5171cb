"""Heading-aware splitting of a text into spans of about ``target`` characters.

Every character of the text lies in at least one span, spans are in order, and a span never
starts or ends inside a word (unless a single word is longer than ``max_chars``). Breaks are
chosen by preference: before a Markdown heading, at a blank line, at a line end, after a
sentence, at any whitespace. Only a break at plain whitespace inside a paragraph carries an
``overlap`` so the cut sentence is readable on both sides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_HEADING = re.compile(r"^#{1,6}[ \t]", re.MULTILINE)
_SENTENCE_END = re.compile(r"[.!?][\"')\]]?\s")


@dataclass(frozen=True, slots=True)
class Span:
    start: int
    end: int


def split_text(
    text: str, *, target: int = 800, min_chars: int = 200, max_chars: int = 1200, overlap: int = 80
) -> list[Span]:
    if not 0 < min_chars <= target <= max_chars:
        raise ValueError("need 0 < min_chars <= target <= max_chars")
    n = len(text)
    if n <= max_chars:
        return [Span(0, n)] if n else []
    spans: list[Span] = []
    start = 0
    while start < n:
        if n - start <= max_chars:
            spans.append(Span(start, n))
            break
        end, soft = _best_break(text, start, target, min_chars, max_chars)
        spans.append(Span(start, end))
        next_start = end
        if soft and overlap:
            next_start = _word_start(text, max(start + 1, end - overlap), end)
        start = next_start
    return spans


def _best_break(text: str, start: int, target: int, lo: int, hi: int) -> tuple[int, bool]:
    """(end, soft): the best cut in [start+lo, start+hi]; soft when it falls mid-paragraph."""
    window_lo, window_hi = start + lo, min(start + hi, len(text))
    aim = start + target
    best: tuple[float, int] | None = None
    best_rank = -1
    for rank, positions in enumerate(_candidates(text, window_lo, window_hi)):
        for pos in positions:
            distance = abs(pos - aim) / max(hi, 1)
            score = rank - distance
            if best is None or score > best[0]:
                best, best_rank = (score, pos), rank
    if best is not None and best_rank >= 2:
        return best[1], False
    if best is not None:
        return best[1], True
    # A single word longer than the window: cut it hard.
    return window_hi, False


def _candidates(text: str, lo: int, hi: int) -> list[list[int]]:
    """Break positions by increasing preference: whitespace, sentence, line, paragraph, heading."""
    segment = text[lo:hi]
    spaces = [lo + m.end() for m in re.finditer(r"\s+", segment)]
    sentences = [lo + m.end() for m in _SENTENCE_END.finditer(segment)]
    lines = [lo + m.end() for m in re.finditer(r"\n", segment)]
    paragraphs = [lo + m.end() for m in re.finditer(r"\n[ \t]*\n", segment)]
    headings = [lo + m.start() for m in _HEADING.finditer(segment) if lo + m.start() > lo]
    return [spaces, sentences, lines, paragraphs, headings]


def _word_start(text: str, pos: int, limit: int) -> int:
    """The first word start at or after ``pos`` (and before ``limit``)."""
    while pos < limit and not text[pos - 1].isspace():
        pos += 1
    return pos
