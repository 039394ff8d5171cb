"""Building an FTS5 MATCH expression from user text.

Each term is double-quoted (quotes inside doubled), so no user text can reach FTS5 operators,
column filters or syntax errors. Terms are OR-ed: AND-matching empties the result on paraphrases,
and BM25 already ranks documents that match more terms higher. Stopwords are dropped unless the
query is made of nothing else.
"""

from __future__ import annotations

import re

from stratamem.entities.stopwords import STOPWORDS

_TERM = re.compile(r"\w+", re.UNICODE)
MAX_TERMS = 64


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
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
