"""The edge of the HTTP API, one middleware (:class:`Guard`) in front of every route:

- the ``Host`` a request names must be one the server answers (:class:`Hosts`: the loopback
  names, the address it is bound to, and those it is told), else 421; a request sent from a
  page (an ``Origin`` header) must come from one of them too, else 403. A page on another
  site cannot then reach the server by rebinding its own name to 127.0.0.1;
- two ``Authorization`` headers are refused (400): no door may read one and another the other;
- a body over the size limit is refused (413) before it is read whole;
- each request gets one line in the access log (without the query text unless the server
  logs queries), every field escaped so that nothing a caller sends can start a line.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stratamem.server.errors import _ApiError, error_response
from stratamem.server.hosts import Hosts, refusal


class _TooLarge(Exception):
    pass


class Guard:
    """Checks Host, Origin and ``Authorization`` (see the module), refuses a body over
    ``max_body_bytes`` (413) and logs one line per request."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        access_log: logging.Logger | None,
        hosts: Hosts | None = None,
    ):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.access_log = access_log
        self.hosts = hosts if hosts is not None else Hosts()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        refused = self.refused(scope)
        if refused is not None:
            await error_response(refused)(scope, receive, send)
            self._log(scope, refused.status, started)
            return
        try:
            body = await self._body(scope, receive)
        except _TooLarge:
            status = 413
            response = error_response(
                _ApiError(413, f"the request body is over {self.max_body_bytes:,} bytes")
            )
            await response(scope, receive, send)
            self._log(scope, status, started)
            return
        try:
            await self.app(scope, _replay(body, receive) if body is not None else receive, sending)
        finally:
            self._log(scope, status, started)

    def refused(self, scope: Scope) -> _ApiError | None:
        """Why a request is refused before anything reads it (see :func:`refusal`)."""
        found = refusal(scope, self.hosts)
        return None if found is None else _ApiError(*found)

    async def _body(self, scope: Scope, receive: Receive) -> list[Message] | None:
        """The request body read whole (None when the method has none), or :class:`_TooLarge`."""
        if scope["method"] in {"GET", "HEAD", "OPTIONS", "DELETE"}:
            return None
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            raise _TooLarge
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                return messages
            size += len(message.get("body", b""))
            if size > self.max_body_bytes:
                raise _TooLarge
            if not message.get("more_body", False):
                return messages

    def _log(self, scope: Scope, status: int, started: float) -> None:
        if self.access_log is None:
            return
        state = scope.get("state") or {}
        line = "%s %s %d %.1fms %s"
        args: list[Any] = [
            printable(scope["method"]),
            printable(scope.get("root_path", "") + scope["path"], spaces=True),
            status,
            (time.perf_counter() - started) * 1000,
            printable(str(state.get("principal", "-")), spaces=True),
        ]
        if state.get("query"):
            line += " query=%r"  # repr escapes every character that is not printable
            args.append(state["query"])
        self.access_log.info(line, *args)


def printable(text: str, *, spaces: bool = False) -> str:
    """``text`` with every character that is not printable (CR, LF and every other control
    character, the line and paragraph separators, format characters), and the backslash,
    written as a Python escape (``\\n``, ``\\x1b``, ``\\u2028``); spaces too where
    ``spaces``, so that a field cannot pass for several. A log line then stays one line, its
    fields where they are."""
    if text.isprintable() and "\\" not in text and not (spaces and " " in text):
        return text
    out = []
    for char in text:
        if char == "\\":
            out.append("\\\\")
        elif char == " ":
            out.append("\\x20" if spaces else " ")
        elif char.isprintable():
            out.append(char)
        else:
            out.append(char.encode("unicode_escape").decode("ascii"))
    return "".join(out)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed
