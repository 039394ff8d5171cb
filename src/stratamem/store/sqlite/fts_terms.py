"""What the in-process BM25 index reads from SQLite's full-text index, so that it holds exactly
the tokens FTS5 indexed and tokenizes queries exactly as FTS5 does.

- Documents: an ``fts5vocab`` table of type ``instance`` over ``chunks_fts``, created in the
  connection's TEMP schema (nothing is written to the database file), lists every token
  instance as (term, rowid, column). One pass grouped by term, which that table delivers in
  order, is aggregated with numpy into per-(term, document) column-weighted frequencies.
- New documents and query terms: a contentless TEMP FTS5 table declared with the same
  tokenizer as ``chunks_fts`` indexes the text, its own ``instance`` vocabulary is read back,
  and it is emptied again. FTS5 tokenizers are context-free, so a word comes out of it as it
  comes out of ``chunks_fts``.
- Statistics: FTS5's averages record (``chunks_fts_data`` row 1: the row count, then the
  token total of each column, as SQLite varints) is what ``bm25()`` divides by, and is the
  check that the in-process index holds the same documents.
- Weights: the table's configured rank, ``bm25(w0, w1, …)``; a column without one weighs 1.0.

The tokenizer is the one ``chunks_fts`` is declared with, and that declaration is the store's
record of it: ``stemmed`` (FTS5's ``porter`` over ``unicode61``, diacritics folded; every store
is made so) or ``plain`` (``unicode61`` alone). :func:`replace_fts_table` switches a store
from one to the other, re-tokenizing every chunk; the schema read here, and so everything
built from it (a saved BM25 index records the tokenizer and a hash of the table's SQL), then
differs, and what was built under the other one is rebuilt.

Anything this module cannot read or make sense of raises
:class:`~stratamem.errors.KeywordIndexUnavailable`.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Final

import numpy as np

from stratamem.errors import KeywordIndexUnavailable
from stratamem.store.keyword import IntArray, KeywordRows, KeywordSchema, KeywordState, Postings
from stratamem.store.settings import CHUNK_GENERATION_KEY

FTS_TABLE: Final = "chunks_fts"
_VOCAB: Final = "temp.stratamem_bm25_vocab"
_TEXT: Final = "stratamem_bm25_text"
_TEXT_VOCAB: Final = "temp.stratamem_bm25_text_vocab"
_TOKENIZE = re.compile(r"tokenize\s*=\s*'((?:[^']|'')*)'", re.IGNORECASE)
_RANK = re.compile(r"^\s*bm25\s*\(([^)]*)\)\s*$", re.IGNORECASE)
_QUERY_CACHE: Final = 4096
_BUILT_IN_TOKENIZERS: Final = frozenset({"unicode61", "ascii", "porter", "trigram"})
_BATCH: Final = 4096
# The tokenizers a store may be switched between, by name: FTS5 ``tokenize`` options.
TOKENIZERS: Final = {
    "stemmed": "porter unicode61 remove_diacritics 2",
    "plain": "unicode61 remove_diacritics 2",
}
DEFAULT_TOKENIZER: Final = "stemmed"


@contextmanager
def unavailable_on_error() -> Iterator[None]:
    """A failed read of the full-text index is the keyword role's error, not the driver's."""
    try:
        yield
    except sqlite3.Error as exc:
        raise KeywordIndexUnavailable(str(exc)) from exc


def fts_schema(conn: sqlite3.Connection) -> KeywordSchema:
    row = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (FTS_TABLE,)
    ).fetchone()
    if row is None or row[0] is None:
        raise KeywordIndexUnavailable(f"no {FTS_TABLE} table")
    sql = str(row[0])
    match = _TOKENIZE.search(sql)
    if match is None:
        raise KeywordIndexUnavailable(f"{FTS_TABLE} names no tokenizer")
    columns = tuple(str(r[1]) for r in conn.execute(f"PRAGMA table_info({FTS_TABLE})"))
    return KeywordSchema(
        columns=columns,
        weights=_weights(conn, len(columns)),
        tokenizer=match.group(1).replace("''", "'"),
        fingerprint=hashlib.sha256(sql.encode()).hexdigest(),
    )


def tokenizer_name(tokenize: str) -> str:
    """The name of an FTS5 ``tokenize`` option among :data:`TOKENIZERS`, or the option itself
    where it is none of them."""
    for name, spec in TOKENIZERS.items():
        if " ".join(tokenize.split()) == spec:
            return name
    return tokenize


def replace_fts_table(conn: sqlite3.Connection, name: str) -> bool:
    """Declare ``chunks_fts`` again with the tokenizer ``name`` (one of :data:`TOKENIZERS`)
    and index every chunk with it; False, changing nothing, where it already uses that one.

    Runs in the caller's write transaction: ``chunks_fts`` is dropped and created anew with
    its rank (the column weights) kept, and ``rebuild`` reads ``chunks`` again. The chunks'
    delete and update triggers and the writes that index new chunks name the table, not its
    definition, and carry on; a locked source has no rows in ``chunks`` (its content is only
    in ``sealed``), so none of it reaches the new index, and its rows are indexed again when
    it is unlocked.
    """
    if name not in TOKENIZERS:
        raise ValueError(f"unknown tokenizer {name!r}; known: {', '.join(TOKENIZERS)}")
    spec = TOKENIZERS[name]
    current = fts_schema(conn)
    if " ".join(current.tokenizer.split()) == spec:
        return False
    rank = conn.execute(f"SELECT v FROM {FTS_TABLE}_config WHERE k = 'rank'").fetchone()
    columns = ", ".join(_quote_id(c) for c in current.columns)
    conn.execute(f"DROP TABLE {FTS_TABLE}")
    conn.execute(
        f"CREATE VIRTUAL TABLE {FTS_TABLE} USING fts5({columns}, content = 'chunks', "
        f"content_rowid = 'rowid', tokenize = '{spec}')"
    )
    if rank is not None:
        conn.execute(
            f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rank) VALUES ('rank', ?)", (str(rank[0]),)
        )
    conn.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('rebuild')")
    return True


def _weights(conn: sqlite3.Connection, columns: int) -> tuple[float, ...]:
    """The column weights of the table's configured rank, ``bm25(w0, w1, …)``; FTS5 weighs
    a column without one 1.0."""
    row = conn.execute(f"SELECT v FROM {FTS_TABLE}_config WHERE k = 'rank'").fetchone()
    text = "bm25()" if row is None else str(row[0])
    match = _RANK.match(text)
    if match is None:
        raise KeywordIndexUnavailable(f"the full-text rank is {text!r}, not bm25")
    given = [float(x) for x in match.group(1).split(",") if x.strip()]
    return tuple((given + [1.0] * columns)[:columns])


def fts_state(conn: sqlite3.Connection) -> KeywordState:
    """The store's chunk generation, the highest chunk rowid and FTS5's averages record, read in
    one statement: one cheap query, and one version of the store even outside a read
    transaction."""
    generation, max_rowid, averages = conn.execute(
        f"""SELECT (SELECT CAST(value AS INTEGER) FROM settings WHERE key = ?),
                   (SELECT max(rowid) FROM chunks),
                   (SELECT block FROM {FTS_TABLE}_data WHERE id = 1)""",
        (CHUNK_GENERATION_KEY,),
    ).fetchone()
    docs, totals = decode_averages(bytes(averages) if averages else b"")
    return KeywordState(
        generation=int(generation or 0), max_rowid=int(max_rowid or 0), docs=docs, totals=totals
    )


def decode_averages(blob: bytes) -> tuple[int, tuple[int, ...]]:
    """The SQLite varints of FTS5's averages record: (row count, totals per column)."""
    values: list[int] = []
    at = 0
    while at < len(blob):
        value = 0
        for i in range(9):
            if at >= len(blob):
                raise KeywordIndexUnavailable("truncated varint in the averages record")
            byte = blob[at]
            at += 1
            if i == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        values.append(value)
    if not values:
        return 0, ()
    return values[0], tuple(values[1:])


