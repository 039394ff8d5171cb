"""Building an FTS5 MATCH expression from user text.

Each term is double-quoted (quotes inside doubled), so no user text can reach FTS5 operators,
column filters or syntax errors. Terms are OR-ed: AND-matching empties the result on paraphrases,
and BM25 already ranks documents that match more terms higher. Stopwords are dropped unless the
query is made of nothing else.

The keyword leg reads a query as :func:`weighted_terms`: each distinct word with how often the
query says it, so that a paragraph's own subject (named three times) weighs more than a word
it mentions once. :func:`term_weight` is that count's weight in the BM25 sum, saturating as
BM25's query-term factor does (Robertson et al., TREC-3, ``k3``):

    w(qtf) = qtf · (k3 + 1) / (qtf + k3)        (1 for a word said once)
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from stratamem.entities.stopwords import STOPWORDS

_TERM = re.compile(r"\w+", re.UNICODE)
MAX_TERMS = 64
# Words of a query read at all (a pasted document is read up to here).
MAX_QUERY_WORDS = 4096
# BM25's query-term saturation (see the module docstring).
K3 = 8.0


def query_terms(text: str) -> list[str]:
    """Distinct lowercased terms of ``text``, stopwords removed where that leaves any."""
    terms: list[str] = []
    seen: set[str] = set()
    for raw in _TERM.findall(text.lower()):
        if raw not in seen:
            seen.add(raw)
            terms.append(raw)
    content = [t for t in terms if t not in STOPWORDS]
    return (content or terms)[:MAX_TERMS]


def match_expression(text: str) -> str | None:
    """The MATCH string for ``text``, or ``None`` when it holds no searchable term."""
    terms = query_terms(text)
    if not terms:
        return None
    return match_terms(terms)


def match_terms(terms: Sequence[str]) -> str:
    """The MATCH string OR-ing these terms, each quoted."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def weighted_terms(text: str) -> list[tuple[str, int]]:
    """Distinct lowercased terms of ``text`` in order, each with how many times the query
    holds it; stopwords removed where that leaves any."""
    counts: dict[str, int] = {}
    for raw in _TERM.findall(text.lower())[:MAX_QUERY_WORDS]:
        counts[raw] = counts.get(raw, 0) + 1
    content = [(t, n) for t, n in counts.items() if t not in STOPWORDS]
    return content or list(counts.items())


def term_weight(count: float) -> float:
    """The weight of a query term said ``count`` times (see the module docstring)."""
    if count <= 0:
        return 0.0
    return count * (K3 + 1.0) / (count + K3)
