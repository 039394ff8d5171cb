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
once each: a search whose scores all differ reads none. Where a ranking keeps only its first
``n`` (the head of the fused scores, the expansion's seeds, the graph leg's limit), only those
that score at least the ``n``-th highest score are read: on a corpus that repeats each text
~20 times, about 4 keys a search instead of about 200.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from stratamem.retrieval.fusion import at_least_top
from stratamem.store.base import Store
from stratamem.store.sources import ChunkHead

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

    def learn(self, heads: Mapping[str, ChunkHead]) -> None:
        """Take the keys of chunks read for another purpose: a later :meth:`cover` does not
        read them again."""
        for node, head in heads.items():
            self._keys[node] = (head.content_sha256, head.seq)
            self._asked.add(node)

    def cover(self, *scores: Mapping[str, float], top: int | None = None) -> None:
        """Read the keys of the nodes of each of ``scores`` that share their score with
        another node of the same mapping (not read before). With ``top``, only of those that
        can be among a mapping's first ``top``: the nodes scoring at least its ``top``-th
        highest score (any node scoring less ranks after ``top`` others whatever its key)."""
        tied: set[str] = set()
        for mapping in scores:
            # A node ties only with nodes of its own score, so those below the cut are not
            # counted.
            nodes = list(mapping) if top is None else at_least_top(mapping, top)
            counts = Counter(mapping[node] for node in nodes)
            tied.update(node for node in nodes if counts[mapping[node]] > 1)
        wanted = sorted(tied - self._asked)
        if wanted:
            self._asked.update(wanted)
            self._keys.update(self._store.content_keys(wanted))
