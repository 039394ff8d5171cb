"""The JSON an operation answers with, the same on every door: nodes, hits, cards, facts.

Compact on purpose: a node carries what a model needs to read it, cite it (``cite``) and go
further (``node_id``, ``children``); a hit adds its score and why it ranks there, and with
``explain`` the per-leg breakdown. A list's text is cut to :data:`PREVIEW_CHARS`; ``show``
gives a node whole.

With a token ``budget``, :func:`fit_cards` packs the hits so that the whole payload the caller
receives — every key, id, citation and text, counted with the same tokenizer as packing —
fits it, and a card never comes without content (a hit with no room for any of its text is
left out and counted in ``left_out``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from stratamem.embed.tokens import count_tokens
from stratamem.retrieval import pieces
from stratamem.retrieval.packing import header, pack
from stratamem.types import (
    NodeKind,
    QueryResponse,
    RetrievalHit,
    ScoreBreakdown,
    SearchResponse,
    rfc3339,
)

# A node's text in a list of results is cut to this many characters; ``show`` gives it whole.
PREVIEW_CHARS = 600


def dumps(data: Any) -> str:
    """The payload as sent: compact JSON, text as it is."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def node(hit: RetrievalHit, *, whole: bool = False, entities: bool = False) -> dict[str, Any]:
    """One node, compact: what a model needs to read it, cite it and go further."""
    text = hit.content if whole else hit.snippet or hit.content
    if not whole and len(text) > PREVIEW_CHARS:
        text = text[: PREVIEW_CHARS - 1] + "…"
    data: dict[str, Any] = {"node_id": hit.node_id, "kind": hit.node_kind.value}
    if hit.node_kind is NodeKind.SUMMARY:
        data["level"] = hit.level
    data["source"] = hit.tree_scope
    if hit.source_ref:
        data["cite"] = hit.source_ref
    data["time_start"] = rfc3339(hit.time_start)
    if hit.time_end is not None and hit.time_end != hit.time_start:
        data["time_end"] = rfc3339(hit.time_end)
    if hit.author:
        data["author"] = hit.author
    if hit.title:
        data["title"] = hit.title
    data["text"] = text
    if hit.node_kind is NodeKind.SUMMARY:
        data["children"] = list(hit.child_ids)
    if entities and hit.entities:
        data["entities"] = list(hit.entities)
    return data


def hit(found: RetrievalHit, *, explain: bool = False) -> dict[str, Any]:
    data = node(found)
    kind = found.explain.get("type")  # a recall hit's: turn, document, item, fact, …
    if kind:
        data = {"type": kind, **data}
    cites = [c for c in (found.explain.get("cites") or {}).values() if c]
    if found.node_kind is NodeKind.FACT and len(cites) > 1:
        data["cites"] = cites
    data["score"] = round(found.score, 4)
    if found.relevance is not None:
        data["relevance"] = round(found.relevance, 3)
    reason = found.explain.get("reason")
    if reason:
        data["why"] = str(reason)
    if explain:
        if "breakdown" in found.explain:
            data["breakdown"] = dict(found.explain["breakdown"])
        if found.node_kind is NodeKind.FACT and "bm25" in found.explain:
            data["breakdown"] = {
                "bm25": found.explain["bm25"],
                "cosine": found.explain.get("cosine"),
            }
        if "recall" in found.explain:
            data["recall"] = dict(found.explain["recall"])
    if explain and "signals" in found.explain:
        data["signals"] = dict(found.explain["signals"])
    return data


def nodes(response: QueryResponse, *, whole: bool = False) -> dict[str, Any]:
    return {
        "nodes": [node(h, whole=whole) for h in response.hits],
        "total": response.total,
        "truncated": response.truncated,
    }


def search(response: SearchResponse, *, budget: int | None, explain: bool) -> dict[str, Any]:
    """A search's answer: its hits, or with a ``budget`` its cards fitted to it."""
    data: dict[str, Any]
    data = {"hits": [hit(h, explain=explain) for h in response.hits]} if budget is None else {}
    data["total"] = response.total
    data["truncated"] = response.truncated
    data["nothing_relevant"] = response.nothing_relevant
    if response.notes:
        data["notes"] = list(response.notes)
    if response.legs and (explain or budget is None):
        data["legs"] = dict(response.legs)
    if budget is not None:
        data = fit_cards(response.hits, budget, data, explain=explain)
    return data


def _breakdown(found: RetrievalHit) -> ScoreBreakdown:
    raw = found.explain.get("breakdown") or {}
    names = ScoreBreakdown.__dataclass_fields__
    return ScoreBreakdown(**{k: v for k, v in raw.items() if k in names})


def _card(found: RetrievalHit, text: str, why: str, explain: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"node_id": found.node_id}
    if found.explain.get("type"):
        out["type"] = found.explain["type"]
    if found.source_ref:
        out["cite"] = found.source_ref
    if not (found.source_ref or "").startswith(found.tree_scope):
        out["source"] = found.tree_scope
    when = rfc3339(found.time_start)
    if when:
        out["time"] = when[:16] + "Z"  # to the minute: a card is read, not sorted
    if found.author:
        out["author"] = found.author
    if found.title:
        out["title"] = found.title
    out["text"] = text
    if found.relevance is not None:
        out["relevance"] = round(found.relevance, 3)
    if found.explain.get("tier0"):
        out["tier0"] = True
    if explain:
        out["why"] = why
        if "breakdown" in found.explain:
            out["breakdown"] = dict(found.explain["breakdown"])
        if "signals" in found.explain:
            out["signals"] = dict(found.explain["signals"])
    return out


