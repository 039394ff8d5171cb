"""Facts as retrieval hits: the :class:`~stratamem.types.RetrievalHit` shape every primitive
returns, so a fact can stand beside chunks and summaries in an agent's context.

A fact's hit is a node of kind ``fact``: its id is the fact's id, its content what the fact
says (:func:`~stratamem.memory.facts.fact_text`), its time range the fact's validity
(``time_end`` None: still true), its source and scope those of the source it belongs to. It is
in no tree (``tree_id`` empty, level 0). ``entities`` are the subject, and the object where it
is an entity. ``source_ref`` is the citation of its first piece of evidence, and ``explain``
holds the rest of the row: subject, predicate, object, origin, confidence, the transaction
times (``recorded_at``, ``expired_at``), the evidence node ids and their citations.
Evidence lies in the fact's own source, so whoever reads the fact reads its evidence too.

Evidence follows an item (:mod:`stratamem.retrieval.item_nodes`): an item's id, or a chunk id
an item had before it was edited, is cited as the chunk the item is derived into now; after
the item was removed, as the version the removal closed. ``explain["evidence_items"]`` says so
for each such piece of evidence: the item's ``id``, the ``version`` cited, its ``nodes`` now
and ``removed_at`` (None while the item stands). Removing an item retracts no fact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from stratamem.memory.facts import fact_text
from stratamem.memory.search import FactHit
from stratamem.retrieval import primitives
from stratamem.retrieval.item_nodes import ItemRef, item_refs
from stratamem.store.base import Store
from stratamem.store.facts import Fact
from stratamem.types import NodeKind, RetrievalHit, TreeKind, rfc3339

REASON = "fact"


def fact_hits(
    store: Store, found: Sequence[FactHit], *, scopes: Mapping[str, str] | None = None
) -> list[RetrievalHit]:
    """``found`` as hits, in their order, with their sources (``scopes``: source id → scope,
    read here when not given) and the citations of their evidence read in one batch."""
    if scopes is None:
        scopes = {s.id: s.scope for s in store.sources()}
    evidence = list(dict.fromkeys(node for hit in found for node in hit.fact.evidence))
    cites, items = evidence_cites(store, evidence)
    return [
        replace(
            fact_hit(h.fact, h.score, scopes.get(h.fact.source_id, ""), cites, items),
            relevance=h.relevance,
        )
        for h in found
    ]


def evidence_cites(
    store: Store, evidence: Sequence[str]
) -> tuple[dict[str, str | None], dict[str, list[ItemRef]]]:
    """The citations of evidence nodes that stand, by id; and for the rest, the items they
    name (see :func:`~stratamem.retrieval.item_nodes.item_refs`)."""
    if not evidence:
        return {}, {}
    standing = primitives.nodes(store, evidence, items=False)
    cites: dict[str, str | None] = {n.node_id: n.source_ref for n in standing}
    items = item_refs(store, [e for e in evidence if e not in cites])
    now = list(dict.fromkeys(n for refs in items.values() for r in refs for n in r.nodes[:1]))
    for node in primitives.nodes(store, now, items=False) if now else ():
        cites[node.node_id] = node.source_ref
    return cites, items


def fact_hit(
    fact: Fact,
    score: float,
    scope: str,
    cites: dict[str, str | None] | None = None,
    items: dict[str, list[ItemRef]] | None = None,
) -> RetrievalHit:
    """One fact as a hit; ``scope`` is its source's, ``cites`` the citations of evidence
    nodes by id (those missing are left out), ``items`` what the evidence that is no node
    names as items (see :func:`evidence_cites`)."""
    cites = cites or {}
    cited: dict[str, str | None] = {}
    followed: dict[str, dict[str, Any]] = {}
    for node in fact.evidence:
        if cites.get(node):
            cited[node] = cites[node]
            continue
        # An item's id may be held by several sources: the evidence lies in the fact's own.
        refs = (items or {}).get(node, ())
        ref = next((r for r in refs if r.now.source_id == fact.source_id), None)
        if ref is None:
            continue
        followed[node] = {
            "id": ref.now.id,
            "version": ref.standing,
            "nodes": list(ref.nodes),
            "removed_at": rfc3339(ref.now.recorded_at) if ref.removed else None,
        }
        cite = cites.get(ref.nodes[0]) if ref.nodes else None
        cite = cite or ref.now.ref
        if cite:
            cited[node] = cite
    entities = (fact.subject, fact.object) if fact.object_is_entity else (fact.subject,)
    explain: dict[str, Any] = {
        "reason": REASON,
        "subject": fact.subject,
        "predicate": fact.predicate,
        "object": fact.object,
        "object_is_entity": fact.object_is_entity,
        "single": fact.single,
        "origin": fact.origin,
        "confidence": fact.confidence,
        "recorded_at": rfc3339(fact.recorded_at),
        "expired_at": rfc3339(fact.expired_at),
        "evidence": list(fact.evidence),
        "cites": cited,
        "evidence_items": followed,
    }
    return RetrievalHit(
        node_id=fact.id,
        node_kind=NodeKind.FACT,
        tree_id="",
        tree_kind=TreeKind.SOURCE,
        tree_scope=scope,
        level=0,
        content=fact_text(fact),
        entities=entities,
        topics=(),
        time_start=fact.valid_from,
        time_end=fact.valid_to,
        score=score,
        source_ref=next(iter(cited.values()), None),
        source_id=fact.source_id,
        title=f"{fact.subject} {fact.predicate}",
        explain=explain,
    )
