"""How a request narrows the caller's :class:`Filters`: one policy for the primitives and for
the search that ranks their hits, so both read the same leaves.

The caller's filters are a ceiling: a request may narrow them, never widen them. A requested
source must be one the filters admit; a requested kind is intersected with the filters'
kinds (nothing when they share none); a time window given in days replaces the filters'
window. A ``source_kind`` that is no :class:`SourceKind` names a platform (``slack``), which
only the summary reads can apply (:class:`Filters` has no platform).
"""

from __future__ import annotations

from datetime import UTC, datetime

from stratamem.store.base import Store
from stratamem.timeparse import as_utc, days_before
from stratamem.types import Filters, Source, SourceKind

__all__ = ["kind_or_platform", "narrow_kinds", "source_filters"]


def source_filters(
    store: Store,
    filters: Filters | None,
    *,
    source: str | None = None,
    source_kind: str | None = None,
    days: float | None = None,
    now: datetime | None = None,
) -> Filters | None:
    """``filters`` narrowed to one source (id or exact scope), a kind, and the last ``days``
    days before ``now`` (the current time when None); None when nothing can match: an unknown
    source, one the filters do not admit, or a kind they exclude.

    A bad ``days`` or ``now`` is a ``ValueError`` whether or not anything matches.
    """
    base = filters or Filters()
    kinds, _ = kind_or_platform(source_kind)
    since = until = None
    if days is not None:
        until = datetime.now(UTC) if now is None else as_utc(now, name="now")
        since = days_before(until, days, name="time_window_days")
    sources = base.sources
    if source:
        found = next((s for s in store.sources() if source in (s.id, s.scope)), None)
        if found is None or (base.sources and not _admits(base, found)):
            return None
        sources = (found.id,)
    allowed_kinds = narrow_kinds(base.kinds, kinds)
    if allowed_kinds is None:
        return None
    return Filters(
        sources=sources,
        kinds=allowed_kinds,
        since=since or base.since,
        until=until or base.until,
    )


def kind_or_platform(value: str | None) -> tuple[tuple[SourceKind, ...], tuple[str, ...]]:
    """A ``source_kind`` as (kinds, platforms): a :class:`SourceKind` value (any case) is a
    kind, anything else a platform; nothing for nothing."""
    if not value:
        return (), ()
    try:
        return (SourceKind(value.lower()),), ()
    except ValueError:
        return (), (value.lower(),)


def narrow_kinds(
    allowed: tuple[SourceKind, ...], wanted: tuple[SourceKind, ...]
) -> tuple[SourceKind, ...] | None:
    """The kinds both the caller's filters and the request admit; None when none are."""
    if not allowed or not wanted:
        return allowed or wanted
    return tuple(k for k in allowed if k in wanted) or None


def _admits(filters: Filters, source: Source) -> bool:
    """Whether one of the filters' source refs names ``source``: its id, its scope, or a
    prefix of its scope ending in ``*``."""
    return any(
        ref in (source.id, source.scope)
        or (ref.endswith("*") and source.scope.startswith(ref[:-1]))
        for ref in filters.sources
    )