def chunk_rows(
    conn: sqlite3.Connection, *, above: int = 0, upto: int | None = None
) -> list[tuple[int, str]]:
    """(rowid, id) of the chunks with ``above`` < rowid ≤ ``upto``, ascending."""
    sql = "SELECT rowid, id FROM chunks WHERE rowid > ? AND rowid <= ? ORDER BY rowid"
    params = (above, (1 << 63) - 1 if upto is None else upto)
    return [(int(r[0]), str(r[1])) for r in conn.execute(sql, params)]


def read_postings(
    conn: sqlite3.Connection,
    vocab: str,
    rowids: IntArray,
    columns: Sequence[str],
    weights: Sequence[float],
) -> Postings:
    """Every token instance of an ``instance`` vocabulary table, aggregated per (term,
    document): frequencies weighted by column, and token counts per (document, column).
    ``rowids`` (ascending) are the documents; an instance of any other rowid is an error."""
    ncols = len(columns)
    case = " ".join(f"WHEN ? THEN {i}" for i in range(ncols))
    cursor = conn.execute(
        f"""SELECT term, count(*), group_concat(doc * {ncols} + CASE col {case} END)
            FROM {vocab} GROUP BY term""",
        tuple(columns),
    )
    n = len(rowids)
    weight_of = np.asarray(weights, dtype=np.float64)
    terms: list[str] = []
    lengths = np.zeros(n * ncols, np.int64)
    parts: list[tuple[IntArray, IntArray, np.ndarray]] = []
    while batch := cursor.fetchmany(_BATCH):
        base = len(terms)
        terms.extend(str(r[0]) for r in batch)
        counts = np.fromiter((r[1] for r in batch), np.int64, len(batch))
        codes = np.fromstring(",".join(r[2] for r in batch), dtype=np.int64, sep=",")
        if len(codes) != int(counts.sum()):
            raise KeywordIndexUnavailable("the vocabulary scan returned a malformed list")
        term = np.repeat(np.arange(base, base + len(batch), dtype=np.int64), counts)
        rowid, col = np.divmod(codes, ncols)
        position = np.searchsorted(rowids, rowid)
        inside = np.minimum(position, max(n - 1, 0))
        if len(codes) and (n == 0 or bool((rowids[inside] != rowid).any())):
            raise KeywordIndexUnavailable(
                "the full-text index holds a row the chunks table does not"
            )
        cell = position * ncols + col
        lengths += np.bincount(cell, minlength=n * ncols)
        key = term * n + position
        if bool((np.diff(key) < 0).any()):
            order = np.argsort(key, kind="stable")
            key, term, position, col = key[order], term[order], position[order], col[order]
        starts = np.concatenate([[0], np.flatnonzero(np.diff(key)) + 1])
        freq = np.add.reduceat(weight_of[col], starts) if len(starts) and len(key) else np.empty(0)
        parts.append((term[starts], position[starts], freq))
    if parts:
        term_all = np.concatenate([p[0] for p in parts])
        doc_all = np.concatenate([p[1] for p in parts])
        freq_all = np.concatenate([p[2] for p in parts]).astype(np.float64)
    else:
        term_all = doc_all = np.empty(0, np.int64)
        freq_all = np.empty(0, np.float64)
    return Postings(
        terms=terms, term=term_all, doc=doc_all, freq=freq_all, lengths=lengths.reshape(n, ncols)
    )


