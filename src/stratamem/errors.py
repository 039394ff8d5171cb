"""The one exception hierarchy of stratamem.

    StratamemError                   base of every error stratamem raises on purpose
    ├── StoreError                   the database cannot be opened, migrated or written
    │   ├── SchemaError              the file was written by a newer or foreign schema
    │   ├── StoreBusyError           another process held the store's write lock too long
    │   ├── StoreFull                the disk filled up; says what was kept, what was not written
    │   ├── SealRaced                another writer sealed some of the items first
    │   └── KeywordIndexUnavailable  the full-text index cannot back the in-process BM25 index
    ├── IngestError                  a path cannot be ingested at all
    │   ├── UnknownFormatError       no connector recognises the path
    │   └── SourceFormatError        a file is malformed; carries the file and the place
    ├── MissingExtraError            an optional package is missing; names the extra to install
    │   └── MissingDependencyError   one an embedder needs (an EmbeddingError too)
    ├── EmbeddingError               a text could not be embedded
    │   ├── MissingDependencyError   (the one above: a MissingExtraError too)
    │   ├── ModelFileError           a model file is missing, corrupt or not the pinned one
    │   └── EmbeddingServerError     an embeddings server failed; carries the URL and status
    ├── ModelMismatchError           the store's vectors were made by another model
    ├── Rejected                     an index file beside the store cannot be used
    ├── RequestFailed                a model server gave no usable answer
    ├── SkipDecision                 one decision of a model's answer cannot be applied
    ├── RerankError                  a reranker could not score the texts
    ├── NotFoundError                a source or node id that does not exist
    ├── InvalidArgument              an argument with no such name, type or value (a ValueError)
    ├── ConfigError                  a config file or variable that cannot be used as it is
    ├── RegistryError                an unknown name or a broken plugin
    └── AccessError                  the caller may not do this, or cannot prove who it is
        ├── AccessDenied             a bad token, an unknown principal, a write refused
        └── LockError                a lock or unlock that cannot be done as asked
            └── WrongPassphrase      the passphrase does not open the locked source

Callers that degrade instead of failing (a search without its vector leg, a summary written
by the extractive fallback) catch these by their place in the tree. Bad arguments to a
function raise ``ValueError``. :func:`is_disk_full` tells a full disk whichever layer
reports it.
"""

from __future__ import annotations

import errno

# SQLite's primary result code for "database or disk is full", and PostgreSQL's SQLSTATE
# for disk_full: read off the drivers' exceptions, so that no driver is imported here.
_SQLITE_FULL = 13
_PG_DISK_FULL = "53100"


class StratamemError(Exception):
    """Base of every error stratamem raises on purpose."""


class StoreError(StratamemError):
    """The store cannot be opened, migrated or written."""


class SchemaError(StoreError):
    """The database was written by an unknown (newer) schema version."""


class StoreBusyError(StoreError):
    """Another process kept the store locked for longer than a write waits (half an hour for
    a write transaction); nothing was written. Try again when that process is done."""


class StoreFull(StoreError):
    """The disk holding the store (or the database's size limit) is full. The store is
    whole: the write that ran out of room was rolled back, and what committed before it is
    kept. The message says which; free some space and run the command again."""


class SealRaced(StoreError):
    """Another writer sealed some of the items first, or one is gone; nothing was written.
    Plan again from what is committed."""


class KeywordIndexUnavailable(StoreError):
    """The full-text index cannot back the in-process BM25 index (another schema, a ranking
    that is not BM25, a write transaction open, a failed read); searches fall back to the
    full-text query."""


class IngestError(StratamemError):
    """A path cannot be ingested."""


class UnknownFormatError(IngestError):
    """No connector recognises the path."""


class SourceFormatError(IngestError):
    """A file is malformed. ``path`` names the file, ``where`` the place in it."""

    def __init__(self, path: str, where: str, reason: str) -> None:
        self.path = path
        self.where = where
        self.reason = reason
        place = f"{path}:{where}" if where else path
        super().__init__(f"{place}: {reason}")


