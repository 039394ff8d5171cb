"""The order of candidates of equal score: by what they hold, not by their ids.

A chunk's id hashes its source id, and a source id names the source's scope, which comes from
the folder or file name it was read from: the same notes ingested from ``~/notes`` and from
``/backup/notes`` get different ids. Ties broken by id would then rank the same content
differently in the two stores. So every ranking of the search breaks its ties by

    (the chunk's content digest, its place in its source, its id)

the first two the same in every store that holds the chunk, the id last only to keep the order
total (two chunks of the same text at the same place of two sources). A node the store holds
no chunk for sorts by its id alone, before the chunks of its score.

The keys are read from the store only for candidates that share their score with another,
once each: a search whose scores all differ reads none.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from stratamem.store.base import Store
from stratamem.types import Chunk

TieKey = tuple[str, int, str]


def by_id(node: str) -> TieKey:
    """The tie key of a node by its id alone (what :class:`TieOrder` falls back to)."""
    return ("", -1, node)


class TieOrder:
    """Content-stable tie keys for one search, read from ``store`` as rankings need them."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._keys: dict[str, tuple[str, int]] = {}
        self._asked: set[str] = set()

    def key(self, node: str) -> TieKey:
        """(content digest, place in its source, id); see the module's docstring."""
        found = self._keys.get(node)
        return ("", -1, node) if found is None else (found[0], found[1], node)

    def learn(self, chunks: Iterable[Chunk]) -> None:
        """Take the keys of chunks read for another purpose: a later :meth:`cover` does not
        read them again."""
        for chunk in chunks:
            self._keys[chunk.id] = (chunk.content_sha256, chunk.seq)
            self._asked.add(chunk.id)

    def cover(self, *scores: Mapping[str, float]) -> None:
        """Read the keys of the nodes of each of ``scores`` that share their score with
        another node of the same mapping (not read before)."""
        tied: set[str] = set()
        for mapping in scores:
            counts = Counter(mapping.values())
            tied.update(node for node, value in mapping.items() if counts[value] > 1)
        wanted = sorted(tied - self._asked)
        if wanted:
            self._asked.update(wanted)
            self._keys.update(self._store.content_keys(wanted))
