"""Facts that match a query: BM25 over what each fact says, fused with the cosine of its
vector where it has one.

A fact's text is its subject's name, its predicate in words and its object. Facts are ranked
among those the reader may see and that hold at the time asked (now by default), as known at
the transaction time asked (now by default), so the statistics (N, document frequencies, the
mean length) are those of that set: a hidden source shapes nothing. With an embedder whose
vectors the facts have (they are embedded when written, where the store holds vectors of the
configured model), each score is the mean of the BM25 and the cosine, each min-max scaled
over the facts; a fact without a vector has its BM25 part alone. Ties go to the smaller fact
id.

Speed: the rows a reader may see are read once into a :class:`FactIndex` (an inverted index
of their words, their times as integers, their vectors of each model asked for) and kept while
the store is unchanged, one per reader (principal) and per connection: the key is the store's
write state (which any write moves, another process's commit included) and the sources the
reader may see, so a write (remember, retract, ingest, lock, forget) or a change of access
makes the next query read the rows again, and a principal's index never holds a row of a
source it cannot see. A query then selects the rows that hold at its times with masks and
scores only those: the BM25 scores are the same floats as scoring the selected rows afresh
(:func:`rank`) gives, and the cosines are taken with the same vectors. Nothing is kept
inside a write transaction, whose rows may yet be rolled back, nor for a store without a
write state.
"""

from __future__ import annotations

import math
import re
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from stratamem.embed.base import Embedder
from stratamem.memory.facts import fact_text
from stratamem.memory.remember import entity_id
from stratamem.retrieval.query import query_terms
from stratamem.retrieval.relevance import (
    Calibration,
    check_min_relevance,
    decreasing,
    keyword_share,
)
from stratamem.retrieval.scope import identity_sources
from stratamem.store.base import Store
from stratamem.store.caches import LastFew
from stratamem.store.facts import Fact

K1 = 1.2
B = 0.75
_WORD = re.compile(r"\w+", re.UNICODE)
MAX_FACTS = 1_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
# Open ends of the time spans, as integers: before and after any time a datetime can hold.
_NEVER = np.iinfo(np.int64).max
_ALWAYS = np.iinfo(np.int64).min


@dataclass(frozen=True, slots=True)
class FactHit:
    """A fact and its fused score, with the raw signals it was ranked on: its ``bm25`` (0
    where no word matched), the query's Σ idf over the facts ranked (``ceiling``, the scale
    of that BM25), the ``cosine`` of its vector and the query's (None without one), and its
    calibrated ``relevance`` (see :mod:`~stratamem.retrieval.relevance`)."""

    fact: Fact
    score: float
    bm25: float = 0.0
    ceiling: float = 0.0
    cosine: float | None = None
    relevance: float | None = None

    def signals(self) -> dict[str, float]:
        """The raw signals by name, as :meth:`Calibration.fact` reads them."""
        out = {"keyword": keyword_share(self.bm25, self.ceiling), "fused": self.score}
        if self.cosine is not None:
            out["cosine"] = self.cosine
        return out

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {**self.fact.to_dict(), "score": round(self.score, 6)}
        if self.relevance is not None:
            out["relevance"] = round(self.relevance, 4)
        return out


@dataclass(frozen=True, slots=True)
class FactMatches:
    """The best ``hits``, how many facts matched in all (before the limit and the floor),
    and whether none reached the relevance floor (``min_relevance``, else the calibration's
    threshold)."""

    hits: tuple[FactHit, ...]
    total: int
    nothing_relevant: bool = False
    # What the ranking could not do as asked (a fact vector of another size than the query's).
    notes: tuple[str, ...] = ()


