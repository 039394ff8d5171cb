"""A live uvicorn server on a loopback port the system picks, for tests to call over HTTP and
MCP, and the checks their answers share."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any
from urllib.parse import quote

import httpx
import httpx2
import pytest
import uvicorn
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent
from starlette.types import ASGIApp

from stratamem.ops import OPERATIONS
from suite import BACKENDS, PATIENCE_S

# For a test whose point is the server around the store (the HTTP layer, the write jobs)
# rather than the store that answers it (``served_location`` is the module's store): it
# runs on the SQLite store alone, which keeps the suite's time for the tests whose point
# is the store.
server_layer_only = pytest.mark.parametrize(
    "served_location", [b for b in BACKENDS if b == "sqlite"], indirect=True
)


class _Server(uvicorn.Server):
    """A uvicorn server that says when it is listening."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        self.ready.set()


@contextmanager
def live(app: ASGIApp) -> Iterator[str]:
    """``app`` served on 127.0.0.1 (a free port) in a thread; yields its base URL."""
    server = _Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        assert server.ready.wait(PATIENCE_S), "the server did not start"
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(PATIENCE_S)


@contextmanager
def clients(
    with_tokens: ASGIApp, without_tokens: ASGIApp, tokens: dict[str, str]
) -> Iterator[dict[str, httpx.Client]]:
    """A client per principal (by name) of ``with_tokens`` served live, and ``owner`` of
    ``without_tokens``."""
    with live(with_tokens) as url, live(without_tokens) as owner_url:
        found = {
            name: httpx.Client(base_url=url, headers=bearer(token), timeout=PATIENCE_S)
            for name, token in tokens.items()
        }
        found["owner"] = httpx.Client(base_url=owner_url, timeout=PATIENCE_S)
        try:
            yield found
        finally:
            for client in found.values():
                client.close()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def error(response: httpx.Response, status: int, code: str) -> str:
    """The message of a JSON error answered with ``status`` and ``code``, without a traceback."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    assert "Traceback" not in response.text
    return str(body["error"]["message"])


@asynccontextmanager
async def connected(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    """An MCP session over streamable HTTP at ``url``/mcp, as the principal ``token`` names
    (None: no token, for a server that asks for none)."""
    headers = bearer(token) if token is not None else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=PATIENCE_S) as client,
        streamable_http_client(f"{url}/mcp", http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def data(result: CallToolResult) -> Any:
    """A tool's answer, which must be no error, and its text the JSON of its structured content."""
    assert not result.is_error, result.content
    assert isinstance(result.content[0], TextContent)
    found = json.loads(result.content[0].text)
    assert found == result.structured_content
    return found


# -- one operation, by name, on either door ---------------------------------------------------


def request_of(name: str, args: Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """The HTTP request that calls operation ``name`` with ``args``: its method, its path (the
    path's arguments put in it) and the rest as httpx takes it (a JSON body for a POST, else
    the query string)."""
    method, path = OPERATIONS[name].route
    rest = dict(args)
    for key in re.findall(r"{(\w+)}", path):
        path = path.replace(f"{{{key}}}", quote(str(rest.pop(key)), safe=""))
    if method == "POST":
        return method, path, {"json": rest}
    query = {k: str(v).lower() if isinstance(v, bool) else v for k, v in rest.items()}
    return method, path, {"params": {k: v for k, v in query.items() if v is not None}}


def call_http(client: httpx.Client, name: str, args: Mapping[str, Any]) -> httpx.Response:
    """Operation ``name`` called with ``args`` on its HTTP route."""
    method, path, options = request_of(name, args)
    return client.request(method, path, **options)


async def call_mcp(session: ClientSession, name: str, args: Mapping[str, Any]) -> CallToolResult:
    """Operation ``name`` called with ``args`` as its MCP tool."""
    return await session.call_tool(name, dict(args))


def tool_error(result: CallToolResult) -> str:
    """The message of a tool's error, which must be one line."""
    assert result.is_error, result.content
    assert isinstance(result.content[0], TextContent)
    text = result.content[0].text
    assert "\n" not in text
    return text
