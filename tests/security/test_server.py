"""The canary store served over HTTP and MCP (one live server, tokens required, writes on),
read by every principal (see ``security_kit``): every read route, tool and resource answers
as the same read of the Python API on the store built from only what the principal may see,
and shows nothing of what it may not; a hidden id answers as a missing one, byte for byte
but for the id; principals reading at once each get their own answers; and the write routes
tell a hidden source or a path outside the ingest root from a missing one no better than
the reads do."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import httpx2
import pytest
import route_probes as probes
import security_kit as kit
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent
from security_kit import NOWHERE, Refs
from serve_kit import Served, serve_copy
from serving import call_http

from stratamem import ops
from stratamem.api import Memory
from stratamem.errors import AccessDenied, NotFoundError, StratamemError
from stratamem.ops import OPERATIONS, MemoryContext, wire
from stratamem.retrieval.primitives import MAX_LIMIT
from stratamem.server.echo import sent, without_echo
from stratamem.server.mcp import one_line
from stratamem.store.rollups import Rollup
from stratamem.store.sources import source_id_for
from suite import PATIENCE_S

PRINCIPALS = [p.name for p in kit.PRINCIPALS]
HIDEABLE = ("hr-secret", "legal-chat", "orphan")  # the named sources some principal may not see
ALL = probes.WINDOWS["all"]
KINDS = ("record", "chat", "document", "email")
WINDOW = {"since": ALL[0].isoformat(), "until": ALL[1].isoformat()}
QUERIES = [q for q in probes.QUERIES if q]  # "" is refused before the store
SOME = (*probes.FEW, *probes.CANARY_QUERIES[::3])  # the queries asked of every leg


# -- the server ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(  # type: ignore[no-untyped-def]
    world, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """A copy of the canary store, its principals made again with the write permission (so
    that the write routes get past it) and their tokens kept, served by one live server. The
    tests that read it never write to it (those that write serve a copy of their own)."""
    with serve_copy(world, tmp_path_factory.mktemp("served")) as found:
        yield found


def _json(value: Any) -> Any:
    """``value`` as it comes back over the wire."""
    return json.loads(json.dumps(value, ensure_ascii=False))


def _scan(
    text: str,
    canaries: set[str],
    refs: Mapping[str, Refs],
    uses: Sequence[str],
    named: Sequence[str] = (),
) -> list[str]:
    """The canaries in ``text``, what the call named itself taken out first."""
    text = text.lower()
    for echo in sorted([*probes.echoes(refs, tuple(uses)), *named], key=len, reverse=True):
        text = text.replace(echo.lower(), "<named>")
    return sorted(c for c in canaries if c in text)


def _tally(group: str, route: str, principal: str, canaries: set[str]) -> None:
    found = kit.counts(group)
    found.routes.add(route)
    found.principals.add(principal)
    found.compared += 1
    found.checks += len(canaries)


# -- HTTP: each request and the same operation run on the reduced store --------------------------


@dataclass(frozen=True)
class Http:
    """Operation ``route`` called with ``args`` on its HTTP route; what it must answer is the
    same operation run in this process on the store built from what the caller may see."""

    route: str
    name: str
    args: Mapping[str, Any]
    uses: tuple[str, ...] = ()
    named: tuple[str, ...] = ()  # what else the call names (and an answer may echo)

    @property
    def id(self) -> str:
        return f"{self.route}:{self.name}"

    def send(self, client: httpx.Client) -> httpx.Response:
        return call_http(client, self.route, self.args)

    def read(self, m: Memory) -> Any:
        return ops.call(MemoryContext(m), self.route, self.args)


def _iso(value: datetime) -> str:
    return value.isoformat()


def _post(route: str, name: str, body: dict[str, Any], *uses: str) -> Http:
    # query_topic answers with the entity id it was asked for.
    named = (body["entity_id"],) if route == "query_topic" else ()
    return Http(route, name, body, uses, named)


def _http_search() -> list[Http]:
    out = [_post("search", f"hybrid:{n}:{q[:30]}", {"query": q}) for n, q in enumerate(QUERIES)]
    for mode in ("keyword", "vector", "graph"):
        out += [_post("search", f"{mode}:{q}", {"query": q, "mode": mode}) for q in SOME]
    query = probes.FEW[1]
    for profile in ("balanced", "semantic", "lexical", "graph_first", "recent"):
        out.append(_post("search", f"profile={profile}", {"query": query, "profile": profile}))
    for q in probes.FEW:
        for budget in (40, 500, 2000):
            out.append(_post("search", f"budget={budget}:{q}", {"query": q, "budget": budget}))
        explained = {"query": q, "budget": 1000, "explain": True}
        out.append(_post("search", f"budget=1000:explain:{q}", explained))
        out.append(_post("search", f"explain:{q}", {"query": q, "explain": True}))
        for limit in (1, 3, 1000):
            out.append(_post("search", f"limit={limit}:{q}", {"query": q, "limit": limit}))
    for mode in ("hybrid", "keyword"):
        for label, sources, uses in probes._source_filters(probes.NAMED):
            body = {"query": query, "sources": list(sources), "mode": mode}
            out.append(_post("search", f"{mode}:sources={label}", body, *uses))
    for mode in probes.MODES:
        for kind in KINDS:
            body = {"query": query, "kinds": [kind], "mode": mode}
            out.append(_post("search", f"{mode}:kind={kind}", body))
        for label, (a, b) in probes.WINDOWS.items():
            body = {"query": query, "since": _iso(a), "until": _iso(b), "mode": mode}
            out.append(_post("search", f"{mode}:window={label}", body))
    return out


def _http_primitives(refs: Mapping[str, Refs]) -> list[Http]:
    out = [
        _post("query_source", "all", {}),
        _post("query_source", "query", {"query": "queue"}),
        _post("query_source", "canary-query", {"query": "zanzibarquux"}),
        _post("query_source", "days", {"time_window_days": 100_000}),
        _post("query_source", "limit-1", {"limit": 1}),
        _post("query_source", "glob", {"source": "slack:*"}),
    ]
    for kind in KINDS:
        out.append(_post("query_source", f"kind={kind}", {"source_kind": kind, "query": "queue"}))
        out.append(_post("query_global", f"kind={kind}", {**WINDOW, "source_kind": kind}))
        out.append(_post("cover_window", f"kind={kind}", {**WINDOW, "kinds": [kind]}))
        out.append(_post("brief", f"kind={kind}", {**WINDOW, "kinds": [kind]}))
    for name in probes.NAMED:
        r = refs[name]
        out += [
            _post("query_source", f"scope:{name}", {"source": r.scope, "query": "queue"}, name),
            _post("query_source", f"id:{name}", {"source": r.source_id}, name),
            _post("query_source", f"filtered:{name}", {"sources": [r.scope]}, name),
            _post("query_global", f"filtered:{name}", {**WINDOW, "sources": [r.source_id]}, name),
            _post("cover_window", f"filtered:{name}", {**WINDOW, "sources": [r.scope]}, name),
            _post("brief", f"filtered:{name}", {**WINDOW, "sources": [r.source_id]}, name),
        ]
    for label, (a, b) in probes.WINDOWS.items():
        span = {"since": _iso(a), "until": _iso(b)}
        out += [
            _post("query_global", label, span),
            _post("query_global", f"{label}:query", {**span, "query": "zanzibarquux queue"}),
            _post("cover_window", label, span),
            _post("cover_window", f"{label}:limit-2", {**span, "limit": 2}),
            _post("brief", label, span),
        ]
    return out


def _http_entities(refs: Mapping[str, Refs]) -> list[Http]:
    out = []
    for entity in (e for e in probes.ENTITIES if e):
        body = {"entity_id": entity, "query": "queue zanzibarquux"}
        out += [
            _post("query_topic", entity, {"entity_id": entity}),
            _post("query_topic", f"{entity}:query", body),
        ]
    for name in probes.NAMED:
        for entity in refs[name].entities:
            body = {"entity_id": entity, "limit": 100}
            out.append(_post("query_topic", f"of:{name}:{entity}", body, name))
    for needle in probes.NEEDLES:
        handles = {"query": needle, "kinds": ["handle", "email"], "limit": 100}
        out += [
            _post("search_entities", needle, {"query": needle, "limit": 100}),
            _post("search_entities", f"{needle}:handle", handles),
        ]
    out.append(_post("entity_history", "all", {"limit": 1000}))
    for entity in (e for e in probes.ENTITIES if e):
        out.append(_post("entity_history", entity, {"entity_id": entity}))
    return out


def _http_by_id(refs: Mapping[str, Refs]) -> list[Http]:
    out = [Http("sources", "all", {}), Http("stats", "all", {})]
    eng = refs["eng"].leaf
    for name in probes.NAMED:
        r = refs[name]
        out += [
            _post("drill_down", f"top:{name}", {"node_id": r.top, "max_depth": 32}, name),
            _post("drill_down", f"summary:{name}", {"node_id": r.summary, "query": "queue"}, name),
            _post("drill_down", f"leaf:{name}", {"node_id": r.leaf}, name),
            _post(
                "fetch_leaves", name, {"ids": [eng, r.leaf, r.summary, NOWHERE.leaf]}, name, "eng"
            ),
        ]
        for part in ("top", "summary", "leaf"):
            out.append(Http("show", f"{part}:{name}", {"node_id": getattr(r, part)}, (name,)))
        item = {"id": r.item or "none"}
        out += [
            _post("item_history", name, item, name),
            _post("item_history", f"in:{name}", {**item, "source": r.scope}, name),
        ]
    return out


def _http_recall() -> list[Http]:
    """``recall``: turns, documents, items and facts in one list, with each filter once."""
    query = probes.FEW[1]
    out = [_post("recall", f"{n}:{q[:30]}", {"query": q}) for n, q in enumerate(SOME)]
    for q in probes.FEW:
        out.append(_post("recall", f"budget=500:{q}", {"query": q, "budget": 500}))
        out.append(_post("recall", f"explain:{q}", {"query": q, "explain": True, "limit": 50}))
        out.append(_post("recall", f"facts:{q}", {"query": q, "types": ["fact"], "limit": 50}))
    for label, sources, uses in probes._source_filters(probes.NAMED):
        body = {"query": query, "sources": list(sources)}
        out.append(_post("recall", f"sources={label}", body, *uses))
    for kind in KINDS:
        out.append(_post("recall", f"kind={kind}", {"query": query, "kinds": [kind]}))
    for label, (a, b) in probes.WINDOWS.items():
        body = {"query": query, "since": _iso(a), "until": _iso(b), "as_of": _iso(b)}
        out.append(_post("recall", f"window={label}", body))
    return out


@pytest.fixture(scope="module")
def http_calls(refs: dict[str, Refs]) -> list[Http]:
    return [
        *_http_search(),
        *_http_recall(),
        *_http_primitives(refs),
        *_http_entities(refs),
        *_http_by_id(refs),
    ]


def _error(
    status: int, code: str, exc: Exception, name: str, args: Mapping[str, Any]
) -> tuple[int, Any]:
    return status, {"error": {"code": code, "message": _without_echo(str(exc), name, args)}}


def _without_echo(message: str, name: str, args: Mapping[str, Any]) -> str:
    """``message`` as a server answers it: without what the caller sent."""
    known = {p.name for p in OPERATIONS[name].params}
    return without_echo(message, sent(args, known=known))


def expected_http(call: Http, mem: Memory) -> tuple[int, Any]:
    """(status, body) the route must answer: the operation's answer on ``mem``, an error as
    the HTTP API's error table maps it."""
    try:
        value = call.read(mem)
    except NotFoundError as exc:
        return _error(404, "not_found", exc, call.route, call.args)
    except AccessDenied as exc:
        return _error(403, "forbidden", exc, call.route, call.args)
    except ValueError as exc:
        return _error(422, "invalid_request", exc, call.route, call.args)
    return 200, _json(value)


