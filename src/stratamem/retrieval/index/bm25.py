"""An in-memory sparse BM25 index that scores exactly as SQLite FTS5's ``bm25()`` does.

Postings are kept term-major, in the compressed-sparse-column layout of xhluca/bm25s: the
postings of term ``t`` are ``doc[indptr[t]:indptr[t + 1]]`` (document positions, ascending)
with their column-weighted frequencies ``freq`` alongside. Documents are held in ascending
rowid order, so a new document always goes at the end. Appended documents' postings go to a
second, small set of the same layout (the tail), merged into the first once they are an
eighth as many, or before a removal or a save: an append then costs about what it adds, not
a copy of every posting (0.4 s a time at a million chunks). A term's postings are its
postings in the first set, then in the tail, which is their order once merged.

Unlike bm25s, whole scores are not stored: N, avgdl and the document frequencies move with
every chunk added or removed, and FTS5 recomputes them on every query. A query computes the
part of FTS5's formula (``ext/fts5/fts5_aux.c``, ``fts5Bm25Function``) that only avgdl
changes for its own postings, from each document's length norm (kept until the documents
change), multiplies by the terms' idf and sums per document::

    f(q, d)  = Σ over instances of q in d of the weight of the instance's column
    idf(q)   = log((N - n(q) + 0.5) / (n(q) + 0.5)), or 1e-6 where that is ≤ 0
    score(d) = Σ_q idf(q) · f(q, d) · (k1 + 1) / (f(q, d) + k1 · (1 - b + b · |d| / avgdl))

with k1 = 1.2, b = 0.75, N the number of rows, n(q) the rows containing q, |d| the tokens of
the row over all its columns and avgdl the mean of |d|. FTS5 returns the negated score; this
module returns it positive. Each query phrase counts once per occurrence in the query, as in
FTS5 (a query naming the same stem twice weighs it twice).

Two departures. Under a filter, N and n(q) count the documents the filter admits, so a
search scoped to one conversation weighs a word by how rare it is *there*. A participant's
name is in half of their conversation's turns and almost nowhere else; weighed against the
whole store it would outweigh every other word of a question asked about that conversation.
avgdl stays the whole index's under a filter (the admitted documents' own made no difference
on LoCoMo). And under an access gate (``base``: the documents a principal may see at all),
N, n(q) and avgdl are all counted over what the gate admits and nothing else: a principal's
scores are exactly those of an index that never held the documents it may not see. Ungated
and unfiltered, the scores are FTS5's. The gate's length norms (its own avgdl) are kept as
the whole index's are, for as long as the documents and the gate stay the same, so a gated
query costs what an ungated one does. A caller may also weigh each query phrase
(``weights``: its part of the sum times the weight) and give another ``k1`` (the kept norms
scaled by k1 / 1.2); the keyword leg does both for a passage, never for keywords.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from stratamem.store.caches import LastFew
from stratamem.store.keyword import IntArray as IntArray
from stratamem.store.keyword import Postings as Postings

K1: Final = 1.2
B: Final = 0.75
MIN_IDF: Final = 1e-6
# The top k of many matches is cut at the k-th best of every SAMPLE_STEP-th document first.
SAMPLE_STEP: Final = 4
# Access gates whose length norms are kept (one per principal reading the index).
GATES_KEPT: Final = 16

DocArray = npt.NDArray[np.int32]
FreqArray = npt.NDArray[np.float32]
Scores = npt.NDArray[np.float64]


@dataclass(slots=True)
class BM25Index:
    """Documents (rowid, id, per-column token counts) and the term-major postings."""

    columns: tuple[str, ...]
    weights: tuple[float, ...]
    rowids: IntArray = field(default_factory=lambda: np.empty(0, np.int64))
    ids: list[str] = field(default_factory=list)
    lengths: npt.NDArray[np.int32] = field(default_factory=lambda: np.empty((0, 0), np.int32))
    vocab: dict[str, int] = field(default_factory=dict)
    indptr: IntArray = field(default_factory=lambda: np.zeros(1, np.int64))
    doc: DocArray = field(default_factory=lambda: np.empty(0, np.int32))
    freq: FreqArray = field(default_factory=lambda: np.empty(0, np.float32))
    # Each document's length norm, avgdl over every document; kept until the documents change.
    _norm: npt.NDArray[np.float64] | None = field(default=None, repr=False)
    # The tail: (indptr, doc, freq) of the postings appended since the last merge.
    _tail: tuple[IntArray, DocArray, FreqArray] | None = field(default=None, repr=False)
    # Under an access gate, each document's length norm (avgdl over what the gate admits),
    # by a digest of the gate's mask: (a copy of the mask, the norms). A few gates are kept,
    # since readers of several principals take turns on one index.
    _norms: LastFew[tuple[npt.NDArray[np.bool_], npt.NDArray[np.float64]]] = field(
        default_factory=lambda: LastFew(GATES_KEPT), repr=False
    )

    def __post_init__(self) -> None:
        if len(self.columns) != len(self.weights):
            raise ValueError("one weight per column")
        if self.lengths.shape != (len(self.rowids), len(self.columns)):
            self.lengths = np.zeros((len(self.rowids), len(self.columns)), np.int32)

    def __len__(self) -> int:
        return len(self.rowids)

    @property
    def terms(self) -> list[str]:
        """Terms by id."""
        out = [""] * len(self.vocab)
        for term, tid in self.vocab.items():
            out[tid] = term
        return out

    @property
    def nnz(self) -> int:
        return len(self.doc) + (len(self._tail[1]) if self._tail is not None else 0)

    @property
    def max_rowid(self) -> int:
        return int(self.rowids[-1]) if len(self.rowids) else 0

    def column_totals(self) -> tuple[int, ...]:
        """Tokens per column over every document (FTS5 keeps the same totals)."""
        return tuple(int(x) for x in self.lengths.sum(axis=0, dtype=np.int64))

    # -- change ----------------------------------------------------------------------------

    def append(self, rowids: IntArray, ids: Sequence[str], postings: Postings) -> None:
        """Add documents whose rowids are all above the current ones; ``postings.doc`` counts
        from 0 for the first of them."""
        if len(rowids) == 0:
            return
        if len(self.rowids) and int(rowids[0]) <= self.max_rowid:
            raise ValueError("appended rowids must be above the indexed ones")
        if bool((np.diff(rowids) <= 0).any()):
            raise ValueError("appended rowids must ascend")
        base = len(self.rowids)
        local = np.asarray(
            [self.vocab.setdefault(t, len(self.vocab)) for t in postings.terms], dtype=np.int64
        )
        term = local[postings.term] if len(postings.term) else np.empty(0, np.int64)
        doc, freq = postings.doc, postings.freq
        key = term * (len(rowids) + 1) + doc
        if bool((np.diff(key) < 0).any()):
            order = np.argsort(key, kind="stable")
            term, doc, freq = term[order], doc[order], freq[order]
        terms = len(self.vocab)
        if len(self.indptr) < terms + 1:  # new terms have no postings in the first set
            grown = np.full(terms + 1 - len(self.indptr), self.indptr[-1])
            self.indptr = np.concatenate([self.indptr, grown])
        if self._tail is None:
            empty = np.zeros(terms + 1, np.int64)
            self._tail = (empty, np.empty(0, np.int32), np.empty(0, np.float32))
        self._tail = _insert(*self._tail, term, (doc + base).astype(np.int32), freq, terms)
        if 8 * len(self._tail[1]) > len(self.doc):
            self.merge()
        self.rowids = np.concatenate([self.rowids, rowids.astype(np.int64)])
        self.ids = [*self.ids, *ids]
        self.lengths = np.concatenate([self.lengths, postings.lengths.astype(np.int32)])
        self._norm = None
        self._norms.clear()

    def merge(self) -> None:
        """Move the tail's postings into the first set (see the module docstring)."""
        if self._tail is None:
            return
        indptr, doc, freq = self._tail
        term = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
        self.indptr, self.doc, self.freq = _insert(
            self.indptr, self.doc, self.freq, term, doc, freq, len(self.vocab)
        )
        self._tail = None

    def remove(self, keep: npt.NDArray[np.bool_]) -> None:
        """Drop the documents where ``keep`` is False, their postings, and the terms left
        with none (a forgotten word must not outlive its documents in memory or on disk)."""
        if bool(keep.all()):
            return
        self.merge()
        position = np.cumsum(keep) - 1
        alive = keep[self.doc]
        term = np.repeat(np.arange(len(self.indptr) - 1), np.diff(self.indptr))[alive]
        self.doc = position[self.doc[alive]].astype(np.int32)
        self.freq = self.freq[alive]
        counts = np.bincount(term, minlength=len(self.indptr) - 1)
        if not bool(counts.all()):
            # Postings stay term-major, so dropping empty terms renumbers without reordering.
            used = counts > 0
            terms = self.terms
            self.vocab = {
                t: i
                for i, t in enumerate(t for t, u in zip(terms, used.tolist(), strict=True) if u)
            }
            counts = counts[used]
        self.indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.rowids = self.rowids[keep]
        self.ids = [i for i, k in zip(self.ids, keep.tolist(), strict=True) if k]
        self.lengths = self.lengths[keep]
        self._norm = None
        self._norms.clear()

    # -- query -----------------------------------------------------------------------------

    def _gains(
        self,
        doc: DocArray,
        freq: FreqArray,
        base: npt.NDArray[np.bool_] | None,
        k1: float = K1,
    ) -> FreqArray:
        """f · (k1 + 1) / (f + k1 · (1 - b + b · |d| / avgdl)) of these postings (``doc``,
        ``freq``, the query's): everything of the score but the idf, avgdl the mean over the
        documents ``base`` admits (every one when None). Computed per query from each
        document's norm, which is kept (by the gate's value under one), so that new
        documents cost the norms of the documents, not a pass over every posting. Another
        ``k1`` than FTS5's scales the kept norms."""
        wide = freq.astype(np.float64)
        norms = self._norms_of(base)[doc]
        if k1 != K1:
            norms = norms * (k1 / K1)
        gain: FreqArray = (wide * (k1 + 1.0) / (wide + norms)).astype(np.float32)
        return gain

    def _norms_of(self, base: npt.NDArray[np.bool_] | None) -> npt.NDArray[np.float64]:
        """k1 · (1 - b + b · |d| / avgdl) of every document, avgdl over what ``base`` admits."""
        if base is None:
            if self._norm is None:
                self._norm = _length_norms(self._sizes(), None)
            return self._norm
        key = hashlib.blake2b(np.packbits(base).tobytes(), digest_size=16).digest()
        found = self._norms.get(key)
        if found is None or not np.array_equal(found[0], base):
            found = self._norms.put(key, (base.copy(), _length_norms(self._sizes(), base)))
        return found[1]

    def _sets(self) -> list[tuple[IntArray, DocArray, FreqArray]]:
        """The first set of postings, then the tail when there is one."""
        first = (self.indptr, self.doc, self.freq)
        return [first] if self._tail is None else [first, self._tail]

    def _postings(self, term_ids: IntArray) -> list[tuple[DocArray, FreqArray]]:
        """(documents, frequencies) of each of these terms, in document order."""
        sets = self._sets()
        out = []
        for t in term_ids.tolist():
            parts = [(d[p[t] : p[t + 1]], f[p[t] : p[t + 1]]) for p, d, f in sets]
            if len(parts) == 1:
                out.append(parts[0])
            else:
                docs, freqs = zip(*parts, strict=True)
                out.append((np.concatenate(docs), np.concatenate(freqs)))
        return out

    def _sizes(self) -> npt.NDArray[np.float64]:
        """|d| of every document: its tokens over all its columns."""
        size: npt.NDArray[np.float64] = self.lengths.sum(axis=1, dtype=np.int64).astype(np.float64)
        return size

    def idf(
        self, term_ids: Sequence[int], *, allow: npt.NDArray[np.bool_] | None = None
    ) -> npt.NDArray[np.float64]:
        """Each term's idf over the documents ``allow`` admits (all when None)."""
        ids = np.asarray(term_ids, dtype=np.int64)
        if allow is None:
            n = float(len(self.rowids))
            hits = np.zeros(len(ids), np.float64)
            for indptr, _, _ in self._sets():
                # Only the query's terms: a diff of the whole vocabulary costs more than the rest.
                hits += indptr[ids + 1] - indptr[ids]
        else:
            n = float(np.count_nonzero(allow))
            hits = np.asarray(
                [len(doc) and np.count_nonzero(allow[doc]) for doc, _ in self._postings(ids)],
                dtype=np.float64,
            )
        value = np.log((n - hits + 0.5) / (hits + 0.5))
        return np.where(value <= 0.0, MIN_IDF, value)

    def idf_total(
        self,
        phrases: Sequence[str],
        *,
        allow: npt.NDArray[np.bool_] | None = None,
        base: npt.NDArray[np.bool_] | None = None,
        scoped_idf: bool = True,
        weights: Sequence[float] | None = None,
    ) -> float:
        """Σ idf over the query's tokens (each times its weight, 1 when ``weights`` is None),
        counted as :meth:`ranked` counts them (a token found in no document as found in
        none): what a document holding each once at the mean length scores, the scale a BM25
        score of this query is read on."""
        if base is not None:
            allow = base if allow is None else allow & base
        scope = allow if scoped_idf else base
        n = float(len(self.rowids) if scope is None else np.count_nonzero(scope))
        weight = [1.0] * len(phrases) if weights is None else list(weights)
        pairs = zip(phrases, weight, strict=True)
        known = [(self.vocab[p], w) for p, w in pairs if p in self.vocab]
        total = 0.0
        if known:
            ids, ws = zip(*known, strict=True)
            total = float((self.idf(ids, allow=scope) * np.asarray(ws)).sum())
        missing = sum(w for p, w in zip(phrases, weight, strict=True) if p not in self.vocab)
        if missing:
            total += missing * max(math.log((n + 0.5) / 0.5), MIN_IDF)
        return total

    def scores(
        self,
        phrases: Sequence[str],
        *,
        allow: npt.NDArray[np.bool_] | None = None,
        base: npt.NDArray[np.bool_] | None = None,
        weights: Sequence[float] | None = None,
        k1: float = K1,
    ) -> Scores:
        """The BM25 score of every document for a query of single-token phrases (0 where
        none matches), the idf counted over the documents ``allow`` admits and avgdl over
        those ``base`` admits (all when None); each phrase's part times its weight in
        ``weights`` (1 when None); ``k1`` FTS5's unless given."""
        weight = [1.0] * len(phrases) if weights is None else list(weights)
        given = zip(phrases, weight, strict=True)
        pairs = [(self.vocab[p], w) for p, w in given if p in self.vocab]
        scores = np.zeros(len(self.rowids), np.float64)
        if not pairs:
            return scores
        known = [t for t, _ in pairs]
        found = self._postings(np.asarray(known, dtype=np.int64))
        lengths = np.asarray([len(doc) for doc, _ in found], dtype=np.int64)
        if not lengths.sum():
            return scores
        doc = np.concatenate([doc for doc, _ in found])
        freq = np.concatenate([freq for _, freq in found])
        gain = self._gains(doc, freq, base, k1)
        idf = self.idf(known, allow=allow)
        if weights is not None:
            idf = idf * np.asarray([w for _, w in pairs], dtype=np.float64)
        value = np.repeat(idf, lengths) * gain
        summed: Scores = np.bincount(doc, weights=value, minlength=len(self.rowids)).astype(
            np.float64, copy=False
        )
        return summed

    def top(
        self, phrases: Sequence[str], k: int, *, allow: npt.NDArray[np.bool_] | None = None
    ) -> tuple[IntArray, Scores]:
        """Positions and scores of the ``k`` best matching documents among those ``allow``
        admits (all when None), best first, ties by rowid. The gate applies before the cut,
        and to the idf."""
        positions, scores, _ = self.ranked(phrases, k, allow=allow)
        return positions, scores

    def ranked(
        self,
        phrases: Sequence[str],
        k: int,
        *,
        allow: npt.NDArray[np.bool_] | None = None,
        scoped_idf: bool = True,
        base: npt.NDArray[np.bool_] | None = None,
        weights: Sequence[float] | None = None,
        k1: float = K1,
    ) -> tuple[IntArray, Scores, int]:
        """:meth:`top`, and how many admitted documents match at all. ``scoped_idf=False``
        keeps the idf of the whole index (of what ``base`` admits, when given) under a
        filter, as FTS5 does. ``base`` is the access gate, of which ``allow`` is a part.
        ``weights`` and ``k1`` as for :meth:`scores`."""
        if base is not None:
            allow = base if allow is None else allow & base
        scores = self.scores(
            phrases, allow=allow if scoped_idf else base, base=base, weights=weights, k1=k1
        )
        if allow is not None:
            scores[~allow] = 0.0
        total = int(np.count_nonzero(scores))
        matched = np.flatnonzero(scores >= _floor(scores, k, total))
        values = scores[matched]
        if k < len(matched):
            kth = np.partition(values, len(values) - k)[len(values) - k]
            keep = values >= kth
            matched, values = matched[keep], values[keep]
        order = np.lexsort((matched, -values))[:k]
        return matched[order], values[order], total


