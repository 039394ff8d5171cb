"""The HTTP API: a thin JSON layer over :class:`~stratamem.server.service.Service`.

Every route but ``/healthz`` takes ``Authorization: Bearer <token>``; the token names the
principal the call reads as (see ``docs/access.md``). Without ``tokens_required`` a call
without a token reads as the owner. The routes, all JSON:

=============================  ===============================================================
``POST /v1/search``            hybrid search (:meth:`Memory.search`)
``POST /v1/query_source``      the seven retrieval primitives, one route each, with the
``POST /v1/query_global``      arguments of their :class:`~stratamem.api.Memory` methods
``POST /v1/query_topic``
``POST /v1/cover_window``
``POST /v1/search_entities``
``POST /v1/drill_down``
``POST /v1/fetch_leaves``
``GET /v1/nodes/{id}``         one chunk or summary
``GET /v1/sources``            the sources the caller may read
``GET /v1/stats``              counts over what the caller may read
``POST /v1/ingest``            read a path on the server's machine (writes on: the owner, or
                               a principal with write permission, under the ingest roots)
``DELETE /v1/sources/{id}``    forget a source (the same)
``GET /v1/jobs/{id}``          a write job the caller started
``POST /v1/recall``            facts true now or at a time (and ``/v1/fact_history``)
``POST /v1/query_facts``       the facts that best match a query, as hits of kind ``fact``
``GET /v1/rollups``            profile cards of subjects (``?subject=``), built from facts
``POST /v1/facts``             state a fact; ``DELETE /v1/facts/{id}`` retracts one (writes)
``GET /healthz``               no token
``GET /docs``                  the API's documentation (no token), from ``/openapi.json``
``POST /mcp``                  the MCP server (streamable HTTP; see ``docs/mcp.md``)
``GET /``, ``/search``, …      the inspector's pages (HTML; see ``docs/inspector.md``), which
                               read as a login session's principal, never a bearer token
=============================  ===============================================================

Every route, those without a token included, answers only a ``Host`` it is reached by: the
loopback names, the address it is bound to and those it is given (``allowed_hosts``); else
421. A request from a web page (an ``Origin`` header) must come from one of them, else 403.
Two ``Authorization`` headers are refused (400). An address that sent too many bad tokens
lately is answered 429 (see :mod:`stratamem.server.tokens`).

Every error is ``{"error": {"code": ..., "message": ...}}`` with its status: 400
``bad_request`` (a body that cannot be read: cut short, not UTF-8, nested or numbered past
what the parser takes), 401 ``unauthorized``, 403 ``forbidden``, 404 ``not_found`` (a node the
caller may not read answers exactly as one that does not exist), 405 ``method_not_allowed``,
413 ``too_large``, 421 ``misdirected`` (a foreign ``Host``), 422 ``invalid_request`` (one line
naming the operation and the parameter, as every door says it), 429 ``too_many_requests``
(with ``Retry-After``), 500 ``internal_error`` (no traceback), 503 ``unavailable``, 504
``timeout`` (see :mod:`stratamem.server.errors`). No error repeats a value the caller sent
(see :mod:`stratamem.server.echo`).

The store's calls are blocking: a read runs on one of the service's reader threads within a
time limit; one past it is answered 504 at once (its thread runs to the end, since a thread
cannot be stopped). A write is a job on the service's writer thread: answered with its result
when it ends within the limit, else 202 and the job, which goes on either way.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast

import anyio
from fastapi import FastAPI, Request, Security
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer
from starlette.requests import ClientDisconnect
from starlette.routing import Route

from stratamem.api import Memory
from stratamem.errors import AccessDenied, MissingExtraError
from stratamem.extras import require
from stratamem.ops import OPERATIONS, Operation, Param, bind
from stratamem.server.codes import STATUS_CODES
from stratamem.server.echo import sent, without_echo
from stratamem.server.edge import Guard
from stratamem.server.errors import (
    _ApiError,
    add_error_handlers,
    answered,
    api_error,
)
from stratamem.server.hosts import Hosts
from stratamem.server.service import Service, ServiceContext
from stratamem.server.tokens import _TooManyTries

if TYPE_CHECKING:
    from stratamem.server.mcp import MCPHTTPApp

MAX_BODY_BYTES = 1 << 20
TIMEOUT_S = 30.0
ACCESS_LOG = logging.getLogger("stratamem.server.access")

log = logging.getLogger(__name__)

T = TypeVar("T")

# -- the app -----------------------------------------------------------------------------------


def create_app(
    service: Service,
    *,
    tokens_required: bool = True,
    max_body_bytes: int = MAX_BODY_BYTES,
    timeout_s: float = TIMEOUT_S,
    access_log: logging.Logger | None = ACCESS_LOG,
    log_queries: bool = False,
    mount_mcp: bool = True,
    allowed_hosts: Sequence[str] = (),
    inspector: bool = True,
) -> FastAPI:
    """The HTTP API over ``service``. ``tokens_required=False`` lets a call without a token
    read as the owner (bind such a server to loopback only). The write routes answer as the
    service allows (:attr:`Service.allow_writes`). ``access_log`` gets one line per request
    (method, path, status, milliseconds, principal), with the query text only when
    ``log_queries``. Every route answers the loopback names and ``allowed_hosts`` as ``Host``
    (``name`` on any port, ``name:port``; ``*``: any), against DNS rebinding, and pages of
    those origins only. The MCP server is mounted at ``/mcp`` (unless ``mount_mcp`` is
    False); without the ``mcp`` extra it is not, and ``app.state.mcp_missing`` says what to
    install. The inspector's pages are mounted at ``/`` (unless ``inspector`` is False; see
    :mod:`stratamem.server.inspector`); without Jinja2 they are not, and
    ``app.state.inspector_missing`` says what to install."""
    hosts = Hosts(allowed_hosts)
    if max_body_bytes <= 0:
        raise ValueError(f"max_body_bytes must be > 0, got {max_body_bytes}")
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
    mounted: list[MCPHTTPApp] = []  # the MCP app, whose session manager runs while this app serves

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            for sub in mounted:
                await stack.enter_async_context(sub.lifespan())
            yield

    app = FastAPI(
        lifespan=lifespan,
        # What is served is documented: the API at /docs (and /openapi.json), no second copy.
        redoc_url=None,
        swagger_ui_oauth2_redirect_url=None,
        title="stratamem",
        summary="Retrieval and memory over one store, read as the principal a token names.",
        version="1",
    )
    calls = app.state.calls = _Calls(service, tokens_required=tokens_required, timeout_s=timeout_s)
    add_error_handlers(app)
    _add_routes(app, calls, log_queries=log_queries)
    app.state.mcp_missing = None
    if mount_mcp:
        try:
            mcp = _mcp_app(service, tokens_required=tokens_required)
        except MissingExtraError as missing:
            log.info("MCP is not mounted: %s", missing)
            app.state.mcp_missing = str(missing)
        else:
            app.router.routes.append(Route("/mcp", mcp))
            mounted.append(mcp)
    app.state.mcp = bool(mounted)
    app.state.inspector = None
    app.state.inspector_missing = None
    if inspector:
        try:
            require("jinja2", "server", "the inspector")
        except MissingExtraError as missing:
            log.info("the inspector is not mounted: %s", missing)
            app.state.inspector_missing = str(missing)
        else:
            from stratamem.server.inspector import mount

            app.state.inspector = mount(app, calls, tokens_required=tokens_required)
    app.add_middleware(Guard, max_body_bytes=max_body_bytes, access_log=access_log, hosts=hosts)
    return app


class _Calls:
    """Who a request is, and its store calls run in a worker thread under the time limit."""

    def __init__(self, service: Service, *, tokens_required: bool, timeout_s: float) -> None:
        self.service = service
        self.tokens_required = tokens_required
        self.timeout_s = timeout_s

    async def caller(self, request: Request) -> str | None:
        """The principal's name, or None for the owner; :class:`_ApiError` 401 otherwise."""
        header = request.headers.get("authorization")
        if header is None and not self.tokens_required:
            request.state.principal = "owner"
            return None
        address = request.client.host if request.client else "-"
        try:
            with anyio.fail_after(self.timeout_s):
                principal = await self.service.tokens.principal(header, address)
        except _TooManyTries as exc:
            headers = {"Retry-After": str(exc.retry_after)}
            raise _ApiError(429, str(exc), headers=headers) from None
        except AccessDenied as exc:
            raise _ApiError(401, str(exc)) from None
        except TimeoutError:
            raise _ApiError(504, f"the request took longer than {self.timeout_s:g}s") from None
        request.state.principal = principal.name
        return principal.name

    async def read(self, who: str | None, work: Callable[[Memory], T]) -> T:
        def job() -> T:
            with self.service.reading(who) as memory:
                return work(memory)

        return await self.in_thread(job)

    async def in_thread(self, job: Callable[[], T]) -> T:
        """``job`` on one of the service's reader threads, within the time limit."""
        try:
            with anyio.fail_after(self.timeout_s):
                return await self.service.read(answered(job))
        except TimeoutError:
            raise _ApiError(504, f"the request took longer than {self.timeout_s:g}s") from None

    async def write(
        self,
        action: str,
        who: str | None,
        job: Callable[[], dict[str, Any]],
        said: Mapping[str, str],
    ) -> JSONResponse:
        """``job`` queued on the service's writer thread: its result when it ends within the
        time limit, else 202 with the job to ask about (it goes on either way, whether or not
        the caller stays). ``said``: what the caller sent, which its errors leave out."""
        found = self.service.submit(action, who, job, sent=said)
        waiting = asyncio.wrap_future(found.future)
        done, _ = await asyncio.wait({waiting}, timeout=self.timeout_s)
        if not done:
            where = f"/v1/jobs/{found.id}"
            return JSONResponse(
                {"job": found.to_dict()}, status_code=202, headers={"Location": where}
            )
        try:
            result = waiting.result()
        except Exception as exc:
            raise api_error(exc) from None
        return JSONResponse({"job": found.id, **result})


