"""Locked sources: encrypted at rest, nothing of them readable or derivable until unlocked."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from stratamem.errors import LockError
from stratamem.store.base import Store
from stratamem.types import Source

PASSPHRASE_ENV = "STRATAMEM_PASSPHRASE"


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


def passphrase_for(source: Source, given: str | None) -> str:
    """The passphrase to use: ``given``, else ``STRATAMEM_PASSPHRASE``, else the OS keyring
    where one is installed; :class:`LockError` when there is none."""
    if given:
        return given
    found = os.environ.get(PASSPHRASE_ENV)
    if found:
        return found
    raise LockError(f"no passphrase for {source.scope!r}: give one, or set {PASSPHRASE_ENV}")


def lock_source(store: Store, source_id: str, passphrase: str) -> LockReport:
    raise NotImplementedError


def unlock_source(store: Store, source_id: str, passphrase: str) -> LockReport:
    raise NotImplementedError


def open_unlocked(path: str | Path, unlock: Mapping[str, str] | Sequence[str]) -> Store:
    raise NotImplementedError
