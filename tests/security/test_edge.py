"""The server's edge: what a request is checked for before it reaches an operation, and what
an answer or a log line may carry.

Every route checks Host and Origin against one list (DNS rebinding); two ``Authorization``
headers are refused; a token check runs off the reader pool, a few at a time, and an address
sending bad tokens is turned away before any hashing; the access log escapes what a path may
carry; job ids count nothing; no error repeats what the caller sent; nothing undocumented is
served; and a server with unlocked sources follows the store's principals and access."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import security_kit as kit
from click.testing import CliRunner
from serving import call_http, connected, live

import stratamem
import stratamem.access.principals as principal_hashes
from stratamem.cli import main as cli
from stratamem.ops import OPERATIONS
from stratamem.server.http import create_app
from stratamem.server.service import Service
from stratamem.testing import HashingEmbedder
from suite import PATIENCE_S

PASSPHRASE = "correct horse battery staple"


@dataclass(frozen=True, slots=True)
class Small:
    path: str
    tokens: dict[str, str]


def _small(path: Path) -> Small:
    with stratamem.open(path, embedder=HashingEmbedder()) as owner:
        owner.items.add("Redis evictions under maxmemory", source="notes")
        owner.sources.set_access("notes", scopes="team")
        found = {
            "bea": owner.principals.add("bea", ["team"], write=True),
            "cal": owner.principals.add("cal", ["team"], write=True),
        }
    return Small(str(path), found)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Small:
    return _small(tmp_path_factory.mktemp("edge") / "store.db")


@contextmanager
def served(path: str, **options: Any) -> Iterator[tuple[str, Service]]:
    """A live server over the store at ``path`` (``options`` go to ``create_app``)."""
    writes = options.pop("allow_writes", False)
    with (
        Service(path, embedder=HashingEmbedder(), allow_writes=writes) as service,
        live(create_app(service, access_log=None, **options)) as url,
    ):
        yield url, service


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def our_error(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) >= {"code", "message"}, body
    return str(body["error"]["message"])


HELLO = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
ROUTES = [
    ("GET", "/v1/sources", None),
    ("POST", "/v1/search", {"query": "redis"}),
    ("GET", "/healthz", None),
    ("GET", "/docs", None),
    ("GET", "/openapi.json", None),
    ("POST", "/mcp", HELLO),
]


def _send(
    client: httpx.Client, method: str, path: str, body: Any, headers: dict[str, str]
) -> httpx.Response:
    extra = MCP_HEADERS if path == "/mcp" else {}
    return client.request(method, path, json=body, headers={**extra, **headers})


# -- Host and Origin, on every route ---------------------------------------------------------


def test_every_route_answers_a_foreign_host_421_and_a_foreign_origin_403(small: Small) -> None:
    with (
        served(small.path, tokens_required=False) as (url, _),
        httpx.Client(base_url=url, timeout=PATIENCE_S) as client,
    ):
        port = url.rsplit(":", 1)[1]
        for method, path, body in ROUTES:
            where = f"{method} {path}"
            for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example"):
                our_error(_send(client, method, path, body, {"Host": host}), 421)
            for origin in ("http://evil.example", f"http://evil.example:{port}", "null"):
                answer = _send(client, method, path, body, {"Origin": origin})
                assert answer.status_code == 403, (where, origin, answer.text)
                our_error(answer, 403)
            for host in (f"localhost:{port}", f"127.0.0.1:{port}", "localhost"):
                answer = _send(client, method, path, body, {"Host": host})
                assert answer.status_code == 200, (where, host, answer.text)
            for origin in (f"http://localhost:{port}", f"http://127.0.0.1:{port}"):
                answer = _send(client, method, path, body, {"Origin": origin})
                assert answer.status_code == 200, (where, origin, answer.text)


def test_every_documented_route_refuses_a_foreign_host_before_anything_else(
    small: Small,
) -> None:
    # Every route the OpenAPI document lists, with every method, writes on and no tokens:
    # a page reached through a rebound name gets 421 whatever it asks.
    with (
        served(small.path, tokens_required=False, allow_writes=True) as (url, _),
        httpx.Client(base_url=url, timeout=PATIENCE_S) as client,
    ):
        document = client.get("/openapi.json").json()
        asked = [("POST", "/mcp"), ("GET", "/docs"), ("GET", "/openapi.json")]
        for path, methods in document["paths"].items():
            concrete = re.sub(r"{\w+}", "x", path)
            asked += [(method.upper(), concrete) for method in methods]
        assert len(asked) > 30
        before = client.get("/v1/sources").json()
        for method, path in asked:
            answer = client.request(method, path, json={}, headers={"Host": "evil.example"})
            assert answer.status_code == 421, (method, path, answer.text)
        assert client.get("/v1/sources").json() == before


def test_an_allowed_host_lets_a_proxy_name_the_server(small: Small) -> None:
    with (
        served(small.path, tokens_required=False, allowed_hosts=["mem.example"]) as (
            url,
            _,
        ),
        httpx.Client(base_url=url, timeout=PATIENCE_S) as client,
    ):
        for method, path, body in ROUTES:
            for host in ("mem.example", "mem.example:443", "MEM.example"):
                answer = _send(client, method, path, body, {"Host": host})
                assert answer.status_code == 200, (path, host, answer.text)
            good = _send(client, method, path, body, {"Origin": "https://mem.example"})
            assert good.status_code == 200, (path, good.text)
            our_error(_send(client, method, path, body, {"Host": "other.example"}), 421)


# -- what is served -----------------------------------------------------------------------------


def test_nothing_undocumented_is_served(small: Small) -> None:
    with (
        served(small.path, tokens_required=False) as (url, _),
        httpx.Client(base_url=url, timeout=PATIENCE_S) as client,
    ):
        our_error(client.get("/redoc"), 404)
        our_error(client.get("/docs/oauth2-redirect"), 404)
        app_paths = client.get("/openapi.json").json()["paths"]
    app = create_app(Service(small.path, embedder=None), access_log=None)
    try:
        # A converter ({source:path}) is the router's; the document writes {source}.
        served_paths = {
            re.sub(r"{(\w+):\w+}", r"{\1}", getattr(route, "path", ""))
            for route in app.router.routes
        }
    finally:
        app.state.calls.service.close()
    assert served_paths == set(app_paths) | {"/docs", "/openapi.json", "/mcp"} | pages()


def pages() -> set[str]:
    """The inspector's routes, as its page documents them (its table of routes)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "inspector.md").read_text()
    found = set(re.findall(r"^\| `(?:GET|POST) (/[^`]*)`", text, re.M))
    found |= set(re.findall(r", `(?:GET|POST) (/[^`]*)`", text))
    assert {"/", "/search", "/login"} <= found
    return found


