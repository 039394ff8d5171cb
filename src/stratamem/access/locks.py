"""Locked sources: encrypted at rest, nothing of them readable or derivable until unlocked.

Locking a source seals everything stored of it under a key derived from a passphrase
(:mod:`stratamem.access.crypto`) and removes the plaintext, in one transaction, then scrubs
the files (see :class:`~stratamem.store.locks.LockStore`); the source keeps its row, marked
locked, and every read leaves it out. Unlocking puts it back for good. :func:`open_unlocked`
puts it back in a copy of the store in memory instead, for one process, leaving the file
locked.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from stratamem.access.crypto import SourceKey
from stratamem.errors import LockError, MissingExtraError, WrongPassphrase
from stratamem.extras import require
from stratamem.store.base import Store
from stratamem.store.locks import Lock, SealCounts
from stratamem.store.unlocked import open_in_memory
from stratamem.types import Source

PASSPHRASE_ENV = "STRATAMEM_PASSPHRASE"
KEYRING_SERVICE = "stratamem"
KEYRING_EXTRA = "keyring"


@dataclass(frozen=True, slots=True)
class LockReport:
    """What a lock or unlock did: the source, how many chunks, summaries and records it
    sealed or restored, and how long it took."""

    source_id: str
    scope: str
    chunks: int
    summaries: int
    records: int
    seconds: float


def check_passphrase(passphrase: str, origin: str = "") -> str:
    """``passphrase``, or ``ValueError`` where it is empty or only whitespace (a passphrase
    of three spaces is no secret). ``origin`` says where it came from, for the message."""
    if not passphrase.strip():
        what = "empty" if not passphrase else "only whitespace"
        where = f" ({origin})" if origin else ""
        raise ValueError(f"the passphrase{where} is {what}: give a real one; nothing was done")
    return passphrase


def passphrase_for(source: Source, given: str | None, *, new: bool = True) -> str:
    """The passphrase to use: ``given``, else ``STRATAMEM_PASSPHRASE``, else the OS keyring's
    entry for service ``stratamem`` and the source's scope, where the ``keyring`` package is
    installed; :class:`LockError` when there is none, ``ValueError`` where the one found is
    only whitespace. A passphrase given to open a lock made before blank ones were refused
    (``new=False``) is taken as it is: the lock's check value decides."""
    if given:
        return check_passphrase(given) if new else given
    found = stored_passphrase(source)
    if found is not None:
        return found
    raise LockError(
        f"no passphrase for {source.scope!r}: give one, set {PASSPHRASE_ENV}, or store it in "
        f"{keyring_place(repr(source.scope))}"
    )


def stored_passphrase(source: Source) -> str | None:
    """``STRATAMEM_PASSPHRASE``, else the OS keyring's entry for the source's scope, else None;
    ``ValueError`` where the one found is only whitespace."""
    env = os.environ.get(PASSPHRASE_ENV)
    if env:
        return check_passphrase(env, PASSPHRASE_ENV)
    found = _from_keyring(source.scope)
    if found:
        return check_passphrase(found, keyring_place(repr(source.scope)))
    return None


def keyring_place(user: str) -> str:
    """Where the OS keyring keeps a passphrase, for a message; with the extra to install
    when the ``keyring`` package is missing."""
    place = f"the OS keyring (service {KEYRING_SERVICE!r}, user {user})"
    try:
        require("keyring", KEYRING_EXTRA, "a passphrase from the OS keyring")
    except MissingExtraError as missing:
        return f"{place}, which needs the '{KEYRING_EXTRA}' extra: {missing.install}"
    return place


def _from_keyring(scope: str) -> str | None:
    what = "a passphrase from the OS keyring"
    try:
        keyring = require("keyring", KEYRING_EXTRA, what)
        keyring_errors = require("keyring.errors", KEYRING_EXTRA, what)
    except MissingExtraError:
        return None  # without the extra, as if the keyring held no entry
    try:
        found = keyring.get_password(KEYRING_SERVICE, scope)
    except (keyring_errors.KeyringError, RuntimeError, OSError):
        return None  # no usable keyring backend: as if it held no entry
    return found if isinstance(found, str) else None


def lock_source(store: Store, source_id: str, passphrase: str) -> LockReport:
    """Seal the source (by id or scope) under ``passphrase``; :class:`LockError` if it is
    locked already."""
    check_passphrase(passphrase)
    started = time.perf_counter()
    source = store.resolve_source(source_id)
    if source.locked:
        raise LockError(f"source {source.scope!r} is already locked")
    key, kdf = SourceKey.create(passphrase, store_id=store.store_id(), source_id=source.id)
    counts = store.seal_source(source.id, kdf=kdf, check_value=key.check_value(), cipher=key)
    return _report(source, counts, started)


def unlock_source(store: Store, source_id: str, passphrase: str) -> LockReport:
    """Restore the source (by id or scope) for good; :class:`LockError` if it is not locked,
    :class:`WrongPassphrase` (nothing changed) if ``passphrase`` does not open it. A blank
    passphrase is not refused here, so that a lock made with one before they were refused
    can still be opened: the check value decides, as for any other."""
    started = time.perf_counter()
    source = store.resolve_source(source_id)
    key = _key(store, source, passphrase)
    counts = store.restore_source(source.id, key)
    return _report(source, counts, started)


def open_unlocked(path: str | Path, unlock: Mapping[str, str] | Sequence[str]) -> Store:
    """The store at ``path`` copied into memory with these locked sources restored there, for
    this process only: nothing decrypted is written to disk, the file keeps them locked, and
    the copy refuses every write. ``unlock`` maps a source's scope or id to its passphrase,
    or lists scopes or ids whose passphrase :func:`passphrase_for` finds. A listed source
    that is not locked is readable as it is. Every passphrase is checked before any source is
    restored; :class:`WrongPassphrase` names the first that fails."""
    wanted: list[tuple[str, str | None]]
    if isinstance(unlock, Mapping):
        wanted = list(unlock.items())
    else:
        wanted = [(ref, None) for ref in ([unlock] if isinstance(unlock, str) else unlock)]
    copy = open_in_memory(path)
    try:
        keys: list[tuple[str, SourceKey]] = []
        for ref, given in wanted:
            source = copy.resolve_source(ref)
            if copy.lock_of(source.id) is not None:
                keys.append((source.id, _key(copy, source, passphrase_for(source, given))))
        for source_id, key in keys:
            copy.restore_source(source_id, key)
        copy.freeze()
    except BaseException:
        copy.close()
        raise
    return copy


def _key(store: Store, source: Source, passphrase: str) -> SourceKey:
    """The locked source's key from ``passphrase``, checked against its lock."""
    lock: Lock | None = store.lock_of(source.id)
    if lock is None:
        raise LockError(f"source {source.scope!r} is not locked")
    key = SourceKey.derive(passphrase, lock.kdf, store_id=store.store_id(), source_id=source.id)
    if not key.opens(lock.check_value):
        raise WrongPassphrase(f"wrong passphrase for {source.scope!r}")
    return key


def _report(source: Source, counts: SealCounts, started: float) -> LockReport:
    return LockReport(
        source_id=source.id,
        scope=source.scope,
        chunks=counts.chunks,
        summaries=counts.summaries,
        records=counts.records,
        seconds=time.perf_counter() - started,
    )
