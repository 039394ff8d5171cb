"""The graph leg: entities named in the query, and the nodes that mention them.

Query words and word runs (up to three) are tried as canonical ids of the kinds people type
(``person:alice chen``, ``topic:redis``, ``tag:release``, ``handle:bob``, ``note:…``,
``channel:…``), and addresses, URLs, handles and hashtags are taken as the ingest extracts
them. Each entity found weighs its inverse document frequency, ``log(1 + N / df)``; entities
mentioned by more than ``hub_fraction`` of all nodes are hubs and skipped. A node scores the
sum of the weights of the query entities it mentions.
"""

from __future__ import annotations

import math
import re

from stratamem.entities.extract import canonical, text_mentions
from stratamem.entities.stopwords import STOPWORDS
from stratamem.store.base import Store
from stratamem.types import Filters

_WORD = re.compile(r"[\w@#.+-]+")
_KINDS = ("person", "topic", "tag", "handle", "note", "channel")


def query_entity_candidates(query: str) -> list[str]:
    """Canonical ids the query could be naming, most specific (longest) first."""
    words = [w.strip(".,;:!?\"'()[]") for w in _WORD.findall(query)]
    words = [w for w in words if w]
    found: dict[str, None] = {}
    for mention in text_mentions(query):
        found.setdefault(mention.entity_id)
    for size in (3, 2, 1):
        for start in range(len(words) - size + 1):
            run = words[start : start + size]
            if run[0].lower() in STOPWORDS or run[-1].lower() in STOPWORDS:
                continue
            if size == 1 and len(run[0]) < 3:
                continue
            phrase = " ".join(run)
            for kind in _KINDS:
                found.setdefault(canonical(kind, phrase.lstrip("@#")))
    return list(found)


def entity_weights(store: Store, candidates: list[str], *, hub_fraction: float) -> dict[str, float]:
    """The idf weight of each candidate the store knows, hubs left out."""
    frequencies = store.entity_frequencies(candidates)
    if not frequencies:
        return {}
    return idf_weights(frequencies, store.chunk_count(), hub_fraction=hub_fraction)


def idf_weights(
    frequencies: dict[str, int], chunks: int, *, hub_fraction: float
) -> dict[str, float]:
    """``log(1 + N / df)`` for each entity mentioned by ``df`` of the ``chunks`` nodes, hubs
    left out."""
    total = max(chunks, 1)
    hub = max(2.0, hub_fraction * total)
    return {entity: math.log(1.0 + total / df) for entity, df in frequencies.items() if df <= hub}


def graph_leg(
    store: Store, query: str, filters: Filters, limit: int, *, hub_fraction: float = 0.05
) -> tuple[dict[str, float], dict[str, float]]:
    """(node → score, matched entity → weight)."""
    weights = entity_weights(store, query_entity_candidates(query), hub_fraction=hub_fraction)
    if not weights:
        return {}, {}
    return store.nodes_by_entities(weights, filters, limit), weights
