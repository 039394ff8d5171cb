"""``mem.entities``: merge and split entities by hand, and the history of both (see
:mod:`stratamem.entities.merges`)."""

from __future__ import annotations

from collections.abc import Sequence

from stratamem.api._core import Facet
from stratamem.entities import merges
from stratamem.entities.search import MentionCount, mention_counts, top_entities
from stratamem.types import EntityDecision, EntityMatch

__all__ = ["Entities"]


class Entities(Facet):
    """What resolution from the sources cannot infer: ``merge`` two ids of one person,
    ``split`` them again; every decision is recorded with who and when. And, for a
    browser of the entities, the most mentioned and one's mentions over time."""

    def top(self, *, kinds: Sequence[str] = (), limit: int = 50) -> list[EntityMatch]:
        """The most mentioned entities among the sources the reader may see, as
        ``mem.search_entities`` gives them (one per canonical id, its aliases listed);
        ``kinds`` keeps those one of whose ids is of such a kind; ``limit`` at most 100."""
        return top_entities(self._store, kinds=kinds, limit=limit)

    def mentions(self, entity_id: str) -> list[MentionCount]:
        """How often ``entity_id``'s entity (every id of it) is mentioned, per source and
        UTC day, in the sources the reader may see: oldest day first, mentions without a
        time last. An id no visible source names gives nothing."""
        return mention_counts(self._store, entity_id)

    def merge(self, entity_a: str, entity_b: str) -> EntityDecision:
        """Record that ``entity_a`` is ``entity_b`` (the canonical id); where a split keeps
        them apart, undo that split. A ``ValueError`` for an id merged with itself or with
        what is one entity with it already (a merge back is a cycle); ``NotFoundError`` for
        an id the store does not name."""
        self._owner_only("merge entities")
        return merges.merge(self._store, self._store, entity_a, entity_b)

    def split(self, entity_a: str, entity_b: str) -> EntityDecision:
        """Undo a merge between the two, or stop following the alias a source states
        between them; a ``ValueError`` where neither joins them."""
        self._owner_only("split entities")
        return merges.split(self._store, self._store, entity_a, entity_b)

    def history(self, *, entity_id: str | None = None, limit: int = 100) -> list[EntityDecision]:
        """Merges and splits, newest first (undone ones too); with ``entity_id``, those of
        its entity's ids only."""
        return merges.history(self._store, entity_id=entity_id, limit=limit)
