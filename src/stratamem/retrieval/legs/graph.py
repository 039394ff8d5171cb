"""The graph leg: entities named in the query, and the nodes that mention them.

Query words and word runs (up to three) are tried as canonical ids of the kinds people type
(``person:alice chen``, ``topic:redis``, ``tag:release``, ``handle:bob``, ``note:…``,
``channel:…``), and addresses, URLs, handles and hashtags are taken as the ingest extracts
them. Each entity found weighs its inverse document frequency, ``log(1 + N / df)``; entities
mentioned by more than ``hub_fraction`` of all nodes are hubs and skipped. A node scores the
sum of the weights of the query entities it mentions (``graph_mode="idf"``, the default).

``graph_mode="bm25"`` reads the co-mention graph too. Each query entity brings its
:data:`NEIGHBOURS` strongest co-mentioned entities, each weighing
``NEIGHBOUR_WEIGHT · w / (w + 1)`` for an edge of weight ``w`` (a direct match weighs 1), and
a node scores the BM25 sum over the entities it mentions: ``q · idf · (k1 + 1) /
(tf + k1 · (1 − b + b · len / avglen))``, where ``idf = log(1 + (N − df + 0.5) / (df + 0.5))``,
``tf`` is 1 (a chunk names an entity once in the index) and ``len`` is the number of entities
the node mentions, ``avglen`` their mean over the candidates. Candidates are the
:data:`POOL_FACTOR` × ``limit`` nodes with the highest summed ``q · idf``.

Each candidate brings the other ids of its entity (:func:`with_aliases`: the aliases its
sources state and the merges recorded), each weighed by its own frequency.

Both read only what the reader may see: frequencies, edges and mentions come from the store's
gated reads, so a hidden entity answers like an unknown one and an edge of a hidden source
brings no neighbour.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from stratamem.entities.extract import canonical, text_mentions
from stratamem.entities.stopwords import STOPWORDS
from stratamem.retrieval.ties import TieOrder
from stratamem.store.base import Store
from stratamem.types import Filters

_WORD = re.compile(r"[\w@#.+-]+")
_KINDS = ("person", "topic", "tag", "handle", "note", "channel")

#: The ways the leg can score: ``idf`` (direct matches only) and ``bm25`` (with neighbours).
GRAPH_MODES = ("idf", "bm25")
#: Neighbours read per query entity, strongest edges first.
NEIGHBOURS = 8
#: What a neighbour weighs at most against a direct match's 1.
NEIGHBOUR_WEIGHT = 0.25
#: Candidates rescored per result asked for (at least :data:`MIN_POOL`).
POOL_FACTOR = 4
MIN_POOL = 200
BM25_K1 = 1.2
BM25_B = 0.75


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


def with_aliases(store: Store, candidates: list[str]) -> list[str]:
    """``candidates`` with, after each, the other ids of its entity (see
    :mod:`stratamem.store.resolution`): a query naming ``maya`` finds the chunks that mention
    ``person:maya patel`` or her address where a source says they are one."""
    resolution = store.entity_resolution()
    if not resolution.canonical_of:
        return candidates
    found: dict[str, None] = {}
    for entity in candidates:
        found.setdefault(entity)
        if entity in resolution.canonical_of:
            for member in resolution.members(entity):
                found.setdefault(member)
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
    store: Store,
    query: str,
    filters: Filters,
    limit: int,
    *,
    hub_fraction: float = 0.05,
    graph_mode: str = "idf",
) -> tuple[dict[str, float], dict[str, float]]:
    """(node → score, matched entity → weight); the matched entities are those the query
    names, never their neighbours."""
    if graph_mode not in GRAPH_MODES:
        raise ValueError(f"unknown graph_mode {graph_mode!r}; use {' or '.join(GRAPH_MODES)}")
    candidates = with_aliases(store, query_entity_candidates(query))
    weights = entity_weights(store, candidates, hub_fraction=hub_fraction)
    if not weights:
        return {}, {}
    if graph_mode == "bm25":
        return graph_bm25(store, weights, filters, limit, hub_fraction=hub_fraction), weights
    return store.nodes_by_entities(weights, filters, limit), weights


def neighbourhood(
    store: Store, direct: Iterable[str], *, neighbours: int = NEIGHBOURS
) -> dict[str, float]:
    """Query weight of each entity: 1 for ``direct`` ones, and for each one's ``neighbours``
    strongest co-mentioned entities ``NEIGHBOUR_WEIGHT · w / (w + 1)`` (the largest, where
    several query entities reach the same one). Edges are read through the store's gate."""
    seeds = sorted(direct)
    out = dict.fromkeys(seeds, 1.0)
    for entity in seeds:
        for other, weight in store.neighbours(entity, neighbours):
            if weight <= 0 or out.get(other, 0.0) >= 1.0:
                continue
            damped = NEIGHBOUR_WEIGHT * weight / (weight + 1.0)
            if damped > out.get(other, 0.0):
                out[other] = damped
    return out


def bm25_idf(df: int, total: int) -> float:
    return math.log(1.0 + (total - df + 0.5) / (df + 0.5))


def graph_bm25(
    store: Store,
    direct: Iterable[str],
    filters: Filters,
    limit: int,
    *,
    hub_fraction: float = 0.05,
    neighbours: int = NEIGHBOURS,
) -> dict[str, float]:
    """The ``limit`` best nodes by graph-BM25 over ``direct`` entities and their neighbours,
    ties by content (:mod:`~stratamem.retrieval.ties`)."""
    if limit <= 0:
        return {}
    query = neighbourhood(store, direct, neighbours=neighbours)
    frequencies = store.entity_frequencies(sorted(query))
    total = max(store.chunk_count(), 1)
    hub = max(2.0, hub_fraction * total)
    terms = {
        entity: query[entity] * bm25_idf(df, total)
        for entity, df in frequencies.items()
        if df <= hub
    }
    if not terms:
        return {}
    pool = store.nodes_by_entities(terms, filters, max(MIN_POOL, POOL_FACTOR * limit))
    if not pool:
        return {}
    mentions = store.mentions_of(sorted(pool))
    lengths = {node: max(len(mentions.get(node, ())), 1) for node in pool}
    average = sum(lengths.values()) / len(lengths)
    scores: dict[str, float] = {}
    for node in pool:
        norm = BM25_K1 * (1.0 - BM25_B + BM25_B * lengths[node] / average)
        saturation = (BM25_K1 + 1.0) / (1.0 + norm)
        scores[node] = saturation * sum(terms.get(e, 0.0) for e in mentions.get(node, ()))
    ties = TieOrder(store)
    ties.cover(scores, top=limit)
    ranked = sorted(scores.items(), key=lambda item: (-item[1], ties.key(item[0])))[:limit]
    return {node: score for node, score in ranked if score > 0}