# When the store held an item's version is the clock of the write: the served store and the
# reduced one were written at different moments, so these are left out of what is compared.
WRITE_TIMES = frozenset({"recorded_at", "closed_at", "removed_at"})


def timeless(value: Any) -> Any:
    """``value`` as :func:`kit.plain` gives it, without the items' transaction times."""
    value = kit.plain(value)
    if isinstance(value, dict):
        if "versions" in value:
            value = {**value, "versions": [
                {k: v for k, v in version.items() if k not in WRITE_TIMES}
                for version in value["versions"]
            ]}  # fmt: skip
        return value
    return value


def check_http(
    call: Http,
    response: httpx.Response,
    want: tuple[int, Any],
    canaries: set[str],
    refs: Mapping[str, Refs],
) -> str | None:
    """What is wrong with ``response`` (None: nothing)."""
    found = _scan(response.text, canaries, refs, call.uses, call.named)
    if found:
        return f"{call.id} shows hidden {found}"
    if response.status_code != want[0]:
        return f"{call.id}: status {response.status_code} != {want[0]}: {response.text[:300]}"
    try:
        kit.assert_same(timeless(response.json()), timeless(want[1]))
    except AssertionError as exc:
        return f"{call.id}: {exc}"
    return None


def test_every_read_operation_is_probed(http_calls: list[Http], mcp_calls: list[Tool]) -> None:
    """The matrices reach every operation that reads, on each door (a new one joins them)."""
    reads = {op.name for op in OPERATIONS.values() if op.reads}
    facts = {route for route, _, _ in _fact_asks()}
    assert {c.route for c in http_calls} | facts == reads
    assert {c.tool for c in mcp_calls} - {"resource"} | facts == reads


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_http_reads_equal_the_reduced_store_and_show_no_canary(  # type: ignore[no-untyped-def]
    world, refs, served: Served, http_calls: list[Http], principal: str
) -> None:
    reduced = world.read("reduced", principal)
    canaries = world.hidden_from(principal).canaries
    client = served.clients[principal]
    wrong = []
    for call in http_calls:
        want = expected_http(call, reduced)
        problem = check_http(call, call.send(client), want, canaries, refs)
        _tally("http", call.route, principal, canaries)
        if problem:
            wrong.append(problem)
    assert not wrong, f"{len(wrong)} of {len(http_calls)} wrong as {principal}:\n" + "\n".join(
        wrong[:10]
    )


# -- a hidden id answers as a missing one ---------------------------------------------------------


def _names(ref: Refs) -> list[str]:
    names = [ref.scope, ref.source_id, ref.tree_id, ref.top, ref.summary, ref.leaf, ref.item or ""]
    return [n for n in (*names, *ref.entities) if n]


def _as_nothing(text: str, ref: Refs) -> str:
    for name in sorted(_names(ref), key=len, reverse=True):
        text = text.replace(name, "<ref>").replace(quote(name, safe=""), "<ref>")
    return text


def _nowhere_like(ref: Refs) -> Refs:
    entities = tuple(f"{e.partition(':')[0]}:no-such-{n}" for n, e in enumerate(ref.entities))
    summary = NOWHERE.top if ref.summary == ref.top else NOWHERE.summary
    return replace(NOWHERE, entities=entities, summary=summary)