def search_facts(
    store: Store,
    query: str,
    *,
    subject: str | None = None,
    sources: Sequence[str] = (),
    valid_at: datetime | None = None,
    known_at: datetime | None = None,
    limit: int = 10,
    embedder: Embedder | None = None,
    cached: bool = True,
    user: str | Sequence[str] | None = None,
    agent: str | Sequence[str] | None = None,
    session: str | Sequence[str] | None = None,
    min_relevance: float | None = None,
    calibration: Calibration | None = None,
) -> list[FactHit]:
    """The ``limit`` facts that best match ``query`` (BM25, fused with vectors given an
    ``embedder``), of ``subject`` when given, of ``sources`` (ids or scopes; a hidden one is
    missing) when given, true at ``valid_at`` (None: now) as known at ``known_at`` (None:
    now). The statistics are those of the facts ranked: other sources shape nothing.
    ``cached=False`` reads the rows afresh instead of using the reader's index. ``user``,
    ``agent`` and ``session`` (one id or several each) keep the facts of their memory."""
    found = match_facts(
        store,
        query,
        subject=subject,
        sources=sources,
        valid_at=valid_at,
        known_at=known_at,
        limit=limit,
        embedder=embedder,
        cached=cached,
        user=user,
        agent=agent,
        session=session,
        min_relevance=min_relevance,
        calibration=calibration,
    )
    return list(found.hits)


def match_facts(
    store: Store,
    query: str,
    *,
    subject: str | None = None,
    sources: Sequence[str] = (),
    valid_at: datetime | None = None,
    known_at: datetime | None = None,
    limit: int = 10,
    embedder: Embedder | None = None,
    cached: bool = True,
    user: str | Sequence[str] | None = None,
    agent: str | Sequence[str] | None = None,
    session: str | Sequence[str] | None = None,
    min_relevance: float | None = None,
    calibration: Calibration | None = None,
) -> FactMatches:
    """:func:`search_facts` with the number of facts that matched before the limit. Each
    hit carries its raw signals and its relevance under ``calibration`` (default: the
    packaged one), going down the list; ``min_relevance`` drops those below it."""
    min_relevance = check_min_relevance(min_relevance)
    calibration = calibration or Calibration.load()
    ranking = rank_facts(
        store,
        query,
        subject=subject,
        sources=sources,
        valid_at=valid_at,
        known_at=known_at,
        limit=limit,
        embedder=embedder,
        cached=cached,
        user=user,
        agent=agent,
        session=session,
    )
    if ranking is None:
        return FactMatches((), 0, nothing_relevant=True)
    hits = ranking.hits()
    count = ranking.total
    shown = decreasing([calibration.fact(h.signals()) for h in hits])
    hits = [replace(h, relevance=r) for h, r in zip(hits, shown, strict=True)]
    bar = calibration.threshold if min_relevance is None else min_relevance
    nothing = not any(r >= bar for r in shown)
    if min_relevance is not None:
        hits = [h for h in hits if (h.relevance or 0.0) >= min_relevance]
    return FactMatches(tuple(hits), count, nothing_relevant=nothing, notes=ranking.notes)


def rank_facts(
    store: Store,
    query: str,
    *,
    subject: str | None = None,
    sources: Sequence[str] = (),
    valid_at: datetime | None = None,
    known_at: datetime | None = None,
    limit: int = 10,
    embedder: Embedder | None = None,
    cached: bool = True,
    user: str | Sequence[str] | None = None,
    agent: str | Sequence[str] | None = None,
    session: str | Sequence[str] | None = None,
) -> FactRanking | None:
    """The ranking :func:`match_facts` reads its hits from, in arrays, before any relevance
    (None: the query has no word to match)."""
    terms = query_terms(query)
    if not terms:
        return None
    wanted_subject = None if subject is None else entity_id(subject)
    when = _utc(valid_at, "as_of") or datetime.now(UTC)
    known = _utc(known_at, "known_at")
    with store.read_snapshot():
        index = fact_index(store) if cached else FactIndex.build(_rows(store))
        homes = {store.resolve_source(s).id for s in sources} if sources else None
        whose = identity_sources(store, users=user, agents=agent, sessions=session)
        if whose is not None:
            homes = whose if homes is None else homes & whose
        chosen = index.select(subject=wanted_subject, sources=homes, valid_at=when, known_at=known)
        return index.rank(store, terms, chosen, query=query, embedder=embedder, limit=limit)


