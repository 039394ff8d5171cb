"""What a principal that holds the write permission may change, through a server.

A principal writes only what it can read, before and after: it may ingest into a new source or
into one it reads, and the source it leaves must be one it reads; the scopes it gives a source
are among its own, and it takes away only scopes it holds (giving ``team`` to a source of
``team`` and ``hr`` leaves ``hr`` there: :func:`kept_scopes`); it forgets only sources it reads
(a source hidden from it answers as one that does not exist). A new source it names no scopes
for gets the principal's own, so that it can read what it wrote. It reads files only under
the server's ingest roots, symbolic links included: a path outside them, or a link inside
them that leads out, is refused before anything is read. The owner (a server without
tokens, on loopback) may do all of this anywhere.

Names: a principal's new sources live under its name (``bob/mbox:personal``: see
:mod:`stratamem.store.names`), and record it as their maker (``Source.created_by``); it writes
a source of another name only where that source exists and it reads it, which is how the owner
lends a name. So a principal can never make a name the owner will write to (``memory``,
``facts:asserted``, ``mbox:personal``), and the owner's writes refuse a source a principal
made unless told to join it (:func:`refuse_foreign`). A name that reads as a user's or an
agent's memory (``memory/user:maya``) is made only by a write for that identity.

A write for a user or an agent (an item, a conversation's turns, a fact of
``user=``/``agent=``: see :class:`~stratamem.types.Identity`) is one into that user's
memory, whose sources carry ``user:<id>`` and ``agent:<id>``: a principal makes it only when
it holds each of those scopes, or ``*`` (:func:`check_identity`). Holding ``private``, which
every such source also carries for the owner's tools, is not enough: a principal writes only
for the users it was given.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from stratamem.errors import AccessDenied, NotFoundError
from stratamem.store.access import ANY_SCOPE, may_read, parse_scopes
from stratamem.store.base import Store
from stratamem.store.names import check_name, looks_like_id, namespaced, normal_name
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
    each user and agent named (``user:maya``) or ``*``; the owner writes for anyone. A
    session alone names nobody a principal could hold the scope of (its sources carry only
    ``private``, as the owner's own memory does), so a principal writes a session's memory
    only with the user or agent it belongs to."""
    if principal is None or ANY_SCOPE in principal.scopes:
        return
    if whose and not whose.labels:
        raise AccessDenied(
            f"principal {principal.name!r} may write a session's memory only for a user or "
            "an agent it holds: give user or agent as well"
        )
    missing = [label for label in whose.labels if label not in principal.scopes]
    if missing:
        raise AccessDenied(
            f"principal {principal.name!r} may not write the memory of {', '.join(missing)}: "
            "it holds no such scope"
        )


def kept_scopes(principal: Principal, old: Sequence[str], given: Sequence[str]) -> tuple[str, ...]:
    """The scopes a source of scopes ``old`` is left with when ``principal`` gives it
    ``given``: those, and every old one the principal does not hold, which it may not take
    away (a principal of ``*`` holds them all)."""
    if ANY_SCOPE in principal.scopes:
        return tuple(sorted(set(given)))
    return tuple(sorted(set(given) | {s for s in old if s not in principal.scopes}))


def admit_source(
    principal: Principal | None, before: Source | None, after: Source, *, named: bool
) -> tuple[str, ...] | None:
    """Refuse a write of ``after`` (``before``: the stored source, None if new) that the
    principal could not read before or after; the scopes to give it: a new one's when the
    writer ``named`` none (its own: see :func:`new_source_access`), an existing one's when it
    named some (:func:`kept_scopes`). A source of a user's or an agent's memory is made only
    by a write for that identity, and keeps its scopes."""
    if principal is None:
        return None
    if before is not None and not may_read(principal, before):
        # As for any read: a source hidden from the principal is one it cannot name.
        raise AccessDenied(f"principal {principal.name!r} may not write source {after.scope!r}")
    whose = Identity.parse(after.scope)
    if whose:
        return _admit_identity(principal, before, after, whose, named=named)
    given = None
    if before is None and not named:
        given = new_source_access(principal)
    elif before is not None and named:
        given = kept_scopes(principal, before.access, after.access)
    if given is not None:
        after = replace(after, access=given)
    if not may_read(principal, after):
        raise AccessDenied(
            f"principal {principal.name!r} could not read source {after.scope!r} "
            f"with scopes {', '.join(after.access) or '(none)'}: give scopes it holds"
        )
    return given


