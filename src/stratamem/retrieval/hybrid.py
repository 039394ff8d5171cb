"""Hybrid search: keyword, vector and graph legs, fused, expanded, boosted, reranked,
diversified and packed.

    legs (each filtered inside its query, before its limit)
      → context (a chat turn's keyword and vector scores, min-max scaled, shared with the turns
        up to ``context_window`` places around it, ``context_share`` to each)
      → fusion (weighted min-max with empty-leg redistribution, or RRF; freshness if asked)
      → expansion (one hop from the top seeds: chunks sharing their rarer entities, and the
        chunks right before and after them; damped)
      → tier-0 boost (pinned and decision items, multiplicative)
      → rerank (optional; a failure keeps the fused order and says so)
      → MMR (λ = 0.7) over candidates that have vectors, as ``SearchConfig.mmr`` says: "on"
        penalises every similarity, "duplicates" only near-duplicates (cosine ≥
        ``mmr_threshold``), "auto" (the default) chat turns as "on" and everything else as
        "duplicates", "off" nothing; ``diversify=False`` turns it off for one search
      → relevance: each hit's calibrated chance of being relevant, read from the legs' raw
        signals (the cosine, BM25 over the query's Σ idf, the graph) by
        :class:`~stratamem.retrieval.relevance.Calibration` (``SearchConfig.calibration``),
        shown going down the list; ``min_relevance`` drops the hits below it and
        ``nothing_relevant`` says whether any reached it (or the calibration's threshold)
      → hits, and cards packed into a token budget when one is given

Every hit carries a :class:`ScoreBreakdown`, a one-line reason and its raw ``signals`` in
``explain``. A leg that
cannot run (no vectors, a changed model, an embedding failure) is left out, its weight goes to
the others, and ``SearchResponse.legs`` says why. Nothing here raises for a bad query.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import replace

from stratamem.config import SearchConfig
from stratamem.retrieval import fusion
from stratamem.retrieval.legs import LEGS
from stratamem.retrieval.legs.graph import idf_weights
from stratamem.retrieval.legs.vector import Vector, VectorLeg
from stratamem.retrieval.mmr import mmr
from stratamem.retrieval.relevance import (
    Calibration,
    check_min_relevance,
    chunk_features,
    decreasing,
    floor,
)
from stratamem.retrieval.rerank import Reranker, apply_rerank
from stratamem.retrieval.scope import resolve
from stratamem.retrieval.ties import TieOrder
from stratamem.store.base import Store
from stratamem.types import (
    Chunk,
    Filters,
    NodeKind,
    RetrievalHit,
    ScoreBreakdown,
    SearchResponse,
    SourceKind,
    TreeKind,
)

MAX_LIMIT = 1000


class _Candidate:
    """One candidate's score as the pipeline builds it: ``final`` is kept equal to
    ``max(fused, expansion) * boost`` by :meth:`reach` and :meth:`boosted` (a search reads it
    hundreds of times)."""

    __slots__ = (
        "boost",
        "context",
        "expansion",
        "final",
        "fused",
        "parts",
        "rerank",
        "tier0",
        "via",
    )

    def __init__(self, parts: dict[str, float] | None = None) -> None:
        self.parts = {} if parts is None else parts
        self.fused = sum(self.parts.values())  # the parts never change once fused
        self.expansion = 0.0
        self.via = ""
        self.boost = 1.0
        self.tier0 = False
        self.context = 0.0  # of the parts, what the turns around it passed on
        self.rerank: float | None = None
        self._settle()

    def reach(self, value: float, via: str) -> None:
        """Reached by expansion from ``via`` with ``value``, if more than before."""
        if value > self.expansion:
            self.expansion, self.via = value, via
            self._settle()

    def boosted(self, boost: float) -> None:
        self.boost = boost
        self._settle()

    def _settle(self) -> None:
        self.final = max(self.fused, self.expansion) * self.boost


class _Candidates:
    """The fused candidates by id: each one's final score in ``finals``, and made a
    :class:`_Candidate` only where the pipeline needs more of it (the nodes the expansion
    reaches, the head): a search fuses hundreds and shows ten."""

    def __init__(
        self,
        parts: dict[str, dict[str, float]],
        scores: dict[str, dict[str, float]],
        lent: dict[str, dict[str, float]],
    ) -> None:
        self._parts, self._scores, self._lent = parts, scores, lent
        self._made: dict[str, _Candidate] = {}
        # What _Candidate(parts).final is, without making one.
        self.finals = {key: max(sum(p.values()), 0.0) * 1.0 for key, p in parts.items()}

    def __len__(self) -> int:
        return len(self.finals)

    def __getitem__(self, key: str) -> _Candidate:
        found = self._made.get(key)
        if found is None:
            found = self._made[key] = _Candidate(self._parts.get(key))
            for name, passed in self._lent.items():
                amount = passed.get(key)
                if amount is not None and name in found.parts:
                    score = self._scores[name][key]
                    share = amount / score if score > 0 else 0.0
                    found.context += found.parts[name] * share
        return found

    def reach(self, key: str, value: float, via: str) -> None:
        """``key`` reached by the expansion from ``via`` with ``value``."""
        candidate = self[key]
        candidate.reach(value, via)
        self.finals[key] = candidate.final


class HybridSearcher:
    def __init__(
        self,
        store: Store,
        *,
        vectors: VectorLeg | None = None,
        reranker: Reranker | None = None,
        config: SearchConfig | None = None,
    ) -> None:
        self.store = store
        self.vectors = vectors
        self.reranker = reranker
        self.config = config or SearchConfig()

    def search(
        self,
        query: str,
        *,
        filters: Filters | None = None,
        limit: int = 10,
        budget: int | None = None,
        config: SearchConfig | None = None,
        legs: Sequence[str] = ("keyword", "vector", "graph"),
        rerank: bool = True,
        diversify: bool = True,
        min_relevance: float | None = None,
    ) -> SearchResponse:
        cfg = config or self.config
        min_relevance = check_min_relevance(min_relevance)
        calibration = Calibration.load(cfg.calibration)
        limit = 10 if limit <= 0 else min(limit, MAX_LIMIT)
        if not query.strip():
            return SearchResponse(
                hits=(), total=0, notes=("empty query: nothing to match",), nothing_relevant=True
            )
        resolved = resolve(self.store, filters or Filters())
        if resolved is None:
            return SearchResponse(
                hits=(),
                total=0,
                budget=budget,
                notes=("no source holds the memory of those users, agents or sessions",),
                nothing_relevant=True,
            )
        filters = resolved
        status: dict[str, str] = {}
        ceilings: dict[str, float] = {}
        notes: list[str] = []
        pool = max(cfg.pool, limit)
        # Everything the hits are made of is read in one read snapshot, so that a search sees
        # another process's commit whole or not at all; the reranker runs after it.
        with self.store.read_snapshot():
            scores = self._legs(query, filters, pool, legs, cfg, status, ceilings)
            raw = scores  # the legs' own scores, before the context shares them out
            lent: dict[str, dict[str, float]] = {}
            turns = _Turns(self.store, filters)
            if cfg.context_share > 0 and cfg.context_window > 0:
                scores, lent = self._in_context(scores, turns, cfg)
            weights = cfg.leg_weights()
            if weights.get("freshness", 0.0) > 0:
                scores["freshness"] = self._freshness(scores, cfg)
            ties = TieOrder(self.store)
            if cfg.fusion == "rrf":
                ties.cover(*scores.values())
                parts = fusion.rrf(scores, weights, k=cfg.rrf_k, tie=ties.key)
            else:
                parts = fusion.weighted_minmax(scores, weights)
            candidates = _Candidates(parts, scores, lent)
            if not candidates:
                return SearchResponse(
                    hits=(),
                    total=0,
                    budget=budget,
                    legs=status,
                    notes=tuple(notes),
                    nothing_relevant=True,
                )
            if cfg.expand_seeds > 0 and cfg.expand_damping > 0:
                self._expand(candidates, filters, turns, cfg, ties)
            finals = candidates.finals
            wanted = max(limit * 4, cfg.rerank_top, 40)
            # What the head is chosen and ordered by, read once for every node that can be in
            # it (those tied at its cut included); the texts only of those shown, below.
            heads = self.store.chunk_heads(fusion.at_least_top(finals, wanted))
            ties.learn(heads)
            ties.cover(finals, top=wanted)
            head = [key for key in fusion.top(finals, wanted, tie=ties.key) if key in heads]
            for key in head:
                if set(heads[key].tags) & set(cfg.tier0_tags):
                    candidates[key].boosted(cfg.tier0_boost)
                    candidates[key].tier0 = True
            boosted = {k: candidates[k].final for k in head}
            ties.cover(boosted)
            head = sorted(head, key=lambda k: (-boosted[k], ties.key(k)))
            vectors: dict[str, Vector] = {}
            in_chat: set[str] = set()
            if (
                diversify
                and cfg.mmr != "off"
                and self.vectors is not None
                and status.get("vector", "").startswith("ok")
            ):
                vectors = self.vectors.vectors(head)
                if cfg.mmr == "auto":
                    kinds = self.store.source_kinds()
                    chat = {sid for sid, kind in kinds.items() if kind is SourceKind.CHAT}
                    in_chat = {k for k in head if heads[k].source_id in chat}
            scopes = self.store.scopes()
            reranking = rerank and self.reranker is not None and bool(head)
            if not reranking:  # the order is final here: only the hits' entities are read
                if vectors:
                    head = _diversify(
                        head, _relevance(head, candidates), vectors, in_chat, cfg, limit
                    )
                head = head[:limit]
            shown, entities = self.store.chunks_and_mentions(head)
            chunks = {c.id: c for c in shown}
        if reranking and self.reranker is not None:
            head = _rerank(self.reranker, query, head, chunks, candidates, cfg, notes, ties)
            if vectors:
                head = _diversify(head, _relevance(head, candidates), vectors, in_chat, cfg, limit)
        top = head[:limit]
        lowest = min(raw["vector"].values()) if raw.get("vector") else 0.0
        signals = [_signals(key, raw, status, ceilings, lowest, candidates[key]) for key in top]
        relevance = decreasing([calibration.chunk(s) for s in signals])
        hits, breakdowns = _hits(top, chunks, candidates, scopes, entities, signals, relevance)
        kept, nothing = floor(hits, min_relevance, calibration.threshold)
        if len(kept) < len(hits):
            breakdowns = breakdowns[: len(kept)]  # the floor keeps a head of the list
        response = SearchResponse(
            hits=tuple(kept),
            total=len(candidates),
            budget=budget,
            legs=status,
            notes=tuple(notes),
            nothing_relevant=nothing,
        )
        if budget is not None:
            response = with_cards(response, budget, breakdowns)
        return response

    # -- legs ------------------------------------------------------------------------------

    def _legs(
        self,
        query: str,
        filters: Filters,
        pool: int,
        legs: Sequence[str],
        cfg: SearchConfig,
        status: dict[str, str],
        ceilings: dict[str, float],
    ) -> dict[str, dict[str, float]]:
        unknown = [name for name in legs if name not in LEGS]
        if unknown:
            raise ValueError(f"unknown leg(s) {unknown}; known: {', '.join(LEGS)}")
        chosen = [name for name in LEGS if name in legs]
        # Started in reverse table order (the vector leg's embedding first), read in order.
        finishing = {
            name: LEGS[name](self.store, self.vectors, cfg).start(query, filters, pool)
            for name in reversed(chosen)
        }
        scores: dict[str, dict[str, float]] = {}
        for name in chosen:
            result = finishing[name]()
            status[name] = result.status
            if result.scores is not None:
                scores[name] = result.scores
            if result.ceiling is not None:
                ceilings[name] = result.ceiling
        return scores

    def _in_context(
        self, scores: dict[str, dict[str, float]], turns: _Turns, cfg: SearchConfig
    ) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
        """Chat turns read in their conversation. A turn is often found only through the one
        before it (an answer through its question), and a run of matching turns says more
        than one alone: each keyword and vector candidate that is a chat turn passes
        ``context_share`` of its min-max score to every turn up to ``context_window`` places
        before and after it. Returns the legs' new scores and what each candidate received.

        The turns are then scaled so that the best of them keeps the score it had: the
        context reorders a conversation's turns, it does not lift them over the documents
        they compete with. Candidates outside chats keep their scores; a store without chats
        is left as it was."""
        if not turns.chat:
            return scores, {}
        names = [name for name in CONTEXT_LEGS if scores.get(name)]
        keys = sorted({key for name in names for key in scores[name]})
        around = turns.around(keys, cfg.context_window)
        if not any(around.values()):
            return scores, {}
        spread = dict(scores)
        lent: dict[str, dict[str, float]] = {}
        for name in names:
            spread[name], lent[name] = _spread(
                fusion.minmax(scores[name]), around, cfg.context_share
            )
        return spread, lent

    def _freshness(
        self, scores: dict[str, dict[str, float]], cfg: SearchConfig
    ) -> dict[str, float]:
        keys = sorted({k for leg in scores.values() for k in leg})
        chunks = self.store.chunks(keys)
        times = {c.id: (c.time_end or c.time_start) for c in chunks}
        known = {k: t for k, t in times.items() if t is not None}
        if not known:
            return {}
        newest = max(known.values())
        half_life = _half_life(cfg)
        return {
            k: math.exp(-math.log(2) * (newest - t).total_seconds() / 86400 / half_life)
            for k, t in known.items()
        }

    # -- expansion, rerank, hits -------------------------------------------------------------

    def _expand(
        self,
        candidates: _Candidates,
        filters: Filters,
        turns: _Turns,
        cfg: SearchConfig,
        ties: TieOrder,
    ) -> None:
        finals = candidates.finals  # changed only at the end, by what is reached
        ties.cover(finals, top=cfg.expand_seeds)
        seeds = fusion.top(finals, cfg.expand_seeds, tie=ties.key)
        reached: dict[str, tuple[float, str]] = {}

        def reach(node: str, value: float, seed: str) -> None:
            if value > reached.get(node, (0.0, ""))[0]:
                reached[node] = (value, seed)

        around = turns.around(seeds, cfg.expand_window)
        for seed, neighbours in around.items():
            for node, distance in neighbours:
                # Each step further from the seed damps what it passes on again.
                reach(node, finals[seed] * cfg.expand_damping**distance, seed)
        mentions = self.store.mentions_of(seeds)
        # One frequency lookup for every seed's entities rather than one per seed.
        frequencies = self.store.entity_frequencies(
            sorted({e for found in mentions.values() for e in found})
        )
        chunk_total = self.store.chunk_count() if frequencies else 0
        weighted: list[tuple[str, dict[str, float], float]] = []
        for seed in seeds:
            weights = idf_weights(
                {e: frequencies[e] for e in mentions.get(seed, []) if e in frequencies},
                chunk_total,
                hub_fraction=cfg.hub_fraction,
            )
            total = sum(weights.values())
            if total:
                weighted.append((seed, weights, total))
        # Every seed's entity-sharing chunks in one read.
        found = self.store.nodes_by_entities_many(
            [weights for _, weights, _ in weighted], filters, cfg.expand_per_seed, exclude=seeds
        )
        for (seed, _, total), shared in zip(weighted, found, strict=True):
            for node, overlap in shared.items():
                strength = overlap / total
                reach(node, finals[seed] * cfg.expand_damping * strength, seed)
        for node, (value, seed) in reached.items():
            candidates.reach(node, value, seed)


CONTEXT_LEGS = ("keyword", "vector")


class _Turns:
    """The turns around chat chunks (:meth:`Store.neighbour_chunks`), read once per search:
    the chat context reads them for every keyword and vector candidate, and the expansion's
    seeds are mostly among those. Where no chat source can match the filters there are none,
    and nothing is read."""

    def __init__(self, store: Store, filters: Filters) -> None:
        self.store, self.filters = store, filters
        self._read: dict[str, list[tuple[str, int]]] = {}
        self._window = -1  # how far around each chunk ``_read`` holds

    @functools.cached_property
    def chat(self) -> bool:
        """Whether a chat source the reader may see can match the filters."""
        kinds = self.filters.kinds
        if kinds and SourceKind.CHAT not in kinds:
            return False
        return SourceKind.CHAT in self.store.source_kinds().values()

    def around(self, keys: Sequence[str], window: int) -> dict[str, list[tuple[str, int]]]:
        """Each key's turns up to ``window`` places away, in their order in the source;
        keys read before at a window as wide are not read again."""
        if not self.chat:
            return {key: [] for key in keys}
        if window > self._window:
            self._read, self._window = {}, window
        missing = [key for key in keys if key not in self._read]
        if missing:
            found = self.store.neighbour_chunks(missing, self.filters, window=self._window)
            self._read.update(found)
        return {
            key: [(node, d) for node, d in self._read.get(key, ()) if d <= window] for key in keys
        }


def _spread(
    own: dict[str, float], around: dict[str, list[tuple[str, int]]], share: float
) -> tuple[dict[str, float], dict[str, float]]:
    """``own`` with each chat turn's ``share`` added to its neighbours, the turns rescaled so
    their best keeps its own best; and what each turn received, on the same scale."""
    lent: dict[str, float] = {}
    turns: list[str] = []
    best_before = 0.0
    for key, value in own.items():
        neighbours = around.get(key)
        if not neighbours:
            continue
        turns.append(key)
        best_before = max(best_before, value)
        given = share * value
        for node, _distance in neighbours:
            lent[node] = lent.get(node, 0.0) + given
    scores = dict(own)
    for node, amount in lent.items():
        scores[node] = scores.get(node, 0.0) + amount
    best_after = max((scores[k] for k in lent), default=0.0)
    if best_before > 0 and best_after > best_before:
        scale = best_before / best_after
        for key in {*turns, *lent}:
            scores[key] *= scale
        lent = {key: amount * scale for key, amount in lent.items()}
    return scores, lent


def _hits(
    keys: list[str],
    chunks: dict[str, Chunk],
    candidates: _Candidates,
    scopes: dict[str, str],
    entities: dict[str, list[str]],
    signals: list[dict[str, float]],
    relevance: list[float],
) -> tuple[list[RetrievalHit], list[ScoreBreakdown]]:
    hits = []
    breakdowns = []
    for key, signal, shown in zip(keys, signals, relevance, strict=True):
        chunk, candidate = chunks[key], candidates[key]
        breakdown = ScoreBreakdown(
            keyword=candidate.parts.get("keyword", 0.0),
            vector=candidate.parts.get("vector", 0.0),
            graph=candidate.parts.get("graph", 0.0),
            freshness=candidate.parts.get("freshness", 0.0),
            expansion=candidate.expansion if candidate.expansion > candidate.fused else 0.0,
            context=candidate.context,
            boost=candidate.boost,
            rerank=candidate.rerank,
            final=candidate.final,
        )
        breakdowns.append(breakdown)
        hits.append(
            RetrievalHit(
                node_id=chunk.id,
                node_kind=NodeKind.LEAF,
                tree_id="",
                tree_kind=TreeKind.SOURCE,
                tree_scope=scopes.get(chunk.source_id, ""),
                level=0,
                content=chunk.content,
                entities=tuple(entities.get(key, ())),
                topics=chunk.tags,
                time_start=chunk.time_start,
                time_end=chunk.time_end,
                score=candidate.final,
                source_ref=chunk.source_ref,
                source_id=chunk.source_id,
                author=chunk.author,
                title=chunk.title,
                explain={
                    "breakdown": breakdown.to_dict(),
                    "reason": reason(breakdown, candidate.via),
                    "tier0": candidate.tier0,
                    "signals": {name: round(value, 6) for name, value in signal.items()},
                },
                relevance=shown,
            )
        )
    return hits, breakdowns


def _signals(
    key: str,
    raw: dict[str, dict[str, float]],
    status: dict[str, str],
    ceilings: dict[str, float],
    lowest: float,
    candidate: _Candidate,
) -> dict[str, float]:
    """A hit's raw signals for its relevance (see :mod:`~stratamem.retrieval.relevance`):
    only those of legs that ran. A hit the vector leg did not return is given the
    ``lowest`` cosine it returned; one the keyword leg did not return a BM25 of 0."""
    cosine = None
    if status.get("vector", "").startswith("ok"):
        cosine = (raw.get("vector") or {}).get(key, lowest)
    bm25 = None
    if "keyword" in ceilings:
        bm25 = (raw.get("keyword") or {}).get(key, 0.0)
    graph = None
    if status.get("graph", "").startswith("ok"):
        graph = (raw.get("graph") or {}).get(key, 0.0) > 0
    return chunk_features(
        cosine=cosine,
        bm25=bm25,
        ceiling=ceilings.get("keyword"),
        graph=graph,
        fused=candidate.final,
    )


def _rerank(
    reranker: Reranker,
    query: str,
    head: list[str],
    chunks: dict[str, Chunk],
    candidates: _Candidates,
    cfg: SearchConfig,
    notes: list[str],
    ties: TieOrder,
) -> list[str]:
    top = head[: cfg.rerank_top]
    texts = [chunks[k].content for k in top]
    scores, note = apply_rerank(reranker, query, texts, timeout=cfg.rerank_timeout_s)
    notes.append(note)
    if scores is None:
        return head
    for key, score in zip(top, scores, strict=True):
        candidates[key].rerank = score
    reranked = {k: candidates[k].rerank or 0.0 for k in top}
    ties.cover(reranked)
    reordered = sorted(top, key=lambda k: (-reranked[k], ties.key(k)))
    return reordered + head[cfg.rerank_top :]


def _diversify(
    head: list[str],
    relevance: dict[str, float],
    vectors: dict[str, Vector],
    in_chat: set[str],
    cfg: SearchConfig,
    limit: int,
) -> list[str]:
    """The first ``limit`` of ``head`` picked by MMR as ``cfg.mmr`` says (MMR picks one at a
    time, so these are the first ``limit`` of the whole order). Under "auto" the chat turns,
    whose neighbours repeat and answer each other, are diversified among themselves as under
    "on"; every other candidate is passed over only for a near-duplicate of one already
    picked, as under "duplicates"."""
    lam = cfg.mmr_lambda
    if cfg.mmr == "on" or (cfg.mmr == "auto" and len(in_chat) == len(head)):
        return mmr(head, relevance, vectors, lam=lam, limit=limit)
    threshold = cfg.mmr_threshold
    if cfg.mmr == "duplicates" or not in_chat:
        return mmr(head, relevance, vectors, lam=lam, threshold=threshold, limit=limit)
    # A mix: each kind keeps the places its items held in the near-duplicate order of them
    # all, and the chat turns among them are put in their MMR order.
    duplicates = mmr(head, relevance, vectors, lam=lam, threshold=threshold)
    shown = duplicates[:limit]
    places = sum(1 for k in shown if k in in_chat)
    chat = [k for k in duplicates if k in in_chat]
    turns = iter(mmr(chat, relevance, vectors, lam=lam, limit=places))
    return [next(turns) if k in in_chat else k for k in shown]


def _relevance(head: list[str], candidates: _Candidates) -> dict[str, float]:
    """What MMR weighs against similarity: the final scores; reranked items, whose scores are
    on the reranker's own scale, stay above the rest and in the reranker's order."""
    rel = {k: candidates[k].final for k in head}
    reranked = {k: c.rerank for k in head if (c := candidates[k]).rerank is not None}
    if reranked:
        low, high = min(reranked.values()), max(reranked.values())
        span = (high - low) or 1.0
        top = max(rel.values())
        for key, score in reranked.items():
            rel[key] = top + 1.0 + (score - low) / span
    return rel


def _half_life(cfg: SearchConfig) -> float:
    from stratamem.config import profile

    return max(profile(cfg.profile).freshness_half_life_days, 1e-6)


def reason(breakdown: ScoreBreakdown, via: str = "") -> str:
    """One line: the signals that made the score, largest first."""
    signals = [
        (name, value)
        for name, value in (
            ("keyword", breakdown.keyword),
            ("vector", breakdown.vector),
            ("graph", breakdown.graph),
            ("fresh", breakdown.freshness),
        )
        if value > 0
    ]
    signals.sort(key=lambda item: -item[1])
    text = " + ".join(f"{name} {value:.2f}" for name, value in signals) or "no direct match"
    if breakdown.context > 0.005:
        text += f"; {breakdown.context:.2f} of it from the turns around it"
    if breakdown.expansion > 0:
        text = f"reached from {via[:12]} ({breakdown.expansion:.2f}); {text}"
    if breakdown.boost != 1.0:
        text += f"; boosted ×{breakdown.boost:g}"
    if breakdown.rerank is not None:
        text += f"; rerank {breakdown.rerank:.3f}"
    return text


def with_cards(
    response: SearchResponse, budget: int, breakdowns: list[ScoreBreakdown]
) -> SearchResponse:
    """``response`` with its hits packed into ``budget`` tokens as cards (a note says how many
    did not fit); recall packs its answers the same way."""
    from stratamem.retrieval import pieces
    from stratamem.retrieval.packing import pack

    cards, dropped = pack(
        response.hits,
        budget,
        reasons=[str(h.explain.get("reason", "")) for h in response.hits],
        breakdowns=breakdowns,
        tier0=[bool(h.explain.get("tier0")) for h in response.hits],
        count=pieces.count,
        truncate=pieces.truncate,
        at_least=pieces.at_least,
    )
    notes = response.notes
    if dropped:
        notes += (f"{dropped} hit(s) did not fit the {budget}-token budget",)
    return replace(response, cards=tuple(cards), notes=notes)
