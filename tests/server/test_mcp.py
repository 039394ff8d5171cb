"""The MCP server end to end, through the SDK's own client: over stdio against a real
``stratamem mcp`` subprocess, and over streamable HTTP against a live uvicorn server."""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
import uvicorn
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent
from starlette.applications import Starlette
from starlette.routing import Route

import stratamem
from stratamem.ops import OPERATIONS
from stratamem.server.mcp import mcp_http_app
from stratamem.server.service import Service
from suite import PATIENCE_S

ROOT = Path(__file__).resolve().parents[2]
WORKSPACE = ROOT / "examples" / "workspace"
# What a server without writes lists: the reading operations, to the owner and principals.
TOOLS = {op.name for op in OPERATIONS.values() if op.reads}

pytestmark = pytest.mark.slow

# The server process runs the code under test (the client passes it only the variables named).
SERVER_ENV = {
    "STRATAMEM_SUMMARIZER": "extractive",
    "PYTHONPATH": str(Path(stratamem.__file__).parents[1]),
}


@dataclass(frozen=True)
class Store:
    path: str
    token: str
    note_id: str  # a chunk of notes:notes, which the principal may not read
    summary_id: str  # a summary of slack:#eng, which it may
    leaf_id: str  # a message of slack:#eng


@pytest.fixture(scope="module")
def store(served_location: str) -> Store:
    path = served_location
    with stratamem.open(path, embedder=None) as memory:
        memory.ingest(WORKSPACE / "slack-export")  # chat: the team scope
        memory.ingest(WORKSPACE / "notes")  # documents: private
        memory.trees.flush()
        token = memory.principals.add("bot", "team")
        note = memory.search("release", sources=["notes:notes"], mode="keyword").hits[0]
        summary = memory.query_source("slack:#eng").hits[0]
        leaf = memory.drill_down(summary.node_id)[0]
    return Store(path, token, note.node_id, summary.node_id, leaf.node_id)


def data(result: CallToolResult) -> Any:
    assert not result.is_error, result.content
    assert isinstance(result.content[0], TextContent)
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


def error(result: CallToolResult) -> str:
    assert result.is_error
    assert isinstance(result.content[0], TextContent)
    return result.content[0].text


@asynccontextmanager
async def stdio_session(db: str, *options: str) -> AsyncIterator[ClientSession]:
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "stratamem", "--db", str(db), *options, "mcp"],
        env=SERVER_ENV,
    )
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def run(test: Callable[[], Any]) -> None:
    anyio.run(test)


# -- stdio ---------------------------------------------------------------------------------------


def test_stdio_lists_and_calls_every_tool(store: Store) -> None:
    async def scenario() -> None:
        async with stdio_session(store.path) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert set(tools) == TOOLS
            for tool in tools.values():
                assert tool.description
                assert len(tool.description) > 40
                assert tool.input_schema["type"] == "object"
            assert tools["search"].input_schema["required"] == ["query"]

            found = data(await session.call_tool("search", {"query": "redis", "limit": 3}))
            assert 0 < len(found["hits"]) <= 3
            assert {"node_id", "cite", "text", "source"} <= set(found["hits"][0])

            # A card's fields (id, citation, source, time) cost a hundred tokens and more here.
            packed = data(await session.call_tool("search", {"query": "redis", "budget": 400}))
            assert packed["cards"]
            assert packed["used"] <= 400
            assert all(card["text"] and card["cite"] for card in packed["cards"])
            explained = {"query": "redis", "budget": 600, "explain": True}
            packed = data(await session.call_tool("search", explained))
            assert packed["cards"]
            assert all(card["why"] and card["breakdown"] for card in packed["cards"])
            whole = data(await session.call_tool("search", {"query": "redis", "budget": 0}))
            assert whole["cards"]
            assert whole["budget"] == 0

            listed = data(await session.call_tool("sources", {}))["sources"]
            assert {s["scope"] for s in listed} >= {"slack:#eng", "notes:notes"}

            summaries = data(await session.call_tool("query_source", {"source": "slack:#eng"}))
            assert summaries["nodes"][0]["kind"] == "summary"
            assert summaries["nodes"][0]["children"]

            since = {"since": "2000-01-01", "until": "2100-01-01"}
            assert data(await session.call_tool("query_global", since))["nodes"]
            assert data(await session.call_tool("cover_window", since))["nodes"]
            grouped = data(await session.call_tool("brief", since))["sources"]
            assert {g["source"] for g in grouped} >= {"slack:#eng"}

            entities = data(await session.call_tool("search_entities", {"query": "eng"}))
            assert entities["entities"]
            entity = entities["entities"][0]["canonical_id"]
            topic = data(await session.call_tool("query_topic", {"entity_id": entity}))
            assert topic["entity_id"] == entity
            assert topic["nodes"]

            below = data(await session.call_tool("drill_down", {"node_id": store.summary_id}))
            assert store.leaf_id in {n["node_id"] for n in below["nodes"]}

            shown = data(await session.call_tool("show", {"node_id": store.leaf_id}))
            assert shown["node_id"] == store.leaf_id
            assert shown["text"]

            ids = [store.leaf_id, "nope"]
            fetched = data(await session.call_tool("fetch_leaves", {"ids": ids}))
            assert [n["node_id"] for n in fetched["nodes"]] == [store.leaf_id]
            assert fetched["missing"] == ["nope"]

            # Errors: one line, never a crash of the session.
            # The id sent is not repeated back (see server/echo.py).
            assert "no node with id <node_id>" in error(
                await session.call_tool("show", {"node_id": "nope"})
            )
            assert "no node" in error(await session.call_tool("drill_down", {"node_id": "nope"}))
            assert "not a summary" in error(
                await session.call_tool("drill_down", {"node_id": store.leaf_id})
            )
            assert error(await session.call_tool("search", {"query": "x", "limit": 0}))
            assert error(await session.call_tool("search", {"query": "x", "mode": "fuzzy"}))
            assert error(await session.call_tool("search", {}))
            message = error(await session.call_tool("cover_window", {"since": "yesterday-ish"}))
            assert "\n" not in message
            assert error(await session.call_tool("query_source", {"source": "slack:#nope"}))
            # Still answering after the errors.
            assert data(await session.call_tool("sources", {}))["sources"]

    run(scenario)


