"""What :class:`~stratamem.api.memory.Memory` and its facets share: the base of a facet, times
read as the command line reads them, source filters checked against what the reader may see,
the one-snapshot decorator, and the rewrite of the index files after a removal."""

from __future__ import annotations

import difflib
import functools
import logging
import weakref
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Concatenate, ParamSpec, Protocol, TypeVar, overload

from stratamem.errors import NotFoundError, StratamemError
from stratamem.retrieval.legs.keyword import index_file, sparse_index
from stratamem.retrieval.legs.vector import VectorLeg, drop_other_vector_files
from stratamem.store.base import Store
from stratamem.store.names import looks_like_id
from stratamem.timeparse import parse_when

if TYPE_CHECKING:
    from stratamem.api.memory import Memory

__all__ = [
    "Facet",
    "When",
    "check_sources",
    "in_one_snapshot",
    "ready_indexes",
    "rewrite_indexes",
    "when",
]

log = logging.getLogger("stratamem.api")

When = datetime | str
"""A time as every argument of the Python API takes it: a ``datetime`` (a naive one is UTC),
or what the command line reads (:func:`~stratamem.timeparse.parse_when`): an ISO 8601 date or
time (``2024-03-12``, ``2024-03-12T09:30``) or a span back from now (``24h``, ``7d``, ``2w``)."""


@overload
def when(value: When, name: str, *, now: datetime | None = None) -> datetime: ...
@overload
def when(value: When | None, name: str, *, now: datetime | None = None) -> datetime | None: ...
def when(value: When | None, name: str, *, now: datetime | None = None) -> datetime | None:
    """``value`` as a ``datetime`` (None and datetimes pass through unchanged); a string is
    read as the command line reads it, a span back counted from ``now`` (default: the clock).
    A string that is no time is a ``ValueError`` naming the argument ``name`` and the value."""
    if value is None or isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            return parse_when(value, now=now)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    raise ValueError(
        f"{name} must be a datetime or a time such as 2024-03-12 or 7d, not {type(value).__name__}"
    )


def check_sources(store: Store, refs: Iterable[str]) -> None:
    """Every source ref (id or scope) names a source the reader may see, else
    :class:`NotFoundError` naming the closest scopes it may see. A scope pattern ending in
    ``*`` is never checked: matching nothing is a fine answer for a pattern. A source hidden
    from the reader reads as one that does not exist, and is never offered as a close match."""
    wanted = [ref for ref in refs if ref and not ref.endswith("*")]
    if not wanted:
        return
    scopes = store.scopes()
    names = set(scopes.values())
    for ref in wanted:
        if (ref in scopes) if looks_like_id(ref) else (ref in names):
            continue
        try:
            store.resolve_source(ref)  # the owner names a locked source, which it may see
        except NotFoundError:
            raise NotFoundError(unknown_source(ref, scopes.values())) from None


def unknown_source(ref: str, scopes: Iterable[str]) -> str:
    """The one-line error for a source ref that names nothing the reader may see."""
    close = difflib.get_close_matches(ref, sorted(set(scopes)), n=3)
    hint = f"; did you mean {', '.join(repr(s) for s in close)}?" if close else ""
    return f"no source with id or scope {ref!r}{hint}"


class _HasStore(Protocol):
    store: Store


S = TypeVar("S", bound=_HasStore)
P = ParamSpec("P")
R = TypeVar("R")


def in_one_snapshot(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Run the method in one read snapshot of the store: its evidence search and the
    primitive it feeds read the same version, whatever other processes commit meanwhile."""

    def wrapper(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with self.store.read_snapshot():
            return method(self, *args, **kwargs)

    functools.update_wrapper(wrapper, method)
    return wrapper


def ready_indexes(vectors: VectorLeg | None) -> None:
    """Open the saved vector index while it still matches the store, so that a removal
    brings it up to date rather than rebuilding it."""
    keep = vectors.index_path() if vectors is not None else None
    if vectors is not None and keep is not None and keep.exists():
        vectors.index()


def rewrite_indexes(store: Store, vectors: VectorLeg | None) -> None:
    """After a removal: rewrite the index files beside the store without what went, and
    remove those that cannot be brought up to date, or written (a full disk): they are
    rebuilt when next searched."""
    keep = vectors.index_path() if vectors is not None else None
    try:
        sparse_index(store).persist_now()
    except OSError as exc:
        log.warning("the keyword index file could not be rewritten, removing it: %s", exc)
        stale = index_file(store)
        if stale is not None:
            stale.unlink(missing_ok=True)
    if vectors is not None:
        try:
            vectors.persist_now()
        except OSError as exc:
            log.warning("the vector index file could not be rewritten, removing it: %s", exc)
            keep = None
    drop_other_vector_files(store, keep)


class Facet:
    """One group of a memory's operations, reached as an attribute of it (``mem.items``): it
    holds nothing of its own, and reads and writes through the memory's store.

    It holds its memory weakly: a memory and its facets referring to each other would keep a
    closed memory (and its embedder's threads) alive until the cycle collector ran, and a
    process forked meanwhile (an ingest reading in a child) would inherit those threads."""

    def __init__(self, memory: Memory) -> None:
        self._memory_ref = weakref.ref(memory)

    @property
    def _memory(self) -> Memory:
        memory = self._memory_ref()
        if memory is None:
            raise StratamemError(f"the memory of this {type(self).__name__.lower()} is gone")
        return memory

    @property
    def _store(self) -> Store:
        return self._memory.store

    def _owner_only(self, action: str) -> None:
        self._memory._owner_only(action)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self._memory_ref()!r}>"
