"""Every operation of the table on both servers' doors, HTTP and MCP, against one live server.

- every operation has its route and its tool, taking the table's parameters and no others;
- a bad argument gets the same one-line error on both doors;
- each caller is listed the tools it may call, and what that list costs in tokens;
- every read answers the same JSON on both doors, for the owner and for principals;
- an agent adds, finds, edits and removes a memory using one door alone;
- a search with a token budget answers a payload that fits it, on both doors.

One store per module and backend: the Slack export (``team``) and the team mailbox (``eng``),
embedded with the hashing embedder and its trees sealed. Principals: ``reader`` (``team``),
``writer`` (``team``, may write) and ``mailer`` (``eng``, may write). One service with writes on
is served with tokens (``url``) and without (``owner_url``, the owner); another with writes off
(``off_url``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp.client.session import ClientSession
from serving import (
    call_http,
    call_mcp,
    connected,
    data,
    error,
    live,
    ok,
    server_layer_only,
    tool_error,
)

import stratamem
from stratamem.embed.tokens import count_tokens
from stratamem.ops import OPERATIONS, allowed
from stratamem.server.http import create_app
from stratamem.server.mcp import tool_of
from stratamem.server.service import Service
from stratamem.testing import HashingEmbedder
from stratamem.types import Principal
from suite import PATIENCE_S

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workspace"
READS = {op.name for op in OPERATIONS.values() if op.reads}
WRITES = {op.name for op in OPERATIONS.values() if op.access == "write"}
ITEM_AND_FACT_WRITES = {"add", "edit", "rm", "remember", "retract", "ingest", "forget"}
WINDOW = {"since": "2000-01-01", "until": "2100-01-01"}
MISSING = "0" * 32


@dataclass(frozen=True)
class Store:
    db: str
    tokens: dict[str, str]
    summary: str  # a summary of slack:#eng
    leaf: str  # a message of slack:#eng, under it
    mail_leaf: str  # a message of the mailbox, which only the owner and mailer read


@dataclass(frozen=True)
class Doors:
    url: str  # tokens asked for, writes on
    owner_url: str  # no token: the owner, writes on
    off_url: str  # tokens asked for, writes off
    store: Store
    clients: dict[str, httpx.Client]  # owner, reader, writer, mailer (writes on)

    def mcp(self, who: str) -> tuple[str, str | None]:
        """Where ``who`` talks MCP (writes on), and its token."""
        if who == "owner":
            return self.owner_url, None
        return self.url, self.store.tokens[who]


@pytest.fixture(scope="module")
def store(served_location: str) -> Store:
    db = served_location
    with stratamem.open(db, embedder=HashingEmbedder()) as memory:
        memory.ingest(EXAMPLES / "slack-export", parallel=False)
        memory.ingest(EXAMPLES / "mail" / "team.mbox", access="eng", parallel=False)
        memory.indexes.embed()
        memory.trees.flush()
        summary = memory.query_source("slack:#eng").hits[0]
        leaf = memory.drill_down(summary.node_id, max_depth=32)[-1]
        mail = memory.search("redis", sources=["mbox:team"], mode="keyword").hits[0]
        tokens = {
            "reader": memory.principals.add("reader", "team"),
            "writer": memory.principals.add("writer", "team", write=True),
            "mailer": memory.principals.add("mailer", "eng", write=True),
        }
    return Store(db, tokens, summary.node_id, leaf.node_id, mail.node_id)


@pytest.fixture(scope="module")
def doors(store: Store) -> Iterator[Doors]:
    with (
        Service(store.db, embedder=HashingEmbedder(), allow_writes=True) as service,
        Service(store.db, embedder=HashingEmbedder()) as read_only,
        live(create_app(service, access_log=None)) as url,
        live(create_app(service, tokens_required=False, access_log=None)) as owner_url,
        live(create_app(read_only, access_log=None)) as off_url,
    ):
        clients = {
            name: httpx.Client(
                base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=PATIENCE_S
            )
            for name, token in store.tokens.items()
        }
        clients["owner"] = httpx.Client(base_url=owner_url, timeout=PATIENCE_S)
        try:
            yield Doors(url, owner_url, off_url, store, clients)
        finally:
            for client in clients.values():
                client.close()


def in_session(url: str, token: str | None, work: Callable[[ClientSession], Awaitable[Any]]) -> Any:
    """``work`` run on an MCP session at ``url`` as ``token``'s principal; what it returns."""

    async def scenario() -> Any:
        async with connected(url, token) as session:
            return await work(session)

    return anyio.run(scenario)


