"""Errors as the HTTP API answers them: ``{"error": {"code", "message"}}`` with a status.

What the caller did wrong is a 4xx naming it; anything else a 5xx without a traceback (which
goes to the server's log). Validation errors list each problem by place, never the input.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from stratamem.errors import (
    AccessDenied,
    IngestError,
    NotFoundError,
    StoreBusyError,
    StratamemError,
)
from stratamem.server.codes import STATUS_CODES
from stratamem.server.echo import without_echo

log = logging.getLogger("stratamem.server.http")

T = TypeVar("T")


class _ApiError(Exception):
    """An error answered as ``{"error": {"code", "message"}}`` with ``status``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or STATUS_CODES.get(status, "error")
        self.message = message
        self.headers = headers or {}

    def without_echo(self, values: Mapping[str, str]) -> _ApiError:
        """This error with nothing of ``values`` (what the caller sent) in its message."""
        return _ApiError(
            self.status,
            without_echo(self.message, values),
            code=self.code,
            headers=self.headers,
        )


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **extra}}


def error_response(error: _ApiError, **extra: Any) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else {}
    headers.update(error.headers)
    return JSONResponse(
        error_body(error.code, error.message, **extra), status_code=error.status, headers=headers
    )


def answered(job: Callable[[], T]) -> Callable[[], T]:
    """``job`` with its errors as :class:`_ApiError` (see :func:`api_error`)."""

    def run() -> T:
        try:
            return job()
        except Exception as exc:
            raise api_error(exc) from None

    return run


def api_error(exc: BaseException) -> Exception:
    """What the caller did wrong as 4xx, the rest as 5xx (an unexpected error logged here
    with its traceback, answered without it); :class:`AccessDenied` as it is (403)."""
    if isinstance(exc, _ApiError | AccessDenied):
        return exc
    if isinstance(exc, NotFoundError):
        return _ApiError(404, str(exc))
    if isinstance(exc, StoreBusyError):
        return _ApiError(503, f"{exc}; try again later")
    if isinstance(exc, ValueError | IngestError):
        return _ApiError(422, str(exc))
    if isinstance(exc, StratamemError):
        return _ApiError(500, str(exc) or type(exc).__name__, code="store_error")
    log.error("unexpected error in a request", exc_info=exc)
    return _ApiError(500, "unexpected error; see the server's log")


def add_error_handlers(app: FastAPI) -> None:
    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        return error_response(cast(_ApiError, exc))

    async def access_denied(request: Request, exc: Exception) -> JSONResponse:
        return error_response(_ApiError(403, str(exc)))

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        status = cast(HTTPException, exc).status_code
        message = {404: "no such route", 405: "method not allowed"}.get(status)
        return error_response(_ApiError(status, message or str(cast(HTTPException, exc).detail)))

    async def invalid(request: Request, exc: Exception) -> JSONResponse:
        # The offending input is left out: it may be the query text.
        details = [
            {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in cast(RequestValidationError, exc).errors()
        ]
        first = details[0] if details else {"loc": [], "msg": "invalid request", "type": ""}
        if first["type"] == "json_invalid":
            message = f"the body is not valid JSON (at character {first['loc'][-1]})"
        else:
            where = ".".join(str(p) for p in first["loc"] if p != "body")
            message = f"{where}: {first['msg']}" if where else str(first["msg"])
        return error_response(_ApiError(422, message), details=details)

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        return error_response(_ApiError(500, "unexpected error; see the server's log"))

    app.add_exception_handler(_ApiError, api_error)
    app.add_exception_handler(AccessDenied, access_denied)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(Exception, unexpected)