# -- two Authorization headers ------------------------------------------------------------------


def test_two_authorization_headers_are_refused_on_both_doors(small: Small) -> None:
    good, other = bearer(small.tokens["bea"]), bearer(small.tokens["cal"])
    with served(small.path) as (url, _), httpx.Client(base_url=url, timeout=PATIENCE_S) as client:
        for first, second in ((good, {"Authorization": "Bearer nope"}), (other, good)):
            headers = [("Authorization", first["Authorization"])]
            headers.append(("Authorization", second["Authorization"]))
            found = client.get("/v1/sources", headers=headers)
            our_error(found, 400)
            found = client.post("/mcp", json=HELLO, headers=[*headers, *MCP_HEADERS.items()])
            our_error(found, 400)
        assert client.get("/v1/sources", headers=good).status_code == 200


# -- the cost of a token ------------------------------------------------------------------------


class HashSpy:
    """Counts the slow hash checks, on which threads they ran, and how many ran at once."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        self.threads: set[str] = set()
        self.running = 0
        self.most = 0
        self._lock = threading.Lock()
        real = principal_hashes.secret_matches

        def spied(secret: str, stored: str) -> bool:
            with self._lock:
                self.calls += 1
                self.running += 1
                self.most = max(self.most, self.running)
                self.threads.add(threading.current_thread().name)
            try:
                return real(secret, stored)
            finally:
                with self._lock:
                    self.running -= 1

        monkeypatch.setattr(principal_hashes, "secret_matches", spied)


def test_bad_tokens_are_turned_away_before_hashing_once_an_address_failed_often(
    small: Small, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stratamem.server.tokens import FAILURES

    spy = HashSpy(monkeypatch)
    good = bearer(small.tokens["bea"])
    with served(small.path) as (url, _), httpx.Client(base_url=url, timeout=PATIENCE_S) as client:
        assert client.get("/v1/sources", headers=good).status_code == 200  # now remembered
        assert spy.calls == 1
        for n in range(FAILURES):
            answer = client.get("/v1/sources", headers=bearer(f"stm_bogus{n}"))
            our_error(answer, 401)
        assert spy.calls == 1 + FAILURES
        for path, body in (("/v1/sources", None), ("/mcp", HELLO)):
            method = "POST" if body else "GET"
            limited = _send(client, method, path, body, bearer("stm_bogus_again"))
            our_error(limited, 429)
            assert int(limited.headers["retry-after"]) >= 1
        assert spy.calls == 1 + FAILURES
        # A token the server already knows still reads from that address.
        assert client.get("/v1/sources", headers=good).status_code == 200


def test_token_checks_run_off_the_reader_pool_a_few_at_a_time(
    small: Small, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stratamem.server.tokens import FAILURES, HASHERS

    spy = HashSpy(monkeypatch)
    with served(small.path) as (url, _):

        def bogus(n: int) -> int:
            headers = bearer(f"stm_bogus_{n}")
            with httpx.Client(base_url=url, timeout=PATIENCE_S) as client:
                return client.get("/v1/sources", headers=headers).status_code

        with ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(bogus, range(16)))
    assert set(statuses) <= {401, 429}
    assert statuses.count(401) == spy.calls <= FAILURES
    assert spy.calls >= 1
    assert not [name for name in spy.threads if name.startswith("stratamem-read")], spy.threads
    assert spy.most <= HASHERS


def test_a_burst_with_a_good_token_not_yet_remembered_is_answered_whole(
    small: Small, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An agent firing more requests at once than the failure limit, with a good token the
    # server has not checked yet: each is answered, and the token is hashed once.
    from stratamem.server.tokens import FAILURES

    spy = HashSpy(monkeypatch)
    good = bearer(small.tokens["bea"])
    with served(small.path) as (url, _):

        def read(_: int) -> int:
            with httpx.Client(base_url=url, timeout=PATIENCE_S) as client:
                return client.get("/v1/sources", headers=good).status_code

        with ThreadPoolExecutor(16) as pool:
            statuses = list(pool.map(read, range(4 * FAILURES)))
    assert statuses == [200] * (4 * FAILURES)
    assert spy.calls == 1


# -- job ids ------------------------------------------------------------------------------------


def test_job_ids_are_random_and_another_principals_job_is_not_found(
    tmp_path: Path,
) -> None:
    store = _small(tmp_path / "store.db")
    with (
        served(store.path, allow_writes=True) as (url, service),
        httpx.Client(base_url=url, timeout=PATIENCE_S) as client,
    ):
        ids = []
        for who in ("bea", "cal", "bea"):
            answer = client.post(
                "/v1/add", json={"text": f"note by {who}"}, headers=bearer(store.tokens[who])
            )
            assert answer.status_code == 200, answer.text
            ids.append(answer.json()["job"])
        for ident in ids:
            assert re.fullmatch(r"job-[0-9a-f]{32}", ident), ident
        assert client.get(f"/v1/jobs/{ids[0]}", headers=bearer(store.tokens["bea"])).is_success
        hidden = client.get(f"/v1/jobs/{ids[0]}", headers=bearer(store.tokens["cal"]))
        assert ids[0] not in our_error(hidden, 404)
        assert service.job(ids[1], "bea") is None


# -- no error repeats the caller's input ------------------------------------------------------

CANARY = "qq'canary\"7\u2028x"
NUMBER = 987654321987


def _filler(kind: str) -> Any:
    return {
        "str": "redis",
        "strs": ["redis"],
        "int": 1,
        "float": 0.5,
        "bool": True,
        "time": "2024-01-01",
        "object": {},
        "objects": [{"role": "user", "content": "hello"}],
    }[kind]


def _probes() -> Iterator[tuple[str, dict[str, Any]]]:
    """(operation, arguments) with the canary in one parameter each, the rest valid."""
    for op in OPERATIONS.values():
        base = {p.name: _filler(p.type) for p in op.params if p.required}
        for param in op.params:
            values: list[Any] = [CANARY, [CANARY], {"k": CANARY}]
            if param.type in ("int", "float"):
                values += [NUMBER, -NUMBER]
            for value in values:
                yield op.name, {**base, param.name: value}
        yield op.name, {**base, f"{CANARY}": 1}
        yield op.name, {**base, "canary_param": 1}


def _echoes(text: str) -> bool:
    return "canary" in text.lower() or str(NUMBER) in text or f"{NUMBER:g}" in text


@pytest.mark.slow
def test_no_error_repeats_what_the_caller_sent(tmp_path: Path) -> None:
    store = _small(tmp_path / "store.db")
    echoed: list[tuple[str, str, str]] = []
    probes = list(_probes())
    with (
        served(store.path, tokens_required=False, allow_writes=True) as (url, _),
        httpx.Client(base_url=url, timeout=PATIENCE_S) as client,
    ):
        for name, args in probes:
            answer = call_http(client, name, args)
            if answer.status_code >= 400 and _echoes(answer.text):
                echoed.append(("http", name, answer.text))
        for path in (f"/v1/jobs/{CANARY}", f"/v1/nodes/{CANARY}", f"/v1/{CANARY}"):
            answer = client.get(path)
            if _echoes(answer.text):
                echoed.append(("http", path, answer.text))
        bad = client.post("/v1/search", content=b'{"query": "x", "limit": "canary"')
        if _echoes(bad.text):
            echoed.append(("http", "bad json", bad.text))

        async def over_mcp() -> None:
            async with connected(url, None) as session:
                for name, args in [*probes, (CANARY, {}), ("canary_tool", {})]:
                    result = await session.call_tool(name, args)
                    text = " ".join(getattr(c, "text", "") for c in result.content)
                    if result.is_error and _echoes(text):
                        echoed.append(("mcp", name, text))
                for uri in (
                    f"stratamem://nodes/{CANARY}",
                    "stratamem://sources/canary",
                    "stratamem://canary/x",
                ):
                    try:
                        await session.read_resource(uri)
                    except Exception as exc:  # the SDK raises the server's error
                        if _echoes(str(exc)):
                            echoed.append(("mcp", uri, str(exc)))

        anyio.run(over_mcp)
    assert not echoed, echoed[:10]


# -- the access log -----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("STRATAMEM_")},
    "PYTHONPATH": str(Path(stratamem.__file__).parents[1]),
}


@contextmanager
def serve_cli(db: str, log: Path, *options: str) -> Iterator[str]:
    """``stratamem serve`` on ``db`` in a process of its own, its output in ``log``; yields its
    URL once it answers, and stops it (its log complete) on the way out."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stratamem", "--db", db, "serve", "--port", str(port), *options],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**ENV, "STRATAMEM_INDEX_DIR": os.environ["STRATAMEM_INDEX_DIR"]},
            start_new_session=True,
        )
    try:
        with httpx.Client(base_url=url, timeout=PATIENCE_S) as client:
            for _ in range(100_000):
                assert proc.poll() is None, log.read_text()
                try:
                    if client.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    with suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=0.05)  # a bounded wait on the process, not a sleep
        yield url
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=PATIENCE_S)


