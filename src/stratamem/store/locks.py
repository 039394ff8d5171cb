"""The locks role: a locked source's content, sealed, and what tells its passphrase.

A locked source keeps its ``sources`` row, marked locked. Everything else stored of it (its
records, chunks and their full-text rows, entity mentions and edges, vectors, its tree with
the summaries, their entities and vectors, and its pending seal job) is serialised, split
into parts, each encrypted by the caller's :class:`PartCipher` and checked to decrypt, and
removed, all in one transaction: a crash leaves the source wholly locked or wholly not.
Restoring reverses it in one transaction. The store never sees a passphrase or a key, only
the cipher (:mod:`stratamem.access.crypto`) and what it recorded (:class:`Lock`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Lock:
    """A locked source's lock: the key derivation (JSON, see :mod:`stratamem.access.crypto`),
    the key check value, how many parts it was sealed in, and when."""

    source_id: str
    kdf: str
    check_value: bytes
    parts: int
    locked_at: datetime


@dataclass(frozen=True, slots=True)
class SealCounts:
    """What a seal or a restore moved: chunks, summaries and records, rows of every table,
    and the size of the serialised content before compression."""

    chunks: int
    summaries: int
    records: int
    rows: int
    size: int


class PartCipher(Protocol):
    """Encrypts and decrypts the parts of one source's sealed content, bound to their place:
    part number ``part``, the last one or not."""

    def seal(self, part: int, last: bool, plaintext: bytes) -> tuple[bytes, bytes]:
        """(nonce, ciphertext)."""
        ...

    def open(self, part: int, last: bool, nonce: bytes, data: bytes) -> bytes:
        """The plaintext; :class:`~stratamem.errors.LockError` if the part fails to decrypt."""
        ...


class LockStore(Protocol):
    def lock_of(self, source_id: str) -> Lock | None:
        """The source's lock, or None when it is not locked."""
        ...

    def seal_source(
        self, source_id: str, *, kdf: str, check_value: bytes, cipher: PartCipher
    ) -> SealCounts:
        """Encrypt everything stored of the source with ``cipher``, record the lock, remove
        the plaintext and mark the source locked, in one transaction; then leave no copy of
        the removed text in the store's files. :class:`~stratamem.errors.LockError` if it is
        locked already."""
        ...

    def restore_source(self, source_id: str, cipher: PartCipher) -> SealCounts:
        """Decrypt the source's sealed content with ``cipher`` and put every row back as it
        was, dropping the lock, in one transaction. :class:`~stratamem.errors.LockError` if
        it is not locked or a part does not decrypt; nothing is changed then."""
        ...
