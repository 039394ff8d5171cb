"""The keyword role on PostgreSQL: BM25 with the very numbers the SQLite store gives.

PostgreSQL's own full-text ranking (``ts_rank``) is not BM25, and its stemmer is not FTS5's,
so neither is used. Text is tokenized by FTS5 itself, in a private in-memory SQLite database
declared with the store's tokenizer (FTS5's tokenizers are context-free: a word comes out of
it as it comes out of the SQLite store's index). What PostgreSQL keeps is what BM25 divides
by and what tells an in-process index that it is stale:

- each chunk's token count per column (``chunks.terms_content``, ``terms_title``), counted
  when the chunk is written;
- their totals and the row count in ``keyword_stats``, kept by statement triggers on
  ``chunks`` (a cascade from a forgotten source included);
- the tokenizer, by name, in the ``keyword.tokenizer`` setting.

The in-process BM25 index (``retrieval.index.bm25``) is built from the chunks' text
tokenized here, and so ranks exactly as on SQLite. :meth:`PgKeywordTables.fts_search`, the
answer where that index cannot be used, finds candidates with ``ILIKE`` on each query token's
stem (a stem is a word's prefix up to its last letter), tokenizes them, keeps those holding
the phrase and scores them with FTS5's formula and the store's statistics.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Final

import numpy as np

from stratamem.errors import KeywordIndexUnavailable
from stratamem.store.dialect import Dialect
from stratamem.store.keyword import IntArray, KeywordRows, KeywordSchema, KeywordState, Postings
from stratamem.store.settings import CHUNK_GENERATION_KEY
from stratamem.store.sqlite.fts_terms import TOKENIZERS, read_postings, tokenizer_name
from stratamem.store.tables.filters import filter_sql, gate_sql
from stratamem.store.tables.hits import keyword_hit
from stratamem.types import Chunk, Filters, RetrievalHit

if TYPE_CHECKING:
    from stratamem.store.postgres.connection import PgConnection

COLUMNS: Final = ("content", "title")
WEIGHTS: Final = (1.0, 0.6)
TOKENIZER_KEY: Final = "keyword.tokenizer"
_BATCH: Final = 2000
_PHRASES_KEPT: Final = 4096
K1, B, MIN_IDF = 1.2, 0.75, 1e-6


class Tokenizer:
    """FTS5's tokenizer ``spec`` over a private in-memory database."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self._conn = sqlite3.connect(":memory:", check_same_thread=False)
        tokenize = spec.replace("'", "''")
        self._conn.execute(
            f"CREATE VIRTUAL TABLE t USING fts5(content, title, content='', tokenize='{tokenize}')"
        )
        self._conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
        # The text itself, for FTS5's snippet(): a contentless table has none to quote.
        self._conn.execute(
            f"CREATE VIRTUAL TABLE s USING fts5(content, title, tokenize='{tokenize}')"
        )
        self._lock = threading.Lock()
        self._phrases: OrderedDict[str, tuple[str, ...]] = OrderedDict()

    @contextmanager
    def _holding(self, rows: Iterable[tuple[int, str, str]]) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.executemany("INSERT INTO t (rowid, content, title) VALUES (?, ?, ?)", rows)
            try:
                yield self._conn
            finally:
                self._conn.execute("INSERT INTO t (t) VALUES ('delete-all')")

    def counts(self, texts: Sequence[tuple[str, str]]) -> list[tuple[int, int]]:
        """Tokens of (content, title) of each text."""
        found = [[0, 0] for _ in texts]
        rows = [(i + 1, c, t) for i, (c, t) in enumerate(texts)]
        with self._holding(rows) as conn:
            for doc, col, n in conn.execute("SELECT doc, col, count(*) FROM v GROUP BY doc, col"):
                found[int(doc) - 1][COLUMNS.index(col)] = int(n)
        return [(a, b) for a, b in found]

    def tokens(self, rows: Sequence[tuple[int, str, str]]) -> dict[int, list[list[str]]]:
        """rowid → tokens of each column, in order."""
        out: dict[int, list[list[str]]] = {r[0]: [[], []] for r in rows}
        with self._holding(rows) as conn:
            for doc, col, term in conn.execute("SELECT doc, col, term FROM v ORDER BY doc, offset"):
                out[int(doc)][COLUMNS.index(col)].append(str(term))
        return out

    def postings(self, rows: Sequence[tuple[int, str, str]]) -> Postings:
        rowids = np.asarray([r[0] for r in rows], dtype=np.int64)
        with self._holding(rows) as conn:
            return read_postings(conn, "v", rowids, COLUMNS, WEIGHTS)

    def snippets(self, expression: str, rows: Sequence[tuple[int, str, str]]) -> dict[int, str]:
        """rowid → FTS5's ``snippet(…, 0, '[', ']', '…', 24)`` of each row (rowid, content,
        title) that ``expression`` matches: what the SQLite store's index quotes of it."""
        with self._lock:
            self._conn.executemany("INSERT INTO s (rowid, content, title) VALUES (?, ?, ?)", rows)
            try:
                found = self._conn.execute(
                    "SELECT rowid, snippet(s, 0, '[', ']', '…', 24) FROM s WHERE s MATCH ?",
                    (expression,),
                ).fetchall()
            finally:
                self._conn.execute("DELETE FROM s")
        return {int(r[0]): str(r[1]) for r in found}

    def phrases(self, terms: Sequence[str]) -> list[tuple[str, ...]]:
        missing = list(dict.fromkeys(t for t in terms if t not in self._phrases))
        if missing:
            found = self.tokens([(i, t, "") for i, t in enumerate(missing, start=1)])
            with self._lock:
                for i, term in enumerate(missing, start=1):
                    self._phrases[term] = tuple(found[i][0])
                while len(self._phrases) > _PHRASES_KEPT:
                    self._phrases.popitem(last=False)
        with self._lock:
            return [self._phrases.get(t) or self._again(t) for t in terms]

    def _again(self, term: str) -> tuple[str, ...]:
        # Dropped from the bounded cache between the fill and the read: tokenize it alone.
        rows = [(1, term, "")]
        self._conn.executemany("INSERT INTO t (rowid, content, title) VALUES (?, ?, ?)", rows)
        try:
            return tuple(
                str(r[0]) for r in self._conn.execute("SELECT term FROM v ORDER BY offset")
            )
        finally:
            self._conn.execute("INSERT INTO t (t) VALUES ('delete-all')")


