"""Hits built from the rows the tables read."""

from __future__ import annotations

import json
from typing import Any

from stratamem.store.base import from_ms
from stratamem.store.dialect import Row
from stratamem.types import NodeKind, RetrievalHit, TreeKind


def keyword_hit(row: Row, entities: list[str], score: float, snippet: str) -> RetrievalHit:
    """A keyword leg's hit of the chunk ``row`` (joined to its source's ``scope``)."""
    explain: dict[str, Any] = {"keyword": round(score, 4)}
    return RetrievalHit(
        node_id=row["id"],
        node_kind=NodeKind.LEAF,
        tree_id="",
        tree_kind=TreeKind.SOURCE,
        tree_scope=row["scope"],
        level=0,
        content=row["content"],
        entities=tuple(entities),
        topics=tuple(json.loads(row["tags"])),
        time_start=from_ms(row["ts_start"]),
        time_end=from_ms(row["ts_end"]),
        score=score,
        source_ref=row["source_ref"],
        source_id=row["source_id"],
        author=row["author"],
        title=row["title"],
        snippet=snippet,
        explain=explain,
    )
