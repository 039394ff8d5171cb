"""FTS5's own ranking of a store's chunks, on either backend: what the keyword tests compare
the sparse index with.

A SQLite store answers from its ``chunks_fts`` table. A store on PostgreSQL has no FTS5
table, so its chunks (rowids, text and titles as stored) are copied into one declared as the
SQLite store declares ``chunks_fts`` (same columns, rank and tokenizer) in an in-memory
database, and that one answers: the scores a SQLite store of the same rows gives.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager

import stratamem
from stratamem.retrieval.query import match_expression
from stratamem.store.sqlite.fts_terms import TOKENIZERS


@contextmanager
def fts5_index(memory: stratamem.Memory) -> Iterator[sqlite3.Connection]:
    """A connection on which ``chunks_fts`` indexes the store's chunks as they are now."""
    store = memory.store
    if store.name == "sqlite":
        yield store.conn  # type: ignore[misc]
        return
    with closing(sqlite3.connect(":memory:")) as conn:
        conn.execute(
            "CREATE TABLE chunks (rowid INTEGER PRIMARY KEY, id TEXT, content TEXT, title TEXT)"
        )
        conn.execute(
            f"""CREATE VIRTUAL TABLE chunks_fts USING fts5(
                    content, title, content = 'chunks', content_rowid = 'rowid',
                    tokenize = '{TOKENIZERS[memory.indexes.keyword_tokenizer()]}')"""
        )
        conn.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('rank', 'bm25(1.0, 0.6)')")
        rows = store.conn.execute("SELECT rowid, id, content, title FROM chunks ORDER BY rowid")
        conn.executemany("INSERT INTO chunks VALUES (?, ?, ?, ?)", [tuple(r) for r in rows])
        conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('rebuild')")
        yield conn


def fts5_top(memory: stratamem.Memory, query: str, k: int = 10) -> dict[str, float]:
    """The ``k`` best chunks for ``query`` by FTS5's rank: chunk id → BM25 score."""
    expression = match_expression(query)
    assert expression is not None
    with fts5_index(memory) as conn:
        rows = conn.execute(
            """SELECT c.id, f.rank FROM chunks_fts f JOIN chunks c ON c.rowid = f.rowid
               WHERE chunks_fts MATCH ? ORDER BY f.rank, f.rowid LIMIT ?""",
            (expression, k),
        ).fetchall()
    return {row[0]: -row[1] for row in rows}
