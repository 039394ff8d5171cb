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
=============================  ===============================================================

Every error is ``{"error": {"code": ..., "message": ...}}`` with its status: 401
``unauthorized``, 403 ``forbidden``, 404 ``not_found`` (a node the caller may not read answers
exactly as one that does not exist), 405 ``method_not_allowed``, 413 ``too_large``, 422
``invalid_request`` (with ``details``), 500 ``internal_error`` (no traceback), 503
``unavailable``, 504 ``timeout`` (see :mod:`stratamem.server.errors`).

The store's calls are blocking: a read runs on one of the service's reader threads within a
time limit; one past it is answered 504 at once (its thread runs to the end, since a thread
cannot be stopped). A write is a job on the service's writer thread: answered with its result
when it ends within the limit, else 202 and the job, which goes on either way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast

import anyio
from fastapi import FastAPI, Query, Request, Security
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer
from starlette.routing import Route

from stratamem.api import Memory
from stratamem.errors import AccessDenied, MissingExtraError
from stratamem.extras import require
from stratamem.server.bodies import (
    MAX_ROLLUP_LIMIT,
    CoverWindowBody,
    DrillDownBody,
    FactHistoryBody,
    FetchLeavesBody,
    IngestBody,
    QueryFactsBody,
    QueryGlobalBody,
    QuerySourceBody,
    QueryTopicBody,
    RecallBody,
    RememberBody,
    SearchBody,
    SearchEntitiesBody,
)
from stratamem.server.edge import Guard
from stratamem.server.errors import (
    STATUS_CODES,
    _ApiError,
    add_error_handlers,
    answered,
    api_error,
)
from stratamem.server.service import Service
from stratamem.types import Source

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
    mcp_allowed_hosts: Sequence[str] | None = None,
) -> FastAPI:
    """The HTTP API over ``service``. ``tokens_required=False`` lets a call without a token
    read as the owner (bind such a server to loopback only). The write routes answer as the
    service allows (:attr:`Service.allow_writes`). ``access_log`` gets one line per request
    (method, path, status, milliseconds, principal), with the query text only when
    ``log_queries``. The MCP
    server is mounted at ``/mcp`` (unless ``mount_mcp`` is False), answering the ``Host`` values
    in ``mcp_allowed_hosts`` (default: the loopback names, against DNS rebinding); without the
    ``mcp`` extra it is not, and ``app.state.mcp_missing`` says what to install."""
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
    add_error_handlers(app)
    _add_routes(app, calls, log_queries=log_queries)
    app.state.mcp_missing = None
    if mount_mcp:
        try:
            mcp = _mcp_app(
                service, tokens_required=tokens_required, allowed_hosts=mcp_allowed_hosts
            )
        except MissingExtraError as missing:
            log.info("MCP is not mounted: %s", missing)
            app.state.mcp_missing = str(missing)
        else:
            app.router.routes.append(Route("/mcp", mcp))
            mounted.append(mcp)
    app.state.mcp = bool(mounted)
    app.add_middleware(Guard, max_body_bytes=max_body_bytes, access_log=access_log)
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
                return await self.service.read(answered(job))
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
            raise api_error(exc) from None
        return JSONResponse({"job": found.id, **result})


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
        found = await calls.read(who, lambda m: m.sources.list())
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

    @app.post("/v1/recall", tags=["facts"])
    async def recall(body: RecallBody, who: Caller) -> dict[str, Any]:
        """The facts true now (or ``as_of`` a time, as known ``known_at`` a time), of
        ``subject`` or of everything the caller may read."""
        found = await calls.read(
            who,
            lambda m: m.facts.recall(
                body.subject,
                predicate=body.predicate,
                as_of=body.as_of,
                known_at=body.known_at,
                limit=body.limit,
            ),
        )
        return {"facts": [f.to_dict() for f in found]}

    @app.post("/v1/fact_history", tags=["facts"])
    async def fact_history(body: FactHistoryBody, who: Caller) -> dict[str, Any]:
        """Every value ``subject``'s ``predicate`` had, oldest first, with the rows since
        corrected or replaced."""
        found = await calls.read(
            who, lambda m: m.facts.history(body.subject, body.predicate, known_at=body.known_at)
        )
        return {"facts": [f.to_dict() for f in found]}

    @app.post("/v1/query_facts", tags=["facts"])
    async def query_facts(body: QueryFactsBody, request: Request, who: Caller) -> dict[str, Any]:
        """The facts that best match ``query`` (true now or ``as_of`` a time, as known
        ``known_at`` a time), as hits of kind ``fact``: what each says, its validity as the
        time range, its source, and its evidence in ``explain``."""
        noted(request, body.query)
        found = await calls.read(
            who,
            lambda m: m.facts.query(
                body.query,
                subject=body.subject,
                sources=body.sources,
                as_of=body.as_of,
                known_at=body.known_at,
                limit=body.limit,
            ),
        )
        return found.to_dict()

    @app.get("/v1/rollups", tags=["facts"])
    async def rollups(
        who: Caller,
        subject: Annotated[
            str | None,
            Query(min_length=1, max_length=500, description="An entity id: person:carol diaz."),
        ] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_ROLLUP_LIMIT)] = 100,
    ) -> dict[str, Any]:
        """The profile cards (rollups) of ``subject``, or of every subject, that the caller
        may read: each built from the facts of sources it reads all of, best score first."""
        found = await calls.read(who, lambda m: m.facts.rollups(subject, limit=limit))
        return {"rollups": [r.to_dict() for r in found]}

    @app.post("/v1/facts", tags=["writes"])
    async def remember(body: RememberBody, who: Caller) -> JSONResponse:
        """State a fact (see ``docs/memory.md``): writes allowed, and for a principal the write
        permission, evidence and a source it can read."""
        _writes_on(calls.service)
        service = calls.service
        return await calls.write(
            "remember",
            who,
            lambda: service.remember(
                who,
                body.subject,
                body.predicate,
                body.object,
                valid_from=body.valid_from,
                valid_to=body.valid_to,
                evidence=body.evidence,
                source=body.source,
            ),
        )

    @app.delete("/v1/facts/{fact_id}", tags=["writes"])
    async def retract(fact_id: str, who: Caller) -> JSONResponse:
        """Correct a fact that was never true: it stays in the history, no longer believed."""
        _writes_on(calls.service)
        service = calls.service
        return await calls.write("retract", who, lambda: service.retract(who, fact_id))

    @app.get("/v1/jobs/{job_id}", tags=["writes"])
    async def job(job_id: str, who: Caller) -> dict[str, Any]:
        """A write job the caller started: queued, running, done (with its result) or
        failed (with its error)."""
        found = calls.service.job(job_id, who)
        if found is None:
            raise _ApiError(404, f"no job {job_id!r}")
        out = found.to_dict()
        if found.state == "failed":
            error = api_error(cast(BaseException, found.future.exception()))
            status = error.status if isinstance(error, _ApiError) else 403
            out["error"] = {
                "code": STATUS_CODES.get(status, "error"),
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


# -- MCP ---------------------------------------------------------------------------------------


def _mcp_app(
    service: Service, *, tokens_required: bool, allowed_hosts: Sequence[str] | None
) -> MCPHTTPApp:
    """The MCP server's HTTP app over ``service``; :class:`MissingExtraError` without the
    ``mcp`` extra."""
    require("mcp", "mcp", "/mcp")
    from stratamem.server.mcp import mcp_http_app

    return mcp_http_app(service, tokens=tokens_required, allowed_hosts=allowed_hosts)
