"""Facts that match a query: BM25 over what each fact says.

A fact's text is its subject's name, its predicate in words and its object. Facts are ranked
among those the reader may see and that hold at the time asked (now by default), so the
statistics (N, document frequencies, the mean length) are those of that set: a hidden source
shapes nothing. The set is scored whole for each query, which suits the thousands of facts a
memory holds; ties go to the smaller fact id.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from stratamem.memory.remember import recall
from stratamem.retrieval.query import query_terms
from stratamem.store.base import Store
from stratamem.store.facts import Fact

K1 = 1.2
B = 0.75
_WORD = re.compile(r"\w+", re.UNICODE)
MAX_FACTS = 1_000_000


@dataclass(frozen=True, slots=True)
class FactHit:
    fact: Fact
    score: float

    def to_dict(self) -> dict[str, object]:
        return {**self.fact.to_dict(), "score": round(self.score, 6)}


def fact_text(fact: Fact) -> str:
    """What a fact says, in words: ``carol diaz leads on-call``."""
    subject = fact.subject.split(":", 1)[-1]
    return f"{subject} {fact.predicate.replace('_', ' ')} {fact.object}"


def search_facts(
    store: Store,
    query: str,
    *,
    subject: str | None = None,
    sources: Sequence[str] = (),
    valid_at: datetime | None = None,
    limit: int = 10,
) -> list[FactHit]:
    """The ``limit`` facts that best match ``query`` (BM25), of ``subject`` when given, of
    ``sources`` (ids or scopes; a hidden one is missing) when given, true at ``valid_at``
    (None: now). The statistics are those of the facts ranked: other sources shape nothing."""
    terms = query_terms(query)
    if not terms:
        return []
    facts = recall(store, subject=subject, valid_at=valid_at, limit=MAX_FACTS)
    if sources:
        wanted = {store.resolve_source(source).id for source in sources}
        facts = [fact for fact in facts if fact.source_id in wanted]
    return rank(facts, terms, limit=limit)


def rank(facts: Sequence[Fact], terms: Sequence[str], *, limit: int) -> list[FactHit]:
    """``facts`` ranked by BM25 for ``terms``, best first, ties by id; those matching none
    are left out."""
    docs = [Counter(_WORD.findall(fact_text(f).lower())) for f in facts]
    if not docs:
        return []
    lengths = [sum(d.values()) for d in docs]
    mean = sum(lengths) / len(lengths) or 1.0
    n = len(docs)
    wanted = list(dict.fromkeys(terms))
    idf = {}
    for term in wanted:
        having = sum(1 for d in docs if term in d)
        idf[term] = max(math.log((n - having + 0.5) / (having + 0.5) + 1.0), 1e-6)
    hits = []
    for fact, doc, length in zip(facts, docs, lengths, strict=True):
        score = 0.0
        for term in wanted:
            f = doc.get(term, 0)
            if f:
                score += idf[term] * f * (K1 + 1) / (f + K1 * (1 - B + B * length / mean))
        if score > 0:
            hits.append(FactHit(fact, score))
    hits.sort(key=lambda h: (-h.score, h.fact.id))
    return hits[: max(1, limit)]