_bearer = HTTPBearer(auto_error=False, description="A principal's token (principal add)")


async def _caller(request: Request, _: Annotated[Any, Security(_bearer)] = None) -> str | None:
    """The principal a request reads as (None: the owner)."""
    calls: _Calls = request.app.state.calls
    return await calls.caller(request)


Caller = Annotated[str | None, Security(_caller)]


def _add_routes(app: FastAPI, calls: _Calls, *, log_queries: bool) -> None:
    @app.get("/healthz", tags=["meta"])
    async def healthz() -> dict[str, str]:
        """Whether the server answers; takes no token."""
        return {"status": "ok"}

    for op in OPERATIONS.values():
        _add_operation(app, calls, op, log_queries=log_queries)

    @app.get("/v1/jobs/{job_id}", tags=["writes"])
    async def job(job_id: str, who: Caller) -> dict[str, Any]:
        """A write job the caller started: queued, running, done (with its result) or
        failed (with its error)."""
        found = calls.service.job(job_id, who)
        if found is None:
            raise _ApiError(404, "no job of that id (a job is found only by who started it)")
        out = found.to_dict()
        if found.state == "failed":
            error = api_error(cast(BaseException, found.future.exception()))
            status = error.status if isinstance(error, _ApiError) else 403
            message = str(error.message if isinstance(error, _ApiError) else error)
            out["error"] = {
                "code": STATUS_CODES.get(status, "error"),
                "status": status,
                "message": without_echo(message, found.sent),
            }
        return out


