"""The hybrid keyword leg on a sparse in-memory BM25 index, with the store's full-text query as
fallback.

The index is the full-text index's image: the same tokens (read from the store's full-text
index itself, :class:`~stratamem.store.keyword.KeywordStore`), the same statistics and the
same formula, so it ranks as the store's own BM25 ranking does (for SQLite, ``ORDER BY rank``
over ``chunks_fts``), only without walking the full-text index for every query.

Staleness: the index carries the store state it reflects (the store's generation, which
every deletion bumps; the highest chunk rowid; the row count and per-column token totals).
When that state moves, chunks gone or replaced since are dropped (their rowid and id are
checked) and chunks above the indexed rowids are tokenized and appended; then the index's row
count and per-column token totals must equal the store's, or it is rebuilt from scratch. The
state (one statement) and what the index is brought up to date from are read in one read
snapshot, and a search holds one from the state check to the hits it reads: what it ranks is
one committed version of the store, whatever another process commits meanwhile. A
large index is saved beside the database (``<db>.bm25.idx``, see ``bm25_file``) and brought up
to date the same way when it is opened. The file names the database it was built from (its
store id) and its rows (rowid and chunk id, each checked against the database before anything
is served); a file of another database, a missing, corrupt or incompatible one is rebuilt from
the store; whatever cannot be built or read leaves the leg on the full-text query, and the
leg's status says why.

The tokenizer is the full-text index's (``stratamem reindex --tokenizer``): when the store's
full-text table is declared again with another one, the schema read from the store differs
from the one the index was built under, and the index is rebuilt; a saved file records the
tokenizer and a hash of the table's definition, and one of another is rebuilt, not read.

Saving happens on a worker thread (``index.saver``): a search never waits for the write.
After a forget, :meth:`SparseKeywordIndex.persist_now` brings the index up to date and rewrites
the file at once, so no forgotten word or chunk id stays in it. A process killed between the
forget's commit and that rewrite leaves the old file; the forget (or lock) committed a mark
with it, and :func:`drop_files_holding_removed`, run when the store is opened, removes every
file made before the mark.

The access gate is a mask over the index's documents, applied before the top-k is taken and
to every statistic (N, n(q), avgdl): a principal's scores are those of a store that never held
what it may not see. So a principal is never answered by the full-text query, whose
statistics count everything; a phrase of several tokens is scored as its words instead.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

from stratamem.errors import KeywordIndexUnavailable
from stratamem.retrieval.index import bm25_file
from stratamem.retrieval.index.bm25 import K1, BM25Index
from stratamem.retrieval.index.file import Rejected, read_header
from stratamem.retrieval.index.saver import BackgroundSaver
from stratamem.retrieval.query import (
    match_expression,
    match_terms,
    term_weight,
    weighted_terms,
)
from stratamem.retrieval.relevance import Calibration, decreasing, keyword_share
from stratamem.retrieval.scope import resolve
from stratamem.store.base import Store
from stratamem.store.caches import LastFew
from stratamem.store.keyword import REMOVED_AT_KEY, KeywordSchema, KeywordState
from stratamem.types import Filters, QueryResponse, RetrievalHit

PERSIST_MIN_DOCS: Final = 2000
# The most query tokens scored: a longer query (a pasted paragraph) keeps its rarest ones.
MAX_SCORED_TOKENS: Final = 96
# A query of more distinct tokens than this is a passage, not keywords (see query_tokens);
# a passage's terms saturate later in a document: BM25's k1 for it (FTS5's is 1.2).
LONG_QUERY_TOKENS: Final = 16
LONG_QUERY_K1: Final = 3.0
# The words of a passage its snippets mark (its rarest).
SNIPPET_TOKENS: Final = 8
_log = logging.getLogger(__name__)

# What a search survives by falling back to the full-text query: the store cannot back the
# index, or building it failed (a malformed batch, no memory for the arrays).
_UNAVAILABLE = (KeywordIndexUnavailable, ValueError, MemoryError)


class _Rebuild(Exception):
    """The index cannot be brought up to date in place."""


class SparseKeywordIndex:
    """One store's sparse BM25 index, kept up to date with the store and (for file stores
    with at least ``persist_min_docs`` chunks) saved beside it."""

    def __init__(
        self, store: Store, *, persist: bool = True, persist_min_docs: int = PERSIST_MIN_DOCS
    ) -> None:
        self._store = weakref.ref(store)
        self.persist = persist and store.index_base() is not None
        self.persist_min_docs = persist_min_docs
        self.note = ""
        self._lock = threading.Lock()
        self._index: BM25Index | None = None
        self._state: KeywordState | None = None
        self._schema: KeywordSchema | None = None
        self._unsaved = 0
        self._failed: tuple[KeywordState, str] | None = None
        self._store_id: str | None = None
        # Per reader's list of admitted rowids (kept alive here, so its id stays its own).
        self._gates: LastFew[tuple[list[int] | None, BM25Index, int, npt.NDArray[np.bool_]]]
        self._gates = LastFew()
        self.saver = BackgroundSaver(f"stratamem-bm25-save:{store.path}")

    def index_path(self) -> Path | None:
        store = self._store()
        if not self.persist or store is None:
            return None
        return Path(f"{store.index_base()}.bm25.idx")

    def search(
        self,
        terms: Sequence[str],
        filters: Filters,
        k: int,
        *,
        counts: Sequence[int] | None = None,
    ) -> dict[str, float] | None:
        """node id → BM25 score of the ``k`` best admitted chunks, or None (with ``note``
        saying why) where the sparse index cannot answer and the full-text query must.
        ``counts``: how often the query says each term (once each when None)."""
        found = self.rank(terms, filters, k, counts=counts)
        if found is None:
            return None
        ranked, _ = found
        return {node: score for _, node, score in ranked}

    def search_scored(
        self,
        terms: Sequence[str],
        filters: Filters,
        k: int,
        *,
        counts: Sequence[int] | None = None,
    ) -> tuple[dict[str, float], float] | None:
        """:meth:`search`, and the query's Σ idf over what it ranked (see
        :meth:`~stratamem.retrieval.index.bm25.BM25Index.idf_total`)."""
        found = self.rank_scored(terms, filters, k, counts=counts)
        if found is None:
            return None
        ranked, _, ceiling = found
        return {node: score for _, node, score in ranked}, ceiling

    def rank(
        self,
        terms: Sequence[str],
        filters: Filters,
        k: int,
        *,
        scoped_idf: bool = True,
        counts: Sequence[int] | None = None,
    ) -> tuple[list[tuple[int, str, float]], int] | None:
        """((rowid, node id, score) of the ``k`` best admitted chunks, how many admitted
        chunks match), or None as for :meth:`search`. ``scoped_idf=False`` ranks exactly as
        the full-text index would, its idf over the whole store even under a filter."""
        found = self.rank_scored(terms, filters, k, scoped_idf=scoped_idf, counts=counts)
        return None if found is None else (found[0], found[1])

    def rank_scored(
        self,
        terms: Sequence[str],
        filters: Filters,
        k: int,
        *,
        scoped_idf: bool = True,
        counts: Sequence[int] | None = None,
    ) -> tuple[list[tuple[int, str, float]], int, float] | None:
        """:meth:`rank`, and the query's Σ idf counted as its scores count it (each token's
        times its weight: see :func:`query_tokens`)."""
        store = self._store()
        if store is None:
            self.note = "the store is closed"
            return None
        if store.in_transaction():
            # Inside an open write transaction the full-text index holds changes it has not
            # yet written to the statistics the index is checked against.
            self.note = "a write transaction is open"
            return None
        with self._lock:
            self.note = ""
            try:
                index = self._current(store)
                phrases = store.keyword_phrases(terms)
            except _UNAVAILABLE as exc:
                self._index = self._state = None
                self.note = f"sparse index unavailable: {exc}"
                try:
                    # Not retried (a full build can take seconds) until the store changes.
                    self._failed = (store.keyword_state(), str(exc))
                except KeywordIndexUnavailable:
                    self._failed = None
                return None
            gated = store.visible_ids() is not None
            if any(len(p) > 1 for p in phrases):
                if not gated:
                    self.note = "a query term is a phrase of several tokens"
                    return None
                # FTS5's statistics count what the principal may not see: the phrase is
                # scored as its words, here, where only what it may see counts.
                self.note = "a phrase scored as its words"
            tokens, weights, passage = query_tokens(index, phrases, counts)
            base = None
            if gated:
                base = self._gate_mask(index, store.allowed_rowids(Filters()))
            allow = None if filters == Filters() else _mask(index, store.allowed_rowids(filters))
            # Scored under the lock: a sync on another thread changes the arrays in place.
            k1 = LONG_QUERY_K1 if passage else K1
            positions, scores, total = index.ranked(
                tokens, k, allow=allow, scoped_idf=scoped_idf, base=base, weights=weights, k1=k1
            )
            ceiling = index.idf_total(
                tokens, allow=allow, base=base, scoped_idf=scoped_idf, weights=weights
            )
            ids = index.ids
            ranked = [
                (rowid, ids[p], score)
                for rowid, p, score in zip(
                    index.rowids[positions].tolist(),
                    positions.tolist(),
                    scores.tolist(),
                    strict=True,
                )
            ]
            return ranked, total, ceiling

    def snippet_terms(self, terms: Sequence[str], counts: Sequence[int] | None) -> list[str]:
        """The terms a snippet of a passage marks: those of its ``SNIPPET_TOKENS`` rarest
        scored tokens (all of a keyword query's terms)."""
        store = self._store()
        if store is None or len(terms) <= LONG_QUERY_TOKENS:
            return list(terms)
        with self._lock:
            index = self._index
            if index is None:
                return list(terms)
            phrases = store.keyword_phrases(terms)
            tokens, _, _ = query_tokens(index, phrases, counts, limit=SNIPPET_TOKENS)
        kept = set(tokens)
        return [t for t, p in zip(terms, phrases, strict=True) if kept.intersection(p)]

    def _gate_mask(self, index: BM25Index, allowed: list[int] | None) -> npt.NDArray[np.bool_]:
        """The access gate's mask over ``index``, kept while the store returns the same
        (cached) list of admitted rowids for the same index."""
        cached = self._gates.get(id(allowed))
        if (
            cached is not None
            and cached[0] is allowed
            and cached[1] is index
            and (cached[2] == len(index))
        ):
            return cached[3]
        mask = _mask(index, allowed)
        if mask is None:
            mask = np.ones(len(index), np.bool_)
        self._gates.put(id(allowed), (allowed, index, len(index), mask))
        return mask

    # -- keeping the index current -----------------------------------------------------------

    def _current(self, store: Store) -> BM25Index:
        schema = store.keyword_schema()
        if self._schema is not None and schema != self._schema and self._index is not None:
            # The full-text index was declared again (another tokenizer): its tokens are not
            # the ones held, whatever the counts say.
            self._index = self._state = None
            self._failed = None
            self.note = "sparse index rebuilt (the full-text tokenizer changed)"
        self._schema = schema
        self._identity(store)
        state = store.keyword_state()
        if self._index is not None and self._state is not None and _not_after(state, self._state):
            # The same version, or (a reader on another thread, in an older snapshot) an older
            # one: what the index has since is new chunks, which that reader's gate and
            # fetches leave out, and removals, which it would have seen a moment later.
            return self._index
        if self._failed is not None and self._failed[0] == state:
            raise KeywordIndexUnavailable(self._failed[1])
        # One read snapshot for the state, the chunk list and the tokens.
        with store.keyword_snapshot():
            state = store.keyword_state()
            current = None
            if self._index is not None and self._state is not None:
                current = (self._index, self._state, False)
            else:
                loaded = self._load(schema)
                if loaded is not None:
                    # A saved file may come from another copy of the database: check it all.
                    current = (*loaded, True)
            if current is None:
                index = self._build(store, schema, state)
                changed = len(index)
            else:
                index, have, force = current
                try:
                    changed = self._sync(store, index, have, state, force=force)
                except _Rebuild as exc:
                    self.note = f"sparse index rebuilt ({exc})"
                    index = self._build(store, schema, state)
                    changed = len(index)
        self._index, self._state = index, state
        self._unsaved += changed
        if self._save_due(index):
            self.saver.submit(self._save_snapshot)
        return index

    def _identity(self, store: Store) -> str:
        if self._store_id is None:
            self._store_id = store.store_id()
        return self._store_id

    def _load(self, schema: KeywordSchema) -> tuple[BM25Index, KeywordState] | None:
        path = self.index_path()
        store = self._store()
        if path is None or store is None or not path.exists():
            return None
        try:
            return bm25_file.read_file(path, schema, store_id=self._identity(store))
        except (Rejected, OSError, ValueError, KeyError, TypeError) as exc:
            self.note = f"sparse index rebuilt: the saved one was unusable ({exc})"
            return None

    def _build(self, store: Store, schema: KeywordSchema, state: KeywordState) -> BM25Index:
        rows = store.keyword_postings()
        index = BM25Index(schema.columns, schema.weights)
        index.append(rows.rowids, rows.ids, rows.postings)
        problem = _disagreement(index, state)
        if problem:
            raise KeywordIndexUnavailable(
                f"the full-text index and the chunks disagree ({problem})"
            )
        return index

    def _sync(
        self,
        store: Store,
        index: BM25Index,
        have: KeywordState,
        now: KeywordState,
        *,
        force: bool,
    ) -> int:
        """Bring ``index`` (at state ``have``) to ``now`` in place; how many documents changed."""
        changed = 0
        if force or now.generation != have.generation or now.max_rowid < index.max_rowid:
            rows = store.keyword_rows(upto=index.max_rowid)
            rowids = np.asarray([r[0] for r in rows], dtype=np.int64)
            keep = np.zeros(len(index), np.bool_)
            if len(rowids):
                at = np.minimum(np.searchsorted(rowids, index.rowids), len(rowids) - 1)
                keep = rowids[at] == index.rowids
                for i in np.flatnonzero(keep).tolist():
                    # A rowid comes back for another chunk once the highest one was deleted.
                    if rows[int(at[i])][1] != index.ids[i]:
                        keep[i] = False
            if int(keep.sum()) != len(rows):
                raise _Rebuild("chunks appeared among the indexed ones")
            changed += len(index) - int(keep.sum())
            index.remove(keep)
        if now.max_rowid > index.max_rowid:
            new = store.keyword_postings(above=index.max_rowid)
            index.append(new.rowids, new.ids, new.postings)
            changed += len(new.rowids)
        problem = _disagreement(index, now)
        if problem:
            raise _Rebuild(problem)
        return changed

    def _save_due(self, index: BM25Index) -> bool:
        if self.index_path() is None or len(index) < self.persist_min_docs:
            return False
        return self._unsaved >= max(1, len(index) // 100)

    def _save_snapshot(self) -> None:
        """The worker's job: copy the current index under the lock, write it without."""
        path = self.index_path()
        with self._lock:
            index, state, schema = self._index, self._state, self._schema
            if path is None or index is None or state is None or schema is None:
                return
            if self._store_id is None or not self._save_due(index):
                return
            copy, unsaved = bm25_file.snapshot(index), self._unsaved
            self._unsaved = 0
        store = self._store()
        try:
            bm25_file.write_file(
                path,
                copy,
                schema,
                state,
                store_id=self._store_id,
                still_current=lambda: store is not None and _unremoved(store, state.generation),
            )
        except (OSError, ValueError):
            with self._lock:
                self._unsaved += unsaved
            raise

    def persist_now(self) -> None:
        """Bring the index up to date and write its file now, or remove the file where the
        store is now too small for one (after a forget: nothing forgotten may stay in it)."""
        store = self._store()
        path = self.index_path()
        if store is None or path is None:
            return
        self.saver.flush()
        with self._lock:
            index = None
            try:
                index = self._current(store)
            except _UNAVAILABLE as exc:
                self._index = self._state = None
                self.note = f"sparse index unavailable: {exc}"
            state, schema = self._state, self._schema
            if (
                index is None
                or state is None
                or schema is None
                or len(index) < self.persist_min_docs
            ):
                path.unlink(missing_ok=True)
                return
            bm25_file.write_file(path, index, schema, state, store_id=self._identity(store))
            self._unsaved = 0
        self.saver.flush()


def query_tokens(
    index: BM25Index,
    phrases: Sequence[Sequence[str]],
    counts: Sequence[int] | None,
    *,
    limit: int | None = None,
) -> tuple[list[str], list[float], bool]:
    """The distinct tokens a query scores, each one's weight, and whether the query is a
    passage (more than ``LONG_QUERY_TOKENS`` tokens) rather than keywords.

    A keyword query weighs a token by the number of its distinct terms that make it ("flows"
    and "flow" are one stem named twice), as FTS5 weighs the OR of those terms. A passage
    weighs it by :func:`~stratamem.retrieval.query.term_weight` of how often the passage
    says it (``counts``, per term; 1 each when None): its subject, said again and again,
    outweighs what it mentions once. Past ``limit`` tokens (``MAX_SCORED_TOKENS`` unless
    given), only that many are scored, those of highest idf over the whole index (ties by
    their order in the query): in a paragraph the rare words carry the ranking, and each
    common one costs a walk over long postings for almost no score.
    """
    named: dict[str, int] = {}
    said: dict[str, int] = {}
    for i, phrase in enumerate(phrases):
        count = 1 if counts is None else counts[i]
        for token in phrase:
            named[token] = named.get(token, 0) + 1
            said[token] = said.get(token, 0) + count
    tokens = list(said)
    limit = MAX_SCORED_TOKENS if limit is None else limit
    if len(tokens) > limit:
        known = [t for t in tokens if t in index.vocab]
        idf = index.idf([index.vocab[t] for t in known]) if known else np.empty(0)
        rarity = dict(zip(known, idf.tolist(), strict=True))
        # A token in no document scores nothing, whatever it weighs.
        order = sorted(range(len(tokens)), key=lambda i: (-rarity.get(tokens[i], -1.0), i))
        tokens = [tokens[i] for i in sorted(order[:limit])]
    if len(said) <= LONG_QUERY_TOKENS:
        return tokens, [float(named[t]) for t in tokens], False
    return tokens, [term_weight(said[t]) for t in tokens], True


def _unremoved(store: Store, generation: int) -> bool:
    """Whether no chunk was removed since ``generation`` (a lock or a forget in another
    process bumps it): only then may a copy of the index made at it be written to disk."""
    try:
        return store.committed_generations()[1] == generation
    except Exception:  # a store closed meanwhile, or busy: do not write
        return False


def _not_after(state: KeywordState, held: KeywordState) -> bool:
    """Whether ``state`` is the version the index holds or an older one: generations and
    rowids only grow."""
    return state == held or (state.generation, state.max_rowid) < (held.generation, held.max_rowid)


def _disagreement(index: BM25Index, state: KeywordState) -> str:
    if state.docs != len(index):
        return f"{len(index)} documents indexed, the full-text index counts {state.docs}"
    if state.docs and state.totals != index.column_totals():
        return (
            f"token totals {index.column_totals()} differ from the full-text index's {state.totals}"
        )
    return ""


def _mask(index: BM25Index, allowed: list[int] | None) -> npt.NDArray[np.bool_] | None:
    if allowed is None:
        return None
    wanted = np.asarray(allowed, dtype=np.int64)
    mask = np.zeros(len(index), np.bool_)
    if len(index) == 0 or len(wanted) == 0:
        return mask
    at = np.minimum(np.searchsorted(index.rowids, wanted), len(index) - 1)
    mask[at[index.rowids[at] == wanted]] = True
    return mask


def index_file(store: Store) -> Path | None:
    """Where the store's sparse index is saved (None for a store in memory)."""
    base = store.index_base()
    return None if base is None else Path(f"{base}.bm25.idx")


def drop_files_holding_removed(store: Store) -> list[Path]:
    """Remove the saved index file, and what a killed save left half-written beside it, where
    it reflects the store from before its last forget or lock (the generation that
    ``REMOVED_AT_KEY`` records): such a file may hold the text they removed. The process that
    removes a source rewrites the file at once; this repairs one killed before it could, and
    costs the next search a rebuild. Cheap where there is nothing to do (one setting, one
    header). Returns the files removed."""
    target = index_file(store)
    mark = store.get_setting(REMOVED_AT_KEY)
    if target is None or mark is None:
        return []
    try:
        removed_at = int(mark)
    except ValueError:
        removed_at = None  # unreadable: every file may hold removed text
    dropped = []
    for path in [target, *target.parent.glob(f".{target.name}.*.tmp")]:
        try:
            header = read_header(path, bm25_file.MAGIC)
        except OSError:
            continue  # not there
        generation = None if header is None else header.get("generation")
        if header is None and path != target:
            continue  # a save whose header is not yet whole has written no text
        if isinstance(generation, int) and removed_at is not None and generation >= removed_at:
            continue
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            _log.warning("%s may hold removed text but cannot be removed: %s", path, exc)
            continue
        dropped.append(path)
    return dropped


_INDEXES: weakref.WeakKeyDictionary[Store, SparseKeywordIndex] = weakref.WeakKeyDictionary()
_INDEXES_LOCK = threading.Lock()


def open_index(store: Store) -> SparseKeywordIndex | None:
    """The store's sparse keyword index if one was created, without creating it."""
    with _INDEXES_LOCK:
        return _INDEXES.get(store)


def sparse_index(store: Store) -> SparseKeywordIndex:
    """The store's sparse keyword index, one per open store, created on first use."""
    with _INDEXES_LOCK:
        found = _INDEXES.get(store)
        if found is None:
            found = _INDEXES[store] = SparseKeywordIndex(store)
        return found


def keyword_leg(
    store: Store, query: str, filters: Filters, k: int
) -> tuple[dict[str, float] | None, str]:
    """(node id → BM25 score of the best ``k`` admitted chunks, status line) for the hybrid
    search; the scores are None when the query has no searchable word."""
    scores, status, _ = keyword_leg_scored(store, query, filters, k)
    return scores, status


def keyword_leg_scored(
    store: Store, query: str, filters: Filters, k: int
) -> tuple[dict[str, float] | None, str, float | None]:
    """:func:`keyword_leg` and the query's Σ idf, the scale its scores are read on (None
    where the full-text query answered: it does not say)."""
    weighted = weighted_terms(query)
    if not weighted:
        return None, "off: the query has no searchable words", None
    terms = [t for t, _ in weighted]
    index = sparse_index(store)
    with store.read_snapshot():
        found = index.search_scored(terms, filters, k, counts=[n for _, n in weighted])
        if found is not None:
            note = f" ({index.note})" if index.note else ""
            return found[0], f"ok: {len(found[0])} matches{note}", found[1]
        if store.visible_ids() is not None:
            # FTS5 ranks with statistics over everything, the hidden sources too.
            return None, f"off: {index.note}", None
        expression = match_expression(query) or ""
        hits, _ = store.fts_search(expression, filters, k, snippets=False, count=False)
    scores = {h.node_id: h.score for h in hits}
    return scores, f"ok: {len(hits)} matches (FTS5: {index.note})", None


# -- the keyword-only search mode ----------------------------------------------------------

SEARCH_DEFAULT_LIMIT = 10
SEARCH_MAX_LIMIT = 1000


def keyword_search(
    store: Store,
    query: str,
    *,
    filters: Filters | None = None,
    limit: int = SEARCH_DEFAULT_LIMIT,
    snippets: bool = True,
    calibration: Calibration | None = None,
) -> QueryResponse:
    """Leaves ranked by BM25 relevance (higher is better), with the pre-limit match count.

    ``limit`` 0 or less means the default (10); it is clamped to 1000. A query with no
    searchable term (punctuation only) matches nothing. With a ``calibration`` each hit
    carries its relevance, read from its BM25 over the query's Σ idf (none where the
    full-text query answered instead of the sparse index).
    """
    if limit <= 0:
        limit = SEARCH_DEFAULT_LIMIT
    limit = min(limit, SEARCH_MAX_LIMIT)
    expression = match_expression(query)
    if expression is None:
        return QueryResponse.empty()
    resolved = resolve(store, filters or Filters())
    if resolved is None:
        return QueryResponse.empty()
    filters = resolved
    # The sparse index ranks as the full-text index does, without it scoring every match of
    # every OR-ed word, except that under a filter a word weighs by its rarity among what the
    # filter admits (as in the hybrid leg: a conversation's speaker names are rare in the
    # store and common in it) and a passage is read as one (see query_tokens); the
    # full-text query answers where the sparse index cannot.
    # One read snapshot: the rows the index ranks are the rows the hits are read from.
    with store.read_snapshot():
        weighted = weighted_terms(query)
        terms, counts = [t for t, _ in weighted], [n for _, n in weighted]
        index = sparse_index(store)
        found = index.rank_scored(terms, filters, limit, counts=counts)
        if found is not None:
            ranked, total, ceiling = found
            pairs = [(r, s) for r, _, s in ranked]
            if snippets and len(terms) > LONG_QUERY_TOKENS:
                # A passage's snippet marks its rarest words: FTS5 would otherwise walk every
                # match of each of its words (0.8 s a Cranfield passage; 0.2 s for 16 words).
                expression = match_terms(index.snippet_terms(terms, counts))
            hits = store.keyword_hits(expression, pairs, snippets=snippets)
            if calibration is not None:
                hits = _with_relevance(hits, ceiling, calibration)
            return QueryResponse(hits=tuple(hits), total=total)
        if store.visible_ids() is not None:
            # FTS5 ranks with statistics over everything, the hidden sources too.
            return QueryResponse.empty()
        hits, total = store.fts_search(expression, filters, limit, snippets=snippets)
    return QueryResponse(hits=tuple(hits), total=total)


def _with_relevance(
    hits: list[RetrievalHit], ceiling: float, calibration: Calibration
) -> list[RetrievalHit]:
    shown = decreasing(
        [calibration.chunk({"keyword": keyword_share(h.score, ceiling)}) for h in hits]
    )
    return [replace(h, relevance=r) for h, r in zip(hits, shown, strict=True)]