def _best(
    facts: Sequence[Fact], rows: IntArray, scores: npt.NDArray[np.float64], limit: int
) -> list[tuple[int, float]]:
    """The ``limit`` best (row, score) pairs, best first, ties by fact id: those at or above
    the ``limit``-th best score are sorted, the rest never are."""
    if len(rows) > limit:
        cut = np.partition(scores, len(scores) - limit)[len(scores) - limit]
        keep = scores >= cut
        rows, scores = rows[keep], scores[keep]
    pairs = sorted(
        zip(rows.tolist(), scores.tolist(), strict=True),
        key=lambda pair: (-pair[1], facts[pair[0]].id),
    )
    return pairs[:limit]


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
            hits.append(FactHit(fact, score, score))
    hits.sort(key=lambda h: (-h.score, h.fact.id))
    return hits[: max(1, limit)]


# -- the index -----------------------------------------------------------------------------------


IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
Mask = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class FactRanking:
    """The best rows of a :class:`FactIndex` for a query, kept in arrays: their positions
    (best first, ties by fact id), fused scores, raw BM25 (0 where no word matched) and
    cosines (NaN without a vector), the query's Σ idf (``ceiling``) and how many rows
    matched in all. :meth:`hits` makes them :class:`FactHit` objects, as many as asked."""

    facts: Sequence[Fact]
    rows: IntArray
    scores: FloatArray
    bm25: FloatArray
    cosine: FloatArray
    ceiling: float
    total: int
    notes: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.rows)

    def hits(self, limit: int | None = None) -> list[FactHit]:
        """The first ``limit`` (None: all) as hits, without a relevance yet."""
        end = len(self.rows) if limit is None else min(limit, len(self.rows))
        out = []
        for i in range(end):
            cosine = float(self.cosine[i])
            out.append(
                FactHit(
                    self.facts[int(self.rows[i])],
                    float(self.scores[i]),
                    float(self.bm25[i]),
                    self.ceiling,
                    None if math.isnan(cosine) else cosine,
                )
            )
        return out


