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
"""

from __future__ import annotations

from collections.abc import Sequence

from stratamem.memory.facts import fact_text
from stratamem.memory.search import FactHit
from stratamem.retrieval import primitives
from stratamem.store.base import Store
from stratamem.store.facts import Fact
from stratamem.types import NodeKind, RetrievalHit, TreeKind, rfc3339

REASON = "fact"


def fact_hits(store: Store, found: Sequence[FactHit]) -> list[RetrievalHit]:
    """``found`` as hits, in their order, with their sources and the citations of their
    evidence read in one batch."""
    scopes = {s.id: s.scope for s in store.sources()}
    evidence = list(dict.fromkeys(node for hit in found for node in hit.fact.evidence))
    cites = {n.node_id: n.source_ref for n in primitives.nodes(store, evidence)} if evidence else {}
    return [fact_hit(h.fact, h.score, scopes.get(h.fact.source_id, ""), cites) for h in found]


def fact_hit(
    fact: Fact, score: float, scope: str, cites: dict[str, str | None] | None = None
) -> RetrievalHit:
    """One fact as a hit; ``scope`` is its source's, ``cites`` the citations of evidence
    nodes by id (those missing are left out)."""
    cites = cites or {}
    cited = {node: cites[node] for node in fact.evidence if cites.get(node)}
    entities = (fact.subject, fact.object) if fact.object_is_entity else (fact.subject,)
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
        explain={
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
        },
    )