def _add_operation(app: FastAPI, calls: _Calls, op: Operation, *, log_queries: bool) -> None:
    """The route of one operation: its arguments from the JSON body (POST) or the query
    string (GET, DELETE) and the path, checked by the operation's own
    :func:`~stratamem.ops.spec.bind`; its answer the operation's JSON."""
    method, path = op.route
    in_path = re.findall(r"{(\w+)(?::\w+)?}", path)

    known = {p.name for p in op.params}

    async def endpoint(request: Request, who: Caller) -> Any:
        args = await _arguments(request, op, method)
        for name in in_path:
            args[name] = request.path_params[name]
        said = sent(args, known=known)
        try:
            return await run(request, who, args, said)
        except _ApiError as exc:
            raise exc.without_echo(said) from None
        except AccessDenied as exc:
            raise _ApiError(403, str(exc)).without_echo(said) from None

    async def run(
        request: Request, who: str | None, args: dict[str, Any], said: Mapping[str, str]
    ) -> Any:
        if op.access == "owner" and who is not None:
            # As every door refuses it (ops.refuse): a principal's write permission is not
            # the owner's, whatever it sent.
            raise _ApiError(403, f"{op.name} is the owner's")
        try:
            bound = bind(op, args)
        except ValueError as exc:
            raise _ApiError(422, str(exc)) from None
        if log_queries and op.query_param and isinstance(bound.get(op.query_param), str):
            request.state.query = bound[op.query_param]
        service = calls.service
        if op.reads:
            context = ServiceContext(service, who)
            return await calls.in_thread(lambda: op.run(context, bound))
        if not service.allow_writes:
            raise _ApiError(403, "writes are off: start the server with --allow-writes")
        context = ServiceContext(service, who)
        return await calls.write(op.name, who, lambda: op.run(context, bound), said)

    body: dict[str, Any]
    if method == "POST":
        body = {
            "requestBody": {
                "required": bool(op.schema()["required"]),
                "content": {"application/json": {"schema": op.schema()}},
            }
        }
    else:
        # The arguments of a GET or DELETE: the path's, then the query string's.
        schema = op.schema()["properties"]
        body = {
            "parameters": [
                {
                    "name": p.name,
                    "in": "path" if p.name in in_path else "query",
                    "required": p.name in in_path or p.required,
                    "description": p.help,
                    "schema": {k: v for k, v in schema[p.name].items() if k != "description"},
                }
                for p in op.params
            ]
        }
    app.add_api_route(
        path,
        endpoint,
        methods=[method],
        name=op.name,
        tags=[op.group if op.reads else "writes"],
        summary=op.name,
        description=op.description,
        openapi_extra=body,
        responses={202: {"description": "Still running: ask GET /v1/jobs/{id}."}}
        if not op.reads
        else None,
    )


