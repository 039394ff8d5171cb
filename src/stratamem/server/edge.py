"""The edge of the HTTP API: a body over the size limit is refused (413) before it is read
whole, and each request gets one line in the access log (without the query text unless the
server logs queries)."""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stratamem.server.errors import _ApiError, error_response


class _TooLarge(Exception):
    pass


class Guard:
    """Refuses a body over ``max_body_bytes`` (413) and logs one line per request."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, access_log: logging.Logger | None):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.access_log = access_log

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
            scope["method"],
            scope.get("root_path", "") + scope["path"],
            status,
            (time.perf_counter() - started) * 1000,
            state.get("principal", "-"),
        ]
        if state.get("query"):
            line += " query=%r"
            args.append(state["query"])
        self.access_log.info(line, *args)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed
