"""Facts that match a query: BM25 over what each fact says, fused with the cosine of its
vector where it has one.

A fact's text is its subject's name, its predicate in words and its object. Facts are ranked
among those the reader may see and that hold at the time asked (now by default), so the
statistics (N, document frequencies, the mean length) are those of that set: a hidden source
shapes nothing. With an embedder whose vectors the facts have (they are embedded when written,
where the store holds vectors of the configured model), each score is the mean of the BM25
and the cosine, each min-max scaled over the facts; a fact without a vector has its BM25
part alone. The set is scored whole for each query, which suits the thousands of facts a
memory holds; ties go to the smaller fact id.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from stratamem.embed.base import Embedder
from stratamem.memory.facts import fact_text
from stratamem.memory.remember import recall
from stratamem.retrieval.fusion import minmax
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


def search_facts(
    store: Store,
    query: str,
    *,
    subject: str | None = None,
    sources: Sequence[str] = (),
    valid_at: datetime | None = None,
    limit: int = 10,
    embedder: Embedder | None = None,
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
    if embedder is None:
        return rank(facts, terms, limit=limit)
    lexical = {h.fact.id: h.score for h in rank(facts, terms, limit=len(facts) or 1)}
    stored = store.fact_vectors(embedder.spec.signature, [f.id for f in facts])
    semantic: dict[str, float] = {}
    if stored:
        query_vector = np.asarray(embedder.embed_batch([query], role="query")[0], np.float32)
        ids = list(stored)
        matrix = np.stack([np.frombuffer(stored[i], dtype="<f4") for i in ids])
        semantic = dict(zip(ids, (matrix @ query_vector).astype(float).tolist(), strict=True))
    totals: dict[str, float] = {}
    for scores in (lexical, semantic):
        for fact, value in minmax(scores).items():
            totals[fact] = totals.get(fact, 0.0) + value / 2
    by_id = {f.id: f for f in facts}
    ranked = sorted(totals.items(), key=lambda pair: (-pair[1], pair[0]))
    return [FactHit(by_id[i], score) for i, score in ranked[: max(1, limit)]]


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
