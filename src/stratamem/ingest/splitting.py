"""Heading-aware splitting of a text into spans of about ``target`` characters.

Every character of the text lies in at least one span, spans are in order, and a span never
starts or ends inside a word (unless a single word is longer than ``max_chars``). Breaks are
chosen by preference: before a Markdown heading, at a blank line, at a line end, after a
sentence, at any whitespace. Only a break at plain whitespace inside a paragraph carries an
``overlap`` so the cut sentence is readable on both sides.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

_HEADING = re.compile(r"^#{1,6}[ \t]", re.MULTILINE)
_SENTENCE_END = re.compile(r"[.!?][\"')\]]?\s")
_SPACES = re.compile(r"\s+")
_LINE = re.compile(r"\n")
_PARAGRAPH = re.compile(r"\n[ \t]*\n")


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
    """(end, soft): the best cut in [start+lo, start+hi]; soft when it falls mid-paragraph.

    A cut scores its kind's rank less its distance from ``start + target`` over ``hi``. That
    distance is under 1 (the window is ``[start + lo, start + hi]`` with ``0 < lo <= target
    <= hi``), so any cut of a better kind beats every cut of a worse one: the best cut is the
    one nearest the aim among those of the best kind the window holds (the first of two as
    near), and the kinds below it need not be looked for.
    """
    window_lo, window_hi = start + lo, min(start + hi, len(text))
    aim = start + target
    segment = text[window_lo:window_hi]
    for rank in range(len(_KINDS) - 1, -1, -1):
        positions = _KINDS[rank](segment, window_lo)
        if positions:
            return _nearest(positions, aim), rank < 2
    # A single word longer than the window: cut it hard.
    return window_hi, False


def _nearest(positions: list[int], aim: int) -> int:
    """The position nearest ``aim`` in the ascending ``positions``; the earlier of two."""
    at = bisect.bisect_left(positions, aim)
    if at == len(positions):
        return positions[-1]
    if at == 0 or aim - positions[at - 1] > positions[at] - aim:
        return positions[at]
    return positions[at - 1]


def _spaces(segment: str, lo: int) -> list[int]:
    return [lo + m.end() for m in _SPACES.finditer(segment)]


def _sentences(segment: str, lo: int) -> list[int]:
    return [lo + m.end() for m in _SENTENCE_END.finditer(segment)]


def _lines(segment: str, lo: int) -> list[int]:
    return [lo + m.end() for m in _LINE.finditer(segment)]


def _paragraphs(segment: str, lo: int) -> list[int]:
    return [lo + m.end() for m in _PARAGRAPH.finditer(segment)]


def _headings(segment: str, lo: int) -> list[int]:
    return [lo + m.start() for m in _HEADING.finditer(segment) if m.start() > 0]


# Break positions by increasing preference: whitespace, sentence, line, paragraph, heading.
_KINDS = (_spaces, _sentences, _lines, _paragraphs, _headings)


def _word_start(text: str, pos: int, limit: int) -> int:
    """The first word start at or after ``pos`` (and before ``limit``)."""
    while pos < limit and not text[pos - 1].isspace():
        pos += 1
    return pos