def _only_hidden(world, ref: Refs, principal: str) -> Refs:  # type: ignore[no-untyped-def]
    """``ref`` with only the entities that no source the principal sees mentions."""
    hidden = world.hidden_from(principal).source_ids
    only = tuple(
        e
        for e in ref.entities
        if all(h.source_id in hidden for h in world.owner.query_topic(e, limit=1000).hits)
    )
    assert only, f"{ref.scope} names no entity of its own"
    return replace(ref, entities=only[:4])


def hidden_cases(world, refs: Mapping[str, Refs], principal: str) -> list[tuple[Refs, Refs]]:  # type: ignore[no-untyped-def]
    """(a named source hidden from ``principal``, ids shaped alike that name nothing)."""
    hidden = world.hidden_from(principal).source_ids
    out = []
    for name in HIDEABLE:
        if refs[name].source_id in hidden:
            ref = _only_hidden(world, refs[name], principal)
            out.append((ref, _nowhere_like(ref)))
    assert out, f"nothing named is hidden from {principal}"
    return out


Ask = Callable[[Refs], list[tuple[str, dict[str, Any]]]]
# What is asked of a hidden source's ids, and of ids shaped alike that name nothing: an
# operation and its arguments, asked over HTTP and (the same) as an MCP tool.
ASKS: dict[str, Ask] = {
    "show-leaf": lambda r: [("show", {"node_id": r.leaf})],
    "show-top": lambda r: [("show", {"node_id": r.top})],
    "show-summary": lambda r: [("show", {"node_id": r.summary})],
    "drill_down": lambda r: [("drill_down", {"node_id": r.top, "max_depth": 8})],
    "drill_down-query": lambda r: [("drill_down", {"node_id": r.summary, "query": "queue"})],
    "drill_down-leaf": lambda r: [("drill_down", {"node_id": r.leaf})],
    "fetch_leaves": lambda r: [("fetch_leaves", {"ids": [r.leaf, r.summary]})],
    "query_source-scope": lambda r: [("query_source", {"source": r.scope})],
    "query_source-id": lambda r: [("query_source", {"source": r.source_id, "query": "queue"})],
    "query_topic": lambda r: [
        ("query_topic", {"entity_id": e, "query": "queue"}) for e in r.entities
    ],
    "search-filter": lambda r: [("search", {"query": "queue", "sources": [r.scope]})],
    "keyword-filter": lambda r: [
        ("search", {"query": "queue", "sources": [r.source_id], "mode": "keyword"})
    ],
    "query_global-filter": lambda r: [("query_global", {**WINDOW, "sources": [r.scope]})],
    "cover_window-filter": lambda r: [("cover_window", {**WINDOW, "sources": [r.source_id]})],
    "brief-filter": lambda r: [("brief", {**WINDOW, "sources": [r.scope]})],
}


def _seen(response: httpx.Response, ref: Refs) -> tuple[int, str, str]:
    """What a caller reads of ``response``, the ids of ``ref`` put as ``<ref>``."""
    kind = response.headers.get("content-type", "")
    return response.status_code, kind, _as_nothing(response.text, ref)


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_http_answers_a_hidden_id_as_a_missing_one(  # type: ignore[no-untyped-def]
    world, refs, served: Served, principal: str
) -> None:
    client = served.clients[principal]
    canaries = world.hidden_from(principal).canaries
    wrong = []
    for hidden, nowhere in hidden_cases(world, refs, principal):
        for name, ask in ASKS.items():
            for (route, args), (_, other) in zip(ask(hidden), ask(nowhere), strict=True):
                got = call_http(client, route, args)
                want = call_http(client, route, other)
                _tally("http hidden = missing", name, principal, canaries)
                if _seen(got, hidden) != _seen(want, nowhere):
                    wrong.append(f"{name} {hidden.scope}: {got.text[:200]} != {want.text[:200]}")
                found = _scan(_as_nothing(got.text, hidden), canaries, refs, ())
                if found:
                    wrong.append(f"{name} {hidden.scope} shows hidden {found}")
    assert not wrong, "\n".join(wrong[:10])


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_http_a_hidden_node_is_404_as_a_missing_one(  # type: ignore[no-untyped-def]
    world, refs, served: Served, principal: str
) -> None:
    client = served.clients[principal]
    for hidden, nowhere in hidden_cases(world, refs, principal):
        for part in ("leaf", "top", "summary"):
            got = client.get(f"/v1/nodes/{getattr(hidden, part)}")
            want = client.get(f"/v1/nodes/{getattr(nowhere, part)}")
            assert got.status_code == want.status_code == 404
            assert got.json()["error"]["code"] == "not_found"
            assert got.content.replace(getattr(hidden, part).encode(), b"<id>") == (
                want.content.replace(getattr(nowhere, part).encode(), b"<id>")
            )


# -- MCP: each tool call and the same operation run on the reduced store -------------------------


@dataclass(frozen=True)
class Tool:
    tool: str  # a tool's name, or "resource" (``args`` holds its ``uri``)
    name: str
    args: Mapping[str, Any]
    uses: tuple[str, ...] = ()
    named: tuple[str, ...] = ()  # what else the call names (and an answer may echo)

    @property
    def id(self) -> str:
        return f"{self.tool}:{self.name}"

    def read(self, m: Memory) -> Any:
        """The structured answer: the operation (or the resource) read in this process."""
        if self.tool == "resource":
            return _resource(m, self.args["uri"])
        return ops.call(MemoryContext(m), self.tool, self.args)


def _tool(tool: str, name: str, args: Mapping[str, Any], *uses: str) -> Tool:
    return Tool(tool, name, args, uses)


def _resource(m: Memory, uri: str) -> dict[str, Any]:
    """A resource as the MCP server reads it: a node as ``show`` gives it, the sources as
    ``sources`` lists them, a source with the summaries at the top of its tree."""
    kind, _, ident = uri.removeprefix("stratamem://").partition("/")
    context = MemoryContext(m)
    if kind == "nodes":
        return ops.call(context, "show", {"node_id": ident})
    if not ident:
        return ops.call(context, "sources", {})
    found = m.sources.get(ident)
    tops = m.query_source(found.id, limit=MAX_LIMIT)
    return {**found.to_dict(), "summaries": [wire.node(h) for h in tops.hits]}


