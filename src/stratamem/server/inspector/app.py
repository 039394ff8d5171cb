"""The memory inspector: server-rendered pages over the operation table, mounted at ``/`` by
:func:`~stratamem.server.http.create_app` beside the API.

Routes: ``/`` and ``/search`` (the search and recall page), ``/nodes/{id}`` (one node),
``/login`` and ``/logout``, ``/static/{name}`` (:mod:`.pages`); ``/sources``,
``/sources/{id}``, ``/sources/{id}/tree``, ``/entities`` and ``/entities/entity``
(:mod:`.browse`). A page reads as the principal of its login
session (see :mod:`.session`); on a server without tokens (an owner's loopback server) a page
reads as the owner with no login. Every read is an operation of
:data:`~stratamem.ops.OPERATIONS`, bound and run as the HTTP route runs it, on the service's
reader threads within the time limit. ``Authorization`` is never read here, and the session
cookie is never read by the API.

Every response of these routes carries :data:`HEADERS` (a Content-Security-Policy with no
inline script or style, ``nosniff``, no referrer); every POST checks the form's ``csrf``
field against its session (403 otherwise). Templates are Jinja2 with autoescape on; other
pages (``views``) register their routes with :meth:`Inspector.page` and render with
:meth:`Inspector.render`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qs

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from stratamem.api import Memory
from stratamem.api.access import is_loopback
from stratamem.errors import AccessDenied
from stratamem.extras import require
from stratamem.ops import OPERATIONS, bind
from stratamem.server.echo import sent, without_echo
from stratamem.server.errors import _ApiError, api_error
from stratamem.server.inspector.session import SESSION_COOKIE, Session, Sessions
from stratamem.server.service import ServiceContext
from stratamem.server.tokens import _TooManyTries

T = TypeVar("T")

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'; connect-src 'self'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    # same-origin, not no-referrer: under no-referrer a browser sends its own forms with
    # ``Origin: null``, which the Origin check every route keeps would refuse.
    "Referrer-Policy": "same-origin",
}
# The static files served, by name, and their types: nothing else under /static answers.
STATIC_TYPES = {
    "app.css": "text/css; charset=utf-8",
    "htmx.min.js": "text/javascript; charset=utf-8",
    "htmx.LICENSE": "text/plain; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
# The API's paths, left as they are: every other path is the inspector's.
API_PATHS = ("/v1", "/mcp", "/docs", "/openapi.json", "/healthz")
MAX_FORM_BYTES = 16_384
EXPIRED = "this form has expired or did not come from this page (reload it and try again)"

Handler = Callable[[Request], Awaitable[Response]]

if TYPE_CHECKING:
    from stratamem.server.http import _Calls


class Refused(Exception):
    """A page answered with an error page: ``status`` and one line saying why."""

    def __init__(self, status: int, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


class Inspector:
    """The inspector's pages over one app's :class:`~stratamem.server.http._Calls`."""

    def __init__(self, calls: _Calls, *, tokens_required: bool) -> None:
        jinja2 = require("jinja2", "server", "the inspector")
        self.calls = calls
        self.service = calls.service
        self.tokens_required = tokens_required
        self.sessions = Sessions()
        self._routes: list[tuple[str, list[str], Handler]] = []
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(TEMPLATES)),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )

    # -- mounting ------------------------------------------------------------------------------

    def mount(self, app: FastAPI) -> None:
        """Add the pages declared (:meth:`page`) and their headers to ``app``."""
        for path, methods, handler in self._routes:
            app.add_route(path, handler, methods=methods, include_in_schema=False)
        app.add_middleware(PageHeaders)

    def page(
        self, path: str, *, methods: tuple[str, ...] = ("GET",)
    ) -> Callable[[Handler], Handler]:
        """A decorator adding a page at ``path``: its handler gets the request, an error
        it raises as :class:`Refused` (or a 4xx of the store) becomes an error page, and a
        POST is refused (403) without the form's ``csrf`` bound to the session."""

        def add(handler: Handler) -> Handler:
            async def run(request: Request) -> Response:
                try:
                    if request.method == "POST" and path != "/login":
                        form = await self.form(request)
                        if not self.csrf_ok(request, form.get("csrf")):
                            raise Refused(403, EXPIRED)
                    return await handler(request)
                except NeedLogin:
                    return RedirectResponse("/login", status_code=303)
                except Refused as exc:
                    return self.error_page(request, exc)

            self._routes.append((path, list(methods), run))
            return handler

        return add

    # -- who is reading ------------------------------------------------------------------------

    def session(self, request: Request) -> Session | None:
        """The request's live session: its cookie's; on a server without tokens, one made
        for the owner when it has none (set by :meth:`render`)."""
        found = self.sessions.get(request.cookies.get(SESSION_COOKIE))
        if found is None and not self.tokens_required:
            found = self.sessions.start(None)
            request.state.new_session = found
        return found

    def reader(self, request: Request) -> Session:
        """The session a page reads as; :class:`NeedLogin` without one."""
        found = self.session(request)
        if found is None:
            raise NeedLogin
        request.state.principal = found.principal or "owner"
        return found

    def csrf_ok(self, request: Request, token: str | None) -> bool:
        found = self.sessions.get(request.cookies.get(SESSION_COOKIE))
        return found is not None and self.sessions.csrf_ok(found.id, token)

    async def form(self, request: Request) -> dict[str, str]:
        """A POST's url-encoded form, one value per field (the last), read once."""
        cached = getattr(request.state, "form", None)
        if cached is not None:
            return dict(cached)
        body = await request.body()
        if len(body) > MAX_FORM_BYTES:
            raise Refused(413, "the form is too large")
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise Refused(400, "the form is not UTF-8") from None
        fields = {k: v[-1] for k, v in parse_qs(text, keep_blank_values=True).items()}
        request.state.form = fields
        return dict(fields)

    async def login(self, request: Request, token: str) -> Session:
        """A session for the principal ``token`` names, checked as the API checks a bearer
        token (the slow hash, the rate limit per address); :class:`Refused` otherwise."""
        address = request.client.host if request.client else "-"
        if not token.strip():
            raise Refused(401, "give the token a principal was given (stratamem principal add)")
        try:
            principal = await self.service.tokens.principal(f"Bearer {token.strip()}", address)
        except _TooManyTries as exc:
            raise Refused(429, str(exc), retry_after=exc.retry_after) from None
        except AccessDenied as exc:
            raise Refused(401, str(exc)) from None
        name = principal.name
        stored = await self.read(lambda: self.service.token_hash(name))
        return self.sessions.start(
            name,
            token_hash=stored,
            scopes=tuple(principal.scopes),
            sources=tuple(principal.sources),
            write=principal.write,
        )

    def may_write(self, session: Session | None) -> bool:
        """Whether ``session`` may make corrections: writes are on, and it is the owner's or
        its principal held the write permission when it logged in (each write checks again)."""
        if session is None or not self.service.allow_writes:
            return False
        return session.principal is None or session.write

    # -- reading -------------------------------------------------------------------------------

    async def call(self, session: Session, name: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """Operation ``name`` run with ``args`` as ``session`` reads, as its HTTP route runs
        it; :class:`Refused` with the one-line error every door gives (nothing of what was
        sent repeated in it)."""
        return (await self.calls_together(session, [(name, args)]))[0]

    async def calls_together(
        self, session: Session, calls: Sequence[tuple[str, Mapping[str, Any]]]
    ) -> list[dict[str, Any]]:
        """Several operations run as ``session`` reads, in one trip to a reader thread."""
        said: dict[str, str] = {}
        for name, args in calls:
            said.update(sent(args, known={p.name for p in OPERATIONS[name].params}))
        bound = []
        for name, args in calls:
            op = OPERATIONS[name]
            if not op.reads:
                raise ValueError(f"{name} is not a read")
            try:
                bound.append((op, bind(op, args)))
            except ValueError as exc:
                raise Refused(422, without_echo(str(exc), said)) from None
        context = ServiceContext(self.service, session.principal)

        def job() -> list[dict[str, Any]]:
            self.still_valid(session)
            return [op.run(context, b) for op, b in bound]

        return await self.read(job, said, session=session)

    async def write(self, session: Session, name: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """Write operation ``name`` run with ``args`` on ``session``'s behalf, as its HTTP
        route runs it: a job on the service's writer thread, where writes are on and the
        session's principal may make it (an operation of the owner's: the owner only). Its
        result when it ends within the time limit; :class:`Refused` otherwise, with the
        one-line error every door gives (nothing of what was sent repeated in it)."""
        op = OPERATIONS[name]
        if op.reads:
            raise ValueError(f"{name} is not a write")
        said = sent(args, known={p.name for p in op.params})
        if not self.service.allow_writes:
            raise Refused(403, "writes are off: start the server with --allow-writes")
        if op.access == "owner" and session.principal is not None:
            raise Refused(403, f"{name} is the owner's")
        try:
            bound = bind(op, args)
        except ValueError as exc:
            raise Refused(422, without_echo(str(exc), said)) from None
        context = ServiceContext(self.service, session.principal)

        def job() -> dict[str, Any]:
            self.still_valid(session)
            return op.run(context, bound)

        found = self.service.submit(name, session.principal, job, sent=said)
        waiting = asyncio.wrap_future(found.future)
        done, _ = await asyncio.wait({waiting}, timeout=self.calls.timeout_s)
        if not done:
            raise Refused(
                504,
                f"the change takes longer than {self.calls.timeout_s:g}s: it goes on; "
                "reload the page later",
            )
        try:
            return waiting.result()
        except _LoginGone:
            self.sessions.end(session.id)
            raise NeedLogin from None
        except Exception as exc:
            error = api_error(exc)
            if isinstance(error, _ApiError):
                raise Refused(error.status, without_echo(error.message, said)) from None
            raise Refused(403, without_echo(str(error), said)) from None

    def still_valid(self, session: Session) -> None:
        """:class:`_LoginGone` where ``session``'s principal was removed or given another
        token since it logged in (a blocking call: on a reader thread)."""
        if session.principal is not None and (
            self.service.token_hash(session.principal) != session.token_hash
        ):
            raise _LoginGone("this login's token no longer opens this store: log in again")

    async def read(
        self,
        job: Callable[[], T],
        said: Mapping[str, str] | None = None,
        *,
        session: Session | None = None,
    ) -> T:
        """``job`` on a reader thread within the time limit; its errors as :class:`Refused`
        (a login no longer valid: ended, and :class:`NeedLogin`)."""
        try:
            return await self.calls.in_thread(job)
        except _LoginGone:
            if session is not None:
                self.sessions.end(session.id)
            raise NeedLogin from None
        except _ApiError as exc:
            raise Refused(exc.status, without_echo(exc.message, said or {})) from None
        except AccessDenied as exc:
            raise Refused(403, without_echo(str(exc), said or {})) from None

    async def memory(self, session: Session, work: Callable[[Memory], T]) -> T:
        """``work`` given the memory ``session`` reads, on a reader thread."""
        who = session.principal
        service = self.service

        def job() -> T:
            self.still_valid(session)
            with service.reading(who) as memory:
                return work(memory)

        return await self.read(job, session=session)

    # -- answering -----------------------------------------------------------------------------

    def render(
        self,
        request: Request,
        template: str,
        context: Mapping[str, Any] | None = None,
        *,
        status: int = 200,
    ) -> HTMLResponse:
        """``template`` rendered for the request's reader (``who``, ``reader`` (its session),
        ``csrf`` and the path given to every template), with the session's cookie where one
        was just made."""
        found = getattr(request.state, "new_session", None) or self.sessions.get(
            request.cookies.get(SESSION_COOKIE)
        )
        values: dict[str, Any] = {
            "who": None if found is None else (found.principal or "owner"),
            "owner": found is not None and found.principal is None,
            "reader": found,
            "logins": self.tokens_required,
            "csrf": self.sessions.csrf(found.id) if found is not None else "",
            "may_write": self.may_write(found),
            "path": request.url.path,
        }
        values.update(context or {})
        html = self.templates.get_template(template).render(values)
        response = HTMLResponse(html, status_code=status)
        new = getattr(request.state, "new_session", None)
        if new is not None:
            self.set_cookie(request, response, SESSION_COOKIE, new.id)
        return response

    def error_page(self, request: Request, error: Refused) -> HTMLResponse:
        context = {"status": error.status, "message": error.message}
        response = self.render(request, "error.html", context, status=error.status)
        if error.retry_after is not None:
            response.headers["Retry-After"] = str(error.retry_after)
        return response

    def set_cookie(self, request: Request, response: Response, name: str, value: str) -> None:
        """A cookie only this server's pages get back: HttpOnly, SameSite=Strict, Path=/, and
        Secure unless the connection is to a loopback address over plain HTTP."""
        response.set_cookie(
            name,
            value,
            httponly=True,
            samesite="strict",
            path="/",
            secure=secure(request),
        )


class NeedLogin(Exception):
    """A page asked for without a session where logins are needed."""


class _LoginGone(AccessDenied):
    """A session whose principal was removed or given another token."""


def secure(request: Request) -> bool:
    """Whether cookies must be Secure: the connection is to an address of the server's other
    than loopback (the one it is bound to, or the one a wildcard bind was reached on), or
    over HTTPS."""
    server = request.scope.get("server")
    bound = server[0] if server else ""
    return request.url.scheme == "https" or not (bound and is_loopback(str(bound)))


def inspected(path: str) -> bool:
    """Whether ``path`` is the inspector's: any that is not the API's (so that a page added
    later gets the headers too)."""
    return not any(path == root or path.startswith(root + "/") for root in API_PATHS)


class PageHeaders:
    """:data:`HEADERS` on every response of the inspector's paths (:func:`inspected`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not inspected(scope["path"]):
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v)
                    for k, v in message.get("headers", [])
                    if k.decode("latin-1").lower() not in {h.lower() for h in HEADERS}
                ]
                headers += [(k.lower().encode(), v.encode()) for k, v in HEADERS.items()]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, sending)
