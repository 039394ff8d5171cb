"""The memory inspector: server-rendered pages over the operation table (see :mod:`.app`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI

from stratamem.server.inspector import browse, fixes, pages
from stratamem.server.inspector.app import CSP, HEADERS, Inspector, Refused

if TYPE_CHECKING:
    from stratamem.server.http import _Calls


def mount(app: FastAPI, calls: _Calls, *, tokens_required: bool) -> Inspector:
    """The inspector's pages added to ``app``, reading through ``calls``."""
    inspector = Inspector(calls, tokens_required=tokens_required)
    pages.add_routes(inspector)
    browse.add_routes(inspector)
    fixes.add_routes(inspector)
    inspector.mount(app)
    return inspector


__all__ = ["CSP", "HEADERS", "Inspector", "Refused", "mount"]
