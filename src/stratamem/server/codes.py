"""The code each HTTP status of an error is answered with (``{"error": {"code", ...}}``), one
table for the HTTP API and the MCP app (which must not need FastAPI to answer)."""

from __future__ import annotations

STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    421: "misdirected",
    422: "invalid_request",
    429: "too_many_requests",
    500: "internal_error",
    503: "unavailable",
    504: "timeout",
}
