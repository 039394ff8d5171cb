"""How much a leaf matters: the salience a seal takes the maximum of and a leaf hit carries."""

from __future__ import annotations

from collections.abc import Sequence

TIER0_TAGS = frozenset({"pinned", "decision"})


def leaf_score(tags: Sequence[str], entity_count: int) -> float:
    """A leaf's salience in [0, 1]: pinned and decision items score 1; otherwise it grows with
    the distinct entities the leaf names (a message naming people, projects and dates matters
    more than "ok"), from 0.25 for none to 1 at five or more."""
    if TIER0_TAGS.intersection(tags):
        return 1.0
    return min(1.0, 0.25 + 0.15 * entity_count)
