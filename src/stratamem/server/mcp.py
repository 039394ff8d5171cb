"""The MCP server: the operation table (:mod:`stratamem.ops`) as tools a model can call.

:func:`build_server` makes the official SDK's ``MCPServer`` whose tools are the operations:
each tool's name, description and input schema are its operation's, its arguments are checked
by the operation's own :func:`~stratamem.ops.spec.bind` (so a bad argument gets the same
one-line error as on HTTP and in Python) and its answer is the operation's JSON. A caller is
listed only the tools it may call: the reading ones, and where the server allows writes, the
writing ones for the owner and for a principal with write permission. ``stratamem mcp`` runs
it over stdio, and :func:`mcp_http_app` serves it over streamable HTTP for the HTTP server to
mount at ``/mcp``.

Every read runs on the service's reader threads as the caller, so a principal sees its
scopes and nothing else; a node it may not see answers exactly like one that does not exist.
A write runs as a job on the service's writer thread. Sources and nodes are also resources:
``stratamem://sources``, ``stratamem://sources/{id}``, ``stratamem://nodes/{id}``.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from mcp_types import Tool as MCPTool
from starlette.types import Receive, Scope, Send

from stratamem.api import Memory
from stratamem.errors import AccessDenied, StratamemError
from stratamem.ops import OPERATIONS, Operation, allowed, bind, operation, refuse, wire
from stratamem.ops.reads import MAX_LIMIT
from stratamem.server.codes import STATUS_CODES
from stratamem.server.echo import sent, without_echo
from stratamem.server.hosts import Hosts, refusal
from stratamem.server.service import Service, ServiceContext
from stratamem.server.tokens import _TooManyTries
from stratamem.types import Principal

log = logging.getLogger(__name__)

T = TypeVar("T")

NAME = "stratamem"

INSTRUCTIONS = """\
stratamem is a memory of conversations, mail, notes and what agents wrote into it. Start with
`search` for a question; use `brief` for "what happened lately", `query_source` or
`query_global` for summaries of a source or a period, `query_topic` for everything about a
person or topic (find its id with `search_entities`), `query_facts` or `recall` for what is
known (facts, with their validity and evidence), `rollups` for an entity's profile card.
Summaries carry child ids: open them with `drill_down`, read nodes whole with `show` or
`fetch_leaves`. Cite with each node's `cite`. Times are ISO 8601 (2024-03-12,
2024-03-12T09:00Z) or spans back from now (24h, 7d)."""
READ_ONLY_NOTE = "Read only: nothing here changes the store."
WRITES_NOTE = (
    "Writes: `add` a memory (then `edit` or `rm` it by id), `remember` or `retract` a fact, "
    "`ingest` a path on the server, `forget` a source."
)

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)


def tool_of(op: Operation) -> MCPTool:
    """The MCP tool an operation is."""
    annotations = READ_ONLY if op.reads else DESTRUCTIVE if op.destructive else WRITE
    return MCPTool(
        name=op.name,
        description=op.description,
        input_schema=op.schema(),
        annotations=annotations,
    )


class _OperationServer(MCPServer):
    """An ``MCPServer`` whose tools are the operations the caller may call."""

    def __init__(
        self, service: Service, principal: Callable[[], str | None], instructions: str
    ) -> None:
        super().__init__(NAME, instructions=instructions, log_level="WARNING")
        self._service = service
        self._principal = principal

    async def _who(self) -> tuple[str | None, Principal | None]:
        name = self._principal()
        if name is None:
            return None, None
        context = ServiceContext(self._service, name)
        return name, await self._service.read(lambda: context.principal)

    async def read_resource(self, uri: Any, context: Any = None) -> Any:
        """The SDK's, with the URI asked for left out of its errors (see
        :mod:`stratamem.server.echo`)."""
        try:
            return await super().read_resource(uri, context)
        except ResourceError as exc:
            said = sent({"uri": str(uri)}, known={"uri"})
            message = without_echo(str(exc), said)
            if isinstance(exc, ResourceNotFoundError):
                raise ResourceNotFoundError(message) from exc
            raise ResourceError(message) from exc

    async def list_tools(self) -> list[MCPTool]:
        _, who = await self._who()
        return [tool_of(op) for op in allowed(who, writes=self._service.allow_writes)]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Any = None
    ) -> CallToolResult:
        try:
            return _result(await self._call(name, arguments))
        except (StratamemError, ValueError) as exc:
            found = OPERATIONS.get(name)
            if found is None:  # the tool's name is the caller's own text
                said = sent(arguments, tool=name)
            else:
                said = sent(arguments, known={p.name for p in found.params})
            raise ToolError(one_line(without_echo(str(exc) or type(exc).__name__, said))) from exc

    async def _call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        service = self._service
        op = operation(name)
        bound = bind(op, arguments)
        who_name, who = await self._who()
        refuse(op, who, writes=service.allow_writes)
        context = ServiceContext(service, who_name)
        if op.reads:
            return await service.read(lambda: op.run(context, bound))
        said = sent(arguments, known={p.name for p in op.params})
        job = service.submit(name, who_name, lambda: op.run(context, bound), sent=said)
        data = await asyncio.wrap_future(job.future)
        return {"job": job.id, **data}


def build_server(service: Service, principal: Callable[[], str | None]) -> MCPServer:
    """An ``MCPServer`` whose tools read ``service`` as ``principal()`` (None: the owner),
    asked afresh on every call."""
    # The SDK configures the root logger when a server is made (``logging.basicConfig``); a
    # library must leave the host's logging as it found it.
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        note = WRITES_NOTE if service.allow_writes else READ_ONLY_NOTE
        server = _OperationServer(service, principal, f"{INSTRUCTIONS}\n{note}")
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)

    async def read(work: Callable[[Memory], T], **given: str) -> T:
        context = ServiceContext(service, principal())

        def job() -> T:
            with context.reading() as memory:
                return work(memory)

        try:
            return await service.read(job)
        except (StratamemError, ValueError) as exc:
            # A ResourceError reaches the client with this message, and only this one.
            message = without_echo(str(exc) or type(exc).__name__, sent(given))
            raise ResourceError(one_line(message)) from exc

    _add_resources(server, read)
    return server


def _result(data: dict[str, Any]) -> CallToolResult:
    text = wire.dumps(data)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def _add_resources(server: MCPServer, read: Callable[..., Any]) -> None:
    """Sources and nodes as resources, for clients that attach context by URI."""

    @server.resource(
        "stratamem://sources",
        name="sources",
        description="The sources you can read, as the sources tool lists them.",
        mime_type="application/json",
    )
    async def sources() -> str:
        found = await read(lambda m: [s.to_dict() for s in m.sources.list()])
        return json.dumps({"sources": found}, ensure_ascii=False)

    @server.resource(
        "stratamem://sources/{source_id}",
        name="source",
        description="One source by id: what it is and the summaries at the top of its tree.",
        mime_type="application/json",
    )
    async def source(source_id: str) -> str:
        def work(memory: Memory) -> dict[str, Any]:
            found = memory.sources.get(source_id)
            tops = memory.query_source(found.id, limit=MAX_LIMIT)
            return {**found.to_dict(), "summaries": [wire.node(h) for h in tops.hits]}

        return json.dumps(await read(work, source_id=source_id), ensure_ascii=False)

    @server.resource(
        "stratamem://nodes/{node_id}",
        name="node",
        description="One node (message, chunk or summary) whole, as the show tool gives it.",
        mime_type="application/json",
    )
    async def node(node_id: str) -> str:
        found = await read(
            lambda m: wire.node(m.get(node_id), whole=True, entities=True), node_id=node_id
        )
        return json.dumps(found, ensure_ascii=False)


def one_line(message: str, *, limit: int = 500) -> str:
    text = " ".join(message.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- streamable HTTP ---------------------------------------------------------------------------

# The principal of the HTTP request being served; the SDK carries a request's context
# variables into the tool call it delivers.
_caller: contextvars.ContextVar[str | None] = contextvars.ContextVar("mcp_caller", default=None)


class MCPHTTPApp:
    """The MCP server as an ASGI app for the streamable HTTP transport.

    Every request must carry ``Authorization: Bearer <token>`` naming a principal (checked
    as :mod:`stratamem.server.tokens` says); a missing or bad token is answered 401 with a
    JSON error (429 for an address that sent too many bad ones lately), and the calls it
    carries read as that principal. Built with ``tokens=False`` (the owner serving on
    loopback alone) no token is asked for and every call reads as the owner. Each request
    is first checked as :func:`~stratamem.server.hosts.refusal` says: its ``Host`` and
    ``Origin`` one of ``allowed_hosts`` (and the loopback names), one ``Authorization``.

    The app answers on any path, so mount it where it should live (Starlette/FastAPI:
    ``Route("/mcp", app)``, which matches ``/mcp`` with no trailing-slash redirect). Its
    session manager must be running while it serves: enter :meth:`lifespan` in the host
    app's lifespan. Run on its own (``uvicorn.run(app)``) it handles the ASGI lifespan
    itself.
    """

    def __init__(
        self,
        service: Service,
        *,
        tokens: bool = True,
        allowed_hosts: Sequence[str] | None = None,
        json_response: bool = False,
    ) -> None:
        self.service = service
        self.tokens = tokens
        self.server = build_server(service, _caller.get)
        self.hosts = Hosts(allowed_hosts or ())
        # Host and Origin are checked here (refusal), against the list every route uses.
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        # Builds the session manager; the Starlette app around it is not used.
        self.server.streamable_http_app(
            json_response=json_response, transport_security=security, host=""
        )
        self.session_manager = self.server.session_manager

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Run the session manager (once per app) while the host app serves."""
        async with self.session_manager.run():
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._serve_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        refused = refusal(scope, self.hosts)
        if refused is not None:
            await _refuse(send, *refused)
            return
        principal: str | None = None
        if self.tokens:
            try:
                principal = await self._principal(scope)
            except _TooManyTries as exc:
                await _refuse(send, 429, str(exc), retry_after=exc.retry_after)
                return
            except AccessDenied as exc:
                await _refuse(send, 401, str(exc))
                return
        reset = _caller.set(principal)
        try:
            await self.session_manager.handle_request(scope, receive, send)
        finally:
            _caller.reset(reset)

    async def _principal(self, scope: Scope) -> str:
        header = None
        for key, value in scope.get("headers", ()):
            if key == b"authorization":
                header = value.decode("latin-1")
        client = scope.get("client")
        found = await self.service.tokens.principal(header, client[0] if client else "-")
        return found.name

    async def _serve_lifespan(self, receive: Receive, send: Send) -> None:
        message = await receive()
        if message["type"] != "lifespan.startup":
            return
        async with self.lifespan():
            await send({"type": "lifespan.startup.complete"})
            while (await receive())["type"] != "lifespan.shutdown":
                pass
        await send({"type": "lifespan.shutdown.complete"})


async def _refuse(send: Send, status: int, message: str, *, retry_after: int = 0) -> None:
    """A JSON error as the HTTP API answers it: ``{"error": {"code", "message"}}``."""
    code = STATUS_CODES.get(status, "error")
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="stratamem"'))
    if retry_after:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def mcp_http_app(
    service: Service,
    *,
    tokens: bool = True,
    allowed_hosts: Sequence[str] | None = None,
    json_response: bool = False,
) -> MCPHTTPApp:
    """The streamable HTTP transport of the MCP server over ``service``, as an ASGI app.

    ``tokens``: ask every request for a bearer token and read as its principal (False: no
    token, every call as the owner; only for a server bound to loopback). ``allowed_hosts``:
    the ``Host`` values accepted besides the loopback names (``name`` on any port,
    ``name:port``; ``*`` turns the check off), which guards a local server against DNS
    rebinding; an ``Origin``, when sent, must name one of them too.
    ``json_response``: answer each request with one JSON body instead of an event stream.
    """
    return MCPHTTPApp(
        service, tokens=tokens, allowed_hosts=allowed_hosts, json_response=json_response
    )