def merge(parts: Sequence[tuple[IntArray, Postings]]) -> tuple[IntArray, Postings]:
    """Postings of consecutive batches of documents as one, sorted by term then document."""
    rowids = np.concatenate([p[0] for p in parts]) if parts else np.empty(0, np.int64)
    if not parts:
        return rowids, Postings.empty(len(COLUMNS))
    terms: dict[str, int] = {}
    term_parts, doc_parts, freq_parts, lengths = [], [], [], []
    offset = 0
    for ids, postings in parts:
        mapping = np.fromiter(
            (terms.setdefault(t, len(terms)) for t in postings.terms), np.int64, len(postings.terms)
        )
        term_parts.append(mapping[postings.term] if len(postings.term) else postings.term)
        doc_parts.append(postings.doc + offset)
        freq_parts.append(postings.freq)
        lengths.append(postings.lengths)
        offset += len(ids)
    term = np.concatenate(term_parts)
    doc = np.concatenate(doc_parts)
    order = np.lexsort((doc, term))
    return rowids, Postings(
        terms=list(terms),
        term=term[order],
        doc=doc[order],
        freq=np.concatenate(freq_parts)[order],
        lengths=np.concatenate(lengths).reshape(-1, len(COLUMNS)),
    )


class PgKeywordTables:
    """The keyword half of :class:`~stratamem.store.postgres.store.PostgresStore`."""

    conn: PgConnection
    dialect: Dialect
    _tokenizer: Tokenizer | None = None

    if TYPE_CHECKING:

        def visible_ids(self) -> list[str] | None: ...

        def allowed_rowids(self, filters: Filters) -> list[int] | None: ...

        def mentions_of(self, node_ids: Sequence[str]) -> dict[str, list[str]]: ...

        def in_transaction(self) -> bool: ...

        def transaction(self) -> AbstractContextManager[PgConnection]: ...

        def read_snapshot(self) -> AbstractContextManager[None]: ...

        def get_setting(self, key: str) -> str | None: ...

        def set_setting(self, key: str, value: str) -> None: ...

    # -- the tokenizer -------------------------------------------------------------------------

    def _tokenizer_spec(self) -> str:
        name = self.get_setting(TOKENIZER_KEY) or "stemmed"
        return TOKENIZERS.get(name, name)

    @property
    def tokenizer(self) -> Tokenizer:
        spec = self._tokenizer_spec()
        held = self._tokenizer
        if held is None or held.spec != spec:
            held = self._tokenizer = Tokenizer(spec)
        return held

    def term_counts(self, chunks: Sequence[Chunk]) -> list[tuple[int, int]]:
        return self.tokenizer.counts([(c.content, c.title) for c in chunks])

    def keyword_tokenizer(self) -> str:
        return tokenizer_name(self._tokenizer_spec())

    def set_keyword_tokenizer(self, name: str) -> bool:
        if name not in TOKENIZERS:
            raise ValueError(f"unknown tokenizer {name!r}; known: {', '.join(TOKENIZERS)}")
        with self.transaction():
            if " ".join(self._tokenizer_spec().split()) == TOKENIZERS[name]:
                return False
            self.set_setting(TOKENIZER_KEY, name)
            tokenizer = Tokenizer(TOKENIZERS[name])
            above = 0
            while rows := self.conn.execute(
                "SELECT rowid, content, title FROM chunks WHERE rowid > %s ORDER BY rowid LIMIT %s",
                (above, _BATCH),
            ).fetchall():
                counts = tokenizer.counts([(r[1], r[2]) for r in rows])
                self.conn.executemany(
                    "UPDATE chunks SET terms_content = %s, terms_title = %s WHERE rowid = %s",
                    [(a, b, r[0]) for (a, b), r in zip(counts, rows, strict=True)],
                )
                above = int(rows[-1][0])
            self.conn.execute(
                """UPDATE keyword_stats SET docs = n.docs, content = n.content, title = n.title
                   FROM (SELECT count(*) AS docs, coalesce(sum(terms_content), 0) AS content,
                                coalesce(sum(terms_title), 0) AS title FROM chunks) n"""
            )
            self._tokenizer = tokenizer
        return True

    def keyword_schema(self) -> KeywordSchema:
        spec = self._tokenizer_spec()
        described = f"postgresql chunks {COLUMNS} weights {WEIGHTS} tokenize '{spec}'"
        return KeywordSchema(
            columns=COLUMNS,
            weights=WEIGHTS,
            tokenizer=spec,
            fingerprint=hashlib.sha256(described.encode()).hexdigest(),
        )

    # -- what the in-process index reads --------------------------------------------------------

    def keyword_state(self) -> KeywordState:
        row = self.conn.execute(
            """SELECT (SELECT CAST(value AS BIGINT) FROM settings WHERE key = %s),
                      (SELECT max(rowid) FROM chunks), docs, content, title
               FROM keyword_stats""",
            (CHUNK_GENERATION_KEY,),
        ).fetchone()
        if row is None:
            raise KeywordIndexUnavailable("keyword_stats has no row")
        generation, max_rowid, docs, content, title = row
        return KeywordState(
            generation=int(generation or 0),
            max_rowid=int(max_rowid or 0),
            docs=int(docs),
            totals=(int(content), int(title)) if docs else (),
        )

    def keyword_rows(self, *, above: int = 0, upto: int | None = None) -> list[tuple[int, str]]:
        sql = "SELECT rowid, id FROM chunks WHERE rowid > %s AND rowid <= %s ORDER BY rowid"
        params = (above, (1 << 63) - 1 if upto is None else upto)
        return [(int(r[0]), str(r[1])) for r in self.conn.execute(sql, params)]

    def keyword_postings(self, *, above: int = 0) -> KeywordRows:
        tokenizer = self.tokenizer
        ids: list[str] = []
        parts: list[tuple[IntArray, Postings]] = []
        cursor = self.conn.execute(
            "SELECT rowid, id, content, title FROM chunks WHERE rowid > %s ORDER BY rowid",
            (above,),
        )
        while batch := cursor.fetchmany(_BATCH):
            rows = [(int(r[0]), str(r[2]), str(r[3])) for r in batch]
            ids.extend(str(r[1]) for r in batch)
            parts.append((np.asarray([r[0] for r in rows], np.int64), tokenizer.postings(rows)))
        rowids, postings = merge(parts)
        return KeywordRows(rowids, ids, postings)

    def keyword_phrases(self, terms: Sequence[str]) -> list[tuple[str, ...]]:
        return self.tokenizer.phrases(terms)

    @contextmanager
    def keyword_snapshot(self) -> Iterator[None]:
        if self.in_transaction():
            raise KeywordIndexUnavailable("a write transaction is open")
        with self.read_snapshot():
            yield

    # -- ranked hits ----------------------------------------------------------------------------

    def fts_search(
        self,
        expression: str,
        filters: Filters,
        limit: int,
        *,
        snippets: bool = True,
        count: bool = True,
    ) -> tuple[list[RetrievalHit], int]:
        """Chunks matching any phrase of ``expression`` (``"a" OR "b c"``), best BM25 first
        (ties by content, then id), scored as FTS5 scores them, and how many match."""
        phrases = [p for p in self.keyword_phrases(_quoted_terms(expression)) if p]
        if not phrases:
            return [], 0
        state = self.keyword_state()
        n_docs = state.docs
        if not n_docs:
            return [], 0
        avgdl = sum(state.totals) / n_docs
        where, params = filter_sql(self.dialect, filters, self.visible_ids())
        patterns = sorted({_pattern(token) for phrase in phrases for token in phrase[:1]})
        candidates = self.conn.execute(
            """SELECT c.rowid, c.content, c.title, c.terms_content + c.terms_title
                FROM chunks c JOIN sources s ON s.id = c.source_id
                WHERE (c.content ILIKE ANY (%s) OR c.title ILIKE ANY (%s))""",
            (patterns, patterns),
        ).fetchall()
        admitted = {
            int(r[0])
            for r in self.conn.execute(
                f"""SELECT c.rowid FROM chunks c JOIN sources s ON s.id = c.source_id
                    WHERE c.rowid = ANY (%s) AND {where}""",
                ([int(r[0]) for r in candidates], *params),
            )
        }
        tokens = self.tokenizer.tokens([(int(r[0]), str(r[1]), str(r[2])) for r in candidates])
        length = {int(r[0]): int(r[3]) for r in candidates}
        freq: list[dict[int, float]] = []
        for phrase in phrases:
            found: dict[int, float] = {}
            for rowid, columns in tokens.items():
                hits = sum(
                    w * _occurrences(cols, phrase) for w, cols in zip(WEIGHTS, columns, strict=True)
                )
                if hits:
                    found[rowid] = hits
            freq.append(found)
        scores: dict[int, float] = {}
        for found in freq:
            idf = math.log((n_docs - len(found) + 0.5) / (len(found) + 0.5))
            idf = idf if idf > 0 else MIN_IDF
            for rowid, f in found.items():
                norm = K1 * (1 - B + B * length[rowid] / avgdl)
                scores[rowid] = scores.get(rowid, 0.0) + idf * f * (K1 + 1) / (f + norm)
        kept = [(score, rowid) for rowid, score in scores.items() if rowid in admitted]
        # Ties at the cut go to the lowest rowid, as FTS5's ORDER BY rank keeps them.
        best = heapq.nsmallest(limit, kept, key=lambda item: (-item[0], item[1]))
        out = self.keyword_hits(expression, [(r, s) for s, r in best], snippets=snippets)
        return out, (len(kept) if count else len(out))

    def keyword_hits(
        self,
        expression: str,
        ranked: Sequence[tuple[int, float]],
        *,
        snippets: bool = True,
    ) -> list[RetrievalHit]:
        if not ranked:
            return []
        rowids = [int(r[0]) for r in ranked]
        gate, params = gate_sql(self.dialect, self.visible_ids(), probe=True)
        rows = {
            row["rowid"]: row
            for row in self.conn.execute(
                f"""SELECT c.rowid, c.id, c.content, c.title, c.author, c.ts_start, c.ts_end,
                           c.tags, c.source_ref, c.source_id, s.scope, c.content_sha256, c.seq
                    FROM chunks c JOIN sources s ON s.id = c.source_id
                    WHERE c.rowid = ANY (%s) AND {gate}""",
                (rowids, *params),
            )
        }
        snips: dict[int, str] = {}
        if snippets and rows:
            snips = self.tokenizer.snippets(
                expression,
                [(r, str(row["content"]), str(row["title"])) for r, row in rows.items()],
            )
        # Ties by content, not by id: see retrieval.ties.
        order = sorted(
            ((score, rows[rowid]["id"], rowid) for rowid, score in ranked if rowid in rows),
            key=lambda item: (
                -item[0],
                rows[item[2]]["content_sha256"],
                rows[item[2]]["seq"],
                item[1],
            ),
        )
        entities = self.mentions_of([rows[rowid]["id"] for _, _, rowid in order])
        return [
            keyword_hit(rows[rowid], entities[node], score, snips.get(rowid, ""))
            for score, node, rowid in order
        ]


def _quoted_terms(expression: str) -> list[str]:
    """The phrases of a MATCH expression as ``match_expression`` writes it."""
    out, at = [], 0
    while (start := expression.find('"', at)) >= 0:
        end = start + 1
        text = []
        while end < len(expression):
            if expression[end] == '"':
                if expression[end + 1 : end + 2] == '"':
                    text.append('"')
                    end += 2
                    continue
                break
            text.append(expression[end])
            end += 1
        out.append("".join(text))
        at = end + 1
    return out


def _pattern(token: str) -> str:
    """An ``ILIKE`` pattern every word that tokenizes to ``token`` matches: a stem keeps the
    word's letters up to its last one (``studi`` of studies, study)."""
    stem = token[:-1] if len(token) > 1 else token
    escaped = stem.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _occurrences(tokens: Sequence[str], phrase: Sequence[str]) -> int:
    n = len(phrase)
    if n == 1:
        return sum(1 for t in tokens if t == phrase[0])
    return sum(1 for i in range(len(tokens) - n + 1) if tuple(tokens[i : i + n]) == tuple(phrase))