async def _arguments(request: Request, op: Operation, method: str) -> dict[str, Any]:
    """The call's arguments as sent: a JSON object in the body of a POST, else the query
    string (each value read as its parameter's type; a list repeats its key)."""
    if method == "POST":
        try:
            raw = await request.body()
        except ClientDisconnect:
            # Gone before its body was whole: answered to nobody, as a bad request.
            raise _ApiError(400, "the body ended before its announced length") from None
        if not raw.strip():
            return {}
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise _ApiError(422, f"the body is not valid JSON (at character {exc.pos})") from None
        except (ValueError, RecursionError):
            # Bytes that are no UTF-8, a number past the digits Python reads, nesting past
            # the parser's depth: the body cannot be read at all.
            raise _ApiError(400, "the body cannot be read as JSON") from None
        if not isinstance(data, dict):
            raise _ApiError(422, f"{op.name}: the body must be a JSON object of arguments")
        return data
    out: dict[str, Any] = {}
    for name in request.query_params:
        values = request.query_params.getlist(name)
        try:
            param = op.param(name)
        except KeyError:
            out[name] = values[-1]  # bind names it
            continue
        out[name] = _typed(param, values)
    return out


def _typed(param: Param, values: list[str]) -> Any:
    """A query-string value read as its parameter's type; one that does not read so is
    left as text, for :func:`~stratamem.ops.spec.bind` to refuse as it does on every door."""
    if param.type == "strs":
        return values
    value = values[-1]
    try:
        if param.type == "int":
            return int(value)
        if param.type == "float":
            return float(value)
    except ValueError:
        return value
    if param.type == "bool" and value.lower() in ("true", "false", "1", "0"):
        return value.lower() in ("true", "1")
    return value


# -- MCP ---------------------------------------------------------------------------------------


def _mcp_app(service: Service, *, tokens_required: bool) -> MCPHTTPApp:
    """The MCP server's HTTP app over ``service``, its Host and Origin checked by this app's
    :class:`Guard`; :class:`MissingExtraError` without the ``mcp`` extra."""
    require("mcp", "mcp", "/mcp")
    from stratamem.server.mcp import mcp_http_app

    return mcp_http_app(service, tokens=tokens_required, allowed_hosts=["*"])