def _floor(scores: Scores, k: int, total: int) -> float:
    """A score no higher than the ``k``-th best of ``scores`` (which are ≥ 0, ``total`` of
    them above 0), and above 0: the cut before the top ``k`` is taken. The ``k``-th best of
    any ``k`` or more documents is no higher than the ``k``-th best of all, so that of every
    fourth document bounds it; among a hundred thousand matches it leaves a few hundred,
    where taking the ``k``-th best of them all would partition them all."""
    smallest = float(np.nextafter(0.0, 1.0))
    if k <= 0 or total <= SAMPLE_STEP * k:
        return smallest
    sample = scores[::SAMPLE_STEP]
    # Only the matches: a partition among a sample that is mostly zeros (the documents that
    # match nothing, most of a large index) degrades towards quadratic.
    sample = sample[sample > 0.0]
    if len(sample) <= k:
        return smallest
    bound = float(np.partition(sample, len(sample) - k)[len(sample) - k])
    return max(bound, smallest)


def _length_norms(
    size: npt.NDArray[np.float64], base: npt.NDArray[np.bool_] | None
) -> npt.NDArray[np.float64]:
    """k1 · (1 - b + b · |d| / avgdl) for documents of ``size`` tokens, avgdl the mean size
    of those ``base`` admits (of all when None)."""
    counted = size if base is None else size[base]
    avgdl = float(counted.sum()) / max(len(counted), 1)
    if avgdl <= 0:
        return np.full_like(size, K1)
    norm: npt.NDArray[np.float64] = K1 * (1.0 - B + B * size / avgdl)
    return norm


def _insert(
    indptr: IntArray,
    doc: DocArray,
    freq: FreqArray,
    term: IntArray,
    new_doc: npt.ArrayLike,
    new_freq: npt.ArrayLike,
    terms: int,
) -> tuple[IntArray, DocArray, FreqArray]:
    """Term-major postings (``indptr`` over up to ``terms`` terms, ``doc``, ``freq``) with
    these added (their ``term``, sorted by term then document, each term's documents after
    those it has): the new arrays."""
    old = np.concatenate([indptr, np.full(terms + 1 - len(indptr), indptr[-1])])
    # np.insert keeps equal insertion points in the order given, so each term's new postings
    # land after its old ones, still ascending by document.
    at = old[term + 1]
    doc = np.insert(doc, at, np.asarray(new_doc, dtype=np.int32))
    freq = np.insert(freq, at, np.asarray(new_freq, dtype=np.float32))
    counts = np.diff(old) + np.bincount(term, minlength=terms)
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), doc, freq