@dataclass(slots=True)
class FactIndex:
    """Every row of the fact store a reader may see (believed or not), ready to be selected
    by time, subject and source and scored by BM25: an inverted index of the words of what
    each says (``_WORD`` tokens of :func:`fact_text`, lower-cased), their lengths, and the
    rows' times as microseconds since 1970 (open ends as the int64 extremes)."""

    facts: list[Fact]
    postings: dict[str, tuple[IntArray, npt.NDArray[np.float64]]]
    lengths: IntArray
    valid_from: IntArray
    valid_to: IntArray
    recorded_at: IntArray
    expired_at: IntArray
    subjects: dict[str, IntArray]
    sources: dict[str, IntArray]
    _vectors: dict[tuple[str, int], tuple[IntArray, npt.NDArray[np.float32], IntArray]] = field(
        default_factory=dict
    )
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def build(cls, facts: Sequence[Fact]) -> FactIndex:
        rows = list(facts)
        by_term: dict[str, tuple[list[int], list[float]]] = {}
        lengths = np.zeros(len(rows), np.int64)
        subjects: dict[str, list[int]] = {}
        sources: dict[str, list[int]] = {}
        for position, fact in enumerate(rows):
            words = Counter(_WORD.findall(fact_text(fact).lower()))
            lengths[position] = sum(words.values())
            for word, count in words.items():
                docs, freqs = by_term.setdefault(word, ([], []))
                docs.append(position)
                freqs.append(float(count))
            subjects.setdefault(fact.subject, []).append(position)
            sources.setdefault(fact.source_id, []).append(position)
        return cls(
            facts=rows,
            postings={
                word: (np.asarray(docs, np.int64), np.asarray(freqs, np.float64))
                for word, (docs, freqs) in by_term.items()
            },
            lengths=lengths,
            valid_from=_times([f.valid_from for f in rows], _ALWAYS),
            valid_to=_times([f.valid_to for f in rows], _NEVER),
            recorded_at=_times([f.recorded_at for f in rows], _ALWAYS),
            expired_at=_times([f.expired_at for f in rows], _NEVER),
            subjects={s: np.asarray(p, np.int64) for s, p in subjects.items()},
            sources={s: np.asarray(p, np.int64) for s, p in sources.items()},
        )

    def select(
        self,
        *,
        subject: str | None,
        sources: set[str] | None,
        valid_at: datetime,
        known_at: datetime | None,
    ) -> Mask:
        """The rows of ``subject`` (None: any) and ``sources`` (None: any) true at
        ``valid_at`` as believed at ``known_at`` (None: now), as :func:`~stratamem.memory.
        facts.as_of` selects them."""
        when = _micros(valid_at)
        chosen = (self.valid_from <= when) & (when < self.valid_to)
        if known_at is None:
            chosen &= self.expired_at == _NEVER
        else:
            known = _micros(known_at)
            chosen &= (self.recorded_at <= known) & (known < self.expired_at)
        if subject is not None:
            chosen &= self._of(self.subjects.get(subject))
        if sources is not None:
            of = [self.sources[s] for s in sorted(sources) if s in self.sources]
            chosen &= self._of(np.concatenate(of) if of else None)
        return chosen

    def _of(self, rows: IntArray | None) -> Mask:
        mask = np.zeros(len(self.facts), np.bool_)
        if rows is not None:
            mask[rows] = True
        return mask

    def rank(
        self,
        store: Store,
        terms: Sequence[str],
        chosen: Mask,
        *,
        query: str,
        embedder: Embedder | None,
        limit: int,
    ) -> FactRanking:
        """The ``limit`` best of the ``chosen`` rows for ``terms`` (at least one): by BM25
        alone without an ``embedder``, else each leg (BM25, and the cosine of the rows with
        a vector of its model) min-max scaled over its rows, halved and summed. Scores stay
        in arrays until the best are taken; only those are sorted (ties by fact id)."""
        lexical_rows, lexical = self.bm25_scores(terms, chosen)
        ceiling = self.idf_total(terms, chosen)
        semantic_rows = np.zeros(0, np.int64)
        semantic = np.zeros(0, np.float64)
        notes: tuple[str, ...] = ()
        if embedder is not None:
            semantic_rows, semantic, skipped = self.cosine_scores_noted(
                store, embedder, query, chosen
            )
            if skipped:
                notes = (
                    f"{skipped} fact vector(s) of {embedder.spec.signature} are not of the "
                    f"query's size ({embedder.spec.dim}): those facts are ranked by BM25 alone",
                )
        size = len(self.facts)
        if embedder is None:
            candidates, fused = lexical_rows, lexical
        else:
            total = np.zeros(size, np.float64)
            member = np.zeros(size, np.bool_)
            for rows, values in ((lexical_rows, lexical), (semantic_rows, semantic)):
                if not len(rows):
                    continue
                low, high = values.min(), values.max()
                scaled = np.ones_like(values) if high == low else (values - low) / (high - low)
                total[rows] += scaled / 2
                member[rows] = True
            candidates = np.flatnonzero(member)
            fused = total[candidates]
        best = _best(self.facts, candidates, fused, max(1, limit))
        rows = np.fromiter((row for row, _ in best), np.int64, len(best))
        raw = np.zeros(size, np.float64)
        raw[lexical_rows] = lexical
        cosine = np.full(size, np.nan, np.float64)
        cosine[semantic_rows] = semantic
        return FactRanking(
            facts=self.facts,
            rows=rows,
            scores=np.fromiter((score for _, score in best), np.float64, len(best)),
            bm25=raw[rows],
            cosine=cosine[rows],
            ceiling=ceiling,
            total=len(candidates),
            notes=notes,
        )

    def bm25(self, terms: Sequence[str], chosen: Mask) -> dict[int, float]:
        """Row → BM25 score for ``terms`` over the ``chosen`` rows (see
        :meth:`bm25_scores`)."""
        rows, scores = self.bm25_scores(terms, chosen)
        return dict(zip(rows.tolist(), scores.tolist(), strict=True))

    def bm25_scores(self, terms: Sequence[str], chosen: Mask) -> tuple[IntArray, FloatArray]:
        """The rows matching some of ``terms`` among the ``chosen`` rows, in order, and their
        BM25 scores, the statistics those of the ``chosen`` rows alone. The arithmetic is
        :func:`rank`'s, in the same order, so the scores are the same floats."""
        n = int(np.count_nonzero(chosen))
        if not n:
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        mean = int(self.lengths[chosen].sum()) / n or 1.0
        scores = np.zeros(len(self.facts), np.float64)
        matched = np.zeros(len(self.facts), np.bool_)
        for term in dict.fromkeys(terms):
            found = self.postings.get(term)
            if found is None:
                continue
            docs, freqs = found
            keep = chosen[docs]
            having = int(np.count_nonzero(keep))
            if not having:
                continue
            docs, freqs = docs[keep], freqs[keep]
            idf = max(math.log((n - having + 0.5) / (having + 0.5) + 1.0), 1e-6)
            length = self.lengths[docs].astype(np.float64)
            scores[docs] += idf * freqs * (K1 + 1) / (freqs + K1 * (1 - B + B * length / mean))
            matched[docs] = True
        rows = np.flatnonzero(matched & (scores > 0))
        return rows, scores[rows]

    def idf_total(self, terms: Sequence[str], chosen: Mask) -> float:
        """Σ idf over the query's words among the ``chosen`` rows, as :meth:`bm25` counts
        it (a word found in none as found in none): the scale a fact's BM25 is read on."""
        n = int(np.count_nonzero(chosen))
        total = 0.0
        for term in dict.fromkeys(terms):
            found = self.postings.get(term)
            having = 0 if found is None else int(np.count_nonzero(chosen[found[0]]))
            total += max(math.log((n - having + 0.5) / (having + 0.5) + 1.0), 1e-6)
        return total

    def cosines(
        self, store: Store, embedder: Embedder, query: str, chosen: Mask
    ) -> dict[int, float]:
        """Row → cosine of the query and the row's vector (see :meth:`cosine_scores`)."""
        rows, values = self.cosine_scores(store, embedder, query, chosen)
        return dict(zip(rows.tolist(), values.tolist(), strict=True))

    def cosine_scores(
        self, store: Store, embedder: Embedder, query: str, chosen: Mask
    ) -> tuple[IntArray, FloatArray]:
        """The ``chosen`` rows that have a vector of ``embedder``'s model, in order, and the
        cosines of the query and their vectors; the query is embedded only when some row
        has one."""
        rows, values, _ = self.cosine_scores_noted(store, embedder, query, chosen)
        return rows, values

    def cosine_scores_noted(
        self, store: Store, embedder: Embedder, query: str, chosen: Mask
    ) -> tuple[IntArray, FloatArray, int]:
        """:meth:`cosine_scores`, and how many of the ``chosen`` rows have a vector of the
        model of another size than the query's: those are left out (ranked by BM25 alone),
        as if they had none."""
        dim = embedder.spec.dim
        rows, matrix, odd = self._model_vectors(store, embedder.spec.signature, dim)
        skipped = int(np.count_nonzero(chosen[odd])) if len(odd) else 0
        keep = chosen[rows]
        if not np.any(keep):
            return np.zeros(0, np.int64), np.zeros(0, np.float64), skipped
        query_vector = np.asarray(embedder.embed_batch([query], role="query")[0], np.float32)
        if query_vector.shape != (matrix.shape[1],):
            return np.zeros(0, np.int64), np.zeros(0, np.float64), skipped + int(keep.sum())
        # Every row's cosine, then the chosen ones: selecting the rows first would copy them.
        values = (matrix @ query_vector)[keep].astype(np.float64)
        return rows[keep], values, skipped

    def _model_vectors(
        self, store: Store, model: str, dim: int
    ) -> tuple[IntArray, npt.NDArray[np.float32], IntArray]:
        """The rows that have a vector of ``model`` of ``dim`` numbers, those vectors, and
        the rows whose vector of ``model`` has another size (read once)."""
        with self._lock:
            found = self._vectors.get((model, dim))
            if found is None:
                stored = store.fact_vectors(model, [f.id for f in self.facts])
                size = dim * 4  # float32
                positions: list[int] = []
                odd: list[int] = []
                for i, f in enumerate(self.facts):
                    blob = stored.get(f.id)
                    if blob is not None:
                        (positions if len(blob) == size else odd).append(i)
                if positions:
                    matrix = np.stack(
                        [np.frombuffer(stored[self.facts[i].id], dtype="<f4") for i in positions]
                    ).astype(np.float32, copy=False)
                else:
                    matrix = np.zeros((0, dim), np.float32)
                found = (np.asarray(positions, np.int64), matrix, np.asarray(odd, np.int64))
                self._vectors[(model, dim)] = found
            return found


