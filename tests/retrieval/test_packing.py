"""Packing ranked hits into a token budget: cards in rank order, every one paid for, tier-0
hits served from the share kept for them, and budget 0 as no limit."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from stratamem.retrieval.packing import TIER0_SHARE, header, pack
from stratamem.types import NodeKind, RetrievalHit, ScoreBreakdown, TreeKind


def words(text: str) -> int:
    return len(text.split())


def first_words(text: str, n: int) -> str:
    return " ".join(text.split()[:n])


def hit(index: int, length: int) -> RetrievalHit:
    return RetrievalHit(
        node_id=f"c{index:03d}",
        node_kind=NodeKind.LEAF,
        tree_id="",
        tree_kind=TreeKind.SOURCE,
        tree_scope="slack:#eng",
        level=0,
        content=" ".join(f"w{index}_{i}" for i in range(length)),
        entities=(),
        topics=(),
        time_start=None,
        time_end=None,
        score=1.0 / (index + 1),
        title=f"hit {index}",
    )


def packed(lengths: list[int], budget: int, tier0: list[bool] | None = None) -> tuple:
    hits = [hit(i, n) for i, n in enumerate(lengths)]
    return pack(
        hits,
        budget,
        reasons=["r"] * len(hits),
        breakdowns=[ScoreBreakdown()] * len(hits),
        count=words,
        truncate=first_words,
        tier0=tier0 or (),
    )


def test_budget_zero_gives_every_hit_whole() -> None:
    cards, dropped = packed([50, 400, 3], 0, [False, True, False])
    assert dropped == 0
    assert [c.form for c in cards] == ["full"] * 3
    assert [c.tier0 for c in cards] == [False, True, False]
    assert cards[1].text.endswith(hit(1, 400).content)


def test_a_pinned_hit_low_in_the_ranking_keeps_its_text() -> None:
    # Ten long hits ahead of a short pinned one: without its share, the budget would be gone
    # before it is reached.
    lengths = [200] * 10 + [30]
    marks = [False] * 10 + [True]
    plain, _ = packed(lengths, 300)
    assert plain[-1].form != "full" or len(plain) < 11
    cards, dropped = packed(lengths, 300, marks)
    assert dropped == 0
    assert cards[-1].tier0
    assert cards[-1].form == "full"
    assert [c.hit.node_id for c in cards] == [f"c{i:03d}" for i in range(11)]
    assert sum(c.tokens for c in cards) <= 300


def test_a_negative_budget_is_refused() -> None:
    import pytest

    with pytest.raises(ValueError, match="budget must be 0"):
        packed([5], -1)


@given(
    lengths=st.lists(st.integers(0, 300), min_size=1, max_size=25),
    budget=st.integers(1, 3000),
    marks=st.lists(st.booleans(), min_size=25, max_size=25),
)
def test_cards_fit_keep_rank_order_and_tier0_lines_come_first(
    lengths: list[int], budget: int, marks: list[bool]
) -> None:
    tier0 = marks[: len(lengths)]
    cards, dropped = packed(lengths, budget, tier0)
    hits = [hit(i, n) for i, n in enumerate(lengths)]
    assert sum(c.tokens for c in cards) <= budget
    assert len(cards) + dropped == len(hits)
    indexes = [int(c.hit.node_id[1:]) for c in cards]
    assert indexes == sorted(indexes)
    for card in cards:
        index = int(card.hit.node_id[1:])
        assert card.tier0 == tier0[index]
        line = header(hits[index])
        assert card.text.startswith(line)
        assert card.tokens == words(card.text) + 1
        assert card.form in {"full", "compact", "line"}
        if card.form == "full":
            assert card.text == f"{line}\n{hits[index].content}"
    # The tier-0 lines that fit in their share are all there, whatever ranks above them.
    reserve = int(budget * TIER0_SHARE) if any(tier0) else 0
    spent = 0
    for index in (i for i in range(len(hits)) if tier0[i]):
        cost = words(header(hits[index])) + 1
        if spent + cost > reserve:
            break
        spent += cost
        assert index in indexes
    # Without tier-0 marks, what is kept is a prefix of the ranking.
    plain, _ = packed(lengths, budget)
    kept = [int(c.hit.node_id[1:]) for c in plain]
    assert kept == list(range(len(kept)))
