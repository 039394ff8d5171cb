"""The access gate and filters as SQL: every read joins the owning source and applies them
before any limit."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from stratamem.store.base import to_ms
from stratamem.types import Filters


def gate_sql(visible: Sequence[str] | None, *, source: str = "s") -> tuple[str, list[Any]]:
    """The access gate over a sources alias: unlocked, and among ``visible`` (the source ids
    a principal may read; None for the owner, who reads every unlocked source)."""
    if visible is None:
        return f"{source}.locked = 0", []
    return (
        f"{source}.locked = 0 AND {source}.id IN (SELECT value FROM json_each(?))",
        [json.dumps(list(visible))],
    )


def filter_sql(
    filters: Filters,
    visible: Sequence[str] | None,
    *,
    chunk: str = "c",
    source: str = "s",
) -> tuple[str, list[Any]]:
    """The WHERE fragment for ``filters`` over a chunks alias joined to a sources alias.

    The access gate (:func:`gate_sql`) comes first: it sits inside every query, before any
    limit, so a source the caller may not read matches nothing.
    """
    gate, params = gate_sql(visible, source=source)
    clauses = [gate]
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
