"""The HTTP API, through httpx against uvicorn on a loopback port the system picks.

One store is built per module and backend: the Slack export (access ``team``) and the team
mailbox (access ``eng``), embedded with the hashing embedder. Principal ``bot`` holds
``team``, ``mailer`` holds ``eng``; each must see its own sources and nothing of the other's.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from click.testing import CliRunner
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from serving import bearer, live, server_layer_only

import stratamem
from stratamem.cli import main
from stratamem.server.http import create_app
from stratamem.server.service import Service
from stratamem.testing import HashingEmbedder
from suite import PATIENCE_S, examples

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "workspace"
FIXTURES = ROOT / "tests" / "fixtures"
SECRET_QUERY = "zanzibar-quokka deploy freeze"


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def store(served_location: str) -> dict[str, Any]:
    path = served_location
    with stratamem.open(path, embedder=HashingEmbedder()) as memory:
        memory.ingest(EXAMPLES / "slack-export", parallel=False)
        memory.ingest(EXAMPLES / "mail" / "team.mbox", access="eng", parallel=False)
        memory.indexes.embed()
        tokens = {
            "bot": memory.principals.add("bot", "team"),
            "mailer": memory.principals.add("mailer", "eng"),
        }
    return {"path": path, "tokens": tokens}


@pytest.fixture(scope="module")
def service(store: dict[str, Any]) -> Iterator[Service]:
    with Service(store["path"], embedder=HashingEmbedder(), allow_writes=True) as served:
        yield served


@pytest.fixture(scope="module")
def access_lines() -> Iterator[list[str]]:
    logger = logging.getLogger("tests.http.access")
    handler = _Lines()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield handler.lines
    logger.removeHandler(handler)


@pytest.fixture(scope="module")
def api(
    service: Service, store: dict[str, Any], access_lines: list[str]
) -> Iterator[dict[str, httpx.Client]]:
    """Clients of one server with tokens (writes on): ``anonymous``, ``bad``, ``bot``,
    ``mailer``; and ``owner`` of a second server without tokens (writes on)."""
    tokens_app = create_app(service, access_log=logging.getLogger("tests.http.access"))
    owner_app = create_app(service, tokens_required=False, access_log=None)
    with live(tokens_app) as url, live(owner_app) as owner_url:

        def client(base: str, token: str | None = None) -> httpx.Client:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            return httpx.Client(base_url=base, headers=headers, timeout=PATIENCE_S)

        clients = {
            "anonymous": client(url),
            "bad": client(url, "stm_000000000000_" + "A" * 43),
            "bot": client(url, store["tokens"]["bot"]),
            "mailer": client(url, store["tokens"]["mailer"]),
            "owner": client(owner_url),
        }
        yield clients
        for c in clients.values():
            c.close()


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    assert "Traceback" not in response.text
    return body["error"]  # type: ignore[no-any-return]


def scopes_of(nodes: list[dict[str, Any]]) -> set[str]:
    return {n["source"] for n in nodes}


# -- health, docs, auth ------------------------------------------------------------------------


def test_healthz_and_docs_need_no_token(api: dict[str, httpx.Client]) -> None:
    assert ok(api["anonymous"].get("/healthz")) == {"status": "ok"}
    assert api["anonymous"].get("/docs").status_code == 200
    paths = ok(api["anonymous"].get("/openapi.json"))["paths"]
    for route in (
        "/v1/search",
        "/v1/query_source",
        "/v1/query_global",
        "/v1/query_topic",
        "/v1/cover_window",
        "/v1/search_entities",
        "/v1/drill_down",
        "/v1/fetch_leaves",
        "/v1/nodes/{node_id}",
        "/v1/sources",
        "/v1/stats",
        "/v1/ingest",
    ):
        assert route in paths


@pytest.mark.parametrize(
    ("method", "path"),
    [("get", "/v1/sources"), ("get", "/v1/stats"), ("get", "/v1/nodes/x"), ("post", "/v1/search")],
)
def test_a_missing_or_bad_token_is_401(
    api: dict[str, httpx.Client], store: dict[str, Any], method: str, path: str
) -> None:
    body = {"json": {"query": "redis"}} if method == "post" else {}
    missing = api["anonymous"].request(method, path, **body)
    assert error(missing, 401, "unauthorized")
    assert missing.headers["www-authenticate"] == "Bearer"
    bad = api["bad"].request(method, path, **body)
    assert error(bad, 401, "unauthorized")["message"] == "the token matches no principal"
    basic = api["anonymous"].request(
        method, path, headers={"Authorization": "Basic " + store["tokens"]["bot"]}, **body
    )
    error(basic, 401, "unauthorized")


@pytest.mark.parametrize(
    "token",
    [
        b"stm_\xff\xfe\x80garbage",  # bytes that are no UTF-8
        "stm_" + "é" * 60,  # latin-1 text
        "stm_000000000000_" + "A" * 4000,  # far too long
        "stm_000000000000_" + "A" * 42 + "%",  # one character off
    ],
)
def test_a_token_of_odd_bytes_is_401(
    api: dict[str, httpx.Client], store: dict[str, Any], token: str | bytes
) -> None:
    raw = token if isinstance(token, bytes) else token.encode("latin-1")
    found = api["anonymous"].post(
        "/v1/search", json={"query": "redis"}, headers={"Authorization": b"Bearer " + raw}
    )
    assert error(found, 401, "unauthorized")


# -- reads and scoping -------------------------------------------------------------------------


def test_search_is_scoped_to_the_principal(api: dict[str, httpx.Client]) -> None:
    owner = ok(api["owner"].post("/v1/search", json={"query": "Redis", "limit": 50}))
    bot = ok(api["bot"].post("/v1/search", json={"query": "Redis", "limit": 50}))
    mailer = ok(api["mailer"].post("/v1/search", json={"query": "Redis", "limit": 50}))
    assert {s.split(":")[0] for s in scopes_of(owner["hits"])} == {"slack", "mbox"}
    assert bot["hits"]
    assert all(s.startswith("slack:") for s in scopes_of(bot["hits"]))
    assert mailer["hits"]
    assert scopes_of(mailer["hits"]) == {"mbox:team"}
    assert {h["node_id"] for h in bot["hits"]}.isdisjoint(h["node_id"] for h in mailer["hits"])
    assert {"hits", "total", "truncated", "legs"} <= set(bot) <= {*bot, "notes"}
    hit = bot["hits"][0]
    assert {"node_id", "kind", "source", "cite", "time_start", "text", "score", "why"} <= set(hit)
    assert "breakdown" not in hit
    explained = ok(
        api["bot"].post("/v1/search", json={"query": "Redis", "limit": 50, "explain": True})
    )
    assert [h["node_id"] for h in explained["hits"]] == [h["node_id"] for h in bot["hits"]]
    assert all(set(h["breakdown"]) >= {"keyword", "vector", "final"} for h in explained["hits"])


def test_search_takes_every_option(api: dict[str, httpx.Client]) -> None:
    found = ok(
        api["owner"].post(
            "/v1/search",
            json={
                "query": "queue",
                "sources": ["slack:*"],
                "kinds": ["chat"],
                "since": "2000-01-01",
                "until": "2100-01-01T00:00Z",
                "limit": 3,
                # A card's citation is a path under the checkout (as long as its folder's
                # name) and the card carries its relevance: room for at least one.
                "budget": 300,
                "mode": "hybrid",
                "profile": "lexical",
            },
        )
    )
    assert 0 < len(found["cards"]) <= 3
    assert "hits" not in found
    assert (found["budget"], found["left_out"]) == (300, 3 - len(found["cards"]))
    assert found["used"] <= 300
    assert all(c["text"] and c["node_id"] for c in found["cards"])
    assert all("why" not in c for c in found["cards"])
    # A budget of 0: every hit whole, as show gives it.
    whole = ok(api["bot"].post("/v1/search", json={"query": "queue", "budget": 0, "limit": 4}))
    hits = ok(api["bot"].post("/v1/search", json={"query": "queue", "limit": 4}))["hits"]
    assert [c["node_id"] for c in whole["cards"]] == [h["node_id"] for h in hits]
    for card in whole["cards"]:
        assert card["text"] == ok(api["bot"].get(f"/v1/nodes/{card['node_id']}"))["text"]
    shown = {c["node_id"]: c for c in found["cards"]}
    owned = ok(api["owner"].post("/v1/fetch_leaves", json={"ids": list(shown)}))["nodes"]
    assert all(n["source"].startswith("slack:") for n in owned)
    keyword = ok(api["bot"].post("/v1/search", json={"query": "queue", "mode": "keyword"}))
    assert keyword["legs"] == {"keyword": "ok"}


def test_sources_and_stats_are_scoped(api: dict[str, httpx.Client]) -> None:
    owner = ok(api["owner"].get("/v1/sources"))["sources"]
    bot = ok(api["bot"].get("/v1/sources"))["sources"]
    mailer = ok(api["mailer"].get("/v1/sources"))["sources"]
    assert {s["scope"] for s in mailer} == {"mbox:team"}
    assert bot
    assert all(s["scope"].startswith("slack:") and "team" in s["access"] for s in bot)
    assert {s["id"] for s in owner} == {s["id"] for s in bot} | {s["id"] for s in mailer}
    assert set(bot[0]) == {
        "id",
        "scope",
        "kind",
        "platform",
        "location",
        "chunks",
        "access",
        "locked",
        "ingested_at",
        "created_by",
    }
    assert {s["created_by"] for s in bot} == {None}  # no one's name for a principal
    stats = {who: ok(api[who].get("/v1/stats")) for who in ("owner", "bot", "mailer")}
    assert stats["bot"] != stats["owner"] != stats["mailer"]
    assert "mbox" not in str(stats["bot"])
    assert "slack" not in str(stats["mailer"])


def test_a_hidden_node_is_404_exactly_as_a_missing_one(api: dict[str, httpx.Client]) -> None:
    mail = ok(api["mailer"].post("/v1/search", json={"query": "Redis"}))["hits"][0]["node_id"]
    assert ok(api["mailer"].get(f"/v1/nodes/{mail}"))["node_id"] == mail
    assert ok(api["owner"].get(f"/v1/nodes/{mail}"))["source"] == "mbox:team"
    unknown = "0" * len(mail)
    hidden = api["bot"].get(f"/v1/nodes/{mail}")
    missing = api["bot"].get(f"/v1/nodes/{unknown}")
    error(hidden, 404, "not_found")
    assert hidden.text.replace(mail, "ID") == missing.text.replace(unknown, "ID")
    assert dict(hidden.headers).keys() == dict(missing.headers).keys()
    # fetch_leaves leaves it out, as it leaves out an id that does not exist
    fetched = ok(api["bot"].post("/v1/fetch_leaves", json={"ids": [mail, unknown]}))
    assert fetched == {"nodes": [], "missing": [mail, unknown]}


# -- the primitives ----------------------------------------------------------------------------


def test_query_source_and_drill_down(api: dict[str, httpx.Client]) -> None:
    summaries = ok(api["bot"].post("/v1/query_source", json={"limit": 50}))
    assert summaries["nodes"]
    assert all(n["kind"] == "summary" for n in summaries["nodes"])
    assert all(s.startswith("slack:") for s in scopes_of(summaries["nodes"]))
    one = ok(api["bot"].post("/v1/query_source", json={"source": "slack:#eng", "query": "queue"}))
    assert scopes_of(one["nodes"]) <= {"slack:#eng"}
    hidden = ok(api["bot"].post("/v1/query_source", json={"source_kind": "email"}))
    assert hidden["nodes"] == []
    top = summaries["nodes"][0]
    below = ok(api["bot"].post("/v1/drill_down", json={"node_id": top["node_id"], "max_depth": 2}))
    assert below["node_id"] == top["node_id"]
    assert below["nodes"]
    assert {n["node_id"] for n in below["nodes"]} >= set(top["children"][:1])
    mail_top = ok(api["owner"].post("/v1/query_source", json={"source": "mbox:team"}))["nodes"][0]
    hidden = api["bot"].post("/v1/drill_down", json={"node_id": mail_top["node_id"]})
    missing = api["bot"].post("/v1/drill_down", json={"node_id": "0" * len(mail_top["node_id"])})
    error(hidden, 404, "not_found")
    assert hidden.text.replace(mail_top["node_id"], "ID") == missing.text.replace(
        "0" * len(mail_top["node_id"]), "ID"
    )


def test_query_global_and_cover_window(api: dict[str, httpx.Client]) -> None:
    window = {"since": "2000-01-01", "until": "2100-01-01"}
    found = ok(api["mailer"].post("/v1/query_global", json={**window, "query": "Redis"}))
    assert found["nodes"]
    assert scopes_of(found["nodes"]) == {"mbox:team"}
    cover = ok(api["bot"].post("/v1/cover_window", json={**window, "limit": 500}))
    assert cover["nodes"]
    assert all(s.startswith("slack:") for s in scopes_of(cover["nodes"]))
    owner = ok(api["owner"].post("/v1/cover_window", json={**window, "sources": ["mbox:team"]}))
    assert scopes_of(owner["nodes"]) == {"mbox:team"}
    brief = ok(api["bot"].post("/v1/brief", json={**window, "limit": 500}))
    assert [n["node_id"] for g in brief["sources"] for n in g["nodes"]] == sorted(
        (n["node_id"] for n in cover["nodes"]),
        key=[n["node_id"] for g in brief["sources"] for n in g["nodes"]].index,
    )
    assert {g["source"] for g in brief["sources"]} == scopes_of(cover["nodes"])


def test_search_entities_and_query_topic(api: dict[str, httpx.Client]) -> None:
    people = ok(api["bot"].post("/v1/search_entities", json={"query": "alice", "limit": 3}))
    assert people["entities"], people
    entity = people["entities"][0]
    assert set(entity) == {
        "canonical_id",
        "kind",
        "surface",
        "mention_count",
        "last_seen",
        "aliases",
    }
    topic = ok(api["bot"].post("/v1/query_topic", json={"entity_id": entity["canonical_id"]}))
    assert topic["entity_id"] == entity["canonical_id"]
    assert topic["nodes"]
    assert all(s.startswith("slack:") for s in scopes_of(topic["nodes"]))
    assert ok(api["mailer"].post("/v1/query_topic", json={"entity_id": "person:nobody"})) == {
        "entity_id": "person:nobody",
        "nodes": [],
        "total": 0,
        "truncated": False,
    }


def test_fetch_leaves_in_the_order_asked(api: dict[str, httpx.Client]) -> None:
    hits = ok(api["bot"].post("/v1/search", json={"query": "queue", "limit": 3}))["hits"]
    leaves = [h["node_id"] for h in hits if h["kind"] == "leaf"][::-1]
    fetched = ok(api["bot"].post("/v1/fetch_leaves", json={"ids": leaves}))
    assert [n["node_id"] for n in fetched["nodes"]] == leaves
    assert fetched["missing"] == []


# -- writes ------------------------------------------------------------------------------------


def test_ingest_is_the_owners_and_off_unless_allowed(another_location: str) -> None:
    # A store of its own: the module's store is read by the other tests as it was built.
    with stratamem.open(another_location, embedder=HashingEmbedder()) as memory:
        memory.ingest(EXAMPLES / "slack-export", parallel=False)
        memory.indexes.embed()
        bot_token = memory.principals.add("bot", "team")
    notes = str(FIXTURES / "markdown" / "til-like")
    with (
        Service(another_location, embedder=HashingEmbedder(), allow_writes=True) as service,
        live(create_app(service, access_log=None)) as url,
        live(create_app(service, tokens_required=False, access_log=None)) as owner_url,
        httpx.Client(base_url=url, headers=bearer(bot_token), timeout=PATIENCE_S) as bot,
        httpx.Client(base_url=owner_url, timeout=PATIENCE_S) as owner,
    ):
        refused = error(bot.post("/v1/ingest", json={"path": notes}), 403, "forbidden")
        assert refused["message"] == (
            "principal 'bot' may not write (principal add --write grants it)"
        )
        # a principal cannot probe the server's paths either
        error(bot.post("/v1/ingest", json={"path": "/nonexistent"}), 403, "forbidden")
        with (
            Service(another_location, embedder=None) as read_only,
            live(create_app(read_only, tokens_required=False, access_log=None)) as read_url,
        ):
            off = httpx.post(f"{read_url}/v1/ingest", json={"path": notes})
            assert "--allow-writes" in error(off, 403, "forbidden")["message"]
            gone = httpx.delete(f"{read_url}/v1/sources/anything")
            assert "--allow-writes" in error(gone, 403, "forbidden")["message"]
        report = ok(owner.post("/v1/ingest", json={"path": notes, "access": ["notes"]}))
        assert report["job"].startswith("job-")
        assert report["embedded"] == report["chunks"] > 0
        assert report["sources"]
        scopes = {s["scope"]: s["access"] for s in ok(owner.get("/v1/sources"))["sources"]}
        assert any(access == ["notes"] for access in scopes.values())
        bot_scopes = {s["scope"] for s in ok(bot.get("/v1/sources"))["sources"]}
        assert bot_scopes
        assert all(s.startswith("slack:") for s in bot_scopes)
        missing = owner.post("/v1/ingest", json={"path": "/nonexistent/path"})
        error(missing, 422, "invalid_request")


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"query": "x", "limit": "ten"},
        {"query": "x", "limit": 0},
        {"query": "x", "kinds": ["bogus"]},
        {"query": "x", "mode": "fuzzy"},
        {"query": "x", "profile": "nope"},
        {"query": "x", "since": "yesterday-ish"},
        {"query": "x", "since": "2024-03-02", "until": "2024-03-01"},
        {"query": "x", "surprise": True},
        {"query": ""},
        {"limit": 3},
        ["query"],
    ],
)
def test_a_bad_body_is_422(api: dict[str, httpx.Client], body: Any) -> None:
    found = error(api["bot"].post("/v1/search", json=body), 422, "invalid_request")
    assert found["message"] != "x"


def test_validation_errors_name_the_field_without_echoing_input(
    api: dict[str, httpx.Client],
) -> None:
    found = error(
        api["bot"].post("/v1/search", json={"query": SECRET_QUERY, "limit": "ten"}),
        422,
        "invalid_request",
    )
    assert found == {
        "code": "invalid_request",
        "message": "search: 'limit' must be a whole number, got text",
    }
    assert SECRET_QUERY not in str(found)


def test_malformed_json_is_422(api: dict[str, httpx.Client]) -> None:
    bad = api["bot"].post(
        "/v1/search", content=b'{"query": ', headers={"Content-Type": "application/json"}
    )
    assert error(bad, 422, "invalid_request")["message"].startswith("the body is not valid JSON")


def test_unknown_routes_and_methods(api: dict[str, httpx.Client]) -> None:
    assert error(api["bot"].get("/v1/nope"), 404, "not_found")["message"] == "no such route"
    assert error(api["anonymous"].get("/nope"), 404, "not_found")
    error(api["bot"].get("/v1/search"), 405, "method_not_allowed")


def test_a_body_over_the_limit_is_413(api: dict[str, httpx.Client]) -> None:
    huge = {"query": "x" * (1 << 20)}
    error(api["bot"].post("/v1/search", json=huge), 413, "too_large")

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it comes
        yield b'{"query": "'
        for _ in range(20):
            yield b"y" * 65536
        yield b'"}'

    error(api["anonymous"].post("/v1/search", content=chunks()), 413, "too_large")


def test_a_request_over_the_time_limit_is_504(service: Service) -> None:
    app = create_app(service, tokens_required=False, timeout_s=1e-9, access_log=None)
    with live(app) as url:
        slow = httpx.post(f"{url}/v1/search", json={"query": "redis"})
        assert "longer than" in error(slow, 504, "timeout")["message"]


class _Broken:
    """A service whose every read fails unexpectedly."""

    allow_writes = False
    ingest_roots = ()

    def reading(self, principal: str | None) -> Any:
        raise RuntimeError("secret internals /etc/passwd")

    async def read(self, job: Any) -> Any:
        return job()


def test_an_unexpected_error_is_500_without_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    app = create_app(
        _Broken(),  # type: ignore[arg-type]
        tokens_required=False,
        access_log=None,
        mount_mcp=False,
    )
    with live(app) as url:
        failed = httpx.get(f"{url}/v1/stats")
    body = error(failed, 500, "internal_error")
    assert "secret" not in failed.text
    assert "RuntimeError" not in failed.text
    assert body["message"] == "unexpected error; see the server's log"
    assert "secret internals" in caplog.text  # the log has what the answer leaves out


# -- the access log ----------------------------------------------------------------------------


def test_the_access_log_has_a_line_per_request_without_the_query(
    service: Service, store: dict[str, Any]
) -> None:
    # A server and a log of its own: a line of another test's request, written once its
    # answer was sent, could otherwise land among these.
    logger = logging.getLogger("tests.http.lines")
    handler = _Lines()
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    bot = {"Authorization": f"Bearer {store['tokens']['bot']}"}
    try:
        app = create_app(service, access_log=logger, mount_mcp=False)
        with live(app) as url, httpx.Client(base_url=url, timeout=PATIENCE_S) as client:
            ok(client.post("/v1/search", json={"query": SECRET_QUERY}, headers=bot))
            client.get("/v1/sources")
            client.post("/v1/search", json={"query": "x" * (2 << 20)}, headers=bot)
            # A line is written once its answer is sent: the client may have it a moment
            # before.
            deadline = time.monotonic() + PATIENCE_S
            while len(handler.lines) < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        logger.removeHandler(handler)
    lines = handler.lines
    assert len(lines) == 3
    method, path, status, ms, who = lines[0].split()
    assert (method, path, status, who) == ("POST", "/v1/search", "200", "bot")
    assert ms.endswith("ms")
    assert float(ms[:-2]) >= 0
    assert lines[1].split()[2:5:2] == ["401", "-"]
    assert lines[2].split()[2] == "413"
    assert not any("zanzibar" in line or "quokka" in line for line in lines)


def test_the_access_log_can_name_the_query(service: Service, store: dict[str, Any]) -> None:
    logger = logging.getLogger("tests.http.queries")
    handler = _Lines()
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        app = create_app(service, access_log=logger, log_queries=True, mount_mcp=False)
        with live(app) as url:
            headers = {"Authorization": f"Bearer {store['tokens']['bot']}"}
            httpx.post(f"{url}/v1/search", json={"query": SECRET_QUERY}, headers=headers)
    finally:
        logger.removeHandler(handler)
    assert SECRET_QUERY in handler.lines[0]


# -- MCP at /mcp -------------------------------------------------------------------------------


def test_mcp_is_mounted_and_reads_as_the_tokens_principal(
    api: dict[str, httpx.Client], store: dict[str, Any]
) -> None:
    url = str(api["bot"].base_url).rstrip("/") + "/mcp"
    hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    assert httpx.post(url, json=hello, timeout=PATIENCE_S).status_code == 401

    async def sources_seen() -> str:
        headers = {"Authorization": f"Bearer {store['tokens']['bot']}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=PATIENCE_S) as client,
            streamable_http_client(url, http_client=client) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            result = await session.call_tool("sources", {})
            return json.dumps([c.model_dump() for c in result.content])

    seen = anyio.run(sources_seen)
    assert "slack:#" in seen
    assert "mbox:team" not in seen


def test_without_the_mcp_extra_the_api_is_served_alone(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # makes `import mcp` fail
    app = create_app(service, access_log=None)
    assert not app.state.mcp
    assert app.state.mcp_missing == "/mcp needs the 'mcp' extra: pip install 'stratamem[mcp]'"
    assert "/mcp" not in {getattr(route, "path", None) for route in app.router.routes}
    assert "/v1/search" in {getattr(route, "path", None) for route in app.router.routes}


# -- stratamem serve ---------------------------------------------------------------------------


def test_serve_refuses_an_open_bind_without_principals(store_location: str) -> None:
    db = store_location
    result = CliRunner().invoke(main, ["--db", db, "serve", "--host", "0.0.0.0"])
    assert result.exit_code == 1
    assert "no principal exists" in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["serve", "--host", "0.0.0.0", "--no-tokens"], "--no-tokens"),
        (["serve", "--host", "192.168.1.10", "--no-tokens"], "loopback"),
        (["--as", "bot", "serve"], "drop --as"),
    ],
)
def test_serve_refusals(tmp_path: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, ["--db", str(tmp_path / "s.db"), *args])
    assert result.exit_code == 1
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1


# -- generated requests -----------------------------------------------------------------------


@server_layer_only
@pytest.mark.fuzz
def test_generated_requests_never_get_a_server_error_or_an_undeclared_body(
    service: Service, store: dict[str, Any]
) -> None:
    """Schemathesis generates valid and invalid requests for every route of the OpenAPI
    document the live server publishes; none may be answered 5xx, and every answer whose
    status the document declares must match its schema."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from schemathesis import GenerationMode
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import response_schema_conformance

    statuses: dict[int, int] = {}
    app = create_app(service, access_log=None)
    with live(app) as url:
        schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
        headers = {"Authorization": f"Bearer {store['tokens']['bot']}"}
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(
                max_examples=examples(550),
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(case=schema.as_strategy(mode))
            def call(case: Any) -> None:
                response = case.call_and_validate(
                    base_url=url,
                    headers=headers,
                    checks=[not_a_server_error, response_schema_conformance],
                )
                statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

            call()
    assert sum(statuses.values()) >= 1000, statuses
    assert not any(code >= 500 for code in statuses), statuses
    assert 200 in statuses, statuses
    assert 422 in statuses, statuses