def listed_tools(url: str, token: str | None) -> list[Any]:
    async def tools(session: ClientSession) -> list[Any]:
        return list((await session.list_tools()).tools)

    return in_session(url, token, tools)  # type: ignore[no-any-return]


def wire_json(value: Any) -> Any:
    """``value`` as JSON sends it (tuples as lists)."""
    return json.loads(json.dumps(value))


# -- (a) every operation: a route and a tool, with the table's parameters ------------------------


@server_layer_only
def test_every_operation_has_its_route_and_its_tool_with_the_tables_parameters(
    doors: Doors,
) -> None:
    document = ok(doors.clients["owner"].get("/openapi.json"))
    tools = {t.name: t for t in listed_tools(doors.owner_url, None)}
    assert set(tools) == set(OPERATIONS)  # the owner, writes on: every operation
    for op in OPERATIONS.values():
        names = [p.name for p in op.params]
        schema = wire_json(op.schema())
        method, path = op.shown_route
        declared = document["paths"][path][method.lower()]
        if method == "POST":
            body = declared["requestBody"]["content"]["application/json"]["schema"]
            assert body == schema, op.name
            assert list(body["properties"]) == names
        else:
            parameters = {p["name"]: p for p in declared["parameters"]}
            assert list(parameters) == names, op.name
            for param in op.params:
                found = parameters[param.name]
                in_path = f"{{{param.name}}}" in path
                assert found["in"] == ("path" if in_path else "query"), (op.name, param.name)
                assert found["required"] == (in_path or param.required)
                want = dict(schema["properties"][param.name])
                want.pop("description")
                assert found["schema"] == want, (op.name, param.name)
        tool = tools[op.name]
        assert tool.input_schema == schema, op.name
        assert list(tool.input_schema["properties"]) == names
        assert tool.description == op.description
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is op.reads
        assert tool.model_dump(mode="json") == tool_of(op).model_dump(mode="json")


# -- (b) a bad argument: one line, the same on both doors ----------------------------------------

BAD: dict[str, list[tuple[str, dict[str, Any], str]]] = {
    "unknown name": [
        ("query_topic", {"entity": "person:alice chen"}, "no parameter <name>"),
        ("fetch_leaves", {"node_ids": [MISSING]}, "did you mean 'ids'?"),
        ("drill_down", {"node_id": MISSING, "depth": 2}, "did you mean 'max_depth'?"),
        ("query_source", {"days": 3}, "did you mean 'time_window_days'?"),
        ("search", {"qeury": "x"}, "did you mean 'query'?"),
        ("search", {"query": "x", "surprise": True}, "no parameter <name>"),
        ("add", {"txt": "a note"}, "did you mean 'text'"),
        ("rollups", {"subjects": "topic:x"}, "did you mean 'subject'?"),
    ],
    "wrong type": [
        ("search", {"query": 5}, "'query' must be text, got a number"),
        ("search", {"query": "x", "limit": "ten"}, "'limit' must be a whole number, got text"),
        ("fetch_leaves", {"ids": 5}, "'ids' must be a list of texts, got a number"),
        ("search", {"query": "x", "explain": "yes"}, "'explain' must be true or false, got text"),
        ("add", {"text": "x", "tags": [1]}, "'tags' must hold texts only, got a number"),
        ("rollups", {"limit": "ten"}, "'limit' must be a whole number, got text"),
    ],
    "date off the calendar": [
        ("search", {"query": "x", "since": "2024-02-30"}, "'since' cannot be read as a time"),
        ("cover_window", {"since": "2024-02-30"}, "'since' cannot be read as a time"),
        ("recall_facts", {"as_of": "2024-13-01"}, "'as_of' cannot be read as a time"),
        (
            "remember",
            {"subject": "topic:a", "predicate": "p", "object": "o", "valid_from": "2023-02-29"},
            "'valid_from' cannot be read as a time",
        ),
    ],
    "limit out of bounds": [
        ("search", {"query": "x", "limit": 0}, "'limit' must be at least 1"),
        ("search", {"query": "x", "limit": 1001}, "'limit' must be at most 1000"),
        ("search", {"query": "x", "budget": -1}, "'budget' must be at least 0"),
        ("query_source", {"time_window_days": 0}, "'time_window_days' must be more than 0"),
        ("recall_facts", {"limit": 0}, "'limit' must be at least 1"),
        ("rollups", {"limit": 0}, "'limit' must be at least 1"),
        ("search", {"query": "x", "min_relevance": -0.1}, "'min_relevance' must be at least 0"),
        ("search", {"query": "x", "min_relevance": 1.5}, "'min_relevance' must be at most 1"),
        (
            "query_facts",
            {"query": "x", "min_relevance": 2},
            "'min_relevance' must be at most 1",
        ),
    ],
    "missing required": [
        ("search", {}, "'query' is required"),
        ("query_topic", {}, "'entity_id' is required"),
        ("drill_down", {"max_depth": 2}, "'node_id' is required"),
        ("fetch_leaves", {}, "'ids' is required"),
        ("add", {}, "'text' is required"),
        ("remember", {"subject": "topic:a"}, "'predicate' is required"),
        ("edit", {"text": "x"}, "'id' is required"),
    ],
}