def _times(values: Sequence[datetime | None], none: int) -> IntArray:
    return np.asarray([none if v is None else _micros(v) for v in values], np.int64)


def _micros(when: datetime) -> int:
    return (when - _EPOCH) // _US


def _utc(when: datetime | None, name: str) -> datetime | None:
    if when is None:
        return None
    if when.tzinfo is None:
        raise ValueError(f"{name} needs a time zone (e.g. 2024-03-12T09:00Z)")
    return when.astimezone(UTC)


def _rows(store: Store) -> list[Fact]:
    """Every row of the fact store the reader may see, believed or not."""
    return store.facts(believed_only=False, limit=MAX_FACTS * 10)


# -- the readers' indexes --------------------------------------------------------------------------


class _Readers(threading.local):
    """The indexes of one store on one thread (a thread reads through one connection, whose
    write state its keys hold): reader → (write state, index)."""

    def __init__(self) -> None:
        self.kept: LastFew[tuple[Any, FactIndex]] = LastFew()


_KEPT: weakref.WeakKeyDictionary[Store, _Readers] = weakref.WeakKeyDictionary()
_KEPT_LOCK = threading.Lock()


def fact_index(store: Store) -> FactIndex:
    """The reader's index of ``store``'s facts, read afresh when the store has changed since
    it was made (call inside a read snapshot, so that the state and the rows are one
    version)."""
    state = _write_state(store)
    if state is None or store.in_transaction():
        return FactIndex.build(_rows(store))
    with _KEPT_LOCK:
        readers = _KEPT.get(store)
        if readers is None:
            readers = _KEPT[store] = _Readers()
    principal = store.principal()
    visible = store.visible_ids()
    key = (
        None if principal is None else principal.name,
        None if visible is None else tuple(sorted(visible)),
    )
    found = readers.kept.get(key)
    if found is not None and found[0] == state:
        return found[1]
    index = FactIndex.build(_rows(store))
    readers.kept.put(key, (state, index))
    return index


def _write_state(store: Store) -> Any:
    """What moves whenever the store changes, from this connection or another one; None for
    a store that says nothing of it (its index is then read for every query)."""
    state: Callable[[], Any] | None = getattr(store, "write_state", None)
    return None if state is None else state()
