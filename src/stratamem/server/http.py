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
``POST /v1/ingest``            read a path on the server's machine (the owner, writes on)
``GET /healthz``               no token
=============================  ===============================================================

Every error is ``{"error": {"code": ..., "message": ...}}`` with its status: 401
``unauthorized``, 403 ``forbidden``, 404 ``not_found`` (a node the caller may not read answers
exactly as one that does not exist), 405 ``method_not_allowed``, 413 ``too_large``, 422
``invalid_request`` (with ``details``), 500 ``internal_error`` (no traceback), 503
``unavailable``, 504 ``timeout``.

The store's calls are blocking: each runs in a worker thread, under the per-principal lock of
the service and a time limit. A call past its limit is answered 504 at once; its thread runs
to the end, since a thread cannot be stopped, and holds that principal's lock until then.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar, cast

import anyio
from fastapi import FastAPI, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field
from starlette.exceptions import HTTPException
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stratamem.api import Memory
from stratamem.config import PROFILES
from stratamem.entities.search import MAX_LIMIT as MAX_ENTITY_LIMIT
from stratamem.errors import (
    AccessDenied,
    IngestError,
    NotFoundError,
    StoreBusyError,
    StratamemError,
)
from stratamem.retrieval.hybrid import MAX_LIMIT as MAX_SEARCH_LIMIT
from stratamem.retrieval.primitives import (
    COVER_DEFAULT_LIMIT,
    DEFAULT_LIMIT,
    MAX_BATCH,
    MAX_LIMIT,
)
from stratamem.server.service import Service
from stratamem.timeparse import parse_when
from stratamem.types import Filters, Source, SourceKind

if TYPE_CHECKING:
    from stratamem.server.mcp import MCPHTTPApp

MAX_BODY_BYTES = 1 << 20
TIMEOUT_S = 30.0
ACCESS_LOG = logging.getLogger("stratamem.server.access")
MAX_QUERY_CHARS = 10_000

log = logging.getLogger(__name__)

T = TypeVar("T")

_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "too_large",
    422: "invalid_request",
    500: "internal_error",
    503: "unavailable",
    504: "timeout",
}


class _ApiError(Exception):
    """An error answered as ``{"error": {"code", "message"}}`` with ``status``."""

    def __init__(self, status: int, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or _STATUS_CODES.get(status, "error")
        self.message = message


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **extra}}


def _error_response(error: _ApiError, **extra: Any) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else None
    return JSONResponse(
        error_body(error.code, error.message, **extra), status_code=error.status, headers=headers
    )


# -- request bodies ----------------------------------------------------------------------------


def _when(value: Any) -> Any:
    """A time as the command line takes it: ISO 8601 (``2024-03-12``) or a span back (``24h``)."""
    return parse_when(value) if isinstance(value, str) else value


When = Annotated[
    datetime,
    BeforeValidator(_when),
    Field(description="ISO 8601 (2024-03-12, 2024-03-12T09:30Z) or a span back: 24h, 7d, 2w."),
]


def _profile(name: str) -> str:
    if name not in PROFILES:
        raise ValueError(f"unknown weight profile; known: {', '.join(sorted(PROFILES))}")
    return name


Query = Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS)]
Names = Annotated[list[Annotated[str, Field(min_length=1, max_length=200)]], Field(max_length=100)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Filtered(_Body):
    sources: Names = Field(
        default_factory=list, description="Source ids or scopes (slack:* is a prefix)."
    )
    kinds: list[SourceKind] = Field(default_factory=list, max_length=4)

    def filters(self, *, since: datetime | None = None, until: datetime | None = None) -> Filters:
        return Filters(
            sources=tuple(self.sources), kinds=tuple(self.kinds), since=since, until=until
        )


class SearchBody(_Filtered):
    query: Query
    since: When | None = None
    until: When | None = None
    limit: int = Field(10, ge=1, le=MAX_SEARCH_LIMIT)
    budget: int | None = Field(None, ge=1, le=1_000_000, description="Pack hits into tokens.")
    mode: Literal["hybrid", "keyword", "vector", "graph"] = "hybrid"
    profile: Annotated[str, AfterValidator(_profile)] | None = Field(
        None, description=f"Fusion weights: {', '.join(sorted(PROFILES))} (default balanced)."
    )


class QuerySourceBody(_Filtered):
    source: str | None = Field(None, max_length=200, description="A source id or scope.")
    source_kind: SourceKind | None = None
    time_window_days: float | None = Field(None, gt=0, le=365_000)
    query: Query | None = None
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)


