"""The inspector's rules that need no server: when a cookie is Secure, which paths are its."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from stratamem.server.inspector.app import inspected, secure


def request(server: tuple[str, int] | None, scheme: str = "http") -> Request:
    return Request(
        {
            "type": "http",
            "method": "GET",
            "scheme": scheme,
            "path": "/",
            "query_string": b"",
            "headers": [(b"host", b"mem.example")],
            "server": server,
        }
    )


@pytest.mark.parametrize(
    ("server", "scheme", "want"),
    [
        (("127.0.0.1", 8765), "http", False),
        (("::1", 8765), "http", False),
        (("127.0.0.1", 8765), "https", True),
        (("10.0.0.5", 8765), "http", True),
        (("192.168.1.20", 443), "https", True),
        (None, "http", True),  # a unix socket: no address to call loopback
    ],
)
def test_cookies_are_secure_off_loopback_or_over_https(
    server: tuple[str, int] | None, scheme: str, want: bool
) -> None:
    assert secure(request(server, scheme)) is want


@pytest.mark.parametrize(
    ("path", "want"),
    [
        ("/", True),
        ("/search", True),
        ("/nodes/abc", True),
        ("/static/app.css", True),
        ("/sources", True),
        ("/v1/search", False),
        ("/v1", False),
        ("/mcp", False),
        ("/docs", False),
        ("/openapi.json", False),
        ("/healthz", False),
        ("/v10", True),
    ],
)
def test_every_path_but_the_apis_is_the_inspectors(path: str, want: bool) -> None:
    assert inspected(path) is want
