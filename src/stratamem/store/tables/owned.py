"""Which rows of the derived tables belong to a source, found through its chunks.

A source's entity mentions, co-mention edges and chunk vectors carry its id, but SQLite keeps
no index on it (migration 19): an index on ``source_id`` of a WITHOUT ROWID table repeats the
whole key of every row. They are found instead through the source's chunks
(``chunks_source_seq``), the mentions by their node (``entity_index_node``) and the edges by
their first entity (the edges' primary key): an edge (a, b) of a source exists only while a
chunk of it mentions both, so ``a`` is among its mentions. Each clause has the slot
``{source}`` for the dialect's named parameter (bound from a dict), and the rows it names
must be deleted in the order edges, mentions, vectors, chunks.
"""

from __future__ import annotations

from stratamem.store.dialect import Dialect

CHUNKS_OF_SOURCE = "SELECT id FROM chunks WHERE source_id = {source}"

MENTIONS_OF_SOURCE = f"source_id = {{source}} AND node_id IN ({CHUNKS_OF_SOURCE})"
"""The ``entity_index`` rows of source ``{source}``."""

EDGES_OF_SOURCE = (
    "source_id = {source} AND a IN ("
    f"SELECT entity_id FROM entity_index WHERE {MENTIONS_OF_SOURCE})"
)
"""The ``entity_edges`` rows of source ``{source}``."""

VECTORS_OF_SOURCE = f"node_id IN ({CHUNKS_OF_SOURCE})"
"""The ``embeddings`` rows of source ``{source}``."""


def delete_derived(d: Dialect) -> list[str]:
    """The statements that delete a source's edges, mentions and vectors, in that order (each
    needs the rows the next one deletes), with the parameter ``source`` bound from a dict."""
    source = d.named("source")
    return [
        f"DELETE FROM {table} WHERE {where.format(source=source)}"
        for table, where in (
            ("entity_edges", EDGES_OF_SOURCE),
            ("entity_index", MENTIONS_OF_SOURCE),
            ("embeddings", VECTORS_OF_SOURCE),
        )
    ]
