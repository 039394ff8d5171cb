"""The access gate and filters as SQL: every read joins the owning source and applies them
before any limit."""

from __future__ import annotations

from typing import Any

from stratamem.store.base import to_ms
from stratamem.types import Filters


def filter_sql(filters: Filters, *, chunk: str = "c", source: str = "s") -> tuple[str, list[Any]]:
    """The WHERE fragment for ``filters`` over a chunks alias joined to a sources alias.

    Locked sources never match: the access gate sits inside every query, before any limit.
    """
    clauses = [f"{source}.locked = 0"]
    params: list[Any] = []
    if filters.sources:
        parts = []
        for ref in filters.sources:
            if ref.endswith("*"):
                # LIKE's ASCII-only case folding, without its limit on a pattern's length.
                parts.append(f"lower(substr({source}.scope, 1, ?)) = lower(?)")
                params.extend([len(ref) - 1, ref[:-1]])
            else:
                parts.append(f"({source}.id = ? OR {source}.scope = ?)")
                params.extend([ref, ref])
        clauses.append("(" + " OR ".join(parts) + ")")
    if filters.kinds:
        clauses.append(f"{source}.kind IN ({','.join('?' * len(filters.kinds))})")
        params.extend(k.value for k in filters.kinds)
    if filters.since is not None:
        clauses.append(f"coalesce({chunk}.ts_end, {chunk}.ts_start) >= ?")
        params.append(to_ms(filters.since))
    if filters.until is not None:
        clauses.append(f"{chunk}.ts_start <= ?")
        params.append(to_ms(filters.until))
    return " AND ".join(clauses), params
