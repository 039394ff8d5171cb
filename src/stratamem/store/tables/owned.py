"""Which rows of the derived tables belong to a source, found through its chunks.

A source's entity mentions and chunk vectors carry its id, but SQLite keeps no index on it
(migration 19): an index on ``source_id`` of a WITHOUT ROWID table repeats the whole key of
every row. They are found instead through the source's chunks (``chunks_source_seq``), then
by node id (``entity_index_node``, the vectors' primary key). Each clause has the slot
``{source}`` for the dialect's named parameter (bound from a dict); the rows must go before
the chunks they are found through.
"""

from __future__ import annotations

from stratamem.store.dialect import Dialect

CHUNKS_OF_SOURCE = "SELECT id FROM chunks WHERE source_id = {source}"

MENTIONS_OF_SOURCE = f"source_id = {{source}} AND node_id IN ({CHUNKS_OF_SOURCE})"
"""The ``entity_index`` rows of source ``{source}``."""

VECTORS_OF_SOURCE = f"node_id IN ({CHUNKS_OF_SOURCE})"
"""The ``embeddings`` rows of source ``{source}``."""


def visible_mentions(gate: str) -> str:
    """A ``FROM`` clause of the mentions (``e``) in the sources (``s``) that pass ``gate``,
    reached from those sources through their chunks (``c``), so that a reader's count or
    search of mentions reads only the mentions of sources it may see."""
    return (
        f"sources s JOIN chunks c ON c.source_id = s.id AND {gate}"
        " JOIN entity_index e ON e.node_id = c.id"
    )


def delete_derived(d: Dialect) -> list[str]:
    """The statements that delete a source's mentions and vectors, with the parameter
    ``source`` bound from a dict: run before its chunks go."""
    source = d.named("source")
    return [
        f"DELETE FROM {table} WHERE {where.format(source=source)}"
        for table, where in (
            ("entity_index", MENTIONS_OF_SOURCE),
            ("embeddings", VECTORS_OF_SOURCE),
        )
    ]