def fit_cards(
    hits: Sequence[RetrievalHit], budget: int, envelope: dict[str, Any], *, explain: bool = False
) -> dict[str, Any]:
    """``envelope`` with ``cards``: the hits packed so that the whole payload, counted in
    tokens, fits ``budget`` (0: every hit whole), ``used`` (the payload's tokens, this count
    included) and ``left_out`` (hits with no room for any text). Each card's text is the
    hit's own text, whole or cut; its source, time and author are fields, not repeated in
    the text.

    A card's fields (id, citation, source, time; with ``explain`` its reason and scores) cost
    more on the wire than the one-line header the packing counts for it, so the packing is
    given, for the first ``n`` hits, the budget less the envelope and those fields, plus the
    headers it will charge; ``n`` goes down from the most cards that could hold any text
    until every one of the ``n`` gets some. What JSON escaping adds is taken off and the
    packing run again."""
    reasons = [str(h.explain.get("reason", "")) for h in hits]
    breakdowns = [_breakdown(h) for h in hits]
    tier0 = [bool(h.explain.get("tier0")) for h in hits]

    def payload(count: int, room: int) -> dict[str, Any]:
        cards, _dropped = pack(
            hits[:count],
            room,
            reasons=reasons[:count],
            breakdowns=breakdowns[:count],
            tier0=tier0[:count],
            count=pieces.count,
            truncate=pieces.truncate,
            at_least=pieces.at_least,
        )
        wire = []
        for card in cards:
            body = card.text.partition("\n")[2].strip() if card.form != "line" else ""
            if body:
                wire.append(_card(card.hit, body, card.reason, explain))
        found = {**envelope, "cards": wire, "budget": budget, "left_out": len(hits) - len(wire)}
        return _measured(found)

    if budget == 0:
        return payload(len(hits), 0)
    ranks = {h.node_id: n for n, h in enumerate(hits)}

    def better(found: dict[str, Any], than: dict[str, Any]) -> bool:
        """The most cards; of as many, the best ranked hits; then the most text."""

        def key(p: dict[str, Any]) -> tuple[int, tuple[int, ...], int]:
            return len(p["cards"]), tuple(-ranks[c["node_id"]] for c in p["cards"]), p["used"]

        return key(found) > key(than)

    best = _measured({**envelope, "cards": [], "budget": budget, "left_out": len(hits)})
    heads = [pieces.count(header(h)) + 1 for h in hits]
    fields = [
        count_tokens(dumps(_card(h, "", r, explain))) + 1
        for h, r in zip(hits, reasons, strict=True)
    ]
    free = budget - best["used"]
    most = 0
    while most < len(hits) and sum(fields[: most + 1]) + (most + 1) * MIN_CARD_TEXT <= free:
        most += 1
    for count in range(most, 0, -1):
        room = free - sum(fields[:count]) + sum(heads[:count])
        tried: set[int] = set()
        while room > sum(heads[:count]) and room not in tried and len(tried) < 6:
            tried.add(room)
            found = payload(count, room)
            left = budget - found["used"]
            if left >= 0:
                if better(found, best):
                    best = found
                if left < MIN_CARD_TEXT:
                    break
            # Over: take off what it is over by. Under: give the packing what the payload
            # left unused (a text cut short of its share, a pinned hit held to its share).
            room += left
        if len(best["cards"]) == count:
            break
    return best


# The fewest tokens of text a card is worth making for.
MIN_CARD_TEXT = 8


def _measured(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` with ``used``: its own tokens, the count itself included."""
    payload["used"] = 0
    for _ in range(4):
        used = count_tokens(dumps(payload))
        if used == payload["used"]:
            break
        payload["used"] = used
    payload["used"] = max(payload["used"], count_tokens(dumps(payload)))
    return payload


def fact(found: Any) -> dict[str, Any]:
    """A fact whole: what it says, when it was true, when it was recorded and stopped being
    believed, what it rests on and where it is from."""
    out: dict[str, Any] = found.to_dict()
    return out


def fact_hit(found: RetrievalHit) -> dict[str, Any]:
    """A fact found by a query: what it says, when it was true, where it is from, what it
    rests on (with citations), and its score."""
    explain = found.explain
    out: dict[str, Any] = {
        "id": found.node_id,
        "subject": explain["subject"],
        "predicate": explain["predicate"],
        "object": explain["object"],
        "valid_from": rfc3339(found.time_start),
        "valid_to": rfc3339(found.time_end),
        "source": found.tree_scope,
        "evidence": list(explain["evidence"]),
    }
    if explain["cites"]:
        out["cites"] = dict(explain["cites"])
    if explain["expired_at"] is not None:
        out["believed_until"] = explain["expired_at"]
    if explain["origin"] != "asserted":
        out["origin"] = explain["origin"]
    if explain["confidence"] != 1.0:
        out["confidence"] = explain["confidence"]
    out["score"] = round(found.score, 4)
    if found.relevance is not None:
        out["relevance"] = round(found.relevance, 3)
    return out
