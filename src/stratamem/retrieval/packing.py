"""Packing ranked hits into a token budget as cards.

Every hit first gets a one-line card (title, source, time). If even those overflow the budget,
the lowest-ranked are left out and the response says how many. What budget remains is spent
in rank order: a hit whose whole text fits becomes a ``full`` card; otherwise it becomes a
``compact`` card cut at a token boundary to its fair share of what is left (at least
``min_compact`` tokens); failing that it stays a ``line``. Tokens are counted with the
embedding model's word-piece tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from stratamem.types import Card, RetrievalHit, ScoreBreakdown, rfc3339

Counter = Callable[[str], int]
Truncator = Callable[[str, int], str]


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
    min_compact: int = 24,
) -> tuple[list[Card], int]:
    """(cards in rank order, how many hits did not fit even as a line)."""
    if budget <= 0:
        raise ValueError("budget must be a positive number of tokens")
    heads = [header(h) for h in hits]
    line_costs = [count(h) + 1 for h in heads]
    kept = 0
    used = 0
    for cost in line_costs:
        if used + cost > budget:
            break
        used += cost
        kept += 1
    remaining = budget - used
    cards: list[Card] = []
    for index in range(kept):
        hit = hits[index]
        body = hit.content
        body_cost = count(body)
        left = kept - index
        text, form, tokens = heads[index], "line", line_costs[index]
        if body_cost <= remaining and (
            body_cost <= remaining // left
            or index == kept - 1
            or body_cost <= remaining - min_compact * (left - 1)
        ):
            text, form = f"{heads[index]}\n{body}", "full"
            tokens += body_cost
            remaining -= body_cost
        else:
            share = max(min_compact, remaining // left)
            if share <= remaining and share >= min_compact:
                cut = truncate(body, share - 1).rstrip()
                if cut:
                    cost = count(cut + "…")
                    if cost <= remaining:
                        text, form = f"{heads[index]}\n{cut}…", "compact"
                        tokens += cost
                        remaining -= cost
        cards.append(
            Card(
                hit=hit,
                text=text,
                tokens=tokens,
                form=form,
                reason=reasons[index],
                breakdown=breakdowns[index],
            )
        )
    return cards, len(hits) - kept