def _mcp_tools(refs: Mapping[str, Refs]) -> list[Tool]:
    query = probes.FEW[1]
    out = [_tool("search", f"hybrid:{n}:{q[:30]}", {"query": q}) for n, q in enumerate(SOME)]
    out += [
        _tool("search", f"{mode}:{q}", {"query": q, "mode": mode})
        for mode in ("keyword", "vector", "graph")
        for q in probes.FEW
    ]
    out += [
        _tool("search", "", {"query": ""}),
        _tool("search", "budget", {"query": query, "budget": 200}),
        _tool("search", "budget=800", {"query": query, "budget": 800, "explain": True}),
        _tool("search", "budget=0", {"query": query, "budget": 0, "limit": 5}),
        _tool("search", "window", {"query": query, **WINDOW, "limit": 50}),
        _tool("recall", "all", {"query": query, "limit": 50, "explain": True}),
        _tool("recall", "budget", {"query": query, "budget": 300}),
        _tool("recall", "facts", {"query": "owner role status", "types": ["fact"]}),
        _tool("recall", "window", {"query": query, **WINDOW, "limit": 50}),
        _tool("sources", "all", {}),
        _tool("stats", "all", {}),
        _tool("query_source", "all", {"query": "queue"}),
        _tool("query_source", "days", {"time_window_days": 100_000}),
        _tool("query_source", "kind=chat", {"source_kind": "chat"}),
        _tool("query_source", "glob", {"source": "slack:*"}),
        _tool("brief", "all", WINDOW),
        _tool("cover_window", "all", WINDOW),
        _tool("resource", "sources", {"uri": "stratamem://sources"}),
    ]
    out += [_tool("search", f"kind={k}", {"query": query, "kinds": [k]}) for k in KINDS]
    for label, (a, b) in probes.WINDOWS.items():
        span = {"since": _iso(a), "until": _iso(b)}
        out += [
            _tool("query_global", label, {**span, "query": "zanzibarquux queue"}),
            _tool("cover_window", f"{label}:limit-3", {**span, "limit": 3}),
        ]
    for entity in [e for e in probes.ENTITIES if e] + ["zorb", "alice", "merov", "xylo"]:
        ask = _tool("query_topic", entity, {"entity_id": entity, "query": "queue"})
        out.append(replace(ask, named=(entity,)))  # the answer names the entity asked for
    out += [_tool("search_entities", q, {"query": q, "limit": 100}) for q in probes.NEEDLES]
    out.append(_tool("entity_history", "all", {"limit": 1000}))
    for name in probes.NAMED:
        r = refs[name]
        both = [refs["eng"].leaf, r.leaf, r.summary, NOWHERE.leaf]
        out.append(_tool("item_history", name, {"id": r.item or "none"}, name))
        out += [
            _tool("search", f"sources={name}", {"query": query, "sources": [r.scope]}, name),
            _tool(
                "search",
                f"sources=id:{name}",
                {"query": query, "sources": [r.source_id], "mode": "keyword"},
                name,
            ),
            _tool("query_source", f"scope:{name}", {"source": r.scope}, name),
            _tool("query_source", f"id:{name}", {"source": r.source_id, "query": "queue"}, name),
            _tool("query_global", f"sources={name}", {**WINDOW, "sources": [r.scope]}, name),
            _tool("cover_window", f"sources={name}", {**WINDOW, "sources": [r.source_id]}, name),
            _tool("brief", f"sources={name}", {**WINDOW, "sources": [r.scope]}, name),
            _tool("drill_down", f"top:{name}", {"node_id": r.top, "max_depth": 32}, name),
            _tool("drill_down", f"summary:{name}", {"node_id": r.summary, "query": "queue"}, name),
            _tool("drill_down", f"leaf:{name}", {"node_id": r.leaf}, name),
            _tool("fetch_leaves", name, {"ids": both}, name, "eng"),
            _tool("show", f"leaf:{name}", {"node_id": r.leaf}, name),
            _tool("show", f"top:{name}", {"node_id": r.top}, name),
            _tool(
                "resource", f"source:{name}", {"uri": f"stratamem://sources/{r.source_id}"}, name
            ),
            _tool("resource", f"node:leaf:{name}", {"uri": f"stratamem://nodes/{r.leaf}"}, name),
            _tool("resource", f"node:top:{name}", {"uri": f"stratamem://nodes/{r.top}"}, name),
        ]
        out += [
            _tool("query_topic", f"of:{name}:{e}", {"entity_id": e}, name) for e in r.entities[:6]
        ]
    return out


@pytest.fixture(scope="module")
def mcp_calls(refs: dict[str, Refs]) -> list[Tool]:
    return _mcp_tools(refs)


