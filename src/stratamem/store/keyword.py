"""The keyword role: the backend's full-text index, as ranked hits and as the term statistics
the in-process BM25 index is built from."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from stratamem.types import Filters, RetrievalHit


class KeywordStore(Protocol):
    def fts_search(
        self,
        expression: str,
        filters: Filters,
        limit: int,
        *,
        snippets: bool = True,
        count: bool = True,
    ) -> tuple[list[RetrievalHit], int]: ...

    def keyword_hits(
        self, expression: str, ranked: Sequence[tuple[int, float]], *, snippets: bool = True
    ) -> list[RetrievalHit]: ...