class FtsTerms:
    """FTS5's own postings and tokenizer, read over TEMP tables on the store's connection.

    One per store: the TEMP tables it fills are the connection's, so filling them is
    serialised here, whoever asks.
    """

    def __init__(self, conn: sqlite3.Connection, schema: KeywordSchema) -> None:
        self.conn = conn
        self.schema = schema
        self._phrases: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._ready = False
        self._query_conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _prepare(self) -> None:
        if self._ready:
            return
        columns = ", ".join(_quote_id(c) for c in self.schema.columns)
        tokenize = self.schema.tokenizer.replace("'", "''")
        # Made anew: tables left on this connection by an earlier reader may be of another
        # tokenizer (the full-text table declared again since).
        for table in (_TEXT_VOCAB, f"temp.{_TEXT}", _VOCAB):
            self.conn.execute(f"DROP TABLE IF EXISTS {table}")
        self.conn.execute(
            f"CREATE VIRTUAL TABLE {_VOCAB} USING fts5vocab(main, {FTS_TABLE}, instance)"
        )
        self.conn.execute(
            f"CREATE VIRTUAL TABLE temp.{_TEXT} "
            f"USING fts5({columns}, content='', tokenize='{tokenize}')"
        )
        self.conn.execute(
            f"CREATE VIRTUAL TABLE {_TEXT_VOCAB} USING fts5vocab(temp, {_TEXT}, instance)"
        )
        self._ready = True

    def postings(self, above: int) -> KeywordRows:
        """The chunks with a rowid above ``above`` and their postings: read from
        ``chunks_fts`` itself for every chunk (``above`` 0), tokenized again otherwise (the
        vocabulary table cannot be read for some rows only)."""
        weights = self.schema.weights
        with self._lock:
            self._prepare()
            rows = chunk_rows(self.conn, above=above)
            rowids = np.asarray([r[0] for r in rows], dtype=np.int64)
            ids = [r[1] for r in rows]
            if above <= 0:
                postings = read_postings(self.conn, _VOCAB, rowids, self.schema.columns, weights)
                return KeywordRows(rowids, ids, postings)
            if not rows:
                return KeywordRows(rowids, ids, Postings.empty(len(self.schema.columns)))
            columns = ", ".join(_quote_id(c) for c in self.schema.columns)
            self.conn.execute(
                f"""INSERT INTO temp.{_TEXT} (rowid, {columns})
                    SELECT rowid, {columns} FROM main.chunks WHERE rowid > ?""",
                (above,),
            )
            try:
                postings = read_postings(
                    self.conn, _TEXT_VOCAB, rowids, self.schema.columns, weights
                )
            finally:
                self._clear()
            return KeywordRows(rowids, ids, postings)

    def _query_side(self) -> sqlite3.Connection:
        """Where query terms are tokenized: a private in-memory database when the tokenizer
        is one FTS5 builds in, so that tokenizing a query writes nothing on the store's
        connection (its change counter keys caches of the store); the store's connection
        otherwise (a tokenizer registered on it exists only there)."""
        if self._query_conn is not None:
            return self._query_conn
        self._prepare()
        if self.schema.tokenizer.split()[0].lower() not in _BUILT_IN_TOKENIZERS:
            self._query_conn = self.conn
            return self.conn
        conn = sqlite3.connect(":memory:", check_same_thread=False)
        columns = ", ".join(_quote_id(c) for c in self.schema.columns)
        tokenize = self.schema.tokenizer.replace("'", "''")
        conn.execute(
            f"CREATE VIRTUAL TABLE temp.{_TEXT} "
            f"USING fts5({columns}, content='', tokenize='{tokenize}')"
        )
        conn.execute(f"CREATE VIRTUAL TABLE {_TEXT_VOCAB} USING fts5vocab(temp, {_TEXT}, instance)")
        weakref.finalize(self, conn.close)
        self._query_conn = conn
        return conn

    def phrases(self, terms: Sequence[str]) -> list[tuple[str, ...]]:
        """The tokens FTS5 makes of each term, in order: what each quoted term of a MATCH
        expression becomes (one token, a phrase of several, or nothing)."""
        with self._lock:
            missing = list(dict.fromkeys(t for t in terms if t not in self._phrases))
            if missing:
                self._tokenize(missing)
            out = []
            for term in terms:
                self._phrases.move_to_end(term)
                out.append(self._phrases[term])
            # Evicted only now: a query of more new words than the cache holds would
            # otherwise lose the first of its own before they are read.
            while len(self._phrases) > _QUERY_CACHE:
                self._phrases.popitem(last=False)
            return out

    def _tokenize(self, missing: list[str]) -> None:
        conn = self._query_side()
        first = self.schema.columns[0]
        conn.executemany(
            f"INSERT INTO temp.{_TEXT} (rowid, {_quote_id(first)}) VALUES (?, ?)",
            list(enumerate(missing, start=1)),
        )
        try:
            found: dict[int, list[str]] = {}
            for doc, term in conn.execute(
                f"SELECT doc, term FROM {_TEXT_VOCAB} ORDER BY doc, offset"
            ):
                found.setdefault(int(doc), []).append(str(term))
        finally:
            self._clear(conn)
        for i, term in enumerate(missing, start=1):
            self._phrases[term] = tuple(found.get(i, ()))

    def _clear(self, conn: sqlite3.Connection | None = None) -> None:
        conn = conn or self.conn
        conn.execute(f"INSERT INTO temp.{_TEXT} ({_TEXT}) VALUES ('delete-all')")


def _quote_id(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