@asynccontextmanager
async def mcp_session(url: str, token: str) -> AsyncIterator[ClientSession]:
    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"}, timeout=PATIENCE_S
        ) as client,
        streamable_http_client(f"{url}/mcp", http_client=client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def ask_mcp(session: ClientSession, call: Tool) -> tuple[str, str]:
    """("ok", the JSON text) or ("error", the message) of a tool call or resource read."""
    if call.tool == "resource":
        try:
            found = await session.read_resource(call.args["uri"])
        except MCPError as exc:
            return "error", str(exc)
        return "ok", found.contents[0].text  # type: ignore[union-attr]
    result = await session.call_tool(call.tool, dict(call.args))
    assert isinstance(result, CallToolResult)
    text = "".join(c.text for c in result.content if isinstance(c, TextContent))
    return ("error" if result.is_error else "ok"), text


def expected_mcp(call: Tool, mem: Memory) -> tuple[str, Any]:
    try:
        value = call.read(mem)
    except (StratamemError, ValueError) as exc:
        message = str(exc) or type(exc).__name__
        if call.tool != "resource":
            message = _without_echo(message, call.tool, call.args)
        return "error", one_line(message)
    return "ok", json.loads(json.dumps(value, ensure_ascii=False))


def check_mcp(
    call: Tool,
    got: tuple[str, str],
    want: tuple[str, Any],
    canaries: set[str],
    refs: Mapping[str, Refs],
) -> str | None:
    found = _scan(got[1], canaries, refs, call.uses, call.named)
    if found:
        return f"{call.id} shows hidden {found}"
    if got[0] != want[0]:
        return f"{call.id}: {got[0]} {got[1][:300]} where {want[0]} {str(want[1])[:300]}"
    if got[0] == "error":
        # The SDK answers a resource's error with its URI alone (see the hidden-id test).
        if call.tool == "resource" or want[1] in got[1]:
            return None
        return f"{call.id}: {got[1]!r} lacks {want[1]!r}"
    try:
        kit.assert_same(timeless(json.loads(got[1])), timeless(want[1]))
    except AssertionError as exc:
        return f"{call.id}: {exc}"
    return None


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_mcp_tools_and_resources_equal_the_reduced_store_and_show_no_canary(  # type: ignore[no-untyped-def]
    world, refs, served: Served, mcp_calls: list[Tool], principal: str
) -> None:
    reduced = world.read("reduced", principal)
    canaries = world.hidden_from(principal).canaries
    wrong: list[str] = []

    async def scenario() -> None:
        async with mcp_session(served.url, served.tokens[principal]) as session:
            # A principal with the write permission, on a server with writes on: every tool
            # but the owner's.
            tools = {t.name for t in (await session.list_tools()).tools}
            assert tools == {op.name for op in OPERATIONS.values() if op.access != "owner"}
            for call in mcp_calls:
                got = await ask_mcp(session, call)
                problem = check_mcp(call, got, expected_mcp(call, reduced), canaries, refs)
                _tally("mcp", call.tool, principal, canaries)
                if problem:
                    wrong.append(problem)

    anyio.run(scenario)
    assert not wrong, f"{len(wrong)} of {len(mcp_calls)} wrong as {principal}:\n" + "\n".join(
        wrong[:10]
    )


MCP_ASKS: dict[str, Ask] = {
    **ASKS,
    "resource-node-leaf": lambda r: [("resource", {"uri": f"stratamem://nodes/{r.leaf}"})],
    "resource-node-top": lambda r: [("resource", {"uri": f"stratamem://nodes/{r.top}"})],
    "resource-source": lambda r: [("resource", {"uri": f"stratamem://sources/{r.source_id}"})],
}


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_mcp_answers_a_hidden_id_as_a_missing_one(  # type: ignore[no-untyped-def]
    world, refs, served: Served, principal: str
) -> None:
    canaries = world.hidden_from(principal).canaries
    wrong: list[str] = []

    async def scenario() -> None:
        async with mcp_session(served.url, served.tokens[principal]) as session:
            for hidden, nowhere in hidden_cases(world, refs, principal):
                for name, ask in MCP_ASKS.items():
                    for (tool, args), (_, other) in zip(ask(hidden), ask(nowhere), strict=True):
                        got = await ask_mcp(session, _tool(tool, name, args))
                        want = await ask_mcp(session, _tool(tool, name, other))
                        _tally("mcp hidden = missing", name, principal, canaries)
                        seen = (got[0], _as_nothing(got[1], hidden))
                        if seen != (want[0], _as_nothing(want[1], nowhere)):
                            wrong.append(f"{name} {hidden.scope}: {got} != {want}")
                        found = _scan(seen[1], canaries, refs, ())
                        if found:
                            wrong.append(f"{name} {hidden.scope} shows hidden {found}")

    anyio.run(scenario)
    assert not wrong, "\n".join(wrong[:10])


# -- many principals at once ---------------------------------------------------------------------


@pytest.mark.slow
def test_principals_reading_at_once_each_get_their_own_answers(  # type: ignore[no-untyped-def]
    world, refs, served: Served, http_calls: list[Http], mcp_calls: list[Tool]
) -> None:
    """Requests of every principal fired together over HTTP (8 threads) while every
    principal's MCP session calls its tools: each answer is the one worked out beforehand
    for its own principal, so no cache, connection or context is shared across them."""
    rng = random.Random(20240301)
    http_jobs: list[tuple[str, Http, tuple[int, Any]]] = []
    mcp_jobs: dict[str, list[tuple[Tool, tuple[str, Any]]]] = {}
    for principal in PRINCIPALS:
        # Worked out here, not in the threads below: the owner's memory it reads is one
        # connection, which threads must not share.
        world.hidden_from(principal)
        reduced = world.read("reduced", principal)
        chosen = rng.sample(http_calls, 50)
        http_jobs += [(principal, c, expected_http(c, reduced)) for c in chosen]
        mcp_jobs[principal] = [(c, expected_mcp(c, reduced)) for c in rng.sample(mcp_calls, 15)]
    rng.shuffle(http_jobs)
    wrong: list[str] = []

    def send(job: tuple[str, Http, tuple[int, Any]]) -> str | None:
        principal, call, want = job
        response = call.send(served.clients[principal])
        canaries = world.hidden_from(principal).canaries
        problem = check_http(call, response, want, canaries, refs)
        return f"{principal}: {problem}" if problem else None

    async def one(principal: str, limiter: anyio.CapacityLimiter) -> None:
        canaries = world.hidden_from(principal).canaries
        async with mcp_session(served.url, served.tokens[principal]) as session:

            async def call(tool: Tool, want: tuple[str, Any]) -> None:
                async with limiter:
                    got = await ask_mcp(session, tool)
                problem = check_mcp(tool, got, want, canaries, refs)
                if problem:
                    wrong.append(f"{principal}: {problem}")

            async with anyio.create_task_group() as group:
                for tool, want in mcp_jobs[principal]:
                    group.start_soon(call, tool, want)

    async def sessions() -> None:
        limiter = anyio.CapacityLimiter(8)
        async with anyio.create_task_group() as group:
            for principal in PRINCIPALS:
                group.start_soon(one, principal, limiter)

    with ThreadPoolExecutor(8) as pool:
        answers = [pool.submit(send, job) for job in http_jobs]
        anyio.run(sessions)
        wrong += [a.result() for a in answers if a.result()]
    found = kit.counts("at once")
    found.routes.update(c.route for _, c, _ in http_jobs)
    found.routes.update(f"mcp:{t.tool}" for jobs in mcp_jobs.values() for t, _ in jobs)
    found.principals.update(PRINCIPALS)
    found.compared += len(http_jobs) + sum(len(j) for j in mcp_jobs.values())
    found.checks += sum(len(world.hidden_from(p).canaries) for p, _, _ in http_jobs)
    found.checks += sum(len(world.hidden_from(p).canaries) * len(j) for p, j in mcp_jobs.items())
    assert not wrong, f"{len(wrong)} wrong:\n" + "\n".join(wrong[:10])


# -- the write routes ----------------------------------------------------------------------------


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_forget_answers_for_a_hidden_source_as_for_a_missing_one(  # type: ignore[no-untyped-def]
    world, refs, served: Served, principal: str
) -> None:
    client = served.clients[principal]
    canaries = world.hidden_from(principal).canaries
    wrong: list[str] = []
    cases = hidden_cases(world, refs, principal)
    for hidden, nowhere in cases:
        for part in ("scope", "source_id"):
            got = client.delete(f"/v1/sources/{quote(getattr(hidden, part), safe='')}")
            want = client.delete(f"/v1/sources/{quote(getattr(nowhere, part), safe='')}")
            _tally("writes", f"DELETE /v1/sources:{part}", principal, canaries)
            if _seen(got, hidden) != _seen(want, nowhere):
                wrong.append(f"http {part} {hidden.scope}: {got.text} != {want.text}")
            if _scan(_as_nothing(got.text, hidden), canaries, refs, ()):
                wrong.append(f"http {part} {hidden.scope} shows hidden: {got.text}")

    async def scenario() -> None:
        async with mcp_session(served.url, served.tokens[principal]) as session:
            for hidden, nowhere in cases:
                for part in ("scope", "source_id"):
                    ask = _tool("forget", part, {"source": getattr(hidden, part)})
                    got = await ask_mcp(session, ask)
                    want = await ask_mcp(
                        session, replace(ask, args={"source": getattr(nowhere, part)})
                    )
                    _tally("writes", f"mcp forget:{part}", principal, canaries)
                    if (got[0], _as_nothing(got[1], hidden)) != (
                        want[0],
                        _as_nothing(want[1], nowhere),
                    ):
                        wrong.append(f"mcp {part} {hidden.scope}: {got} != {want}")

    anyio.run(scenario)
    with served.service.reading(None) as owner:
        for hidden, _ in cases:
            assert owner.sources.get(hidden.scope).chunk_count > 0, f"{hidden.scope} was forgotten"
    assert not wrong, "\n".join(wrong[:10])


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_extract_answers_for_a_hidden_source_as_for_a_missing_one(  # type: ignore[no-untyped-def]
    world, refs, served: Served, principal: str
) -> None:
    client = served.clients[principal]
    canaries = world.hidden_from(principal).canaries
    wrong: list[str] = []
    for hidden, nowhere in hidden_cases(world, refs, principal):
        for part in ("scope", "source_id"):
            got = client.post("/v1/extract", json={"sources": [getattr(hidden, part)]})
            want = client.post("/v1/extract", json={"sources": [getattr(nowhere, part)]})
            _tally("writes", f"POST /v1/extract:{part}", principal, canaries)
            if _seen(got, hidden) != _seen(want, nowhere):
                wrong.append(f"http {part} {hidden.scope}: {got.text} != {want.text}")
            if _scan(_as_nothing(got.text, hidden), canaries, refs, ()):
                wrong.append(f"http {part} {hidden.scope} shows hidden: {got.text}")
    assert not wrong, "\n".join(wrong[:10])


def _outside(served: Served, world) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Paths outside the ingest root: some that exist, some that do not."""
    # The world's store on SQLite; on PostgreSQL, whose stores are no files, a fixture.
    file = kit.FIXTURES / "email" / "sample.mbox" if kit.is_postgres(world.full) else world.full
    return {
        "a file": str(file),
        "a folder": str(kit.FIXTURES / "slack"),
        "the store": str(served.file),
        "the store through the root": f"{served.root}/../store/{served.file.name}",
        "a file that is not there": "/no-such-folder-here/export.mbox",
        "a folder that is not there": str(kit.FIXTURES / "no-such-fixture"),
        "nothing through the root": f"{served.root}/../no-such-store.db",
    }


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_ingest_outside_the_root_is_refused_alike_whether_the_path_exists(  # type: ignore[no-untyped-def]
    world, served: Served, principal: str
) -> None:
    client = served.clients[principal]
    paths = _outside(served, world)
    http: dict[str, tuple[int, str]] = {}
    for label, path in paths.items():
        for body in ({"path": path}, {"path": path, "format": "mbox", "access": ["nobody"]}):
            answer = client.post("/v1/ingest", json=body)
            _tally("writes", "POST /v1/ingest", principal, set())
            assert answer.status_code == 403, answer.text
            http[f"{label}:{len(body)}"] = (answer.status_code, answer.text.replace(path, "<p>"))
    assert len(set(http.values())) == 1, http

    async def scenario() -> dict[str, tuple[str, str]]:
        out = {}
        async with mcp_session(served.url, served.tokens[principal]) as session:
            for label, path in paths.items():
                got = await ask_mcp(session, _tool("ingest", label, {"path": path}))
                _tally("writes", "mcp ingest", principal, set())
                out[label] = (got[0], got[1].replace(path, "<p>"))
        return out

    mcp = anyio.run(scenario)
    assert {kind for kind, _ in mcp.values()} == {"error"}
    assert len(set(mcp.values())) == 1, mcp
    assert list(served.root.iterdir()) == []


@pytest.mark.parametrize("owner", PRINCIPALS)
def test_a_job_is_found_by_its_principal_alone(served: Served, owner: str) -> None:
    job = served.service.submit("ingest", owner, lambda: {"read": 0})
    assert job.future.result(timeout=PATIENCE_S) == {"read": 0}
    mine = served.clients[owner].get(f"/v1/jobs/{job.id}")
    assert mine.status_code == 200, mine.text
    assert mine.json()["state"] == "done"
    nothing = "job-999999-" + "0" * 12
    for other in PRINCIPALS:
        if other == owner:
            continue
        got = served.clients[other].get(f"/v1/jobs/{job.id}")
        want = served.clients[other].get(f"/v1/jobs/{nothing}")
        _tally("writes", "GET /v1/jobs", other, set())
        assert got.status_code == want.status_code == 404
        assert got.content.replace(job.id.encode(), b"<job>") == want.content.replace(
            nothing.encode(), b"<job>"
        )


def _rpc(served: Served, principal: str, message: dict[str, Any], session: str | None) -> Any:
    """One JSON-RPC message posted to /mcp with ``principal``'s token: the answer's message."""
    headers = {
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {served.tokens[principal]}",
    }
    if session is not None:
        headers["mcp-session-id"] = session
    answer = httpx.post(f"{served.url}/mcp", json=message, headers=headers, timeout=PATIENCE_S)
    assert answer.status_code in (200, 202), answer.text
    data = [line[5:] for line in answer.text.splitlines() if line.startswith("data:")]
    return answer.headers.get("mcp-session-id"), json.loads(data[0]) if data else None


@pytest.mark.parametrize("principal", [p for p in PRINCIPALS if p != "cat"])
def test_a_call_on_another_principals_mcp_session_reads_as_its_own_token(  # type: ignore[no-untyped-def]
    world, refs, served: Served, principal: str
) -> None:
    """A session opened by ``cat`` (who sees hr-secret) and called with another token: the
    call reads as that token's principal, for whom the node does not exist."""
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "leak-suite", "version": "1"},
        },
    }
    session, _ = _rpc(served, "cat", hello, None)
    assert session
    _rpc(served, "cat", {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    leaf = refs["hr-secret"].leaf

    def show(who: str, node: str) -> Any:
        ask = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
        ask["params"] = {"name": "show", "arguments": {"node_id": node}}
        return _rpc(served, who, ask, session)[1]["result"]

    assert not show("cat", leaf)["isError"]
    got, want = show(principal, leaf), show(principal, NOWHERE.leaf)
    canaries = world.hidden_from(principal).canaries
    _tally("mcp", "foreign session", principal, canaries)
    assert json.dumps(got).replace(leaf, "<id>") == json.dumps(want).replace(NOWHERE.leaf, "<id>")
    assert not _scan(json.dumps(got).replace(leaf, "<id>"), canaries, refs, ())


# -- facts ---------------------------------------------------------------------------------------

ASSERTED = "facts:asserted"  # where the owner's facts without evidence or source go
FACT_SCOPES = (*(s for spec in kit.SPECS for s in spec.scopes), ASSERTED)
FACT_CANARY = {s: spec.canaries[0] for spec in kit.SPECS if spec.canaries for s in spec.scopes}
FACTS_AT = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)  # transaction time: a minute per write
SHARED = ("topic:queue", "person:alice chen")  # subjects every source speaks of
NO_SUBJECT = "topic:zqnosuchsubjectfact"


def fact_word(scope: str) -> str:
    """A word only the facts of ``scope`` hold (no text of the store has it, and no other
    scope's word holds it)."""
    return "zq" + "".join(c for c in scope.lower() if c.isalnum()) + "fact"


def own_subject(scope: str) -> str:
    return f"topic:{fact_word(scope)}"


@dataclass(frozen=True)
class Stated:
    """One write as the owner: a statement into ``scope`` (on ``evidence`` from it, else
    into it by name), or with ``retract`` the correction of the last row this scope's
    (subject, predicate) recorded."""

    scope: str
    subject: str
    predicate: str
    object: str = ""
    valid_from: datetime | None = None
    evidence: tuple[str, ...] = ()
    retract: bool = False


def fact_statements(owner: Memory) -> tuple[Stated, ...]:
    """Every source states a value of its own subject, of the shared ones, then changes
    some; every other one corrects a value. Each object names the source's words."""
    first: list[Stated] = []
    later: list[Stated] = []
    for n, scope in enumerate(FACT_SCOPES):
        word = fact_word(scope)
        told = f"{word} {FACT_CANARY.get(scope, 'plain')}"
        leaf: tuple[str, ...] = ()
        both: tuple[str, ...] = ()
        if scope != ASSERTED:
            summaries, leaves = kit.tree_nodes(owner, owner.trees.get(scope).id)
            leaf = (leaves[0].node_id,)
            both = (leaves[-1].node_id, summaries[-1].node_id)
        start = kit.T0 + timedelta(days=n)
        first += [
            Stated(scope, own_subject(scope), "status", f"{told} first", start, both),
            Stated(scope, SHARED[0], "owner", f"{told} owner", kit.T0 + timedelta(hours=n), leaf),
            Stated(scope, SHARED[1], "role", f"{told} role"),
        ]
        later += [
            Stated(
                scope, own_subject(scope), "status", f"{told} second", start + timedelta(5), leaf
            ),
            Stated(scope, SHARED[0], "owner", f"{told} later", kit.T0 + timedelta(days=20), both),
        ]
        if n % 2 == 0:
            later.append(Stated(scope, SHARED[1], "role", retract=True))
    return (*first, *later)


def state_facts(
    mem: Memory, statements: Sequence[Stated], scopes: Collection[str]
) -> dict[str, set[str]]:
    """``statements`` of ``scopes`` written as the owner, each at its own transaction time
    (the same in every store); the ids each scope recorded."""
    recorded: dict[str, set[str]] = {s: set() for s in scopes}
    last: dict[tuple[str, str, str], str] = {}
    for n, said in enumerate(statements):
        if said.scope not in scopes:
            continue
        now = FACTS_AT + timedelta(minutes=n)
        key = (said.scope, said.subject, said.predicate)
        if said.retract:
            mem.facts.retract(last[key], now=now)
            continue
        into = None if said.evidence or said.scope == ASSERTED else said.scope
        found = mem.facts.remember(
            said.subject,
            said.predicate,
            said.object,
            valid_from=said.valid_from,
            evidence=said.evidence,
            source=into,
            now=now,
        )
        recorded[said.scope].update(f.id for f in found.recorded)
        last[key] = found.recorded[-1].id
    return recorded


def fact_rollups() -> list[Rollup]:
    """A rollup of each scope's own subject, and one of a shared subject over each scope and
    the next (read only by a reader of both), as consolidation writes them."""
    out = []
    for n, scope in enumerate(FACT_SCOPES):
        word, other = fact_word(scope), FACT_SCOPES[(n + 1) % len(FACT_SCOPES)]
        mine, theirs = source_id_for(scope), source_id_for(other)
        body = {"summary": f"{word} {FACT_CANARY.get(scope, 'plain')}"}
        pair = {"summary": f"{word} {fact_word(other)}"}
        out += [
            Rollup(f"rollup_{word}", own_subject(scope), scope, f"h{n}", FACTS_AT, 1 - n / 100,
                   body, (mine,)),
            Rollup(f"rollup_pair_{word}", SHARED[1], f"{scope},{other}", f"p{n}", FACTS_AT,
                   0.5 - n / 100, pair, (mine, theirs)),
        ]  # fmt: skip
    return out


def write_fact_rollups(mem: Memory, scopes: Collection[str]) -> None:
    """The rollups of :func:`fact_rollups` whose sources are all of ``scopes``."""
    ids = {source_id_for(s) for s in scopes}
    with mem.store.transaction():
        for rollup in fact_rollups():
            if set(rollup.sources) <= ids:
                mem.store.write_rollup(rollup)


@dataclass
class FactWorld:
    recorded: dict[str, set[str]]  # scope → ids of the facts the served store recorded there
    oracles: dict[str, Memory]  # principal → its reduced store with its facts, read as it
    scopes: dict[str, set[str]]  # principal → the scopes whose facts it reads

    def canaries(self, world, principal: str) -> set[str]:  # type: ignore[no-untyped-def]
        """What of the facts ``principal`` must not be shown, and what its scopes hide."""
        out = set(world.hidden_from(principal).canaries)
        for scope in set(FACT_SCOPES) - self.scopes[principal]:
            out |= {fact_word(scope), source_id_for(scope), *self.recorded[scope]}
        return out


def fact_scopes(world, name: str) -> set[str]:  # type: ignore[no-untyped-def]
    scopes = {s for spec in world.visible(name) for s in spec.scopes}
    if kit.sees(world.principal(name), ("private",), ASSERTED):
        scopes.add(ASSERTED)
    return scopes


@pytest.fixture(scope="module")
def fact_served(  # type: ignore[no-untyped-def]
    world, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """A copy of the canary store of its own, served as :func:`served` is, for the facts
    :func:`fact_world` writes into it while it serves."""
    with serve_copy(world, tmp_path_factory.mktemp("fact-served")) as found:
        yield found


@pytest.fixture(scope="module")
def fact_world(  # type: ignore[no-untyped-def]
    world, fact_served: Served, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FactWorld]:
    """The facts written into a served store while it serves (as the owner, on the service's
    writer thread), and alike into a copy of each principal's reduced store."""
    served = fact_served
    statements = fact_statements(world.owner)

    def write() -> dict[str, Any]:
        with served.service.writing(None) as (memory, _):
            recorded = state_facts(memory, statements, FACT_SCOPES)
            write_fact_rollups(memory, FACT_SCOPES)
            return {"recorded": recorded}

    recorded = served.service.submit("facts", None, write).future.result(timeout=PATIENCE_S)[
        "recorded"
    ]
    places = world.places.within(tmp_path_factory.mktemp("fact-oracles"))
    oracles: dict[str, Memory] = {}
    scopes: dict[str, set[str]] = {}
    try:
        for name in PRINCIPALS:
            path = places.copy(world.reduced(name), name)
            scopes[name] = fact_scopes(world, name)
            with kit.open_memory(path) as owner:
                mine = state_facts(owner, statements, scopes[name])
                write_fact_rollups(owner, scopes[name])
            assert all(mine[s] == recorded[s] for s in scopes[name]), "fact ids differ"
            oracles[name] = kit.open_memory(path, principal=name)
        yield FactWorld(recorded, oracles, scopes)
    finally:
        for memory in oracles.values():
            memory.close()


def _fact_times() -> dict[str, dict[str, str]]:
    """as_of and known_at to read the facts at, by label: valid times across the statements,
    transaction times before, between and after the writes, ISO strings and spans."""
    valid = {
        "before": kit.T0 - timedelta(days=1),
        "3h": kit.T0 + timedelta(hours=3),
        "2d": kit.T0 + timedelta(days=2),
        "8d": kit.T0 + timedelta(days=8),
        "40d": kit.T0 + timedelta(days=40),
    }
    # The first round of writes ends at minute 3 * len(FACT_SCOPES) - 1; the later one runs
    # past minute 4 * len(FACT_SCOPES).
    known = {
        "nothing": FACTS_AT - timedelta(minutes=1),
        "first": FACTS_AT + timedelta(minutes=len(FACT_SCOPES) * 3, seconds=-30),
        "later": FACTS_AT + timedelta(minutes=len(FACT_SCOPES) * 4, seconds=30),
        "all": FACTS_AT + timedelta(days=1),
    }
    out = {
        "as_of=1d": {"as_of": "1d"},
        "as_of=3650d": {"as_of": "3650d"},
        "known_at=1h": {"known_at": "1h"},
        "as_of=2024-03-03": {"as_of": "2024-03-03"},
    }
    out |= {f"as_of={k}": {"as_of": v.isoformat()} for k, v in valid.items()}
    out |= {f"known_at={k}": {"known_at": v.isoformat()} for k, v in known.items()}
    out |= {
        f"as_of={a}:known_at={b}": {"as_of": valid[a].isoformat(), "known_at": known[b].isoformat()}
        for a in ("3h", "8d", "40d")
        for b in ("first", "later")
    }
    return out


def _fact_asks() -> list[tuple[str, str, dict[str, Any]]]:
    """(route or tool, name, arguments): recall with no subject, the shared subjects and each
    source's own, at many times; the history of each; a subject nobody speaks of; a bad one."""
    out: list[tuple[str, str, dict[str, Any]]] = [
        ("recall_facts", "all", {}),
        ("recall_facts", "limit=1", {"limit": 1}),
        ("recall_facts", "limit=4", {"limit": 4}),
        ("recall_facts", "status", {"predicate": "status"}),
        ("recall_facts", "role", {"predicate": "Role"}),
        ("recall_facts", "nobody", {"subject": NO_SUBJECT}),
        ("recall_facts", "bad", {"subject": "queue"}),
        ("fact_history", "nobody", {"subject": NO_SUBJECT, "predicate": "status"}),
        ("fact_history", "bad", {"subject": "queue", "predicate": "owner"}),
    ]
    times = _fact_times()
    out += [("recall_facts", f"all:{label}", args) for label, args in times.items()]
    for subject, predicate in zip(SHARED, ("owner", "role"), strict=True):
        pair = {"subject": subject, "predicate": predicate}
        out += [
            ("recall_facts", subject, {"subject": subject}),
            ("recall_facts", f"{subject}:{predicate}", pair),
            ("fact_history", subject, pair),
        ]
        out += [
            ("recall_facts", f"{subject}:{label}", {"subject": subject, **args})
            for label, args in times.items()
        ]
        out += [
            ("fact_history", f"{subject}:{label}", {**pair, **args})
            for label, args in times.items()
            if set(args) == {"known_at"}
        ]
    queries = ("owner role first", "later second", *FACT_CANARY.values())
    out += [("query_facts", q, {"query": q, "limit": 50}) for q in queries]
    out += [
        ("query_facts", f"all:{label}", {"query": "owner role first second later", **args})
        for label, args in times.items()
    ]
    out += [
        ("query_facts", "limit=2", {"query": "owner role", "limit": 2}),
        ("query_facts", "shared", {"query": "role", "subject": SHARED[1], "limit": 50}),
        ("query_facts", "bad", {"query": "role", "subject": "queue"}),
        ("rollups", "all", {}),
        ("rollups", "shared", {"subject": SHARED[1]}),
        ("rollups", "limit=2", {"limit": 2}),
        ("rollups", "nobody", {"subject": NO_SUBJECT}),
        ("rollups", "bad", {"subject": "queue"}),
    ]
    for scope in FACT_SCOPES:
        subject = own_subject(scope)
        status = {"subject": subject, "predicate": "status"}
        out += [
            ("query_facts", f"own:{scope}", {"query": fact_word(scope), "subject": subject}),
            ("query_facts", f"source:{scope}", {"query": "owner role", "sources": [scope]}),
            ("rollups", f"own:{scope}", {"subject": subject}),
            ("recall_facts", f"own:{scope}", {"subject": subject}),
            ("recall_facts", f"own:{scope}:as_of=3h", {"subject": subject, **times["as_of=3h"]}),
            (
                "recall_facts",
                f"own:{scope}:as_of=8d",
                {**status, **times["as_of=8d:known_at=first"]},
            ),
            ("fact_history", f"own:{scope}", status),
            ("fact_history", f"own:{scope}:known_at=first", {**status, **times["known_at=first"]}),
        ]
    return out


def _fact_http(route: str, name: str, args: Mapping[str, Any]) -> Http:
    return Http(route, name, args)


def _fact_tool(route: str, name: str, args: Mapping[str, Any]) -> Tool:
    return Tool(route, name, args)


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_facts_reach_a_principal_from_the_sources_it_reads_alone(  # type: ignore[no-untyped-def]
    world, fact_served: Served, fact_world: FactWorld, principal: str
) -> None:
    """Checked against the read rule itself, not the reduced store: every source's facts
    are in the served store, and a principal's recall holds those of its sources alone."""
    with fact_served.service.reading(None) as owner:
        homes = {f.source_id for f in owner.facts.recall(limit=10_000)}
    assert homes == {source_id_for(s) for s in FACT_SCOPES}
    response = fact_served.clients[principal].post("/v1/recall_facts", json={"limit": 10_000})
    assert response.status_code == 200, response.text
    seen = {f["source_id"] for f in response.json()["facts"]}
    assert seen == {source_id_for(s) for s in fact_world.scopes[principal]}
    found = kit.counts("http facts")
    found.routes.add("recall:read rule")
    found.principals.add(principal)
    found.compared += 1


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_http_facts_equal_the_reduced_store_and_show_no_canary(  # type: ignore[no-untyped-def]
    world, refs, fact_served: Served, fact_world: FactWorld, principal: str
) -> None:
    oracle = fact_world.oracles[principal]
    canaries = fact_world.canaries(world, principal)
    client = fact_served.clients[principal]
    calls = [_fact_http(*ask) for ask in _fact_asks()]
    wrong = []
    for call in calls:
        problem = check_http(call, call.send(client), expected_http(call, oracle), canaries, refs)
        _tally("http facts", call.route, principal, canaries)
        if problem:
            wrong.append(problem)
    assert not wrong, f"{len(wrong)} of {len(calls)} wrong as {principal}:\n" + "\n".join(
        wrong[:10]
    )


def _hidden_fact_asks(
    fact_world: FactWorld, principal: str
) -> list[tuple[str, str, dict[str, Any]]]:
    """Asks of each subject only sources hidden from ``principal`` speak of."""
    out = []
    for scope in sorted(set(FACT_SCOPES) - fact_world.scopes[principal]):
        subject = own_subject(scope)
        out += [
            ("recall_facts", scope, {"subject": subject}),
            ("recall_facts", f"{scope}:status", {"subject": subject, "predicate": "status"}),
            ("query_facts", scope, {"query": f"{fact_word(scope)} first", "subject": subject}),
            ("rollups", scope, {"subject": subject}),
            ("recall_facts", f"{scope}:as_of", {"subject": subject, "as_of": "2024-03-03"}),
            ("recall_facts", f"{scope}:known_at", {"subject": subject, "known_at": "2024-06-02"}),
            ("fact_history", scope, {"subject": subject, "predicate": "status"}),
            (
                "fact_history",
                f"{scope}:known_at",
                {"subject": subject, "predicate": "status", "known_at": "2024-06-02"},
            ),
        ]
    return out


def _nobody(args: Mapping[str, Any]) -> dict[str, Any]:
    return {**args, "subject": NO_SUBJECT}


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_http_facts_of_a_subject_of_hidden_sources_answer_as_of_none(  # type: ignore[no-untyped-def]
    world, refs, fact_served: Served, fact_world: FactWorld, principal: str
) -> None:
    client = fact_served.clients[principal]
    canaries = fact_world.canaries(world, principal)
    asks = _hidden_fact_asks(fact_world, principal)
    assert asks, f"no source with facts is hidden from {principal}"
    wrong = []
    for route, name, args in asks:
        got = call_http(client, route, args)
        want = call_http(client, route, _nobody(args))
        _tally("http facts", f"{route}:hidden = missing", principal, canaries)
        if (got.status_code, got.content) != (want.status_code, want.content):
            wrong.append(f"{route} {name}: {got.text[:200]} != {want.text[:200]}")
        if _scan(got.text, canaries, refs, ()):
            wrong.append(f"{route} {name} shows hidden: {got.text[:200]}")
    assert not wrong, "\n".join(wrong[:10])


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_mcp_facts_equal_the_reduced_store_and_show_no_canary(  # type: ignore[no-untyped-def]
    world, refs, fact_served: Served, fact_world: FactWorld, principal: str
) -> None:
    oracle = fact_world.oracles[principal]
    canaries = fact_world.canaries(world, principal)
    calls = [_fact_tool(*ask) for ask in _fact_asks()]
    hidden = _hidden_fact_asks(fact_world, principal)
    wrong: list[str] = []

    async def scenario() -> None:
        async with mcp_session(fact_served.url, fact_served.tokens[principal]) as session:
            for call in calls:
                got = await ask_mcp(session, call)
                want = expected_mcp(call, oracle)
                problem = check_mcp(call, got, want, canaries, refs)
                _tally("mcp facts", call.tool, principal, canaries)
                if problem:
                    wrong.append(problem)
            for route, name, args in hidden:
                asked = _fact_tool(route, name, args)
                got = await ask_mcp(session, asked)
                want = await ask_mcp(session, replace(asked, args=_nobody(asked.args)))
                _tally("mcp facts", f"{route}:hidden = missing", principal, canaries)
                if got != want:
                    wrong.append(f"{route} {name}: {got} != {want}")
                if _scan(got[1], canaries, refs, ()):
                    wrong.append(f"{route} {name} shows hidden: {got[1][:200]}")

    anyio.run(scenario)
    assert not wrong, f"{len(wrong)} wrong as {principal}:\n" + "\n".join(wrong[:10])
