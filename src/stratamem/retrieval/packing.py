"""Packing ranked hits into a token budget as cards.

Every hit first gets a one-line card (title, source, time). If even those overflow the budget,
the lowest-ranked are left out and the response says how many. What budget remains is spent
in rank order: a hit whose whole text fits becomes a ``full`` card; otherwise it becomes a
``compact`` card cut at a token boundary to its fair share of what is left (at least
``min_compact`` tokens); failing that it stays a ``line``. Tokens are counted with the
embedding model's word-piece tokenizer.

Tier-0 hits (pinned items, decisions) have a share of the budget kept for them
(``tier0_share``): their lines are placed first within it, and their texts are paid from
what it has left before the other hits are served, so a long answer never crowds out a pinned
decision. Cards stay in rank order. A budget of 0 packs nothing out: every hit is a ``full``
card.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from stratamem.types import Card, RetrievalHit, ScoreBreakdown, rfc3339

Counter = Callable[[str], int]
Truncator = Callable[[str, int], str]
TIER0_SHARE = 0.25


def header(hit: RetrievalHit) -> str:
    parts = [hit.title or hit.tree_scope, hit.tree_scope if hit.title else ""]
    when = rfc3339(hit.time_start)
    parts += [when[:16].replace("T", " ") if when else "", hit.author or ""]
    return " · ".join(p for p in parts if p)


def pack(
    hits: Sequence[RetrievalHit],
    budget: int,
    *,
    reasons: Sequence[str],
    breakdowns: Sequence[ScoreBreakdown],
    count: Counter,
    truncate: Truncator,
    tier0: Sequence[bool] = (),
    tier0_share: float = TIER0_SHARE,
    min_compact: int = 24,
    at_least: Counter | None = None,
) -> tuple[list[Card], int]:
    """(cards in rank order, how many hits did not fit even as a line). ``tier0`` marks the
    tier-0 hits (none when empty); ``budget`` 0 means no limit.

    ``at_least``, when given, is a lower bound on ``count`` that is cheap to take: a text
    that it shows to be over what the text may spend is not counted at all, and nothing else
    changes."""
    if budget < 0:
        raise ValueError("budget must be 0 (no limit) or a positive number of tokens")
    if not 0.0 <= tier0_share <= 1.0:
        raise ValueError("tier0_share must be between 0 and 1")
    marks = list(tier0) if tier0 else [False] * len(hits)
    if len(marks) != len(hits):
        raise ValueError("tier0 must mark every hit")
    heads = [header(h) for h in hits]
    line_costs = [count(h) + 1 for h in heads]

    def card(index: int, text: str, tokens: int, form: str) -> Card:
        return Card(
            hit=hits[index],
            text=text,
            tokens=tokens,
            form=form,
            reason=reasons[index],
            breakdown=breakdowns[index],
            tier0=marks[index],
        )

    if budget == 0:
        return [
            card(i, f"{heads[i]}\n{h.content}", line_costs[i] + count(h.content), "full")
            for i, h in enumerate(hits)
        ], 0

    reserve = int(budget * tier0_share) if any(marks) else 0
    kept: set[int] = set()
    used = 0
    for index in (i for i in range(len(hits)) if marks[i]):
        if used + line_costs[index] > reserve:
            break
        kept.add(index)
        used += line_costs[index]
    reserve_left = reserve - used
    for index in range(len(hits)):
        if index in kept:
            continue
        if used + line_costs[index] > budget:
            break
        kept.add(index)
        used += line_costs[index]
    remaining = budget - used
    # Tier-0 texts first, from what their share has left (never more than the budget has
    # left), then every other text from what remains.
    first = sorted(i for i in kept if marks[i])
    order = first + sorted(i for i in kept if not marks[i])
    cards: dict[int, Card] = {}
    for position, index in enumerate(order):
        in_reserve = position < len(first)
        pool = min(remaining, reserve_left) if in_reserve else remaining
        left = (len(first) if in_reserve else len(order)) - position
        body = hits[index].content
        # Whole when it fits what is left and, unless it is the last, its fair share or what
        # leaves every later text its least.
        most = pool if left == 1 else min(pool, max(pool // left, pool - min_compact * (left - 1)))
        # A bound never exceeds the text's length, so only a longer text can be over by it.
        over = at_least is not None and len(body) > most and at_least(body) > most
        body_cost = -1 if over else count(body)
        text, form, tokens, spent = heads[index], "line", line_costs[index], 0
        if 0 <= body_cost <= most:
            text, form, spent = f"{heads[index]}\n{body}", "full", body_cost
        else:
            share = max(min_compact, pool // left)
            if share <= pool:
                cut = truncate(body, share - 1).rstrip()
                if cut:
                    cost = count(cut + "…")
                    if cost <= pool:
                        text, form, spent = f"{heads[index]}\n{cut}…", "compact", cost
        remaining -= spent
        if in_reserve:
            reserve_left -= spent
        cards[index] = card(index, text, tokens + spent, form)
    return [cards[i] for i in sorted(cards)], len(hits) - len(kept)
