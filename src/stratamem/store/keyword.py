"""The keyword role: the backend's full-text index, as ranked hits and as the term statistics
the in-process BM25 index is built from.

The in-process index (``retrieval.index.bm25``) must rank exactly as the backend's own BM25
ranking does, so it takes everything from the backend: the tokens of every row as the
full-text index holds them, the column weights, the statistics BM25 divides by, and the
tokens a query term becomes. What it reads is described here in terms of rows, terms and
postings; how a backend keeps them (FTS5's vocabulary tables, PostgreSQL's ``tsvector``
columns) stays inside it.

Row keys are the chunks' integer keys (``rowid``), as in the vectors role. Every method that
reads the full-text index raises :class:`~stratamem.errors.KeywordIndexUnavailable` when the
index cannot back an in-process one (another schema, a ranking that is not BM25, a failed
read); the caller then falls back to :meth:`KeywordStore.fts_search`.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from stratamem.types import Filters, RetrievalHit

IntArray = npt.NDArray[np.int64]

# Set, in the transaction of every forget and every lock, to the chunk generation it leaves: an
# index file beside the store that reflects an older generation may hold the text they
# removed, and is dropped when the store is next opened (a process killed between the commit
# and its rewrite of the file leaves such a file).
REMOVED_AT_KEY = "index_files.removed_at"


@dataclass(slots=True)
class Postings:
    """(term id, document position, weighted frequency) triples, sorted by term then
    document; what a reader of the full-text index hands over for a batch of documents."""

    terms: list[str]
    term: IntArray
    doc: IntArray
    freq: npt.NDArray[np.float64]
    lengths: npt.NDArray[np.int64]  # tokens per (document, column), documents × columns

    @classmethod
    def empty(cls, columns: int) -> Postings:
        none = np.empty(0, np.int64)
        return cls([], none, none, np.empty(0, np.float64), np.zeros((0, columns), np.int64))


@dataclass(frozen=True, slots=True)
class KeywordRows:
    """Rows of the full-text index with their postings: ``postings.doc`` counts positions in
    ``rowids`` (ascending), ``ids`` are the rows' chunk ids."""

    rowids: IntArray
    ids: list[str]
    postings: Postings


@dataclass(frozen=True, slots=True)
class KeywordSchema:
    """What the ranking is parameterised by, recorded with a saved index and checked when it
    is opened: the indexed columns and their BM25 weights (a column's frequency counts
    ``weight`` times), the tokenizer in the backend's own words (FTS5's ``tokenize`` option),
    and a hash of the full-text index's definition (``sha256`` of its SQL, hex)."""

    columns: tuple[str, ...]
    weights: tuple[float, ...]
    tokenizer: str
    fingerprint: str


@dataclass(frozen=True, slots=True)
class KeywordState:
    """Where the full-text index stands: an in-process index that reflects another state is
    stale. ``generation`` counts the chunks deleted (an append leaves it), ``max_rowid`` the highest
    row key, ``docs`` the rows indexed and ``totals`` the tokens of each column over all of
    them (BM25's N and, summed, N·avgdl), empty while no row was ever indexed."""

    generation: int
    max_rowid: int
    docs: int
    totals: tuple[int, ...]


class KeywordStore(Protocol):
    def fts_search(
        self,
        expression: str,
        filters: Filters,
        limit: int,
        *,
        snippets: bool = True,
        count: bool = True,
    ) -> tuple[list[RetrievalHit], int]: ...

    def keyword_hits(
        self, expression: str, ranked: Sequence[tuple[int, float]], *, snippets: bool = True
    ) -> list[RetrievalHit]: ...

    def keyword_schema(self) -> KeywordSchema: ...

    def keyword_tokenizer(self) -> str:
        """The full-text index's tokenizer by name: ``stemmed`` or ``plain`` (the backend's
        own words for any other)."""
        ...

    def set_keyword_tokenizer(self, name: str) -> bool:
        """Index every chunk again with the tokenizer ``name`` (``stemmed`` or ``plain``), in
        one write transaction, and record it with the index; False where it is in use
        already. An unknown name is a ``ValueError``."""
        ...

    def keyword_state(self) -> KeywordState: ...

    def keyword_rows(self, *, above: int = 0, upto: int | None = None) -> list[tuple[int, str]]:
        """(row key, chunk id) of the rows with ``above`` < key ≤ ``upto``, ascending."""
        ...

    def keyword_postings(self, *, above: int = 0) -> KeywordRows:
        """The rows with a key above ``above`` (every row for 0) and their postings, the
        frequencies weighted by column as :meth:`keyword_schema` says."""
        ...

    def keyword_phrases(self, terms: Sequence[str]) -> list[tuple[str, ...]]:
        """The tokens the full-text index makes of each term, in order: one token, a phrase of
        several, or none."""
        ...

    def keyword_snapshot(self) -> AbstractContextManager[None]:
        """One consistent read of the state, the rows and the postings: what is read inside
        comes from a single version of the store (the caller's read snapshot, when one is
        open). Raises :class:`~stratamem.errors.KeywordIndexUnavailable` inside a write
        transaction."""
        ...
