"""The inspector's browsing pages: the sources, one source, its summary tree level by level,
the entities and one entity, each the data of :mod:`.views` rendered by its template.

Routes: ``/sources``, ``/sources/{id}``, ``/sources/{id}/tree?node=ID``, ``/entities?q=``
and ``/entities/entity?id=``. Each page is one :class:`Shown` made by a function of a
:class:`~stratamem.api.memory.Memory` opened as the page's reader (:func:`sources_page`,
:func:`source_page`, :func:`tree_page`, :func:`entities_page`, :func:`entity_page`), so a
source hidden from the reader, or locked, is absent as a missing one is: its page is the
same 404 as an unknown id's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from stratamem.server.inspector import views
from stratamem.server.inspector.app import Inspector, Refused

if TYPE_CHECKING:
    from stratamem.api.memory import Memory

__all__ = [
    "NO_ENTITY",
    "NO_NODE",
    "NO_SOURCE",
    "Shown",
    "add_routes",
    "entities_page",
    "entity_page",
    "source_page",
    "sources_page",
    "tree_page",
]

NO_SOURCE = "no source of that id"
NO_NODE = "no node of that id in this source"
NO_ENTITY = "no entity of that id"


@dataclass(frozen=True, slots=True)
class Shown:
    """A page to render: its template and what it is given; ``missing``, where not empty,
    says what was not found (the page is then a 404 with that line)."""

    template: str
    context: dict[str, Any] = field(default_factory=dict)
    missing: str = ""


def sources_page(memory: Memory) -> Shown:
    return Shown("sources.html", {"rows": views.sources(memory)})


def source_page(memory: Memory, source_id: str) -> Shown:
    detail = views.source(memory, source_id)
    if detail is None:
        return Shown("error.html", missing=NO_SOURCE)
    return Shown("source.html", {"detail": detail})


def tree_page(memory: Memory, source_id: str, node_id: str | None) -> Shown:
    if views.source(memory, source_id) is None:
        return Shown("error.html", missing=NO_SOURCE)
    level = views.tree(memory, source_id, node_id or None)
    if level is None:
        return Shown("error.html", missing=NO_NODE)
    return Shown("tree.html", {"level": level})


def entities_page(memory: Memory, query: str) -> Shown:
    """The entity list for ``query``; a query refused (too long) is one line on the page."""
    try:
        rows = views.entities(memory, query)
    except ValueError as exc:
        return Shown("entities.html", {"rows": [], "query": "", "error": str(exc)})
    return Shown("entities.html", {"rows": rows, "query": query, "error": ""})


def entity_page(memory: Memory, entity_id: str) -> Shown:
    try:
        detail = views.entity(memory, entity_id)
    except ValueError:  # an id longer than any entity's
        detail = None
    if detail is None:
        return Shown("error.html", missing=NO_ENTITY)
    return Shown("entity.html", {"detail": detail})


def add_routes(inspector: Inspector) -> None:
    """The five pages added to ``inspector``, and the views' charts and filters to its
    templates."""
    views.register(inspector.templates)
    page = inspector.page

    async def show(request: Request, make: Callable[[Memory], Shown]) -> Response:
        session = inspector.reader(request)
        shown = await inspector.memory(session, make)
        if shown.missing:
            raise Refused(404, shown.missing)
        return inspector.render(request, shown.template, shown.context)

    @page("/sources")
    async def sources(request: Request) -> Response:
        return await show(request, sources_page)

    @page("/sources/{source_id}")
    async def source(request: Request) -> Response:
        source_id = request.path_params["source_id"]
        return await show(request, lambda m: source_page(m, source_id))

    @page("/sources/{source_id}/tree")
    async def tree(request: Request) -> Response:
        source_id = request.path_params["source_id"]
        node_id = request.query_params.get("node")
        return await show(request, lambda m: tree_page(m, source_id, node_id))

    @page("/entities")
    async def entities(request: Request) -> Response:
        query = request.query_params.get("q", "")
        return await show(request, lambda m: entities_page(m, query))

    @page("/entities/entity")
    async def entity(request: Request) -> Response:
        entity_id = request.query_params.get("id", "")
        return await show(request, lambda m: entity_page(m, entity_id))
