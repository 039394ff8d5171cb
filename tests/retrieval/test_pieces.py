"""The cheaper word-piece counts and cuts packing uses give exactly what the tokenizer's own
count and cut give, and the lower bound never exceeds the count."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratamem.embed.tokens import count_tokens, count_tokens_batch, truncate_to_tokens
from stratamem.retrieval import pieces
from stratamem.retrieval.packing import pack
from stratamem.types import NodeKind, RetrievalHit, ScoreBreakdown, TreeKind

TEXTS = [
    "",
    " ",
    "a",
    "Hello, world!",
    "unbelievably antidisestablishmentarianism supercalifragilistic words",
    "naïve café résumé — “quotes” and ‘more’ … ellipsis",
    "e\u0301 combining a\u0301b marks \u0301\u0301 alone",
    "Σίσυφος ΟΔΟΣ Straße ﬁne ligature",
    "東京は日本の首都です。北京也是首都。",
    "한국어 텍스트는 자모로 나뉩니다",
    "emoji 🙂🙂 and flags 🇫🇷 zero\u200bwidth soft\u00adhyphen",
    "tabs\tand\nnew\r\nlines\x1cseparator\x00null\ufffdreplacement",
    "x" * 150 + " " + "y" * 99 + " long words",
    "snake_case __dunder__ 3.14159 1,000,000 v2.0-rc1 a@b.com http://x.y/z?q=1",
    "... --- !!! ??? (((",
    "The quick brown fox jumps over the lazy dog. " * 40,
]


def test_counts_are_the_tokenizers() -> None:
    assert [pieces.count(t) for t in TEXTS] == [count_tokens(t) for t in TEXTS]
    assert [pieces.count(t) for t in TEXTS] == [count_tokens(t) for t in TEXTS]  # remembered


@pytest.mark.parametrize("text", TEXTS)
def test_cuts_are_the_tokenizers_at_every_length(text: str) -> None:
    for n in range(count_tokens(text) + 3):
        assert pieces.truncate(text, n) == truncate_to_tokens(text, n), n


def test_a_negative_cut_is_refused() -> None:
    with pytest.raises(ValueError, match="n must be"):
        pieces.truncate("text", -1)


@pytest.mark.parametrize("text", TEXTS)
def test_the_bound_is_below_the_count(text: str) -> None:
    assert pieces.at_least(text) <= count_tokens(text)


def test_every_letter_and_digit_alone_is_at_least_one_piece() -> None:
    """The bound rests on this: no letter or digit is normalised away."""
    alnum = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isalnum()]
    counts = count_tokens_batch(alnum)
    assert [c for c, n in zip(alnum, counts, strict=True) if n < 1] == []


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.integers(0, 60))
def test_any_text_counts_cuts_and_bounds_as_the_tokenizer(text: str, n: int) -> None:
    assert pieces.count(text) == count_tokens(text)
    assert pieces.at_least(text) <= count_tokens(text)
    assert pieces.truncate(text, n) == truncate_to_tokens(text, n)


def hit(index: int, content: str) -> RetrievalHit:
    return RetrievalHit(
        node_id=f"c{index:03d}",
        node_kind=NodeKind.LEAF,
        tree_id="",
        tree_kind=TreeKind.SOURCE,
        tree_scope="slack:#eng",
        level=0,
        content=content,
        entities=(),
        topics=(),
        time_start=None,
        time_end=None,
        score=1.0 / (index + 1),
        title=f"hit {index}",
    )


def packed(hits: list[RetrievalHit], budget: int, tier0: list[bool], fast: bool) -> tuple:
    helpers = (
        {"at_least": pieces.at_least}
        if fast
        else {"count": count_tokens, "truncate": truncate_to_tokens}
    )
    cards, dropped = pack(
        hits,
        budget,
        reasons=["r"] * len(hits),
        breakdowns=[ScoreBreakdown()] * len(hits),
        tier0=tier0,
        **({"count": pieces.count, "truncate": pieces.truncate} | helpers),
    )
    return [(c.hit.node_id, c.text, c.tokens, c.form, c.tier0) for c in cards], dropped


def test_packing_with_the_cheaper_counts_packs_the_same() -> None:
    """Texts near every boundary: each budget from 0 to past the whole payload."""
    hits = [hit(i, text) for i, text in enumerate(TEXTS[1:] + TEXTS[4:9])]
    total = sum(count_tokens(h.content) + 12 for h in hits)
    tier0 = [i % 5 == 2 for i in range(len(hits))]
    for budget in [*range(0, 150), *range(150, total + 40, 11)]:
        for marks in ([], tier0):
            assert packed(hits, budget, marks, True) == packed(hits, budget, marks, False), (
                budget,
                bool(marks),
            )


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.text(max_size=300), min_size=1, max_size=8),
    st.integers(0, 600),
    st.lists(st.booleans(), min_size=8, max_size=8),
)
def test_any_hits_pack_the_same(texts: list[str], budget: int, marks: list[bool]) -> None:
    hits = [hit(i, text) for i, text in enumerate(texts)]
    tier0 = marks[: len(hits)]
    assert packed(hits, budget, tier0, True) == packed(hits, budget, tier0, False)
