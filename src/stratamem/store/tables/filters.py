"""The access gate and filters as SQL: every read joins the owning source and applies them
before any limit."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from stratamem.store.base import to_ms
from stratamem.store.dialect import Dialect
from stratamem.store.names import looks_like_id
from stratamem.types import Filters


def gate_sql(
    d: Dialect, visible: Sequence[str] | None, *, source: str = "s", probe: bool = False
) -> tuple[str, list[Any]]:
    """The access gate over a sources alias: unlocked, and among ``visible`` (the source ids
    a principal may read; None for the owner, who reads every unlocked source).

    ``probe`` is for reads that look rows up by a list of ids: the gate is then only a
    check on each row found (``+`` keeps SQLite from driving the read by it, which would
    visit every row of every visible source). Reads that scan keep the plain form, which
    lets SQLite start from the visible sources."""
    if visible is None:
        return f"{source}.locked = 0", []
    column = f"{d.hint}{source}.id" if probe else f"{source}.id"
    return (
        f"{source}.locked = 0 AND {column} IN (SELECT value FROM {d.json_rows})",
        [json.dumps(list(visible))],
    )


def of_visible_sql(d: Dialect, visible: Sequence[str] | None, column: str) -> tuple[str, list[Any]]:
    """``column`` (a row's source id) among ``visible`` (``"1 = 1"`` for the owner): for reads
    keyed by entity, whose ``(entity_id, source_id)`` index then visits only the visible
    sources' rows, so their work does not grow with what the reader may not see."""
    if visible is None:
        return "1 = 1", []
    return f"{column} IN (SELECT value FROM {d.json_rows})", [json.dumps(list(visible))]


def trees_sql(
    d: Dialect, visible: Sequence[str] | None, *, summary: str = "sm"
) -> tuple[str, list[Any]]:
    """For a reader narrowed to ``visible`` sources: their summaries, by tree, as a
    constraint the summaries' tree index answers (``"1 = 1"`` for the owner). With it a read
    visits the summaries of those trees only, so its work does not grow with what the
    reader may not see."""
    if visible is None:
        return "1 = 1", []
    return (
        f"""{summary}.tree_id IN (SELECT gt.id FROM trees gt
                WHERE gt.source_id IN (SELECT value FROM {d.json_rows}))""",
        [json.dumps(list(visible))],
    )


def filter_sql(
    d: Dialect,
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
    if filters.names_identity:
        # Read as no filter, they would show what the caller asked to leave out.
        raise ValueError(
            "filters naming users, agents or sessions are resolved to sources before a "
            "store reads them (stratamem.retrieval.scope.resolve)"
        )
    gate, params = gate_sql(d, visible, source=source)
    clauses = [gate]
    if filters.sources:
        parts = []
        for ref in filters.sources:
            if ref.endswith("*"):
                # LIKE's ASCII-only case folding, without its limit on a pattern's length.
                parts.append(f"lower(substr({source}.scope, 1, {d.p})) = lower({d.p})")
                params.extend([len(ref) - 1, ref[:-1]])
            elif looks_like_id(ref):
                # By id alone: no source's name may stand in for another's id.
                parts.append(f"{source}.id = {d.p}")
                params.append(ref)
            else:
                parts.append(f"{source}.scope = {d.p}")
                params.append(ref)
        clauses.append("(" + " OR ".join(parts) + ")")
    if filters.kinds:
        clauses.append(f"{source}.kind IN ({d.marks(len(filters.kinds))})")
        params.extend(k.value for k in filters.kinds)
    if filters.since is not None:
        clauses.append(f"coalesce({chunk}.ts_end, {chunk}.ts_start) >= {d.p}")
        params.append(to_ms(filters.since))
    if filters.until is not None:
        clauses.append(f"{chunk}.ts_start <= {d.p}")
        params.append(to_ms(filters.until))
    return " AND ".join(clauses), params