FORGED = "2099-01-01T00:00:00 GET /v1/forged 200 1.0ms owner"


def test_the_access_log_cannot_be_given_a_line(small: Small, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    with (
        serve_cli(small.path, log, "--no-tokens") as url,
        httpx.Client(base_url=url, timeout=PATIENCE_S) as client,
    ):
        forged = "/v1/x%0A" + FORGED.replace(" ", "%20") + "%0D%0B%1B%C2%85%E2%80%A8end"
        assert client.get(forged).status_code == 404
    lines = log.read_text().splitlines()
    assert not [line for line in lines if "/v1/forged" in line and "/v1/x" not in line], lines
    logged = [line for line in lines if "/v1/x" in line]
    assert len(logged) == 1, lines
    for escaped in ("\\n", "\\r", "\\x0b", "\\x1b", "\\x85", "\\u2028"):
        assert escaped in logged[0], (escaped, logged[0])
    assert re.search(r"end 404 [0-9.]+ms -$", logged[0]), logged[0]


# -- a server with unlocked sources follows the store -----------------------------------------


@pytest.mark.slow
def test_an_unlocked_server_follows_principals_and_access_in_the_store(
    places: kit.Places, tmp_path: Path
) -> None:
    location = places.within(tmp_path).new("unlocked")
    with stratamem.open(location, embedder=HashingEmbedder()) as owner:
        owner.items.add("The vault holds the plutonic ledger", source="vault")
        owner.items.add("Team notes on queues", source="notes")
        owner.sources.set_access("vault", scopes="team")
        owner.sources.set_access("notes", scopes="team")
        bea = owner.principals.add("bea", ["team"])
        dan = owner.principals.add("dan", ["hr"])
        owner.locks.lock("vault", passphrase=PASSPHRASE)
    search = {"query": "plutonic ledger", "mode": "keyword"}
    with (
        Service(location, embedder=HashingEmbedder(), unlock={"vault": PASSPHRASE}) as service,
        live(create_app(service, access_log=None)) as url,
        httpx.Client(base_url=url, timeout=PATIENCE_S) as client,
    ):

        def sees(token: str) -> set[str]:
            answer = client.post("/v1/search", json=search, headers=bearer(token))
            assert answer.status_code == 200, answer.text
            return {hit["source"] for hit in answer.json()["hits"]}

        assert "vault" in sees(bea)
        assert "vault" not in sees(dan)
        # The vault's scopes changed on the file, through the command line: they apply.
        ran = CliRunner().invoke(cli, ["--db", location, "access", "vault", "--scopes", "hr"])
        assert ran.exit_code == 0, ran.output
        assert "vault" not in sees(bea)
        assert "vault" in sees(dan)
        # A principal removed on the file: its token stops working at once.
        with stratamem.open(location, embedder=None) as owner:
            owner.principals.remove("dan")
        our_error(client.post("/v1/search", json=search, headers=bearer(dan)), 401)
        assert "vault" not in sees(bea)  # the others still read, as the store says


def test_serve_answers_the_hosts_it_is_told(small: Small, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    with (
        serve_cli(small.path, log, "--no-tokens", "--allowed-host", "mem.example") as url,
        httpx.Client(base_url=url, timeout=PATIENCE_S) as client,
    ):
        for host, status in (("mem.example", 200), ("evil.example", 421)):
            answer = client.get("/v1/sources", headers={"Host": host})
            assert answer.status_code == status, (host, answer.text)
        hello = client.post("/mcp", json=HELLO, headers={**MCP_HEADERS, "Host": "mem.example"})
        assert hello.status_code == 200, hello.text