class QueryGlobalBody(_Filtered):
    since: When
    until: When
    source_kind: SourceKind | None = None
    query: Query | None = None
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)


class QueryTopicBody(_Filtered):
    entity_id: str = Field(min_length=1, max_length=500, description="person:alice chen")
    since: When | None = None
    until: When | None = None
    query: Query | None = None
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)


class CoverWindowBody(_Filtered):
    since: When
    until: When
    limit: int = Field(COVER_DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)


class SearchEntitiesBody(_Body):
    query: Query
    kinds: Names = Field(default_factory=list, description="Entity kinds: person, system, …")
    limit: int = Field(5, ge=1, le=MAX_ENTITY_LIMIT)


class DrillDownBody(_Filtered):
    node_id: str = Field(min_length=1, max_length=200)
    max_depth: int = Field(1, ge=1, le=32)
    query: Query | None = None
    limit: int | None = Field(None, ge=1, le=MAX_LIMIT)


class FetchLeavesBody(_Filtered):
    ids: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        min_length=1, max_length=MAX_BATCH
    )


class IngestBody(_Body):
    path: str = Field(min_length=1, max_length=4096, description="A path on the server.")
    format: str | None = Field(None, max_length=100, description="The connector (detected).")
    scope: str | None = Field(None, max_length=200)
    access: list[Annotated[str, Field(min_length=1, max_length=64)]] | None = Field(
        None, max_length=100, description="Access scopes (default: a principal's own)."
    )
    sync: bool = Field(False, description="Remove the records the export lacks.")
    embed: bool = Field(True, description="Embed the new chunks before answering.")
    trees: bool = Field(
        True, description="Seal the summary trees of what changed (false: leave them queued)."
    )


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
    mcp_allowed_hosts: Sequence[str] | None = None,
) -> FastAPI:
    """The HTTP API over ``service``. ``tokens_required=False`` lets a call without a token
    read as the owner (bind such a server to loopback only). The write routes answer as the
    service allows (:attr:`Service.allow_writes`). ``access_log`` gets one line per request
    (method, path, status, milliseconds, principal), with the query text only when
    ``log_queries``. The MCP
    server is mounted at ``/mcp`` (unless ``mount_mcp`` is False), answering the ``Host`` values
    in ``mcp_allowed_hosts`` (default: the loopback names, against DNS rebinding)."""
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
        title="stratamem",
        summary="Retrieval and memory over one store, read as the principal a token names.",
        version="1",
    )
    calls = app.state.calls = _Calls(service, tokens_required=tokens_required, timeout_s=timeout_s)
    _add_error_handlers(app)
    _add_routes(app, calls, log_queries=log_queries)
    if mount_mcp:
        mcp = _mcp_app(service, tokens_required=tokens_required, allowed_hosts=mcp_allowed_hosts)
        if mcp is not None:
            app.router.routes.append(Route("/mcp", mcp))
            mounted.append(mcp)
    app.state.mcp = bool(mounted)
    app.add_middleware(_Guard, max_body_bytes=max_body_bytes, access_log=access_log)
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
        scheme, _, token = (header or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise _ApiError(401, "a bearer token is required: Authorization: Bearer <token>")
        try:
            principal = await self.in_thread(lambda: self.service.authenticate(token.strip()))
        except AccessDenied:
            raise _ApiError(401, "the token matches no principal") from None
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
                return await self.service.read(_answered(job))
        except TimeoutError:
            raise _ApiError(504, f"the request took longer than {self.timeout_s:g}s") from None

    async def write(
        self, action: str, who: str | None, job: Callable[[], dict[str, Any]]
    ) -> JSONResponse:
        """``job`` queued on the service's writer thread: its result when it ends within the
        time limit, else 202 with the job to ask about (it goes on either way, whether or not
        the caller stays)."""
        found = self.service.submit(action, who, job)
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
            raise _api_error(exc) from None
        return JSONResponse({"job": found.id, **result})


def _answered(job: Callable[[], T]) -> Callable[[], T]:
    """``job`` with its errors as :class:`_ApiError` (see :func:`_api_error`)."""

    def run() -> T:
        try:
            return job()
        except Exception as exc:
            raise _api_error(exc) from None

    return run


def _api_error(exc: BaseException) -> Exception:
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


_bearer = HTTPBearer(auto_error=False, description="A principal's token (principal add)")


async def _caller(request: Request, _: Annotated[Any, Security(_bearer)] = None) -> str | None:
    """The principal a request reads as (None: the owner)."""
    calls: _Calls = request.app.state.calls
    return await calls.caller(request)


Caller = Annotated[str | None, Security(_caller)]


def _add_routes(app: FastAPI, calls: _Calls, *, log_queries: bool) -> None:
    def noted(request: Request, query: str | None) -> None:
        if log_queries and query:
            request.state.query = query

    @app.get("/healthz", tags=["meta"])
    async def healthz() -> dict[str, str]:
        """Whether the server answers; takes no token."""
        return {"status": "ok"}

    @app.post("/v1/search", tags=["search"])
    async def search(body: SearchBody, request: Request, who: Caller) -> dict[str, Any]:
        """Hybrid search: keyword, vector and graph legs fused; ``budget`` packs cards."""
        noted(request, body.query)
        found = await calls.read(
            who,
            lambda m: m.search(
                body.query,
                sources=body.sources,
                kinds=body.kinds,
                since=body.since,
                until=body.until,
                limit=body.limit,
                budget=body.budget,
                mode=body.mode,
                profile=body.profile,
            ),
        )
        return found.to_dict()

    @app.post("/v1/query_source", tags=["primitives"])
    async def query_source(body: QuerySourceBody, request: Request, who: Caller) -> dict[str, Any]:
        """Summaries of one source, a kind of source, or all; newest first or by ``query``."""
        noted(request, body.query)
        found = await calls.read(
            who,
            lambda m: m.query_source(
                body.source,
                source_kind=body.source_kind,
                time_window_days=body.time_window_days,
                query=body.query,
                limit=body.limit,
                filters=body.filters(),
            ),
        )
        return found.to_dict()

    @app.post("/v1/query_global", tags=["primitives"])
    async def query_global(body: QueryGlobalBody, request: Request, who: Caller) -> dict[str, Any]:
        """Summaries of every source overlapping [since, until]."""
        noted(request, body.query)
        found = await calls.read(
            who,
            lambda m: m.query_global(
                since=body.since,
                until=body.until,
                source_kind=body.source_kind,
                query=body.query,
                limit=body.limit,
                filters=body.filters(),
            ),
        )
        return found.to_dict()

    @app.post("/v1/query_topic", tags=["primitives"])
    async def query_topic(body: QueryTopicBody, request: Request, who: Caller) -> dict[str, Any]:
        """Summaries and leaves that name a canonical entity id."""
        noted(request, body.query)
        found = await calls.read(
            who,
            lambda m: m.query_topic(
                body.entity_id,
                since=body.since,
                until=body.until,
                query=body.query,
                limit=body.limit,
                filters=body.filters(),
            ),
        )
        return found.to_dict()

    @app.post("/v1/cover_window", tags=["primitives"])
    async def cover_window(body: CoverWindowBody, who: Caller) -> dict[str, Any]:
        """The fewest summaries and leaves covering every leaf in [since, until]."""
        found = await calls.read(
            who,
            lambda m: m.cover_window(
                since=body.since, until=body.until, limit=body.limit, filters=body.filters()
            ),
        )
        return found.to_dict()

    @app.post("/v1/search_entities", tags=["primitives"])
    async def search_entities(
        body: SearchEntitiesBody, request: Request, who: Caller
    ) -> dict[str, Any]:
        """Entities whose name matches ``query``, with their canonical ids."""
        noted(request, body.query)
        found = await calls.read(
            who, lambda m: m.search_entities(body.query, kinds=body.kinds, limit=body.limit)
        )
        return {"entities": [e.to_dict() for e in found]}

    @app.post("/v1/drill_down", tags=["primitives"])
    async def drill_down(body: DrillDownBody, request: Request, who: Caller) -> dict[str, Any]:
        """A summary's descendants, ``max_depth`` levels down, breadth first."""
        noted(request, body.query)
        found = await calls.read(
            who,
            lambda m: m.drill_down(
                body.node_id,
                max_depth=body.max_depth,
                query=body.query,
                limit=body.limit,
                filters=body.filters(),
            ),
        )
        return {"hits": [h.to_dict() for h in found]}

    @app.post("/v1/fetch_leaves", tags=["primitives"])
    async def fetch_leaves(body: FetchLeavesBody, who: Caller) -> dict[str, Any]:
        """Chunks by id, in the order asked; ids that are missing (or hidden) are left out."""
        found = await calls.read(who, lambda m: m.fetch_leaves(body.ids, filters=body.filters()))
        return {"hits": [h.to_dict() for h in found]}

    @app.get("/v1/nodes/{node_id}", tags=["store"])
    async def node(node_id: str, who: Caller) -> dict[str, Any]:
        """One chunk or summary by id, with its entities and provenance."""
        found = await calls.read(who, lambda m: m.get(node_id))
        return found.to_dict()

    @app.get("/v1/sources", tags=["store"])
    async def sources(who: Caller) -> dict[str, Any]:
        """The sources the caller may read."""
        found = await calls.read(who, lambda m: m.sources())
        return {"sources": [source_dict(s) for s in found]}

    @app.get("/v1/stats", tags=["store"])
    async def stats(who: Caller) -> dict[str, Any]:
        """Counts of sources, chunks, tokens, entities and edges the caller may read."""
        return await calls.read(who, lambda m: m.stats())

    @app.post(
        "/v1/ingest",
        tags=["writes"],
        responses={202: {"description": "Still running: ask GET /v1/jobs/{id}."}},
    )
    async def ingest(body: IngestBody, who: Caller) -> JSONResponse:
        """Read a path on the server's machine into the store, then embed the new chunks.
        Needs a server started with writes allowed and, for a principal, the write
        permission and a path under the server's ingest roots. Runs as a job: its report
        when it ends within the request's time limit, else 202 and the job."""
        _writes_on(calls.service)
        service = calls.service
        return await calls.write(
            "ingest",
            who,
            lambda: service.ingest(
                who,
                body.path,
                kind=body.format,
                scope=body.scope,
                access=body.access,
                sync=body.sync,
                embed=body.embed,
                trees=body.trees,
            ),
        )

    @app.delete("/v1/sources/{source}", tags=["writes"])
    async def forget(source: str, who: Caller) -> JSONResponse:
        """Remove a source (id or scope) and everything derived from it. Needs writes
        allowed and, for a principal, the write permission and a source it can read."""
        _writes_on(calls.service)
        service = calls.service
        return await calls.write(
            "forget", who, lambda: {"source": source, "removed": service.forget(who, source)}
        )

    @app.get("/v1/jobs/{job_id}", tags=["writes"])
    async def job(job_id: str, who: Caller) -> dict[str, Any]:
        """A write job the caller started: queued, running, done (with its result) or
        failed (with its error)."""
        found = calls.service.job(job_id, who)
        if found is None:
            raise _ApiError(404, f"no job {job_id!r}")
        out = found.to_dict()
        if found.state == "failed":
            error = _api_error(cast(BaseException, found.future.exception()))
            status = error.status if isinstance(error, _ApiError) else 403
            out["error"] = {
                "code": _STATUS_CODES.get(status, "error"),
                "status": status,
                "message": str(error.message if isinstance(error, _ApiError) else error),
            }
        return out


def _writes_on(service: Service) -> None:
    if not service.allow_writes:
        raise _ApiError(403, "writes are off: start the server with --allow-writes")


def source_dict(s: Source) -> dict[str, Any]:
    """A source on the wire, as ``stratamem sources --json`` prints it."""
    return s.to_dict()


# -- errors ------------------------------------------------------------------------------------


def _add_error_handlers(app: FastAPI) -> None:
    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        return _error_response(cast(_ApiError, exc))

    async def access_denied(request: Request, exc: Exception) -> JSONResponse:
        return _error_response(_ApiError(403, str(exc)))

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        status = cast(HTTPException, exc).status_code
        message = {404: "no such route", 405: "method not allowed"}.get(status)
        return _error_response(_ApiError(status, message or str(cast(HTTPException, exc).detail)))

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
        return _error_response(_ApiError(422, message), details=details)

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        return _error_response(_ApiError(500, "unexpected error; see the server's log"))

    app.add_exception_handler(_ApiError, api_error)
    app.add_exception_handler(AccessDenied, access_denied)
    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(Exception, unexpected)


# -- the edge: body limit and access log -------------------------------------------------------


class _TooLarge(Exception):
    pass


class _Guard:
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
            response = _error_response(
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


# -- MCP ---------------------------------------------------------------------------------------


def _mcp_app(
    service: Service, *, tokens_required: bool, allowed_hosts: Sequence[str] | None
) -> MCPHTTPApp | None:
    """The MCP server's HTTP app over ``service``; None (and a log line) where there is none."""
    try:
        from stratamem.server.mcp import mcp_http_app
    except ImportError as exc:
        log.info("MCP is not mounted at /mcp: %s", exc)
        return None
    return mcp_http_app(service, tokens=tokens_required, allowed_hosts=allowed_hosts)
