"""The operation table: every operation declared once (name, typed parameters, who may call
it, limits, a description written for a model, an example), and the one way to call one.

The doors are built from it: the HTTP routes (:mod:`stratamem.server.http`), the MCP tools
(:mod:`stratamem.server.mcp`) and the CLI's commands take each operation's parameters under
the same names, check them with the same :func:`~stratamem.ops.spec.bind` and answer with the
same JSON (:mod:`stratamem.ops.wire`).
"""

from stratamem.ops.context import Context, MemoryContext
from stratamem.ops.spec import REQUIRED, Operation, Param, bind
from stratamem.ops.table import OPERATIONS, allowed, call, may_call, operation, refuse

__all__ = [
    "OPERATIONS",
    "REQUIRED",
    "Context",
    "MemoryContext",
    "Operation",
    "Param",
    "allowed",
    "bind",
    "call",
    "may_call",
    "operation",
    "refuse",
]
