"""The one exception hierarchy of stratamem.

    StratamemError
    ├── StoreError                the database cannot be opened, migrated or written
    │   └── SchemaError           the file was written by a newer or foreign schema
    ├── IngestError               a path cannot be ingested at all
    │   ├── UnknownFormatError    no connector recognises the path
    │   └── SourceFormatError     a file is malformed; carries the file and the place
    ├── NotFoundError             a source or node id that does not exist
    └── RegistryError             an unknown name for a pluggable part

Bad arguments to a function raise ``ValueError``.
"""

from __future__ import annotations


class StratamemError(Exception):
    """Base of every error stratamem raises on purpose."""


class StoreError(StratamemError):
    """The store cannot be opened, migrated or written."""


class SchemaError(StoreError):
    """The database was written by an unknown (newer) schema version."""


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


class NotFoundError(StratamemError):
    """A source or node id that does not exist."""


class RegistryError(StratamemError):
    """An unknown name was asked of a registry of pluggable parts."""
