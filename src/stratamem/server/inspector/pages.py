"""The inspector's core pages: search and recall, one node, login and logout, static files."""

from __future__ import annotations

import secrets
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

import stratamem.server.inspector.search as search
from stratamem.server.inspector.app import (
    EXPIRED,
    STATIC,
    STATIC_TYPES,
    Inspector,
    _Refused,
)
from stratamem.server.inspector.session import LOGIN_COOKIE, SESSION_COOKIE

# Errors of the caller's input, shown as one line on the search page (the rest: an error page).
SHOWN_ON_PAGE = (404, 422)


def add_routes(inspector: Inspector) -> None:
    page = inspector.page

    @page("/")
    @page("/search")
    async def search_page(request: Request) -> Response:
        session = inspector.reader(request)
        form = search.Form.read(request.query_params)
        answer: dict[str, Any] | None = None
        error = ""
        calls: list[tuple[str, dict[str, Any]]] = [("sources", {})]
        if form.query:
            calls.append((form.operation, form.arguments()))
        try:
            found = await inspector.calls_together(session, calls)
        except _Refused as exc:
            if exc.status not in SHOWN_ON_PAGE:
                raise
            error = exc.message
            found = [await inspector.call(session, "sources", {})]
        if len(found) > 1:
            answer = found[1]
        context = {
            "form": form,
            "answer": answer,
            "hits": search.hits(answer) if answer else [],
            "error": error,
            "source_choices": search.source_choices(found[0]["sources"]),
            "operations": search.OPERATIONS,
            "modes": search.MODES,
            "kinds": search.SOURCE_KINDS,
            "types": search.TYPES,
            "bar_width": search.BAR_WIDTH,
        }
        if request.headers.get("hx-request") and not request.headers.get(
            "hx-history-restore-request"
        ):
            return inspector.render(request, "_results.html", context)
        return inspector.render(request, "search.html", context)

    @page("/nodes/{node_id:path}")
    async def node_page(request: Request) -> Response:
        session = inspector.reader(request)
        node_id = request.path_params["node_id"]
        try:
            found = await inspector.call(session, "show", {"node_id": node_id})
        except _Refused as exc:
            if exc.status in (404, 422):
                raise _Refused(404, "no node of that id") from None
            raise
        return inspector.render(request, "node.html", {"node": found})

    @page("/login", methods=("GET", "POST"))
    async def login_page(request: Request) -> Response:
        if not inspector.tokens_required or inspector.session(request) is not None:
            return RedirectResponse("/", status_code=303)
        pending = request.cookies.get(LOGIN_COOKIE) or ""
        if request.method == "GET" or not pending:
            return login_form(request, "", status=200)
        form = await inspector.form(request)
        if not inspector.sessions.csrf_ok(pending, form.get("csrf"), purpose="login"):
            raise _Refused(403, EXPIRED)
        try:
            made = await inspector.login(request, form.get("token", ""))
        except _Refused as exc:
            if exc.status not in (401, 429):
                raise
            response = login_form(request, exc.message, status=exc.status)
            if exc.retry_after is not None:
                response.headers["Retry-After"] = str(exc.retry_after)
            return response
        response = RedirectResponse("/", status_code=303)
        inspector.set_cookie(request, response, SESSION_COOKIE, made.id)
        response.delete_cookie(LOGIN_COOKIE, path="/")
        return response

    def login_form(request: Request, message: str, *, status: int) -> Response:
        """The login form, its CSRF token bound to the login cookie (kept, else made)."""
        pending = request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(32)
        token = inspector.sessions.csrf(pending, purpose="login")
        response = inspector.render(
            request, "login.html", {"login_csrf": token, "message": message}, status=status
        )
        inspector.set_cookie(request, response, LOGIN_COOKIE, pending)
        return response

    @page("/logout", methods=("POST",))
    async def logout(request: Request) -> Response:
        inspector.sessions.end(request.cookies.get(SESSION_COOKIE))
        response = RedirectResponse("/login" if inspector.tokens_required else "/", 303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    @page("/static/{name}")
    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        kind = STATIC_TYPES.get(name)
        if kind is None:
            raise _Refused(404, "no such file")
        body = (STATIC / name).read_bytes()
        return Response(body, media_type=kind, headers={"Cache-Control": "no-cache"})
