"""What a principal that holds the write permission may change, through a server.

A principal writes only what it can read, before and after: it may ingest into a new source or
into one it reads, and the source it leaves must be one it reads; the scopes it gives a source
are among its own; it forgets only sources it reads (a source hidden from it answers as one that
does not exist). A new source it names no scopes for gets the principal's own, so that it
can read what it wrote. It reads files only under the server's ingest roots, symbolic links
included: a path outside them, or a link inside them that leads out, is refused before
anything is read. The owner (a server without tokens, on loopback) may do all of this
anywhere.

A write for a user or an agent (an item, a conversation's turns, a fact of
``user=``/``agent=``: see :class:`~stratamem.types.Identity`) is one into that user's
memory, whose sources carry ``user:<id>`` and ``agent:<id>``: a principal makes it only when
it holds each of those scopes, or ``*`` (:func:`check_identity`). Holding ``private``, which
every such source also carries for the owner's tools, is not enough: a principal writes only
for the users it was given.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from stratamem.errors import AccessDenied, NotFoundError
from stratamem.store.access import ANY_SCOPE, may_read, parse_scopes
from stratamem.store.base import Store
from stratamem.types import Identity, Principal, Source, SourceKind

# How many entries of a directory to check for links that lead out, before giving up.
MAX_CHECKED_ENTRIES = 200_000


def require_write(principal: Principal | None) -> None:
    if principal is not None and not principal.write:
        raise AccessDenied(
            f"principal {principal.name!r} may not write (principal add --write grants it)"
        )


def new_source_access(principal: Principal | None) -> tuple[str, ...] | None:
    """The scopes a new source gets when the writer names none: the principal's own (but
    ``*``), or None (the kind's default) for the owner and for a principal of ``*`` alone."""
    if principal is None:
        return None
    own = tuple(s for s in principal.scopes if s != ANY_SCOPE)
    return own or None


def check_access(principal: Principal | None, access: Sequence[str] | None) -> None:
    """Refuse scopes the principal does not hold itself."""
    if principal is None or access is None or ANY_SCOPE in principal.scopes:
        return
    foreign = [s for s in parse_scopes(access) if s not in principal.scopes]
    if foreign:
        raise AccessDenied(
            f"principal {principal.name!r} may not give scopes it does not hold: "
            + ", ".join(foreign)
        )


def check_identity(principal: Principal | None, whose: Identity) -> None:
    """Refuse a write into ``whose`` memory by a principal that does not hold the scope of
    each user and agent named (``user:maya``) or ``*``; the owner writes for anyone."""
    if principal is None or ANY_SCOPE in principal.scopes:
        return
    missing = [label for label in whose.labels if label not in principal.scopes]
    if missing:
        raise AccessDenied(
            f"principal {principal.name!r} may not write the memory of {', '.join(missing)}: "
            "it holds no such scope"
        )


def admit_source(
    principal: Principal | None, before: Source | None, after: Source, *, named: bool
) -> tuple[str, ...] | None:
    """Refuse a write of ``after`` (``before``: the stored source, None if new) that the
    principal could not read before or after; the scopes to give a new source when the
    writer ``named`` none (its own: see :func:`new_source_access`)."""
    if principal is None:
        return None
    if before is not None and not may_read(principal, before):
        # As for any read: a source hidden from the principal is one it cannot name.
        raise AccessDenied(f"principal {principal.name!r} may not write source {after.scope!r}")
    given = None
    if before is None and not named:
        given = new_source_access(principal)
        if given is not None:
            after = replace(after, access=given)
    if not may_read(principal, after):
        raise AccessDenied(
            f"principal {principal.name!r} could not read source {after.scope!r} "
            f"with scopes {', '.join(after.access) or '(none)'}: give scopes it holds"
        )
    return given


def require_readable(principal: Principal | None, source: Source) -> None:
    """For a forget: a source the principal cannot read is one that does not exist (resolve
    the name as the principal first, so that the answer is the store's own for a missing one;
    this is the check behind it)."""
    if principal is not None and not may_read(principal, source):
        raise NotFoundError(f"no source with id or scope {source.id!r}")


def check_path(path: str | Path, roots: Sequence[Path], *, owner: bool) -> Path:
    """``path`` resolved, when the writer may read it: anywhere for the owner, else only
    under one of ``roots`` (resolved), with no link below it leading out. A check before the
    read, for a clear refusal; what makes a principal's read safe, whatever changes on disk
    after it, is that the read itself is confined (see :mod:`stratamem.ingest.confine`)."""
    target = Path(path).expanduser()
    if owner:
        return target
    if not roots:
        raise AccessDenied("this server reads no paths for principals (serve --ingest-root DIR)")
    resolved = _resolve(target, path)
    if not _inside(resolved, roots):
        raise AccessDenied(f"{path}: outside the server's ingest roots")
    if resolved.is_dir():
        _no_way_out(resolved, roots)
    return resolved


def _inside(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


def _resolve(path: Path, shown: str | Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a loop of links: RuntimeError before Python 3.13
        raise AccessDenied(f"{shown}: a link that leads nowhere") from None


def _no_way_out(folder: Path, roots: Sequence[Path]) -> None:
    """Refuse a link below ``folder`` that leads out of ``roots``. A link to a folder inside
    them is checked in turn, since a reader may follow it; each folder once."""
    seen = 0
    walked: set[Path] = set()
    for top, dirs, files in os.walk(folder, followlinks=True):
        here = _resolve(Path(top), top)
        if here in walked:
            dirs[:] = []
            continue
        walked.add(here)
        for name in (*dirs, *files):
            seen += 1
            if seen > MAX_CHECKED_ENTRIES:
                raise AccessDenied(
                    f"{folder}: over {MAX_CHECKED_ENTRIES:,} entries to check; "
                    "ingest a smaller folder"
                )
            entry = Path(top, name)
            if entry.is_symlink() and not _inside(_resolve(entry, entry), roots):
                raise AccessDenied(f"{entry}: a link out of the server's ingest roots")


def own_facts_source(store: Store, scope: str, principal: Principal) -> None:
    """Make ``scope`` (a principal's own facts, asserted without evidence) if it is missing,
    with the principal's scopes (see :func:`own_source`)."""
    own_source(
        store, scope, principal, platform="facts", title=f"Facts asserted by {principal.name}"
    )


def own_source(
    store: Store, scope: str, principal: Principal, *, platform: str, title: str
) -> None:
    """Make ``scope`` (a record source the principal writes to) if it is missing, with the
    principal's scopes; one that exists is left as it is. Refused, with one message whether
    it exists or not, where the principal could not read it: a source of that name that is
    not its own, or one its source globs leave out."""
    with store.transaction():
        try:
            found = store.resolve_source(scope)
        except NotFoundError:
            store.upsert_source(
                scope=scope,
                kind=SourceKind.RECORD,
                platform=platform,
                location="",
                title=title,
                access=new_source_access(principal),
            )
            found = store.resolve_source(scope)
        if not may_read(principal, found):
            raise AccessDenied(
                f"principal {principal.name!r} may not write to {scope!r}: "
                "write to a source it reads, or to its own"
            )