@server_layer_only
@pytest.mark.parametrize("kind", list(BAD))
def test_a_bad_argument_gets_the_same_one_line_error_on_both_doors(doors: Doors, kind: str) -> None:
    cases = BAD[kind]

    async def tool_errors(session: ClientSession) -> list[str]:
        return [tool_error(await call_mcp(session, name, args)) for name, args, _ in cases]

    for who in ("owner", "reader", "writer"):
        mcp = in_session(*doors.mcp(who), tool_errors)
        for (name, args, words), over_mcp in zip(cases, mcp, strict=True):
            over_http = error(call_http(doors.clients[who], name, args), 422, "invalid_request")
            assert over_http == over_mcp, (name, args)
            assert over_http.startswith(f"{name}: "), over_http
            assert words in over_http, over_http
            assert "\n" not in over_http


@server_layer_only
def test_a_write_refused_says_why_alike_on_both_doors(doors: Doors) -> None:
    asks = [
        ("add", {"text": "a note"}),
        ("edit", {"id": "item_x", "text": "x"}),
        ("rm", {"id": "item_x"}),
        ("remember", {"subject": "topic:a", "predicate": "p", "object": "o"}),
        ("retract", {"fact_id": "fact_x"}),
        ("forget", {"source": "slack:#eng"}),
        ("ingest", {"path": "/no/such/path"}),
    ]
    assert {name for name, _ in asks} == ITEM_AND_FACT_WRITES

    async def refusals(session: ClientSession) -> list[str]:
        return [tool_error(await call_mcp(session, name, args)) for name, args in asks]

    not_a_writer = "principal 'reader' may not write (principal add --write grants it)"
    writes_off = "writes are off: start the server with --allow-writes"
    for url, token, message in (
        (doors.url, doors.store.tokens["reader"], not_a_writer),
        (doors.off_url, doors.store.tokens["writer"], writes_off),
    ):
        assert in_session(url, token, refusals) == [message] * len(asks)
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=PATIENCE_S
        ) as client:
            for name, args in asks:
                assert error(call_http(client, name, args), 403, "forbidden") == message
    # Nothing was written: no source of the reader's own, no fact.
    sources = {s["scope"] for s in ok(doors.clients["owner"].get("/v1/sources"))["sources"]}
    assert (
        not {
            "reader/memory",
            "reader/facts:asserted",
            "writer/facts:asserted",
            "memory:reader",
            "facts:reader",
            "facts:writer",
        }
        & sources
    )
    facts = ok(call_http(doors.clients["owner"], "recall_facts", {"subject": "topic:a"}))
    assert facts == {"facts": []}


# -- (c) the tools each caller is listed, and what they cost -------------------------------------


