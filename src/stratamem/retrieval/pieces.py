"""Word-piece counts and cuts for packing: the same numbers as
:func:`~stratamem.embed.tokens.count_tokens` and the same cuts as
:func:`~stratamem.embed.tokens.truncate_to_tokens`, for less tokenizing.

Three things make them cheaper:

- counts are remembered across searches (a least-recently-used cache of ``CACHED`` texts), so
  the hits an agent keeps finding are tokenized once (a batch call was tried for the headers:
  on two loaded cores the tokenizer's thread pool made it slower than one call per text);
- a cut of ``n`` pieces tokenizes only a prefix of the text that surely holds ``n + 1`` of
  them, not the whole text;
- :meth:`WordPieces.at_least` is a lower bound on the count that needs no tokenizer, so that
  packing can tell that a text is over its share without counting it.

The bound: the word-piece tokenizer splits a text at whitespace (space, tab, newline and
carriage return among others) and gives every word that keeps a letter or digit after
normalisation at least one piece (``[UNK]`` included). So the runs of text between those four
characters that hold a letter or digit (``str.isalnum``) are at most as many as the pieces.
It holds for :func:`~stratamem.embed.tokens.estimate_tokens` too, which counts every
``\\w+`` run. For the same reason the pieces of a prefix that ends at one of those characters
are exactly the pieces of the whole text that lie in it, with the same offsets.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from threading import Lock

from stratamem.embed.tokens import count_tokens, counting_tokenizer, truncate_to_tokens

CACHED = 4096  # texts whose counts are remembered
_RUN = re.compile(r"[^ \t\n\r]+")
# A run's start, then as little as it takes to reach a letter or digit of the same run.
_RUN_WITH_ALNUM = re.compile(r"(?<![^ \t\n\r])[^ \t\n\r]*?[^\W_]")
_ALNUM = re.compile(r"[^\W_]")


def at_least(text: str) -> int:
    """A lower bound on the word pieces of ``text``: its whitespace-separated runs that hold
    a letter or digit (see the module's docstring)."""
    return len(_RUN_WITH_ALNUM.findall(text))


def prefix_holding(text: str, pieces: int) -> str:
    """The shortest prefix of ``text`` ending at whitespace (or the text's end) that holds at
    least ``pieces`` word pieces by :func:`at_least`; the whole text when it holds fewer."""
    if pieces <= 0:
        return ""
    found = 0
    for run in _RUN.finditer(text):
        if _ALNUM.search(run.group()):
            found += 1
            if found == pieces:
                return text[: run.end()]
    return text


_counted: OrderedDict[str, int] = OrderedDict()
_lock = Lock()


def count(text: str) -> int:
    """:func:`~stratamem.embed.tokens.count_tokens` of ``text``, remembered."""
    with _lock:
        pieces = _counted.get(text)
        if pieces is not None:
            _counted.move_to_end(text)
            return pieces
    pieces = count_tokens(text)
    _remember({text: pieces})
    return pieces


def forget() -> None:
    """Drop every remembered count."""
    with _lock:
        _counted.clear()


def _remember(counts: dict[str, int]) -> None:
    with _lock:
        for text, pieces in counts.items():
            _counted[text] = pieces
            _counted.move_to_end(text)
        while len(_counted) > CACHED:
            _counted.popitem(last=False)


def truncate(text: str, n: int) -> str:
    """:func:`~stratamem.embed.tokens.truncate_to_tokens` of ``text``, tokenizing only a
    prefix that surely holds ``n + 1`` pieces."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    tokenizer = counting_tokenizer()
    if tokenizer is None:
        return truncate_to_tokens(text, n)
    offsets = tokenizer.encode(prefix_holding(text, n + 1), add_special_tokens=False).offsets
    if len(offsets) <= n:  # then the prefix was the whole text
        return text
    # As truncate_to_tokens: cut after piece k only where piece k+1 starts past it.
    for k in range(n, 0, -1):
        end = offsets[k - 1][1]
        if offsets[k][0] >= end:
            return text[:end].rstrip()
    return ""
