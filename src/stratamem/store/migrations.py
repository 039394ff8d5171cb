"""One runner for both backends' numbered schema migrations.

A backend gives its steps (``store/sqlite/migrations.py``, ``store/postgres/migrations.py``:
the SQL of each differs, the numbering is each backend's own) and how it keeps the version
and its write lock (:class:`SchemaSteps`). The runner does the rest the same way on both:
each step runs in its own write transaction, which reads the version again once it holds
the write lock, so two processes opening a new store at once take turns and the second finds
each step done rather than running it twice; a store written by a newer stratamem is refused
rather than misread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from stratamem.errors import SchemaError


class SchemaSteps(Protocol):
    """A backend's migrations: the steps, and the version kept in the database."""

    @property
    def steps(self) -> Sequence[str]:
        """Step ``n`` (from 1) is ``steps[n - 1]``: what takes a store from version ``n - 1``
        to ``n``."""
        ...

    def version(self) -> int:
        """The version the database is at (0 for a new one), in or out of a transaction."""
        ...

    def begin(self) -> None:
        """Open a write transaction that holds the store's write lock."""
        ...

    def apply(self, step: str) -> None:
        """Run one step inside the transaction."""
        ...

    def set_version(self, version: int) -> None: ...

    def commit(self) -> None: ...

    def rollback(self) -> None: ...


def migrate(schema: SchemaSteps) -> int:
    """Bring the database up to the last of ``schema.steps``; returns the version it found."""
    latest = len(schema.steps)
    found = checked(schema.version(), latest)
    version = found
    while version < latest:
        schema.begin()
        try:
            version = checked(schema.version(), latest)
            if version < latest:
                version += 1
                schema.apply(schema.steps[version - 1])
                schema.set_version(version)
        except BaseException:
            schema.rollback()
            raise
        schema.commit()
    return found


def checked(version: int, latest: int) -> int:
    """``version``, unless it is newer than ``latest`` (what this code knows)."""
    if version > latest:
        raise SchemaError(
            f"database schema version {version} is newer than this stratamem knows "
            f"({latest}); upgrade stratamem"
        )
    return version