def test_stdio_principal_sees_only_its_scopes(store: Store) -> None:
    async def scenario() -> None:
        async with stdio_session(store.path, "--as", "bot") as session:
            await _check_scoped(session, store)

    run(scenario)


async def _check_scoped(session: ClientSession, store: Store) -> None:
    listed = data(await session.call_tool("sources", {}))["sources"]
    assert {s["scope"] for s in listed} == {"slack:#eng", "slack:#general", "slack:#incidents"}
    hidden = error(await session.call_tool("show", {"node_id": store.note_id}))
    missing = error(await session.call_tool("show", {"node_id": "0" * 32}))
    assert hidden == missing.replace("0" * 32, store.note_id)
    assert store.note_id not in hidden.replace(f"'{store.note_id}'", "")
    fetched = data(await session.call_tool("fetch_leaves", {"ids": [store.note_id]}))
    assert fetched == {"nodes": [], "missing": [store.note_id]}
    assert error(await session.call_tool("query_source", {"source": "notes:notes"}))
    for query in ("release", "architecture", "decision"):
        found = data(await session.call_tool("search", {"query": query, "limit": 50}))
        assert all(h["source"].startswith("slack:") for h in found["hits"])
    everything = {"since": "2000-01-01", "until": "2100-01-01"}
    for name in ("brief", "cover_window", "query_global"):
        text = json.dumps(data(await session.call_tool(name, everything)))
        assert "notes:notes" not in text
        assert store.note_id not in text
    # What it may read still works.
    assert data(await session.call_tool("show", {"node_id": store.leaf_id}))["text"]


def test_stdio_unknown_principal_fails_at_start(store: Store, tmp_path: Path) -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "stratamem", "--db", str(store.path), "--as", "nobody", "mcp"],
        input="",
        capture_output=True,
        text=True,
        timeout=PATIENCE_S,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith("error:")
    assert "nobody" in done.stderr


# -- streamable HTTP -----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def http_url(store: Store) -> Iterator[str]:
    with Service(store.path, embedder=None) as service:
        app = mcp_http_app(service)

        @asynccontextmanager
        async def lifespan(_: Starlette) -> AsyncIterator[None]:
            async with app.lifespan():
                yield

        host = Starlette(routes=[Route("/mcp", app)], lifespan=lifespan)
        port = _free_port()
        server = uvicorn.Server(
            uvicorn.Config(host, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        ready = threading.Event()
        for _ in range(500):
            if server.started:
                ready.set()
                break
            thread.join(0.01)
        assert ready.is_set(), "the server did not start"
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            server.should_exit = True
            thread.join(10)


@asynccontextmanager
async def http_session(url: str, token: str | None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=PATIENCE_S) as client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def test_http_refuses_a_request_without_a_good_token(http_url: str) -> None:
    hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    for headers in ({}, {"Authorization": "Bearer stm_wrong"}, {"Authorization": "Basic x"}):
        answer = httpx.post(http_url, json=hello, headers=headers, timeout=PATIENCE_S)
        assert answer.status_code == 401
        assert answer.headers["content-type"] == "application/json"
        assert set(answer.json()) == {"error"}


def test_http_principal_sees_only_its_scopes(http_url: str, store: Store) -> None:
    async def scenario() -> None:
        async with http_session(http_url, store.token) as session:
            assert {t.name for t in (await session.list_tools()).tools} == TOOLS
            await _check_scoped(session, store)

    run(scenario)


def test_http_client_without_token_cannot_connect(http_url: str) -> None:
    async def scenario() -> None:
        async with http_session(http_url, None) as session:
            await session.list_tools()

    # The client reports the 401 that answered its first request as an MCP error.
    with pytest.raises(ExceptionGroup) as caught:
        run(scenario)
    assert caught.group_contains(MCPError)


def test_http_without_tokens_reads_as_the_owner(store: Store) -> None:
    async def scenario() -> None:
        with Service(store.path, embedder=None) as service:
            app = mcp_http_app(service, tokens=False)
            transport = httpx2.ASGITransport(app=app)
            async with (
                app.lifespan(),
                httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client,
                streamable_http_client("http://127.0.0.1/mcp", http_client=client) as streams,
                ClientSession(*streams) as session,
            ):
                await session.initialize()
                shown = data(await session.call_tool("show", {"node_id": store.note_id}))
                assert shown["source"] == "notes:notes"

    run(scenario)
