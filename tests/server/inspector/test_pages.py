"""The inspector's pages, through httpx against uvicorn on a loopback port the system picks.

One store per module and backend: the Slack export (access ``team``), the team mailbox
(access ``eng``) and a note of hostile markup (access ``team``). Principal ``bot`` holds
``team``: the mailbox is hidden from it. One server asks for tokens (logins); another, the
owner's, does not.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from serving import bearer, live

import stratamem
from stratamem.server.http import create_app
from stratamem.server.inspector import CSP
from stratamem.server.service import Service
from stratamem.server.tokens import FAILURES
from stratamem.testing import HashingEmbedder
from suite import PATIENCE_S

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "workspace"
HOSTILE = (
    "quokkabanner notes: <script>alert(1)</script> and <img src=x onerror=alert(1)> "
    'and <a href="javascript:alert(1)">click</a> and [more](javascript:alert(2))'
)


@pytest.fixture(scope="module")
def store(served_location: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    notes = tmp_path_factory.mktemp("hostile")
    (notes / "hostile.md").write_text(f"# Hostile\n\n{HOSTILE}\n")
    with stratamem.open(served_location, embedder=HashingEmbedder()) as memory:
        memory.ingest(EXAMPLES / "slack-export", parallel=False)
        memory.ingest(EXAMPLES / "mail" / "team.mbox", access="eng", parallel=False)
        memory.ingest(notes, access="team", parallel=False)
        memory.indexes.embed()
        token = memory.principals.add("bot", "team")
        temp = memory.principals.add("temp", "team")
        sources = memory.sources.list()
        hidden = next(s for s in sources if "eng" in s.access)
        hostile = memory.search("quokkabanner", mode="keyword", limit=1).hits[0].node_id
        hidden_node = memory.query_source(hidden.scope, limit=1).hits[0].node_id
        summary = next(
            h
            for h in memory.query_source(limit=50).hits
            if h.child_ids and h.tree_scope.startswith("slack:")
        )
    return {
        "summary": summary.node_id,
        "children": list(summary.child_ids),
        "token": token,
        "temp": temp,
        "hidden_scope": hidden.scope,
        "hidden_node": hidden_node,
        "hostile": hostile,
        "path": served_location,
    }


@pytest.fixture(scope="module")
def urls(store: dict[str, Any]) -> Iterator[dict[str, str]]:
    """Base URLs: ``logins`` (tokens required) and ``owner`` (no tokens)."""
    with (
        Service(store["path"], embedder=HashingEmbedder()) as service,
        live(create_app(service, access_log=None)) as logins,
        live(create_app(service, tokens_required=False, access_log=None)) as owner,
    ):
        yield {"logins": logins, "owner": owner}


def client(base: str) -> httpx.Client:
    return httpx.Client(base_url=base, timeout=PATIENCE_S)


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html
    return found.group(1)


@contextmanager
def logged_in(urls: dict[str, str], token: str) -> Iterator[httpx.Client]:
    """A client of the logins server holding a session for ``token``."""
    with client(urls["logins"]) as browser:
        form = browser.get("/login")
        answer = browser.post("/login", data={"token": token, "csrf": csrf_of(form.text)})
        assert answer.status_code == 303, answer.text
        yield browser


@pytest.fixture(scope="module")
def bot(urls: dict[str, str], store: dict[str, Any]) -> Iterator[httpx.Client]:
    with logged_in(urls, store["token"]) as browser:
        yield browser


def results_block(html: str) -> str:
    found = re.search(r'<section id="results".*?</section>', html, re.S)
    assert found, html
    return found.group(0)


# -- who you are ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/search", "/search?q=deploy", "/nodes/abc"])
def test_pages_without_a_session_go_to_the_login(urls: dict[str, str], path: str) -> None:
    with client(urls["logins"]) as browser:
        answer = browser.get(path)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/login"


def test_a_bearer_token_is_no_session(urls: dict[str, str], store: dict[str, Any]) -> None:
    with client(urls["logins"]) as browser:
        answer = browser.get("/", headers=bearer(store["token"]))
    assert answer.status_code == 303
    assert answer.headers["location"] == "/login"


def test_a_good_token_logs_in_with_a_strict_cookie(
    urls: dict[str, str], store: dict[str, Any]
) -> None:
    with client(urls["logins"]) as browser:
        form = browser.get("/login")
        assert form.status_code == 200
        answer = browser.post("/login", data={"token": store["token"], "csrf": csrf_of(form.text)})
        assert answer.status_code == 303
        assert answer.headers["location"] == "/"
        cookie = next(
            c for c in answer.headers.get_list("set-cookie") if c.startswith("stratamem_session=")
        )
        flags = {part.strip().lower() for part in cookie.split(";")[1:]}
        assert {"httponly", "path=/", "samesite=strict"} <= flags
        assert "secure" not in flags  # served on loopback
        value = cookie.split(";")[0].split("=", 1)[1]
        assert len(value) >= 43  # 32 random bytes, url-safe
        page = browser.get("/")
        assert page.status_code == 200
        assert '<strong class="principal">bot</strong>' in page.text


def test_a_bad_token_is_refused_on_the_form_without_echo(urls: dict[str, str]) -> None:
    typed = "stm_000000000000_" + "Q" * 43
    with client(urls["logins"]) as browser:
        form = browser.get("/login")
        answer = browser.post("/login", data={"token": typed, "csrf": csrf_of(form.text)})
        assert answer.status_code == 401
        assert "the token matches no principal" in answer.text
        assert typed not in answer.text
        assert "stratamem_session" not in answer.headers.get("set-cookie", "")
        assert browser.get("/").status_code == 303


def test_logins_share_the_apis_limit_on_bad_tokens(store: dict[str, Any]) -> None:
    with (
        Service(store["path"], embedder=HashingEmbedder()) as service,
        live(create_app(service, access_log=None)) as url,
        client(url) as browser,
    ):
        csrf = csrf_of(browser.get("/login").text)
        for n in range(FAILURES):
            bad = {"token": f"stm_00000000000{n % 10}_" + "Z" * 43, "csrf": csrf}
            assert browser.post("/login", data=bad).status_code == 401
        answer = browser.post("/login", data={"token": store["token"], "csrf": csrf})
        assert answer.status_code == 429
        assert answer.headers["retry-after"]
        assert "too many bad tokens" in answer.text
        api = browser.post("/v1/search", json={"query": "x"}, headers=bearer("stm_x_" + "Y" * 43))
        assert api.status_code == 429  # one count for both doors


def test_the_owner_server_needs_no_login(urls: dict[str, str]) -> None:
    with client(urls["owner"]) as browser:
        page = browser.get("/")
        assert page.status_code == 200
        assert '<strong class="principal">owner</strong>' in page.text
        assert browser.get("/login").status_code == 303


def test_logout_ends_the_session(urls: dict[str, str], store: dict[str, Any]) -> None:
    with logged_in(urls, store["token"]) as browser:
        csrf = csrf_of(browser.get("/").text)
        answer = browser.post("/logout", data={"csrf": csrf})
        assert answer.status_code == 303
        assert answer.headers["location"] == "/login"
        assert browser.get("/").status_code == 303


def test_a_login_ends_when_its_token_is_rotated_or_removed(
    urls: dict[str, str], store: dict[str, Any]
) -> None:
    with logged_in(urls, store["temp"]) as browser:
        assert browser.get("/").status_code == 200
        with stratamem.open(store["path"], embedder=None) as owner:
            owner.principals.remove("temp")
            store["temp"] = owner.principals.add("temp", "team")
        answer = browser.get("/")
        assert answer.status_code == 303
        assert answer.headers["location"] == "/login"
        assert browser.get("/").status_code == 303  # ended, not only refused once
    with logged_in(urls, store["temp"]) as browser:
        assert browser.get("/").status_code == 200
        with stratamem.open(store["path"], embedder=None) as owner:
            owner.principals.remove("temp")
        assert browser.get("/search?q=deploy").status_code == 303


# -- CSRF, headers, the API ---------------------------------------------------------------------


@pytest.mark.parametrize("csrf", [None, "", "0" * 64])
def test_a_post_without_its_csrf_is_refused(
    urls: dict[str, str], store: dict[str, Any], csrf: str | None
) -> None:
    data = {} if csrf is None else {"csrf": csrf}
    with logged_in(urls, store["token"]) as browser:
        answer = browser.post("/logout", data=data)
        assert answer.status_code == 403
        assert "did not come from this page" in answer.text
        assert browser.get("/").status_code == 200  # still logged in
    with client(urls["logins"]) as browser:
        browser.get("/login")
        answer = browser.post("/login", data={"token": store["token"], **data})
        assert answer.status_code == 403
        assert "stratamem_session" not in answer.headers.get("set-cookie", "")


def test_another_sessions_csrf_is_refused(urls: dict[str, str], store: dict[str, Any]) -> None:
    with logged_in(urls, store["token"]) as one, logged_in(urls, store["token"]) as two:
        theirs = csrf_of(two.get("/").text)
        assert one.post("/logout", data={"csrf": theirs}).status_code == 403


@pytest.mark.parametrize(
    "path",
    ["/", "/search?q=deploy", "/login", "/nodes/0000", "/static/app.css", "/static/htmx.min.js"],
)
@pytest.mark.parametrize("server", ["logins", "owner"])
def test_every_page_and_file_carries_the_headers(
    urls: dict[str, str], bot: httpx.Client, server: str, path: str
) -> None:
    if server == "logins":
        answer = bot.get(path)
    else:
        with client(urls["owner"]) as browser:
            answer = browser.get(path)
    assert answer.headers["content-security-policy"] == CSP
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["referrer-policy"] == "same-origin"


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("app.css", "text/css"),
        ("htmx.min.js", "text/javascript"),
        ("htmx.LICENSE", "text/plain"),
        ("favicon.svg", "image/svg+xml"),
    ],
)
def test_static_files_have_their_types(urls: dict[str, str], name: str, kind: str) -> None:
    with client(urls["logins"]) as browser:  # no session needed
        answer = browser.get(f"/static/{name}")
    assert answer.status_code == 200
    assert answer.headers["content-type"].split(";")[0] == kind
    assert answer.content


@pytest.mark.parametrize("name", ["../app.py", "..%2Fapp.py", "nope.js", "session.py"])
def test_only_the_static_files_are_served(urls: dict[str, str], name: str) -> None:
    with client(urls["owner"]) as browser:
        answer = browser.get(f"/static/{name}")
    assert answer.status_code == 404
    assert "Sessions" not in answer.text


def test_a_session_cookie_does_not_authorise_the_api(bot: httpx.Client) -> None:
    assert bot.cookies.get("stratamem_session")
    answer = bot.post("/v1/search", json={"query": "deploy"})
    assert answer.status_code == 401
    assert bot.get("/v1/sources").status_code == 401


def test_pages_load_nothing_from_outside(bot: httpx.Client) -> None:
    html = bot.get("/search?q=deploy").text
    for found in re.findall(r'(?:src|href|action)="([^"]*)"', html):
        assert found.startswith("/"), found
    assert "<script>" not in html  # no inline script
    for tag in re.findall(r"<[a-zA-Z][^>]*>", html):
        assert " style=" not in tag, tag
        assert not re.search(r"\son\w+=", tag), tag


# -- search and nodes ---------------------------------------------------------------------------


def test_search_shows_hits_with_their_bars(bot: httpx.Client) -> None:
    page = bot.get("/search", params={"q": "redis job queue", "limit": "5"})
    assert page.status_code == 200
    block = results_block(page.text)
    assert block.count('<li class="hit">') == 5
    assert "<rect " in block
    assert 'class="bar bar-' in block
    assert 'href="/nodes/' in block


def test_recall_runs_on_the_same_page(bot: httpx.Client) -> None:
    page = bot.get("/search", params={"q": "redis", "op": "recall", "types": "turn"})
    assert page.status_code == 200
    assert '<span class="type">turn</span>' in results_block(page.text)


@pytest.mark.parametrize(
    ("params", "said"),
    [
        ({"q": "redis", "since": "<b>yesterday"}, "since"),
        ({"q": "redis", "limit": "many"}, "limit"),
        ({"q": "redis", "limit": "100000"}, "limit"),
        ({"q": "redis", "sources": "<i>no-such-source"}, "sources"),
        ({"q": "redis", "op": "recall", "as_of": "<b>tomorrow"}, "as_of"),
    ],
)
def test_bad_input_is_one_line_on_the_page(
    bot: httpx.Client, params: dict[str, str], said: str
) -> None:
    page = bot.get("/search", params=params)
    assert page.status_code == 200
    error = re.search(r'<p class="error" role="alert">(.*?)</p>', page.text, re.S)
    assert error, page.text
    assert said in error.group(1)
    assert "\n" not in error.group(1)
    assert "Traceback" not in page.text
    for value in params.values():
        if "<" in value:
            assert value not in page.text


def test_hostile_text_comes_out_escaped(bot: httpx.Client, store: dict[str, Any]) -> None:
    search = bot.get("/search", params={"q": "quokkabanner", "mode": "keyword"})
    node = bot.get(f"/nodes/{store['hostile']}")
    assert node.status_code == 200
    for html in (results_block(search.text), node.text):
        assert "quokkabanner" in html
        assert "<script>alert" not in html
        assert "<img src=x" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert not re.search(r'href="\s*javascript:', html, re.I)
        assert not re.search(r"<a [^>]*javascript:", html, re.I)


def test_a_principal_never_sees_a_hidden_source(bot: httpx.Client, store: dict[str, Any]) -> None:
    hidden = store["hidden_scope"]
    for params in (
        {"q": "deploy freeze"},
        {"q": "deploy", "op": "recall"},
        {"q": "deploy", "mode": "keyword", "limit": "50"},
        {},
    ):
        page = bot.get("/search", params=params)
        assert page.status_code == 200
        assert hidden not in page.text
    refused = bot.get("/search", params={"q": "deploy", "sources": hidden})
    assert hidden not in refused.text
    assert store["hidden_node"] not in refused.text
    missing = bot.get("/nodes/" + "0" * 32)
    gone = bot.get(f"/nodes/{store['hidden_node']}")
    assert missing.status_code == gone.status_code == 404
    assert missing.text.replace("0" * 32, "ID") == gone.text.replace(store["hidden_node"], "ID")


def test_the_owner_sees_every_source(urls: dict[str, str], store: dict[str, Any]) -> None:
    with client(urls["owner"]) as browser:
        page = browser.get("/search")
        assert store["hidden_scope"] in page.text
        node = browser.get(f"/nodes/{store['hidden_node']}")
        assert node.status_code == 200


def test_the_htmx_fragment_is_the_pages_results_block(bot: httpx.Client) -> None:
    params = {"q": "why did we drop redis", "limit": "4"}
    page = bot.get("/search", params=params)
    fragment = bot.get("/search", params=params, headers={"HX-Request": "true"})
    assert fragment.status_code == 200
    assert fragment.text.strip() == results_block(page.text)
    assert "<html" not in fragment.text


def test_a_summary_links_its_children(bot: httpx.Client, store: dict[str, Any]) -> None:
    page = bot.get(f"/nodes/{store['summary']}")
    assert page.status_code == 200
    children = re.search(r'<ol class="children">(.*?)</ol>', page.text, re.S)
    assert children
    linked = re.findall(r'href="/nodes/([^"]+)"', children.group(1))
    assert linked == store["children"]
    assert bot.get(f"/nodes/{linked[0]}").status_code == 200


@pytest.mark.parametrize("path", ["/v1/sources", "/healthz", "/openapi.json", "/docs"])
def test_the_apis_answers_are_left_as_they_are(urls: dict[str, str], path: str) -> None:
    with client(urls["owner"]) as browser:
        answer = browser.get(path)
    assert answer.status_code == 200
    assert "content-security-policy" not in answer.headers
