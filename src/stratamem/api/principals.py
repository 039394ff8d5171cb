"""``mem.principals``: who may read (and write) a store, and their bearer tokens."""

from __future__ import annotations

import builtins
from collections.abc import Sequence

from stratamem.access import principals
from stratamem.api._core import Facet
from stratamem.errors import NotFoundError
from stratamem.types import Principal

__all__ = ["Principals"]


class Principals(Facet):
    """Add, list, remove and rotate principals; tell one from its token. The owner only,
    but for :meth:`authenticate`."""

    def add(
        self,
        name: str,
        scopes: str | Sequence[str],
        *,
        sources: Sequence[str] = (),
        write: bool = False,
    ) -> str:
        """Create a principal that reads sources sharing one of ``scopes`` (``*``: any)
        and, if ``sources`` globs are given, matching one of them; returns its bearer token,
        which is not stored and cannot be shown again."""
        self._owner_only("manage principals")
        return principals.add_principal(self._store, name, scopes, sources=sources, write=write)

    def list(self) -> builtins.list[Principal]:
        self._owner_only("list principals")
        return self._store.principals()

    def remove(self, name: str) -> None:
        self._owner_only("manage principals")
        if not self._store.delete_principal(name):
            raise NotFoundError(f"no principal named {name!r}")

    def rotate(self, name: str) -> str:
        """A new token for the principal (the old one stops working at once)."""
        self._owner_only("manage principals")
        return principals.rotate_token(self._store, name)

    def authenticate(self, token: str) -> Principal:
        """The principal a bearer token belongs to; :class:`AccessDenied` if none."""
        return principals.authenticate(self._store, token)
