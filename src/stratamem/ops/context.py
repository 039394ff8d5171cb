"""Where an operation runs: the store as its caller reads it, and — for a write — the store
written on the caller's behalf.

A door makes one :class:`Context` per call. :class:`MemoryContext` is a :class:`Memory` in
this process (Python, the CLI); a server makes its own over its pool of memories (see
:class:`stratamem.server.service.Service`). Writes by a principal go through the owner's
memory after :mod:`stratamem.access.writes` has said what the principal may do, so the rules
for a principal's writes live with the operations, not with any one door.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from stratamem.access import writes
from stratamem.errors import AccessDenied

if TYPE_CHECKING:
    from stratamem.api import Memory
    from stratamem.types import Principal


class Context(Protocol):
    """What an operation's ``run`` is given."""

    @property
    def principal(self) -> Principal | None:
        """The caller (None: the store's owner)."""
        ...

    @property
    def ingest_roots(self) -> tuple[Path, ...]:
        """Where a principal may ingest from (the owner: anywhere)."""
        ...

    def reading(self) -> AbstractContextManager[Memory]:
        """The store as the caller reads it, for the block."""
        ...

    def writing(self) -> AbstractContextManager[Memory]:
        """The store to write to on the caller's behalf (as the owner), for the block;
        :class:`~stratamem.errors.AccessDenied` where the caller may not write."""
        ...


class MemoryContext:
    """A :class:`Memory` of this process: it reads as its principal; only the owner's
    writes (a memory opened for a principal is read only)."""

    def __init__(self, memory: Memory, *, ingest_roots: tuple[Path, ...] = ()) -> None:
        self.memory = memory
        self.ingest_roots = ingest_roots

    @property
    def principal(self) -> Principal | None:
        return self.memory.principal

    @contextmanager
    def reading(self) -> Iterator[Memory]:
        yield self.memory

    @contextmanager
    def writing(self) -> Iterator[Memory]:
        who = self.memory.principal
        if who is not None:
            raise AccessDenied(f"principal {who.name!r} reads only here: writes are the owner's")
        yield self.memory


def may_write(context: Context) -> None:
    """Refuse a caller without the write permission."""
    writes.require_write(context.principal)


def require_write(principal: Principal | None) -> None:
    """Refuse ``principal`` (None: the owner) where it holds no write permission."""
    writes.require_write(principal)
