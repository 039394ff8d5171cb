"""Every operation, declared once; the doors (Python, CLI, HTTP, MCP) are built from here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stratamem.errors import AccessDenied, InvalidArgument
from stratamem.ops.context import Context, require_write
from stratamem.ops.entities import ENTITIES
from stratamem.ops.extract import EXTRACTION
from stratamem.ops.facts import FACTS
from stratamem.ops.items import ITEMS
from stratamem.ops.owner import OWNER
from stratamem.ops.reads import READS
from stratamem.ops.sources import SOURCE_WRITES
from stratamem.ops.spec import Operation, bind
from stratamem.types import Principal

OPERATIONS: Mapping[str, Operation] = {
    op.name: op for op in (*READS, *ITEMS, *FACTS, *ENTITIES, *EXTRACTION, *SOURCE_WRITES, *OWNER)
}


def operation(name: str) -> Operation:
    """The operation called ``name``; :class:`InvalidArgument` naming the close ones."""
    found = OPERATIONS.get(name)
    if found is None:
        import difflib

        close = difflib.get_close_matches(name, list(OPERATIONS), n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise InvalidArgument(f"no operation {name!r}{hint}")
    return found


def may_call(op: Operation, principal: Principal | None, *, writes: bool) -> bool:
    """Whether ``principal`` (None: the owner) may call ``op`` where ``writes`` are on."""
    if op.access == "read":
        return True
    if not writes:
        return False
    if op.access == "owner":
        return principal is None
    return principal is None or principal.write


def refuse(op: Operation, principal: Principal | None, *, writes: bool) -> None:
    """:class:`AccessDenied` where ``principal`` may not call ``op`` (see :func:`may_call`),
    saying why: writes are off, it holds no write permission, or the operation is the
    owner's."""
    if may_call(op, principal, writes=writes):
        return
    if not writes:
        raise AccessDenied("writes are off: start the server with --allow-writes")
    require_write(principal)
    raise AccessDenied(f"{op.name} is the owner's")


def allowed(principal: Principal | None, *, writes: bool) -> list[Operation]:
    """The operations ``principal`` may call, in table order: all it lists as tools."""
    return [op for op in OPERATIONS.values() if may_call(op, principal, writes=writes)]


def call(
    context: Context, name: str, args: Mapping[str, Any] | None = None, *, writes: bool = True
) -> dict[str, Any]:
    """Run operation ``name`` with ``args`` (checked by :func:`bind`) in ``context``: its
    JSON answer. :class:`AccessDenied` for a write where writes are off or the caller may
    not write."""
    op = operation(name)
    bound = bind(op, args)
    if not op.reads and not writes:
        raise AccessDenied("writes are off: start the server with --allow-writes")
    if op.access == "owner" and context.principal is not None:
        raise AccessDenied(f"principal {context.principal.name!r} may not {name}")
    return op.run(context, bound)
