"""Turning tree reads into :class:`RetrievalHit` values, and the shared semantic rerank.

The rerank decorates each hit with the cosine similarity between the query and the hit's stored
vector (chunk vectors for leaves, summary vectors for summaries, of the embedder's model only)
and sorts by it, newest end time breaking ties. Given ``evidence`` (node id → [0, 1], see
:func:`leaf_evidence`), the score is ``(1 − w) · cosine + w · evidence``: a summary also ranks
by the best search hit among the leaves under it, which matters because the model reads only
the first 256 word pieces of a summary. Hits with neither sort last in the order they came. If
the query cannot be embedded the other signal (or the incoming order) stands: a primitive
never fails because a model is unavailable.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

import numpy as np

from stratamem.embed.base import Embedder
from stratamem.store.base import Store
from stratamem.store.trees import TreeLeaf, TreeSummary
from stratamem.store.vectors import unpack_vectors
from stratamem.tree.salience import leaf_score
from stratamem.types import NodeKind, RetrievalHit, TreeKind

log = logging.getLogger(__name__)

EVIDENCE_WEIGHT = 0.5


def summary_hit(summary: TreeSummary, *, score: float | None = None) -> RetrievalHit:
    """A hit from a summary with its tree's scope and kind; its score is the summary's
    salience unless ``score`` is given."""
    node = summary.node
    return RetrievalHit(
        node_id=node.id,
        node_kind=NodeKind.SUMMARY,
        tree_id=node.tree_id,
        tree_kind=summary.tree_kind,
        tree_scope=summary.scope,
        level=node.level,
        content=node.content,
        entities=node.entities,
        topics=node.topics,
        time_start=node.time_start,
        time_end=node.time_end,
        score=node.score if score is None else score,
        child_ids=node.child_ids,
        source_ref=None,
        source_id=node.source_id,
    )


def leaf_hits(store: Store, leaves: Sequence[TreeLeaf]) -> list[RetrievalHit]:
    """Hits from chunks with their scope and tree id (empty while unsealed); entities come in
    one batched read, the score is the leaf's salience. A leaf without an end time ends at
    its start."""
    mentions = store.mentions_of([leaf.chunk.id for leaf in leaves])
    hits = []
    for leaf in leaves:
        chunk = leaf.chunk
        entities = tuple(mentions.get(chunk.id, ()))
        hits.append(
            RetrievalHit(
                node_id=chunk.id,
                node_kind=NodeKind.LEAF,
                tree_id=leaf.tree_id,
                tree_kind=TreeKind.SOURCE,
                tree_scope=leaf.scope,
                level=0,
                content=chunk.content,
                entities=entities,
                topics=chunk.tags,
                time_start=chunk.time_start,
                time_end=chunk.time_start if chunk.time_end is None else chunk.time_end,
                score=leaf_score(chunk.tags, len(entities)),
                source_ref=chunk.source_ref,
                source_id=chunk.source_id,
                author=chunk.author,
                title=chunk.title,
            )
        )
    return hits


def rerank(
    store: Store,
    hits: Sequence[RetrievalHit],
    query: str | None,
    embedder: Embedder | None,
    *,
    evidence: Mapping[str, float] | None = None,
    evidence_weight: float = EVIDENCE_WEIGHT,
) -> list[RetrievalHit]:
    """``hits`` ranked by their relevance to ``query`` (see the module docstring)."""
    if not query or not query.strip() or not hits:
        return list(hits)
    similarities = _similarities(store, hits, query, embedder)
    if not similarities and not evidence:
        return list(hits)
    scored: list[tuple[float, float, int, RetrievalHit]] = []
    rest: list[RetrievalHit] = []
    for position, hit in enumerate(hits):
        similarity = similarities.get(hit.node_id)
        found = None if evidence is None else evidence.get(hit.node_id)
        if similarity is None and found is None:
            rest.append(hit)
            continue
        if evidence is None:
            score = float(similarity or 0.0)
        else:
            score = (1 - evidence_weight) * (similarity or 0.0) + evidence_weight * (found or 0.0)
        scored.append((-score, -_ts(hit.time_end), position, hit))
    scored.sort(key=lambda item: item[:3])
    return [replace(hit, score=-neg) for neg, _, _, hit in scored] + rest


def _similarities(
    store: Store, hits: Sequence[RetrievalHit], query: str, embedder: Embedder | None
) -> dict[str, float]:
    """Cosine between the query and each hit's stored vector of the embedder's model."""
    if embedder is None:
        return {}
    try:
        q = np.asarray(embedder.embed_batch([query], role="query")[0], dtype=np.float32)
    except Exception as exc:
        log.warning("query could not be embedded, keeping the incoming order: %s", exc)
        return {}
    model = embedder.spec.signature
    leaves = [h.node_id for h in hits if h.node_kind is NodeKind.LEAF]
    summaries = [h.node_id for h in hits if h.node_kind is NodeKind.SUMMARY]
    blobs = {**store.vectors_of(model, leaves), **store.trees.vectors(model, summaries)}
    out: dict[str, float] = {}
    for node_id, blob in blobs.items():
        if len(blob) in (2 * len(q), 4 * len(q)):
            out[node_id] = float(unpack_vectors([blob], len(q))[0] @ q)
    return out


def leaf_evidence(store: Store, scored_leaves: Mapping[str, float]) -> dict[str, float]:
    """Spread leaf scores up their trees: each leaf keeps its score divided by the best one,
    and each summary gets the best normalised score among the leaves under it. One batched
    read per level."""
    top = max(scored_leaves.values(), default=0.0)
    if top <= 0:
        return {}
    out = {leaf: max(0.0, score / top) for leaf, score in scored_leaves.items()}
    frontier = store.trees.parents_of_chunks(list(out))
    while frontier:
        raised: dict[str, float] = {}
        for child, parent in frontier.items():
            raised[parent] = max(raised.get(parent, 0.0), out[child])
        for parent, score in raised.items():
            out[parent] = max(out.get(parent, 0.0), score)
        frontier = store.trees.parents_of_summaries(list(raised))
    return out


def _ts(value: datetime | None) -> float:
    return float("-inf") if value is None else value.timestamp()
