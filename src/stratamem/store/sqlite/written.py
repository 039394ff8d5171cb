"""What every write of chunks on SQLite ends with: one statement over the new rows, selected
by a condition the writer appends (their rowids or ids), for each thing derived from them.

- their text indexed in FTS5 (migration 18 dropped the insert trigger);
- their number added to their sources' ``source_counts`` (migration 24).

A row trigger would run each as a statement of its own per row: FTS5 flushes its pending
terms each time, and a count costs about 5 µs a chunk. Deletes are still followed by
triggers, which keep both.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Final

from stratamem.store.sqlite.keyword import FTS_INDEX

COUNT_WRITTEN: Final = """INSERT INTO source_counts (source_id, chunks)
    SELECT source_id, count(*) FROM chunks WHERE {where} GROUP BY source_id
    ON CONFLICT(source_id) DO UPDATE SET chunks = chunks + excluded.chunks"""


def chunks_written(conn: sqlite3.Connection, where: str, params: Sequence[object]) -> None:
    """Index and count the chunks ``where`` selects, which were just written."""
    conn.execute(FTS_INDEX + where, params)
    conn.execute(COUNT_WRITTEN.format(where=where), params)
