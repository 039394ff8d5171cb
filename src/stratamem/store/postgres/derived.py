"""The columns a PostgreSQL store computes from others as it writes a row.

The store's own writes fill them (``insert_chunks``, ``insert_vectors``); a row written from
elsewhere must be given them here: a row copied from another store (``store/copy.py``) or a
sealed row restored (a source sealed by a SQLite store, then copied here, brings rows without
them, and a PostgreSQL one brings them as they were).

=================  ================================  ==========================================
table              columns                           computed from
=================  ================================  ==========================================
``chunks``         ``terms_content``, ``terms_title``  ``content``, ``title``: token counts with
                                                     the store's tokenizer (BM25's lengths)
``embeddings``     ``embedding``                     ``vector``: pgvector's form of the vector
=================  ================================  ==========================================

A row from another PostgreSQL store keeps its ``embedding`` (it depends on the row alone,
and writing it out again is the slow part of a copy); the token counts are counted again,
with this store's tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final


@dataclass(frozen=True, slots=True)
class Derived:
    """``columns``, written with the SQL ``marks``, are ``compute(store, rows)`` of the
    rows' ``needs``; ``portable`` where their values are right in any PostgreSQL store (they
    depend on nothing but the row), so that rows that bring them keep them."""

    columns: tuple[str, ...]
    needs: tuple[str, ...]
    marks: tuple[str, ...]
    compute: Callable[[Any, list[tuple[Any, ...]]], list[tuple[Any, ...]]]
    portable: bool = False


def _term_counts(store: Any, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return list(store.tokenizer.counts([(str(c), str(t)) for c, t in rows]))


def _vector_texts(store: Any, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    from stratamem.store.postgres.vectors import vector_text

    return [(vector_text(bytes(blob), int(dim)),) for blob, dim in rows]


DERIVED: Final = {
    "chunks": Derived(
        ("terms_content", "terms_title"), ("content", "title"), ("%s", "%s"), _term_counts
    ),
    "embeddings": Derived(
        ("embedding",), ("vector", "dim"), ("CAST(%s AS vector)",), _vector_texts, portable=True
    ),
}


def derived_columns(table: str) -> tuple[str, ...]:
    """The columns of ``table`` a PostgreSQL store computes."""
    found = DERIVED.get(table)
    return () if found is None else found.columns


def with_derived(
    store: Any, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]
) -> tuple[list[str], list[str], list[tuple[Any, ...]]]:
    """Rows of ``table`` (of ``columns``, derived ones among them or not) as the store writes
    them: (columns, each one's SQL, rows), the derived columns computed by ``store`` now
    (portable ones the rows bring kept as they are: computing them is what costs)."""
    derived = DERIVED.get(table)
    if derived is not None and derived.portable and set(derived.columns) <= set(columns):
        derived = None
    drop = () if derived is None else derived.columns
    keep = [i for i, c in enumerate(columns) if c not in drop]
    names = [columns[i] for i in keep]
    kept = [tuple(row[i] for i in keep) for row in rows]
    if derived is None:
        return names, ["%s"] * len(names), kept
    at = [names.index(c) for c in derived.needs]
    values = derived.compute(store, [tuple(r[i] for i in at) for r in kept]) if kept else []
    return (
        [*names, *derived.columns],
        ["%s"] * len(names) + list(derived.marks),
        [(*r, *v) for r, v in zip(kept, values, strict=True)],
    )
