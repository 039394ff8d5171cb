"""``recall``: one ranked list of the turns, messages, documents, items and facts that answer
a question, each typed and cited.

Two legs run: the hybrid search over chunks (:meth:`~stratamem.api.reads.Reads.search`, with
the caller's filters) and the fact search (:func:`~stratamem.memory.search.match_facts`, over
the facts true at ``as_of``, of the sources the same filters admit, whose ``valid_from`` lies
in the ``since``/``until`` window). Each leg gives at most :func:`leg_depth` candidates.
:func:`merge` puts them in one order; it is the one place a score decides where a fact
stands beside a chunk.

**How facts are merged** (:class:`Fusion`, chosen on LoCoMo's tune half, see
``docs/search.md`` and ``benchmarks/results/locomo_recall.md``). Ranks, not raw scores, are
fused, since a chunk's hybrid score and a fact's BM25/cosine are on no common scale (by
default ``lend`` with k = 10, w = 0.5)::

    chunk c at rank r_c:  s(c) = 1 / (k + r_c) + w · Σ_{facts f citing c} 1 / (k + r_f)
    fact f at rank r_f:   s(f) = w / (k + r_f) + max_{c in f's evidence} 1 / (k + r_c)

(``lend``: a fact lends its score to the chunks it cites, and stands right after the best of
them, or where its own score puts it when none of them was found) or, with ``rrf``, weighted
reciprocal rank fusion of the two lists (Cormack et al. 2009), the second terms left out; or,
with ``parity``, each leg's own score (a chunk's hybrid score, a fact's fused BM25/cosine
times ``w``): the method a calibrated relevance on one scale for both would drive.
``head``/``head_facts`` cap how many facts stand in the first ``head`` places. Ties go to the
chunk, then to the leg's own order.

**Types** (:func:`hit_type`): ``fact``; ``item`` for a chunk of an item an agent wrote (a
source of platform ``memory`` that is no chat); otherwise by the chunk's source kind:
``turn`` (chat), ``message`` (email), ``document``, ``record``. Each hit's ``explain`` keeps
its raw signals: a chunk's ``breakdown`` per leg, a fact's ``bm25`` and ``cosine``, and
``recall`` (the leg, its rank there, the merged score).

**Prior** (opt-in, :attr:`~stratamem.config.SearchConfig.recall_fact_prior` = β > 0): a
fact's score is multiplied by ``(1 − β) + β · p`` before the fact leg is ranked, ``p`` its
consolidation score (0.4 recency + 0.4 importance + 0.2 relevance, see
:mod:`stratamem.memory.consolidate`; 0.5 for a fact not scored yet).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from stratamem.embed.base import Embedder
from stratamem.memory.hits import fact_hits
from stratamem.memory.search import MAX_FACTS, FactHit, rank_facts
from stratamem.retrieval import primitives
from stratamem.retrieval.item_nodes import item_refs
from stratamem.retrieval.relevance import Calibration, decreasing
from stratamem.retrieval.scope import admitted_sources
from stratamem.store.base import Store
from stratamem.types import (
    Filters,
    NodeKind,
    RetrievalHit,
    ScoreBreakdown,
    SearchResponse,
    Source,
    SourceKind,
)

__all__ = [
    "DEFAULT_FUSION",
    "TYPES",
    "TYPE_KINDS",
    "Fusion",
    "chunk_kinds",
    "fact_leg",
    "fact_leg_hits",
    "fact_matches",
    "followed_evidence",
    "hit_type",
    "leg_depth",
    "merge",
    "order",
    "packed",
    "recalled",
    "relevant",
    "typed",
]

TYPES = ("turn", "message", "document", "record", "item", "fact")
CHUNK_TYPES = {
    SourceKind.CHAT: "turn",
    SourceKind.EMAIL: "message",
    SourceKind.DOCUMENT: "document",
    SourceKind.RECORD: "record",
}
ITEM_PLATFORM = "memory"
MIN_DEPTH = 50
METHODS = ("lend", "rrf", "parity")
# A fact not scored by consolidation yet counts as middling under the prior.
UNSCORED_PRIOR = 0.5


@dataclass(frozen=True, slots=True)
class Fusion:
    """How the fact leg is merged with the chunk leg (see the module's docstring)."""

    # The defaults: chosen on LoCoMo's tune half (benchmarks/results/locomo_recall.md).
    method: str = "lend"  # one of METHODS
    k: int = 10
    fact_weight: float = 0.5
    head: int = 0  # 0: no cap
    head_facts: int = 0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(
                f"recall fusion must be one of {', '.join(METHODS)}, not {self.method!r}"
            )
        if self.k < 1 or self.fact_weight < 0 or self.head < 0 or self.head_facts < 0:
            raise ValueError("recall fusion needs k ≥ 1 and a weight and caps ≥ 0")


DEFAULT_FUSION = Fusion()


def leg_depth(limit: int) -> int:
    """How many candidates each leg gives for a recall of ``limit`` hits."""
    return max(limit, MIN_DEPTH)


# The source kinds a chunk of each type may come from (an item: any source but a chat).
TYPE_KINDS = {
    "turn": (SourceKind.CHAT,),
    "message": (SourceKind.EMAIL,),
    "document": (SourceKind.DOCUMENT,),
    "record": (SourceKind.RECORD,),
    "item": (SourceKind.EMAIL, SourceKind.DOCUMENT, SourceKind.RECORD),
}


def chunk_kinds(wanted: set[str], kinds: Sequence[SourceKind]) -> tuple[SourceKind, ...] | None:
    """The source kinds the chunk leg searches for the ``wanted`` types within ``kinds``
    (none: every kind), so that the leg's cut keeps only chunks that may be of those types
    and a rare type is not crowded out of it: ``kinds`` itself when every chunk type is
    wanted or the types admit every kind asked; None when no kind asked can hold one."""
    types = wanted & set(TYPE_KINDS)
    asked = tuple(kinds) or tuple(SourceKind)
    allowed = {kind for name in types for kind in TYPE_KINDS[name]}
    narrowed = tuple(kind for kind in asked if kind in allowed)
    if not narrowed:
        return None
    return tuple(kinds) if narrowed == asked else narrowed


def hit_type(hit: RetrievalHit, kinds: dict[str, SourceKind], platforms: dict[str, str]) -> str:
    """What ``hit`` is: ``fact``, ``item``, or by its source's kind (see the docstring)."""
    if hit.node_kind is NodeKind.FACT:
        return "fact"
    kind = kinds.get(hit.source_id)
    if kind is not SourceKind.CHAT and platforms.get(hit.source_id) == ITEM_PLATFORM:
        return "item"
    return CHUNK_TYPES.get(kind, "record") if kind is not None else "record"


def typed(
    store: Store, hits: Sequence[RetrievalHit], sources: Sequence[Source] | None = None
) -> list[RetrievalHit]:
    """``hits`` with their type in ``explain["type"]`` (copies: the hits are not changed);
    ``sources``: the reader's, read here when not given."""
    if sources is None:
        sources = store.sources(counts=False)
    kinds = {s.id: s.kind for s in sources}
    platforms = {s.id: s.platform for s in sources}
    return [replace(h, explain={**h.explain, "type": hit_type(h, kinds, platforms)}) for h in hits]


def fact_leg(
    store: Store,
    query: str,
    *,
    filters: Filters,
    as_of: datetime | None,
    limit: int,
    embedder: Embedder | None,
    prior: float = 0.0,
    sources: Sequence[Source] | None = None,
    calibration: Calibration | None = None,
) -> tuple[list[RetrievalHit], int]:
    """The facts that best match ``query``, true at ``as_of`` (None: now), of the sources
    ``filters`` admit, with ``valid_from`` in its window, best first, at most ``limit``, as
    hits of kind ``fact`` (each with its raw ``bm25`` and ``cosine`` in ``explain``), and
    how many facts matched in all. ``sources``: the reader's, read here when not given. Each
    hit's ``relevance`` is its own under ``calibration`` (default: the packaged one), from
    its raw signals, not yet shown going down any list (see :func:`relevant`)."""
    found, total, _ = fact_matches(
        store,
        query,
        filters=filters,
        as_of=as_of,
        limit=limit,
        embedder=embedder,
        prior=prior,
        calibration=calibration,
    )
    return fact_leg_hits(store, found, sources), total


def fact_matches(
    store: Store,
    query: str,
    *,
    filters: Filters,
    as_of: datetime | None,
    limit: int,
    embedder: Embedder | None,
    prior: float = 0.0,
    calibration: Calibration | None = None,
) -> tuple[list[FactHit], int, tuple[str, ...]]:
    """:func:`fact_leg`'s facts before they are made hits (no citation read yet), each with
    its own relevance, how many matched in all, and notes on what the ranking could not do
    as asked (a fact vector of another size than the query's: BM25 alone for that fact)."""
    calibration = calibration or Calibration.load()
    homes = admitted_sources(store, filters)
    if homes is not None and not homes:
        return [], 0, ()
    windowed = filters.since is not None or filters.until is not None
    ranking = rank_facts(
        store,
        query,
        sources=sorted(homes) if homes is not None else (),
        valid_at=as_of,
        limit=(MAX_FACTS if windowed or prior > 0 else limit),
        embedder=embedder,
    )
    if ranking is None:
        return [], 0, ()
    found: Sequence[FactHit] = ranking.hits(None if windowed or prior > 0 else limit)
    total = ranking.total
    if windowed:
        found = tuple(h for h in found if _in_window(h, filters))
        total = len(found)
    if prior > 0 and found:
        found = _with_prior(store, found, prior)
    own = [replace(h, relevance=calibration.fact(h.signals())) for h in found[:limit]]
    return own, total, ranking.notes


def fact_leg_hits(
    store: Store, found: Sequence[FactHit], sources: Sequence[Source] | None = None
) -> list[RetrievalHit]:
    """``found`` as hits of kind ``fact``, their evidence cited, each with its raw ``bm25``
    and ``cosine`` in ``explain``. ``sources``: the reader's, read here when not given."""
    known = store.sources(counts=False) if sources is None else sources
    hits = fact_hits(store, found, scopes={s.id: s.scope for s in known})
    for hit, matched_hit in zip(hits, found, strict=True):
        hit.explain["bm25"] = matched_hit.bm25  # the raw signals its score was fused from
        hit.explain["cosine"] = matched_hit.cosine
    return hits


def _in_window(hit: FactHit, filters: Filters) -> bool:
    start = hit.fact.valid_from
    if start is None:
        return filters.since is None
    if filters.since is not None and start < filters.since:
        return False
    return filters.until is None or start <= filters.until


def _with_prior(store: Store, found: Sequence[FactHit], beta: float) -> tuple[FactHit, ...]:
    scores = store.fact_scores([h.fact.id for h in found])
    weighed = []
    for h in found:
        kept = scores.get(h.fact.id)
        p = UNSCORED_PRIOR if kept is None else kept.score
        weighed.append(replace(h, score=h.score * ((1 - beta) + beta * p)))
    weighed.sort(key=lambda h: (-h.score, h.fact.id))
    return tuple(weighed)


def merge(
    chunks: Sequence[RetrievalHit],
    facts: Sequence[RetrievalHit],
    *,
    fusion: Fusion = DEFAULT_FUSION,
) -> list[RetrievalHit]:
    """The two legs (each best first) in one order, each hit's score the merged one and its
    leg, rank and merged score in ``explain["recall"]``; see the module's docstring."""
    placed = order(chunks, [_evidence(f) for f in facts], [f.score for f in facts], fusion=fusion)
    return [
        _placed(chunks[rank - 1] if leg == "chunks" else facts[rank - 1], score, leg, rank)
        for score, leg, rank in placed
    ]


def order(
    chunks: Sequence[RetrievalHit],
    evidence: Sequence[Sequence[str]],
    fact_scores: Sequence[float],
    *,
    fusion: Fusion = DEFAULT_FUSION,
) -> list[tuple[float, str, int]]:
    """Where :func:`merge` puts each hit, best first: (merged score, leg, rank in its leg),
    from the chunks and, for each fact in its leg's order, the node ids it rests on
    (``evidence``) and its own score: what the merge reads of a fact, so that a fact need
    not be made a hit, its evidence cited, to be placed."""
    k, w = fusion.k, fusion.fact_weight
    base = {h.node_id: 1.0 / (k + r) for r, h in enumerate(chunks, 1)}
    lent = dict.fromkeys(base, 0.0)
    fact_score: list[float] = []
    for r, nodes in enumerate(evidence, 1):
        own = w / (k + r)
        cited = [n for n in nodes if n in base]
        if fusion.method == "lend":
            for node in cited:
                lent[node] += own
            own += max((base[n] for n in cited), default=0.0)
        fact_score.append(own)
    if fusion.method == "parity":  # the legs' own scores, a fact's weighted
        base = {h.node_id: h.score for h in chunks}
        fact_score = [w * score for score in fact_scores]
    scored: list[_Entry] = []
    for r, h in enumerate(chunks, 1):
        scored.append((base[h.node_id] + lent[h.node_id], 0, r, "chunks"))
    for r in range(1, len(evidence) + 1):
        scored.append((fact_score[r - 1], 1, r, "facts"))
    scored.sort(key=lambda s: (-s[0], s[1], s[2]))
    placed = _capped(scored, fusion) if fusion.head else scored
    return [(score, leg, rank) for score, _, rank, leg in placed]


_Entry = tuple[float, int, int, str]


def _placed(hit: RetrievalHit, score: float, leg: str, rank: int, **more: str) -> RetrievalHit:
    explain = {**hit.explain, "recall": {"leg": leg, "rank": rank, "score": score}, **more}
    return replace(hit, score=score, explain=explain)


def recalled(
    store: Store,
    chunks: Sequence[RetrievalHit],
    facts: Sequence[FactHit],
    *,
    wanted: set[str],
    limit: int,
    fusion: Fusion = DEFAULT_FUSION,
    sources: Sequence[Source],
) -> tuple[list[RetrievalHit], int]:
    """The first ``limit`` hits of the two legs merged (:func:`merge`) and typed
    (:func:`typed`), of the ``wanted`` types, and how many of those types the merge holds
    in all: the same hits as merging the facts made hits (:func:`fact_leg_hits`), typing
    and cutting, but only the facts that stand among the first ``limit`` are made hits,
    their evidence cited. ``sources``: the reader's."""
    evidence = followed_evidence(store, facts, {h.node_id for h in chunks})
    placed = order(chunks, evidence, [f.score for f in facts], fusion=fusion)
    kinds = {s.id: s.kind for s in sources}
    platforms = {s.id: s.platform for s in sources}
    chosen: list[tuple[float, str, int, str]] = []
    count = 0
    for score, leg, rank in placed:
        kind = "fact" if leg == "facts" else hit_type(chunks[rank - 1], kinds, platforms)
        if kind not in wanted:
            continue
        count += 1
        if len(chosen) < limit:
            chosen.append((score, leg, rank, kind))
    ranks = [rank for _, leg, rank, _ in chosen if leg == "facts"]
    made = dict(
        zip(ranks, fact_leg_hits(store, [facts[r - 1] for r in ranks], sources), strict=True)
    )
    hits = [
        _placed(chunks[rank - 1] if leg == "chunks" else made[rank], score, leg, rank, type=kind)
        for score, leg, rank, kind in chosen
    ]
    return hits, count


def followed_evidence(
    store: Store, facts: Sequence[FactHit], standing: set[str]
) -> list[list[str]]:
    """The node ids each fact rests on, as :func:`merge` reads them off its hit: its
    evidence, and where a piece of it no longer stands, the chunks the item it names is
    derived into now (see :mod:`stratamem.memory.hits`). ``standing``: node ids known to
    stand (the chunk leg's hits); the others are looked up, the items first, since only an
    id that names an item can add a node."""
    others = list(dict.fromkeys(e for f in facts for e in f.fact.evidence if e not in standing))
    refs = item_refs(store, others) if others else {}
    if refs:
        found = primitives.nodes(store, list(refs), items=False)
        standing = standing | {n.node_id for n in found}
    out = []
    for hit in facts:
        nodes = list(hit.fact.evidence)
        for node in hit.fact.evidence:
            if node in standing or node not in refs:
                continue
            ref = next((r for r in refs[node] if r.now.source_id == hit.fact.source_id), None)
            if ref is not None:
                nodes.extend(ref.nodes)
        out.append(nodes)
    return out


def relevant(hits: Sequence[RetrievalHit]) -> list[RetrievalHit]:
    """``hits`` (merged, best first) with their relevance shown going down the list, as
    search shows its own (:func:`~stratamem.retrieval.relevance.decreasing`): each hit shows
    the lower of its own and that of every hit above it, so a fact ranked after a chunk never
    shows more than the chunk claims. A hit without a relevance counts as 0."""
    shown = decreasing([0.0 if h.relevance is None else h.relevance for h in hits])
    return [replace(h, relevance=r) for h, r in zip(hits, shown, strict=True)]


def _capped(scored: list[_Entry], fusion: Fusion) -> list[_Entry]:
    """``scored`` with at most ``head_facts`` facts in the first ``head`` places; the others
    move down to just after them, in order."""
    head: list[_Entry] = []
    held: list[_Entry] = []
    rest: list[_Entry] = []
    facts = 0
    for entry in scored:
        if len(head) < fusion.head:
            if entry[1] == 1:
                if facts >= fusion.head_facts:
                    held.append(entry)
                    continue
                facts += 1
            head.append(entry)
        else:
            rest.append(entry)
    return head + held + rest


def _evidence(fact: RetrievalHit) -> list[str]:
    """The node ids a fact hit rests on, and the chunks its evidence items are now."""
    found = list(fact.explain.get("evidence", ()))
    for followed in fact.explain.get("evidence_items", {}).values():
        found.extend(followed.get("nodes", ()))
    return found


def packed(response: SearchResponse, budget: int) -> SearchResponse:
    """``response`` with its hits packed into ``budget`` tokens as cards, as search packs
    its own (:func:`~stratamem.retrieval.hybrid.with_cards`)."""
    from stratamem.retrieval.hybrid import with_cards

    breakdowns = [
        ScoreBreakdown(
            **{
                k: v
                for k, v in (h.explain.get("breakdown") or {}).items()
                if k in ScoreBreakdown.__dataclass_fields__
            }
        )
        for h in response.hits
    ]
    return replace(with_cards(response, budget, breakdowns), budget=budget)