def tool_tokens(tools: list[Any]) -> int:
    """The word pieces of a tool list as JSON, as ``tools/list`` sends it."""
    shown = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]
    return count_tokens(json.dumps(shown, ensure_ascii=False, separators=(",", ":")))


@server_layer_only
def test_each_caller_is_listed_the_tools_it_may_call(doors: Doors) -> None:
    tokens = doors.store.tokens
    seen = {
        "reader": listed_tools(doors.url, tokens["reader"]),
        "writer": listed_tools(doors.url, tokens["writer"]),
        "owner": listed_tools(doors.owner_url, None),
        "writer, writes off": listed_tools(doors.off_url, tokens["writer"]),
    }
    names = {who: {t.name for t in tools} for who, tools in seen.items()}
    assert names["reader"] == READS
    assert names["writer, writes off"] == READS
    assert names["writer"] == READS | WRITES
    assert names["writer"] >= ITEM_AND_FACT_WRITES
    assert names["owner"] == set(OPERATIONS)
    # In the table's order, each as the table declares it.
    writer = Principal(name="writer", scopes=("team",), write=True)
    assert [t.model_dump(mode="json") for t in seen["writer"]] == [
        tool_of(op).model_dump(mode="json") for op in allowed(writer, writes=True)
    ]
    sizes = {who: (len(tools), tool_tokens(tools)) for who, tools in seen.items()}
    print("\ntools listed and their schema tokens (MiniLM word pieces):")
    for who, (count, size) in sizes.items():
        print(f"  {who:20} {count:3} tools {size:6} tokens")
    assert sizes["reader"][1] < sizes["writer"][1] <= sizes["owner"][1]
    assert sizes["reader"] == sizes["writer, writes off"]


# -- (d) reads: the same JSON on both doors ------------------------------------------------------