def _admit_identity(
    principal: Principal, before: Source | None, after: Source, whose: Identity, *, named: bool
) -> tuple[str, ...] | None:
    if before is None:
        raise AccessDenied(reserved(principal, after.scope, whose))
    check_identity(principal, whose)
    if named and set(after.access) != set(before.access):
        raise AccessDenied(
            f"principal {principal.name!r} may not change the scopes of {after.scope!r}, "
            "a user's or an agent's memory"
        )
    return None


def reserved(principal: Principal, scope: str, whose: Identity) -> str:
    """Why ``principal`` may not make source ``scope``, whose name reads as ``whose``
    memory: the one-line refusal."""
    of = ", ".join(f"{kind} {value!r}" for kind, value in whose.parts())
    return (
        f"principal {principal.name!r} may not make source {scope!r}: the name is that of "
        f"the memory of {of}, made only by a write for it (user=, agent=, session=)"
    )


def refuse_foreign(source: Source, *, join: bool) -> None:
    """For the owner's writes: refuse ``source`` where a principal made it, unless told to
    ``join`` it (its scopes are that principal's choice, and so may be its readers)."""
    if source.created_by is not None and not join:
        raise AccessDenied(
            f"source {source.scope!r} was made by principal {source.created_by!r}: "
            "pass join (--join) to write to it"
        )


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


def write_target(
    principal: Principal, asked: str, reads: Callable[[str], Source | None]
) -> str | None:
    """The source a principal's write asked of ``asked`` goes to, where it exists: ``asked``
    itself (in NFC form) where the principal reads a source of that name (``reads``: the
    source of a name as the principal sees the store, None for none); else the source of that
    name in its namespace where it reads it. None: neither exists, and the write makes
    :func:`own_name` of ``asked`` (:func:`own_source`)."""
    if looks_like_id(asked):
        found = reads(asked)  # an id names one source, never a name of the namespace
        return None if found is None else found.id
    name = normal_name(asked)
    for candidate in (name, own_name(principal, name)):
        found = reads(candidate)
        if found is not None:
            return found.id
    return None


def own_name(principal: Principal, asked: str) -> str:
    """The name ``asked`` takes in ``principal``'s namespace: ``<its name>/<asked>``;
    :class:`~stratamem.errors.InvalidArgument` where ``asked`` is no name a source may take."""
    return namespaced(principal.name, check_name(normal_name(asked)))


def own_facts_source(store: Store, scope: str, principal: Principal) -> None:
    """Make ``scope`` (a principal's own facts, asserted without evidence) if it is missing,
    with the principal's scopes (see :func:`own_source`)."""
    own_source(
        store, scope, principal, platform="facts", title=f"Facts asserted by {principal.name}"
    )


def own_source(
    store: Store, scope: str, principal: Principal, *, platform: str, title: str
) -> None:
    """Make ``scope`` (a record source the principal writes to, a name in its namespace:
    :func:`own_name`) if it is missing, with the principal's scopes and as its own; one that
    exists is left as it is. Refused, with one message whether it exists or not, where the
    principal could not read it: a source of that name that is not its own, or one its
    source globs leave out; and where the name reads as a user's or an agent's memory."""
    whose = Identity.parse(scope)
    if whose:
        raise AccessDenied(reserved(principal, scope, whose))
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
                created_by=principal.name,
            )
            found = store.resolve_source(scope)
        if not may_read(principal, found):
            raise AccessDenied(
                f"principal {principal.name!r} may not write to {scope!r}: "
                "write to a source it reads, or to its own"
            )
