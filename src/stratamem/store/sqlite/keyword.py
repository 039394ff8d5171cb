"""The full-text index of the SQLite store (the ``KeywordStore`` role): FTS5's BM25 ranking
with snippets, and its terms and statistics for the in-process BM25 index (read by
``fts_terms``). Every query joins ``sources`` and applies :func:`filter_sql` inside the SQL,
so filtering always happens before the limit."""

from __future__ import annotations

import heapq
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING

from stratamem.errors import KeywordIndexUnavailable
from stratamem.store.dialect import Dialect
from stratamem.store.keyword import KeywordRows, KeywordSchema, KeywordState
from stratamem.store.sqlite.fts_terms import (
    FtsTerms,
    chunk_rows,
    fts_schema,
    fts_state,
    replace_fts_table,
    tokenizer_name,
    unavailable_on_error,
)
from stratamem.store.tables.filters import gate_sql
from stratamem.store.tables.hits import keyword_hit
from stratamem.types import Filters, RetrievalHit

FTS_INDEX = """INSERT INTO chunks_fts(rowid, content, title)
    SELECT rowid, content, title FROM chunks WHERE """
"""Indexes in FTS5 the chunks a condition appended to it selects: every write of chunks ends
with it (see store/sqlite/written.py)."""


class KeywordTables:
    """The keyword half of :class:`~stratamem.store.sqlite.store.SQLiteStore`."""

    conn: sqlite3.Connection
    dialect: Dialect

    if TYPE_CHECKING:

        def visible_ids(self) -> list[str] | None: ...

        def allowed_rowids(self, filters: Filters) -> list[int] | None: ...

        def mentions_of(self, node_ids: Sequence[str]) -> dict[str, list[str]]: ...

        def in_transaction(self) -> bool: ...

        def transaction(self) -> AbstractContextManager[sqlite3.Connection]: ...

        def read_snapshot(self) -> AbstractContextManager[None]: ...

    # -- terms and statistics for the in-process BM25 index -----------------------------------

    _fts_reader: tuple[int, FtsTerms] | None = None

    @property
    def _fts_terms(self) -> FtsTerms:
        """Made on first use and again whenever the database's schema changed (the full-text
        table declared anew with another tokenizer, here or by another connection); not kept
        when the schema cannot be read, so it is asked again."""
        with unavailable_on_error():
            version = int(self.conn.execute("PRAGMA schema_version").fetchone()[0])
            held = self._fts_reader
            if held is not None and held[0] == version:
                return held[1]
            reader = FtsTerms(self.conn, fts_schema(self.conn))
            self._fts_reader = (version, reader)
            return reader

    def keyword_tokenizer(self) -> str:
        return tokenizer_name(self._fts_terms.schema.tokenizer)

    def set_keyword_tokenizer(self, name: str) -> bool:
        with self.transaction(), unavailable_on_error():
            changed = replace_fts_table(self.conn, name)
        self._fts_reader = None
        return changed

    def keyword_schema(self) -> KeywordSchema:
        return self._fts_terms.schema

    def keyword_state(self) -> KeywordState:
        with unavailable_on_error():
            return fts_state(self.conn)

    def keyword_rows(self, *, above: int = 0, upto: int | None = None) -> list[tuple[int, str]]:
        with unavailable_on_error():
            return chunk_rows(self.conn, above=above, upto=upto)

    def keyword_postings(self, *, above: int = 0) -> KeywordRows:
        terms = self._fts_terms
        with unavailable_on_error():
            return terms.postings(above)

    def keyword_phrases(self, terms: Sequence[str]) -> list[tuple[str, ...]]:
        reader = self._fts_terms
        with unavailable_on_error():
            return reader.phrases(terms)

    @contextmanager
    def keyword_snapshot(self) -> Iterator[None]:
        """A read transaction (the caller's read snapshot when one is open): FTS5's tables,
        ``chunks`` and the settings as of one commit."""
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
        """Leaves matching an FTS5 expression, best BM25 first (ties by content, then id), and
        the match count (``count=False`` skips counting past the limit and reports what was
        returned).

        The ranking runs on the FTS index alone (its ``rank`` is bm25 with the column weights set
        by the schema), restricted by rowid to the admitted chunks when a filter or a lock is in
        force; only the top ``limit`` rows are then read from ``chunks``.
        """
        admitted = self.allowed_rowids(filters)
        if admitted is None:
            ranked = self.conn.execute(
                "SELECT rowid, rank FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rank LIMIT ?",
                (expression, limit),
            ).fetchall()
            matched = len(ranked)
        else:
            # A rowid constraint would make FTS5 rerun the whole query once per admitted rowid;
            # reading every match's (rowid, rank) and keeping the admitted ones is far cheaper.
            allowed = set(admitted)
            everything = self.conn.execute(
                "SELECT rowid, rank FROM chunks_fts WHERE chunks_fts MATCH ?", (expression,)
            ).fetchall()
            kept = [row for row in everything if row[0] in allowed]
            matched = len(kept)
            ranked = heapq.nsmallest(limit, kept, key=lambda row: (row[1], row[0]))
        if not ranked:
            return [], 0
        hits = self.keyword_hits(
            expression, [(rowid, -float(rank)) for rowid, rank in ranked], snippets=snippets
        )
        total = len(hits)
        if count and admitted is not None:
            total = matched
        elif count and len(ranked) >= limit:
            total = int(
                self.conn.execute(
                    "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", (expression,)
                ).fetchone()[0]
            )
        return hits, total

    def keyword_hits(
        self,
        expression: str,
        ranked: Sequence[tuple[int, float]],
        *,
        snippets: bool = True,
    ) -> list[RetrievalHit]:
        """Hits for chunks already ranked, as (rowid, BM25 score): best first, ties by content
        digest, place and id, each with a snippet of where ``expression`` matches it."""
        if not ranked:
            return []
        rowids = [r[0] for r in ranked]
        marks = ",".join("?" * len(rowids))
        gate, params = gate_sql(self.dialect, self.visible_ids(), probe=True)
        rows = {
            row["rowid"]: row
            for row in self.conn.execute(
                f"""SELECT c.rowid, c.id, c.content, c.title, c.author, c.ts_start, c.ts_end,
                           c.tags, c.source_ref, c.source_id, s.scope, c.content_sha256, c.seq
                    FROM chunks c JOIN sources s ON s.id = c.source_id
                    WHERE c.rowid IN ({marks}) AND {gate}""",
                (*rowids, *params),
            )
        }
        snips: dict[int, str] = {}
        if snippets:
            snips = dict(
                self.conn.execute(
                    f"""SELECT rowid, snippet(chunks_fts, 0, '[', ']', '…', 24) FROM chunks_fts
                        WHERE chunks_fts MATCH ? AND rowid IN ({marks})""",
                    (expression, *rowids),
                ).fetchall()
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
