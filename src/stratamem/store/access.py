"""The access role: principals, each source's access scopes, and the read rule.

Who may read which source (:func:`may_read`): the owner (no principal) reads every source
that is not locked. A principal reads a source that is not locked, has at least one access
scope, shares one with the principal (or the principal holds ``*``), and, where the principal
names source globs, matches one of them by scope or id. Everything else is invisible, and a
source with no scopes is invisible to every principal (fail closed). Every backend applies
this rule inside its reads, before any limit, through :meth:`AccessStore.visible_ids`.

A principal's token is never stored: only its public id and a slow hash of its secret
(see :mod:`stratamem.access.principals`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Protocol

from stratamem.types import Identity, Principal, Source, SourceKind

ANY_SCOPE = "*"


def may_read(principal: Principal | None, source: Source) -> bool:
    """Whether ``principal`` (None: the owner) may read ``source``."""
    if source.locked:
        return False
    if principal is None:
        return True
    if not source.access:
        return False
    if ANY_SCOPE not in principal.scopes and not set(source.access) & set(principal.scopes):
        return False
    if principal.sources:
        return any(
            glob == source.id or fnmatchcase(source.scope, glob) for glob in principal.sources
        )
    return True


def visible(principal: Principal | None, sources: Iterable[Source]) -> list[Source]:
    """The sources ``principal`` may read, in the order given."""
    return [s for s in sources if may_read(principal, s)]


def read_no_wider(
    principals: Iterable[Principal], sources: Iterable[Source], target: Source
) -> frozenset[str]:
    """The ids of the sources every principal reading ``target`` also reads (``target``
    itself included while it is not locked): what a writer into ``target`` may be shown
    without carrying a value to a principal that could not read it. A locked source is never
    among them. Computed from the principals and scopes of now: a principal added later
    with other scopes is not foreseen."""
    every = list(sources)
    if target.locked:
        return frozenset()
    readers = [p for p in principals if may_read(p, target)]
    return frozenset(s.id for s in every if not s.locked and all(may_read(p, s) for p in readers))


_SCOPE = re.compile(r"[a-z0-9][a-z0-9_.@:-]{0,63}")

# What a source is given when its ingest names no scopes: a channel export is shared by a
# team; mail, notes and records are one person's until said otherwise.
DEFAULT_ACCESS: dict[SourceKind, tuple[str, ...]] = {
    SourceKind.CHAT: ("team",),
    SourceKind.EMAIL: ("private",),
    SourceKind.DOCUMENT: ("private",),
    SourceKind.RECORD: ("private",),
}


def default_access(kind: SourceKind) -> tuple[str, ...]:
    return DEFAULT_ACCESS.get(kind, ("private",))


def identity_access(whose: Identity) -> tuple[str, ...] | None:
    """The access scopes a new source of ``whose`` memory gets: ``private`` and its
    ``user:<id>`` and ``agent:<id>`` labels, whatever its kind (a conversation with a user is
    not a team channel); None (the kind's default) for nobody's."""
    if not whose:
        return None
    return tuple(sorted({"private", *whose.labels}))


def parse_scopes(value: str | Iterable[str], *, allow_any: bool = False) -> tuple[str, ...]:
    """Scope labels from ``eng,team`` or a list: lowercased, deduplicated, sorted; a label
    is a letter or digit then up to 63 of letters, digits and ``_ . @ : -``. ``*`` (any scope)
    only where ``allow_any``. A user's or an agent's memory carries ``user:<id>`` or
    ``agent:<id>`` (see :class:`~stratamem.types.Identity`)."""
    parts = value.split(",") if isinstance(value, str) else list(value)
    out: set[str] = set()
    for part in parts:
        label = part.strip().lower()
        if not label:
            continue
        if label == ANY_SCOPE and allow_any:
            out.add(label)
            continue
        if not _SCOPE.fullmatch(label):
            raise ValueError(
                f"bad access scope {part.strip()!r}: use letters, digits and _ . @ : - "
                "(up to 64), starting with a letter or digit"
            )
        out.add(label)
    return tuple(sorted(out))


@dataclass(frozen=True, slots=True)
class PrincipalRow:
    """A principal as stored: the principal, and its token's public id and hash."""

    principal: Principal
    token_id: str
    token_hash: str


class AccessStore(Protocol):
    def read_as(self, principal: str | None) -> None:
        """Gate every read of this store for ``principal`` (None: the owner);
        :class:`~stratamem.errors.AccessDenied` if there is no such principal."""
        ...

    def principal(self) -> Principal | None:
        """Who reads through this store (None: the owner)."""
        ...

    def visible_ids(self) -> list[str] | None:
        """The source ids the reader may see, or None for the owner (every unlocked one)."""
        ...

    def set_access(self, source_id: str, access: Sequence[str]) -> None: ...

    def get_principal(self, name: str) -> Principal | None: ...

    def principal_row(
        self, *, name: str | None = None, token_id: str | None = None
    ) -> PrincipalRow | None: ...

    def principals(self) -> list[Principal]: ...

    def put_principal(self, row: PrincipalRow) -> None:
        """Create the principal, or replace it (scopes, token) when the name exists."""
        ...

    def delete_principal(self, name: str) -> bool: ...
