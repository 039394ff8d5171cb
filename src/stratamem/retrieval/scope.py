"""How a request narrows the caller's :class:`Filters`: one policy for the primitives and for
the search that ranks their hits, so both read the same leaves.

The caller's filters are a ceiling: a request may narrow them, never widen them. A requested
source must be one the filters admit; a requested kind is intersected with the filters'
kinds (nothing when they share none); a time window given in days replaces the filters'
window. A ``source_kind`` that is no :class:`SourceKind` names a platform (``slack``), which
only the summary reads can apply (:class:`Filters` has no platform).

Users, agents and sessions are sources (see :class:`~stratamem.types.Identity`): filters
that name them are turned here, in :func:`resolve`, into the ids of the sources the reader
may see whose scope names them, so every read applies them as it applies a source filter,
before any limit. Every read that takes filters resolves them first; a store refuses filters
left unresolved rather than ignore them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from stratamem.store.base import Store
from stratamem.store.names import names_source
from stratamem.timeparse import as_utc, days_before
from stratamem.types import Filters, Identity, Source, SourceKind

__all__ = [
    "admitted_sources",
    "identity_sources",
    "kind_or_platform",
    "narrow_kinds",
    "resolve",
    "source_filters",
]


def resolve(store: Store, filters: Filters | None) -> Filters | None:
    """``filters`` with its users, agents and sessions turned into source ids: those of the
    sources the reader may see that the filters' sources admit and whose identity has one of
    the ids given of each part given. None when no source is left (nothing can match);
    ``filters`` as given when it names no identity."""
    if filters is None or not filters.names_identity:
        return filters
    scopes = store.scopes()
    chosen = tuple(
        sorted(
            sid
            for sid, scope in scopes.items()
            if filters.admits(Identity.parse(scope))
            and (not filters.sources or _admits_ref(filters, sid, scope))
        )
    )
    if not chosen:
        return None
    return Filters(sources=chosen, kinds=filters.kinds, since=filters.since, until=filters.until)


def identity_sources(
    store: Store,
    *,
    users: str | Sequence[str] | None = None,
    agents: str | Sequence[str] | None = None,
    sessions: str | Sequence[str] | None = None,
) -> set[str] | None:
    """The ids of the sources the reader may see that hold the memory of one of ``users``
    (and of ``agents``, and of ``sessions``, each where given); None when none is given (no
    narrowing). For the reads that filter by source id themselves (facts)."""
    wanted = Filters(users=_many(users), agents=_many(agents), sessions=_many(sessions))
    if not wanted.names_identity:
        return None
    found = resolve(store, wanted)
    return set() if found is None else set(found.sources)


def admitted_sources(store: Store, filters: Filters | None) -> set[str] | None:
    """The ids of the sources the reader may see that ``filters`` admit (its sources, kinds,
    users, agents and sessions); None when the filters name none of those (no narrowing).
    For the reads that filter by source id themselves (facts)."""
    if filters is None or not (filters.sources or filters.kinds or filters.names_identity):
        return None
    found = resolve(store, filters)
    if found is None:
        return set()
    kinds = store.source_kinds()
    return {
        sid
        for sid, scope in store.scopes().items()
        if (not found.sources or _admits_ref(found, sid, scope))
        and (not found.kinds or kinds.get(sid) in found.kinds)
    }


def _many(value: str | Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


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
    resolved = resolve(store, filters)
    if resolved is None and filters is not None:
        return None
    base = resolved or Filters()
    kinds, _ = kind_or_platform(source_kind)
    since = until = None
    if days is not None:
        until = datetime.now(UTC) if now is None else as_utc(now, name="now")
        since = days_before(until, days, name="time_window_days")
    sources = base.sources
    if source:
        found = next((s for s in store.sources() if names_source(source, s.id, s.scope)), None)
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
    return _admits_ref(filters, source.id, source.scope)


def _admits_ref(filters: Filters, source_id: str, scope: str) -> bool:
    # A prefix compares as the store's SQL does: ASCII letters in any case.
    return any(
        names_source(ref, source_id, scope)
        or (ref.endswith("*") and _ascii_lower(scope).startswith(_ascii_lower(ref[:-1])))
        for ref in filters.sources
    )


def _ascii_lower(text: str) -> str:
    return text.translate(_ASCII_LOWER)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