def read_calls(store: Store) -> list[tuple[str, dict[str, Any]]]:
    """Every reading operation, with arguments that reach the store (and some that fail)."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("search", {"query": "redis queue"}),
        ("search", {"query": "redis queue", "explain": True, "limit": 5}),
        ("search", {"query": "redis", "mode": "keyword", "sources": ["slack:*"]}),
        ("search", {"query": "queue", "kinds": ["email"], **WINDOW}),
        ("search", {"query": "redis queue", "budget": 600}),
        ("search", {"query": "redis queue", "budget": 0, "limit": 3}),
        ("search", {"query": "redis queue", "budget": 1500, "explain": True}),
        ("recall", {"query": "redis queue topic purpose", "explain": True}),
        ("recall", {"query": "queue topic", "types": ["fact", "turn"], "budget": 600}),
        ("recall", {"query": "queue", "kinds": ["email"], "as_of": "2024-03-01", **WINDOW}),
        ("search", {"query": "redis queue", "min_relevance": 0.3}),
        ("search", {"query": "redis queue", "min_relevance": 0.3, "budget": 600}),
        ("search", {"query": "redis", "mode": "keyword", "min_relevance": 0.2}),
        ("query_source", {}),
        ("query_source", {"source": "slack:#eng", "query": "queue"}),
        ("query_source", {"source": "mbox:team"}),
        ("query_source", {"source_kind": "email", "time_window_days": 100_000}),
        ("query_global", {**WINDOW, "query": "redis"}),
        ("query_topic", {"entity_id": "person:alice chen"}),
        ("query_topic", {"entity_id": "alice", "query": "queue"}),
        ("cover_window", {**WINDOW, "limit": 50}),
        ("brief", {**WINDOW, "sources": ["slack:*"]}),
        ("search_entities", {"query": "alice"}),
        ("drill_down", {"node_id": store.summary, "max_depth": 2}),
        ("drill_down", {"node_id": store.leaf}),
        ("fetch_leaves", {"ids": [store.leaf, store.mail_leaf, MISSING]}),
        ("show", {"node_id": store.leaf}),
        ("show", {"node_id": store.summary}),
        ("show", {"node_id": store.mail_leaf}),
        ("show", {"node_id": MISSING}),
        ("sources", {}),
        ("stats", {}),
        ("recall_facts", {}),
        ("recall_facts", {"subject": "channel:slack:#eng"}),
        ("fact_history", {"subject": "channel:slack:#eng", "predicate": "topic"}),
        ("query_facts", {"query": "topic purpose"}),
        ("query_facts", {"query": "topic purpose", "min_relevance": 0.3}),
        ("query_facts", {"query": "topic", "sources": ["mbox:team"]}),
        ("rollups", {}),
        ("rollups", {"subject": "person:alice chen", "limit": 5}),
        ("item_history", {"id": MISSING}),
        ("entity_history", {}),
        ("entity_history", {"entity_id": "person:alice chen", "limit": 5}),
    ]
    assert {name for name, _ in calls} == READS, "a reading operation is not compared"
    return calls


@pytest.mark.parametrize("who", ["owner", "reader", "mailer"])
def test_every_read_answers_the_same_json_on_both_doors(doors: Doors, who: str) -> None:
    calls = read_calls(doors.store)

    async def over_mcp(session: ClientSession) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        for name, args in calls:
            result = await call_mcp(session, name, args)
            out.append(("error", tool_error(result)) if result.is_error else ("ok", data(result)))
        return out

    mcp = in_session(*doors.mcp(who), over_mcp)
    answered = 0
    for (name, args), (state, want) in zip(calls, mcp, strict=True):
        response = call_http(doors.clients[who], name, args)
        if state == "ok":
            assert ok(response) == want, (who, name, args)
            answered += 1
        else:
            assert response.status_code in (404, 422), response.text
            assert response.json()["error"]["message"] == want, (who, name, args)
    assert answered > len(calls) // 2


def test_a_principal_reads_its_own_on_both_doors(doors: Doors) -> None:
    """What the equality above compares differs by caller: each door reads as its caller."""
    everything = {s["scope"] for s in ok(doors.clients["owner"].get("/v1/sources"))["sources"]}
    seen = {
        who: {s["scope"] for s in ok(doors.clients[who].get("/v1/sources"))["sources"]}
        for who in ("reader", "mailer")
    }
    assert seen["reader"] >= {"slack:#eng", "slack:#general"}
    assert "mbox:team" in seen["mailer"]
    assert not {"mbox:team"} & seen["reader"]
    assert seen["reader"] | seen["mailer"] <= everything
    hidden = call_http(doors.clients["reader"], "show", {"node_id": doors.store.mail_leaf})
    missing = call_http(doors.clients["reader"], "show", {"node_id": MISSING})
    assert error(hidden, 404, "not_found").replace(doors.store.mail_leaf, "<id>") == error(
        missing, 404, "not_found"
    ).replace(MISSING, "<id>")


# -- (e) an agent's memory through one door ------------------------------------------------------


class Http:
    """One door: HTTP."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    async def ok(self, name: str, args: dict[str, Any]) -> Any:
        return ok(call_http(self.client, name, args))

    async def refused(self, name: str, args: dict[str, Any]) -> str:
        response = call_http(self.client, name, args)
        assert response.status_code in (403, 404, 422), response.text
        return str(response.json()["error"]["message"])


