"""The memory inspector: server-rendered pages over the operation table (see :mod:`.app`)."""

from stratamem.server.inspector.app import CSP, HEADERS, Inspector, Refused

__all__ = ["CSP", "HEADERS", "Inspector", "Refused"]
