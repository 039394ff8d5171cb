"""How ``recall`` merges its chunk leg and its fact leg, against orders worked out by hand."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from stratamem.memory.recall import Fusion, hit_type, leg_depth, merge
from stratamem.types import NodeKind, RetrievalHit, SourceKind, TreeKind

T = datetime(2024, 4, 1, tzinfo=UTC)


def _hit(
    node_id: str, score: float, *, evidence: tuple[str, ...] = (), source: str = "s"
) -> RetrievalHit:
    kind = NodeKind.FACT if node_id.startswith("f") else NodeKind.LEAF
    explain = {"evidence": list(evidence)} if kind is NodeKind.FACT else {}
    return RetrievalHit(
        node_id=node_id,
        node_kind=kind,
        tree_id="",
        tree_kind=TreeKind.SOURCE,
        tree_scope=source,
        level=0,
        content=node_id,
        entities=(),
        topics=(),
        time_start=T,
        time_end=T,
        score=score,
        source_id=source,
        explain=explain,
    )


CHUNKS = [_hit("c1", 0.9), _hit("c2", 0.5), _hit("c3", 0.4)]
FACTS = [_hit("f1", 0.8, evidence=("c3",)), _hit("f2", 0.7, evidence=("gone",))]


def _order(fusion: Fusion) -> list[tuple[str, float]]:
    return [(h.node_id, round(h.score, 6)) for h in merge(CHUNKS, FACTS, fusion=fusion)]


def test_rrf_interleaves_by_rank_and_a_tie_goes_to_the_chunk() -> None:
    # k = 1, w = 1: c 1/2, 1/3, 1/4; f 1/2, 1/3.
    assert _order(Fusion("rrf", 1, 1.0)) == [
        ("c1", 0.5),
        ("f1", 0.5),
        ("c2", 0.333333),
        ("f2", 0.333333),
        ("c3", 0.25),
    ]
    # w = 0.5: f 1/4, 1/6.
    assert [n for n, _ in _order(Fusion("rrf", 1, 0.5))] == ["c1", "c2", "c3", "f1", "f2"]


def test_lend_raises_the_chunks_a_fact_cites_and_puts_the_fact_after_them() -> None:
    # c3: 1/4 + 1/2; f1: 1/2 + 1/4 (its evidence c3's own); f2 cites nothing found: 1/3.
    assert _order(Fusion("lend", 1, 1.0)) == [
        ("c3", 0.75),
        ("f1", 0.75),
        ("c1", 0.5),
        ("c2", 0.333333),
        ("f2", 0.333333),
    ]


def test_parity_weighs_the_legs_own_scores() -> None:
    assert _order(Fusion("parity", 60, 0.5)) == [
        ("c1", 0.9),
        ("c2", 0.5),
        ("c3", 0.4),
        ("f1", 0.4),
        ("f2", 0.35),
    ]


def test_a_cap_moves_the_facts_past_the_head_in_their_order() -> None:
    assert [n for n, _ in _order(Fusion("rrf", 1, 1.0, head=2, head_facts=0))] == [
        "c1",
        "c2",
        "f1",
        "f2",
        "c3",
    ]
    assert [n for n, _ in _order(Fusion("rrf", 1, 1.0, head=3, head_facts=1))] == [
        "c1",
        "f1",
        "c2",
        "f2",
        "c3",
    ]


def test_the_merge_says_each_hits_leg_and_rank() -> None:
    merged = {h.node_id: h.explain["recall"] for h in merge(CHUNKS, FACTS)}
    assert merged["c2"]["leg"] == "chunks"
    assert merged["c2"]["rank"] == 2
    assert merged["f2"]["leg"] == "facts"
    assert merged["f2"]["rank"] == 2
    assert merge([], []) == []
    assert [h.node_id for h in merge([], FACTS)] == ["f1", "f2"]


def test_a_bad_fusion_is_refused() -> None:
    with pytest.raises(ValueError, match="must be one of lend, rrf, parity, not 'sum'"):
        Fusion("sum")
    with pytest.raises(ValueError, match="k ≥ 1"):
        Fusion("rrf", 0)


def test_a_hit_is_typed_by_its_source() -> None:
    kinds = {"chat": SourceKind.CHAT, "mail": SourceKind.EMAIL, "doc": SourceKind.DOCUMENT}
    kinds |= {"mem": SourceKind.RECORD, "convo": SourceKind.CHAT}
    platforms = {"mem": "memory", "convo": "memory", "doc": "markdown"}
    typed = {
        source: hit_type(_hit("c", 1.0, source=source), kinds, platforms)
        for source in ("chat", "mail", "doc", "mem", "convo", "unknown")
    }
    assert typed == {
        "chat": "turn",
        "mail": "message",
        "doc": "document",
        "mem": "item",
        "convo": "turn",
        "unknown": "record",
    }
    assert hit_type(FACTS[0], kinds, platforms) == "fact"
    assert leg_depth(10) == 50
    assert leg_depth(200) == 200