class MissingExtraError(StratamemError):
    """An optional package is missing. ``extra`` is the stratamem extra that brings it, and
    the message says ``<what> needs the '<extra>' extra: pip install 'stratamem[<extra>]'``;
    ``install`` is that command. A package no extra brings (``extra`` None) is named by the
    ``install`` command given instead."""

    def __init__(self, what: str, *, extra: str | None = None, install: str | None = None) -> None:
        if install is None:
            if extra is None:
                raise ValueError("give the extra or the install command")
            install = f"pip install 'stratamem[{extra}]'"
        self.extra = extra
        self.install = install
        if extra is not None:
            message = f"{what} needs the '{extra}' extra: {install}"
        else:
            message = f"{what}; install it with: {install}"
        super().__init__(message)


class EmbeddingError(StratamemError):
    """A text could not be embedded."""


class MissingDependencyError(EmbeddingError, MissingExtraError):
    """A package an embedder needs is missing; ``install`` is the command that brings it. An
    :class:`EmbeddingError` too, so callers that search without vectors when the embedder
    fails go on without it."""

    def __init__(self, what: str, install: str | None = None, *, extra: str | None = None) -> None:
        super().__init__(what, extra=extra, install=install)


class ModelFileError(EmbeddingError):
    """A model file is missing, unreadable or differs from the pinned one. ``path`` names it."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class EmbeddingServerError(EmbeddingError):
    """An embeddings server failed. ``status`` is the HTTP status, or None when none came back."""

    def __init__(self, url: str, status: int | None, reason: str) -> None:
        self.url = url
        self.status = status
        self.reason = reason
        where = f"{url} (HTTP {status})" if status is not None else url
        super().__init__(f"{where}: {reason}")


class ModelMismatchError(StratamemError):
    """The store's vectors were made by another model; ``stratamem reindex`` switches."""


class Rejected(StratamemError):
    """A saved index that is readable but not one the caller can use: another format, other
    parameters, another database, other rows, or damaged. The caller rebuilds it from the
    store."""


class RequestFailed(StratamemError):
    """No usable answer from a model server: ``status`` is None when none came; ``detail`` is
    the server's message (or the HTTP reason); ``retry`` says whether asking again may help,
    and ``delay`` how long the server asked to wait first (``Retry-After``)."""

    def __init__(
        self,
        reason: str,
        *,
        status: int | None = None,
        detail: str = "",
        retry: bool = False,
        delay: float | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.detail = detail
        self.retry = retry
        self.delay = delay


class RerankError(StratamemError):
    """A reranker could not score the texts; the search keeps the fused order."""


class NotFoundError(StratamemError):
    """A source or node id that does not exist."""


class SkipDecision(StratamemError):
    """One decision in a model's answer cannot be applied (an unknown fact, a bad date, a
    fact the caller may not change): it is left out with this reason, the others applied."""


class InvalidArgument(StratamemError, ValueError):
    """An argument an operation does not take, or of the wrong type or out of bounds; the
    message names the operation and the parameter, on one line."""


class ConfigError(StratamemError):
    """A config file or variable that cannot be read, names an unknown setting, or gives one
    a value it cannot take; the message names the file or variable and the setting."""


class RegistryError(StratamemError):
    """An unknown name was asked of a registry of pluggable parts, or the plugin behind a
    name failed to load."""


class AccessError(StratamemError):
    """The caller may not do this, or cannot prove who it is."""


class AccessDenied(AccessError):
    """A token that matches no principal, an unknown principal, or a write a principal
    may not make. Says nothing of what exists behind it."""


class LockError(AccessError):
    """A lock or unlock that cannot be done as asked: the source is already locked (or not
    locked), or no passphrase was given."""


class WrongPassphrase(LockError):
    """The passphrase does not open the locked source (its key check value differs)."""


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk is full, whichever layer raised it: :class:`StoreFull`,
    the OS's ``ENOSPC`` or ``EDQUOT`` (an ``OSError``), SQLite's ``SQLITE_FULL`` or
    PostgreSQL's ``disk_full``."""
    if isinstance(exc, StoreFull):
        return True
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF == _SQLITE_FULL
    return getattr(exc, "sqlstate", None) == _PG_DISK_FULL


def full_error(exc: BaseException) -> StoreFull:
    """``exc`` (SQLITE_FULL, or the OS's ENOSPC) as the :class:`StoreFull` a write that
    ran out of room raises."""
    return StoreFull(
        f"disk full ({exc}): this write was rolled back and nothing of it was written; what "
        "earlier writes committed is kept. Free some space and run it again"
    )