class Mcp:
    """The other door: MCP tools."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    async def ok(self, name: str, args: dict[str, Any]) -> Any:
        return data(await call_mcp(self.session, name, args))

    async def refused(self, name: str, args: dict[str, Any]) -> str:
        return tool_error(await call_mcp(self.session, name, args))


async def remember_find_edit_remove(door: Http | Mcp, word: str, scope: str) -> str:
    """An agent's round of one memory: add it, find it, correct it, find the correction,
    remove it, and find it gone. The id it had."""
    first, second = f"{word}alpha", f"{word}omega"

    async def found(text: str) -> list[dict[str, Any]]:
        hits = (await door.ok("search", {"query": text, "limit": 50}))["hits"]
        return [h for h in hits if text in h["text"]]

    added = await door.ok("add", {"text": f"Maya prefers the {first} plan", "tags": ["pref"]})
    assert added["job"].startswith("job-")
    assert (added["action"], added["scope"]) == ("added", scope)
    item = added["id"]
    (hit,) = await found(first)
    assert hit["source"] == scope
    assert hit["cite"] == f"{scope}#{item}"
    shown = await door.ok("show", {"node_id": hit["node_id"]})
    assert shown["text"] == f"Maya prefers the {first} plan"

    edited = await door.ok("edit", {"id": item, "text": f"Maya prefers the {second} plan"})
    assert (edited["id"], edited["action"]) == (item, "updated")
    (again,) = await found(second)
    assert again["cite"] == f"{scope}#{item}"
    assert await found(first) == []

    # The id stays the item's: it reads as the item now, and its history keeps the first text.
    assert (await door.ok("show", {"node_id": item}))["text"] == f"Maya prefers the {second} plan"
    history = (await door.ok("item_history", {"id": item}))["versions"]
    assert [(v["action"], v["text"]) for v in history] == [
        ("added", f"Maya prefers the {first} plan"),
        ("edited", f"Maya prefers the {second} plan"),
    ]

    removed = await door.ok("rm", {"id": item})
    assert (removed["id"], removed["action"]) == (item, "deleted")
    assert await found(second) == []
    gone = await door.refused("edit", {"id": item, "text": "again"})
    # The id sent is not repeated back (stratamem.server.echo).
    assert gone == "no item with id <id>"
    assert await door.refused("rm", {"id": item}) == gone
    assert await door.refused("show", {"node_id": item}) == "no node with id <node_id>"
    # What it said before stays readable: its last chunk reads as the closed version.
    closed = await door.ok("show", {"node_id": again["node_id"]})
    assert closed["text"] == f"Maya prefers the {second} plan"
    history = (await door.ok("item_history", {"id": item}))["versions"]
    assert [v["action"] for v in history] == ["added", "edited", "removed"]
    return str(item)


@pytest.mark.parametrize("who", ["owner", "writer"])
def test_an_agent_remembers_finds_edits_and_removes_over_http_alone(doors: Doors, who: str) -> None:
    scope = "memory" if who == "owner" else f"{who}/memory"
    door = Http(doors.clients[who])
    anyio.run(remember_find_edit_remove, door, f"zqhttp{who}", scope)
    owned = {s["scope"]: s for s in ok(doors.clients["owner"].get("/v1/sources"))["sources"]}
    if who == "writer":
        assert owned[scope]["access"] == ["team"]


@pytest.mark.parametrize("who", ["owner", "writer"])
def test_an_agent_remembers_finds_edits_and_removes_over_mcp_alone(doors: Doors, who: str) -> None:
    scope = "memory" if who == "owner" else f"{who}/memory"

    async def work(session: ClientSession) -> str:
        return await remember_find_edit_remove(Mcp(session), f"zqmcp{who}", scope)

    in_session(*doors.mcp(who), work)


# -- (f) a search with a token budget fits it ----------------------------------------------------


@pytest.mark.parametrize("who", ["owner", "reader"])
def test_a_budgeted_search_fits_its_budget_on_both_doors(doors: Doors, who: str) -> None:
    # Every query at every budget, each with one of the extras in turn (each extra meets each
    # query and each budget).
    extras: list[dict[str, Any]] = [{}, {"explain": True}, {"limit": 50}]
    asks = [
        {"query": query, "budget": budget, **extras[(q + b) % len(extras)]}
        for q, query in enumerate(("redis queue", "who decided the release", "alice"))
        for b, budget in enumerate((300, 500, 1000, 3000))
    ]

    async def texts(session: ClientSession) -> list[str]:
        out = []
        for args in asks:
            result = await call_mcp(session, "search", args)
            data(result)
            out.append(result.content[0].text)  # type: ignore[union-attr]
        return out

    mcp = in_session(*doors.mcp(who), texts)
    for args, over_mcp in zip(asks, mcp, strict=True):
        response = call_http(doors.clients[who], "search", args)
        ok(response)
        for payload in (response.text, over_mcp):
            found = json.loads(payload)
            assert count_tokens(payload) <= found["used"] <= args["budget"], args
            assert found["budget"] == args["budget"]
            assert "hits" not in found
            assert all(card["text"].strip() for card in found["cards"]), args
            assert all(("why" in card) == bool(args.get("explain")) for card in found["cards"])
            assert found["left_out"] + len(found["cards"]) <= found["total"]
            if args["budget"] >= 1000 and found["total"]:
                assert found["cards"], args
        assert json.loads(response.text) == json.loads(over_mcp)
