"""The summarizer contract: what a seal hands over and what comes back.

A summarizer turns the items of one buffer (leaf chunks for a level-1 summary, summaries for the
levels above) into one text of at most ``budget`` tokens (counted with
:func:`stratamem.embed.tokens.estimate_tokens`). It must never return an empty string for
non-empty input. Summarizers run outside any write transaction, so a slow one holds no lock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class SummaryItem:
    """One input to a summary: a chunk (``level`` 0) or a sealed summary (``level`` ≥ 1)."""

    node_id: str
    text: str
    level: int = 0
    author: str | None = None
    time_start: datetime | None = None
    time_end: datetime | None = None
    title: str = ""


@runtime_checkable
class Summarizer(Protocol):
    """``name`` is recorded with every summary it writes."""

    name: str

    def summarize(self, items: Sequence[SummaryItem], *, budget: int) -> str: ...
