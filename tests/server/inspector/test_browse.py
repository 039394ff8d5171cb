"""The inspector's sources, source, tree, entities and entity pages, through httpx against
uvicorn on a loopback port the system picks.

One store per module and backend: a chat the principal ``reader`` sees (``team``), with a
summary tree of several levels and facts about Alice, one corrected and one retracted; a chat
hidden from it (``secret``); and a note it would see but for its lock. One server asks for
tokens (logins); another, the owner's, does not.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from typing import Any
from urllib.parse import quote

import httpx
import inspector_kit
import pytest
from serving import live

import stratamem
from stratamem.config import TreeConfig
from stratamem.server.http import create_app
from stratamem.server.inspector import CSP
from stratamem.server.service import Service
from stratamem.testing import HashingEmbedder
from suite import PATIENCE_S

T0 = datetime(2024, 3, 1, tzinfo=UTC)
ALICE = "person:alice chen"
HIDDEN_ENTITY = "person:carol diaz"
# Words only the hidden and the locked sources hold.
CANARIES = ("zebrafish", "quagga", "chat:secret", "notes:vault", "carol diaz")
HOSTILE = '<script>alert("x")</script>" onmouseover="alert(1)'


@pytest.fixture(scope="module")
def store(served_location: str) -> dict[str, Any]:
    with stratamem.open(
        served_location,
        embedder=HashingEmbedder(),
        tree_config=TreeConfig(input_token_budget=40, summary_fanout=2),
    ) as mem:
        for i in range(12):
            mem.items.add(
                f"Alice Chen and Bob Martins went through the Phoenix release plan, step {i}.",
                source="chat:eng",
                kind="chat",
                author="Alice Chen",
                time=T0 + timedelta(days=3 * i),
            )
        mem.items.add(
            f"{HOSTILE} says the Phoenix build is green.",
            source="chat:eng",
            kind="chat",
            author="Bob Martins",
            time=T0 + timedelta(days=40),
        )
        mem.sources.set_access("chat:eng", scopes=["team"])
        for i in range(3):
            mem.items.add(
                f"Zebrafish quagga: Carol Diaz told Alice Chen about Phoenix, part {i}.",
                source="chat:secret",
                kind="chat",
                author="Carol Diaz",
                time=T0 + timedelta(days=i),
            )
        mem.sources.set_access("chat:secret", scopes=["secret"])
        mem.items.add(
            "Quagga vault notes about Alice Chen.", source="notes:vault", kind="record", time=T0
        )
        mem.sources.set_access("notes:vault", scopes=["team"])
        mem.trees.build()
        mem.trees.flush()
        inspector_kit.fact_history(mem, ALICE, T0, "chat:eng")
        mem.facts.remember(ALICE, "leads", "zebrafish", valid_from=T0, source="chat:secret")
        token = mem.principals.add("reader", ["team"])
        ids = {s.scope: s.id for s in mem.sources.list()}
        hidden_node = mem.query_source("chat:secret", limit=1).hits[0].node_id
        mem.locks.lock("notes:vault", passphrase="correct horse battery staple")
    return {"path": served_location, "token": token, "ids": ids, "hidden_node": hidden_node}


@pytest.fixture(scope="module")
def urls(store: dict[str, Any]) -> Iterator[dict[str, str]]:
    with (
        Service(store["path"], embedder=HashingEmbedder()) as service,
        live(create_app(service, access_log=None)) as logins,
        live(create_app(service, tokens_required=False, access_log=None)) as owner,
    ):
        yield {"logins": logins, "owner": owner}


@pytest.fixture(scope="module")
def owner(urls: dict[str, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=urls["owner"], timeout=PATIENCE_S) as browser:
        yield browser


@pytest.fixture(scope="module")
def reader(urls: dict[str, str], store: dict[str, Any]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=urls["logins"], timeout=PATIENCE_S) as browser:
        form = browser.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf
        answer = browser.post("/login", data={"token": store["token"], "csrf": csrf[1]})
        assert answer.status_code == 303, answer.text
        yield browser


def main_of(html: str) -> str:
    found = re.search(r"<main>.*</main>", html, re.S)
    assert found, html[:300]
    return found.group(0)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, dict(attrs)))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)


def tags(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(html)
    return parser.found


def assert_safe(answer: httpx.Response) -> None:
    """The page's headers, and nothing in it its policy would refuse: no inline script or
    style, no event attribute, nothing loaded from elsewhere, the hostile text escaped."""
    assert answer.headers["content-security-policy"] == CSP
    assert answer.headers["x-content-type-options"] == "nosniff"
    for tag, attrs in tags(answer.text):
        assert tag != "style", tag
        assert tag != "script" or attrs.get("src") == "/static/htmx.min.js", (tag, attrs)
        assert not [n for n in attrs if n == "style" or n.startswith("on")], (tag, attrs)
        for name in ("href", "src", "action"):
            if attrs.get(name) is not None:
                assert str(attrs[name]).startswith(("/", "#")), (tag, attrs)
    assert HOSTILE not in answer.text
    assert "javascript:" not in answer.text.lower()


def pages(store: dict[str, Any]) -> list[str]:
    eng = store["ids"]["chat:eng"]
    return [
        "/sources",
        f"/sources/{eng}",
        f"/sources/{eng}/tree",
        "/entities",
        "/entities?q=alice",
        f"/entities/entity?id={quote(ALICE)}",
    ]


def drill(browser: httpx.Client, source_id: str) -> list[str]:
    """The tree page's links followed, first child first, from the top to a leaf: the pages."""
    url = f"/sources/{source_id}/tree"
    seen = [url]
    while True:
        page = browser.get(url)
        assert page.status_code == 200, url
        below = re.search(r'<ol class="tree-children">(.*?)</ol>', page.text, re.S)
        if below is None:
            return seen
        url = re.findall(r'href="([^"]+)"', below.group(1))[0].replace("&amp;", "&")
        seen.append(url)


# -- every page --------------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["owner", "reader"])
def test_each_page_answers_safely(
    request: pytest.FixtureRequest, store: dict[str, Any], who: str
) -> None:
    browser: httpx.Client = request.getfixturevalue(who)
    for path in pages(store):
        answer = browser.get(path)
        assert answer.status_code == 200, (path, answer.text[:300])
        assert_safe(answer)


@pytest.mark.parametrize("path", ["/sources", "/entities", "/entities/entity?id=x"])
def test_the_pages_need_a_login(urls: dict[str, str], path: str) -> None:
    with httpx.Client(base_url=urls["logins"], timeout=PATIENCE_S) as browser:
        answer = browser.get(path)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/login"


def test_the_owner_sees_every_source_a_locked_one_sealed(
    owner: httpx.Client, store: dict[str, Any]
) -> None:
    page = main_of(owner.get("/sources").text)
    for scope, ident in store["ids"].items():
        assert f'href="/sources/{ident}"' in page, scope
    assert '<span class="lock-state locked">locked</span>' in page
    locked = owner.get(f"/sources/{store['ids']['notes:vault']}")
    assert locked.status_code == 200
    assert "sealed with it while it is locked" in locked.text


def test_a_principal_sees_only_its_sources(reader: httpx.Client, store: dict[str, Any]) -> None:
    listed = reader.get("/sources").text
    assert re.findall(r'href="/sources/([^"/]+)"', main_of(listed)) == [store["ids"]["chat:eng"]]
    for path in pages(store):
        text = reader.get(path).text.lower()
        assert not [c for c in CANARIES if c in text], path
    alice = reader.get(f"/entities/entity?id={quote(ALICE)}").text
    assert "zebrafish" not in alice.lower()
    assert "sealed while locked" not in alice


def test_hidden_and_unknown_ids_are_the_same_404(
    reader: httpx.Client, store: dict[str, Any]
) -> None:
    eng = store["ids"]["chat:eng"]
    nowhere = "src_" + "0" * 16
    pairs = [
        (f"/sources/{store['ids']['chat:secret']}", f"/sources/{nowhere}"),
        (f"/sources/{store['ids']['notes:vault']}", f"/sources/{nowhere}"),
        ("/sources/chat:secret", "/sources/chat:nowhere"),
        (f"/sources/{store['ids']['chat:secret']}/tree", f"/sources/{nowhere}/tree"),
        (f"/sources/{store['ids']['notes:vault']}/tree", f"/sources/{nowhere}/tree"),
        (
            f"/sources/{eng}/tree?node={store['hidden_node']}",
            f"/sources/{eng}/tree?node=" + "0" * 32,
        ),
        (f"/entities/entity?id={quote(HIDDEN_ENTITY)}", "/entities/entity?id=person%3Anobody"),
    ]
    for hidden, missing in pairs:
        got, want = reader.get(hidden), reader.get(missing)
        assert got.status_code == want.status_code == 404, hidden
        assert main_of(got.text) == main_of(want.text), hidden
        assert_safe(got)
        assert not [c for c in CANARIES if c in got.text.lower()], hidden


def test_a_node_of_another_source_is_no_level_of_this_one(
    owner: httpx.Client, store: dict[str, Any]
) -> None:
    eng = store["ids"]["chat:eng"]
    answer = owner.get(f"/sources/{eng}/tree", params={"node": store["hidden_node"]})
    assert answer.status_code == 404
    assert '<p class="error" role="alert">no node of that id in this source</p>' in answer.text


# -- the tree ----------------------------------------------------------------------------------


def test_the_source_links_its_tree_which_drills_to_a_leaf(
    reader: httpx.Client, store: dict[str, Any]
) -> None:
    eng = store["ids"]["chat:eng"]
    source = reader.get(f"/sources/{eng}").text
    assert f'href="/sources/{eng}/tree"' in source
    seen = drill(reader, eng)
    assert len(seen) >= 4, seen  # the top, two levels of summaries at least, a leaf
    leaf = reader.get(seen[-1])
    assert "<h1>Chunk</h1>" in leaf.text
    crumbs = re.search(r'<nav class="breadcrumb".*?</nav>', leaf.text, re.S)
    assert crumbs
    # The breadcrumb links each level above, back to the top and the source.
    linked = re.findall(r'href="([^"]+)"', crumbs.group(0))
    assert linked[:3] == ["/sources", f"/sources/{eng}", f"/sources/{eng}/tree"]
    assert [u.replace("&amp;", "&") for u in linked[3:]] == seen[1:-1]
    node = re.search(r'href="(/nodes/[^"]+)"', main_of(leaf.text))
    assert node
    assert reader.get(node.group(1)).status_code == 200


# -- entities ----------------------------------------------------------------------------------


def test_the_entity_list_finds_and_links(reader: httpx.Client) -> None:
    page = reader.get("/entities", params={"q": "alice"}).text
    assert f'href="/entities/entity?id={quote(ALICE)}"' in page
    assert 'value="alice"' in page
    none = reader.get("/entities", params={"q": "nobody-at-all"})
    assert "No entity matches" in none.text


def test_a_long_entity_query_is_one_line_without_echo(reader: httpx.Client) -> None:
    query = "<b>" + "x" * 1_000
    answer = reader.get("/entities", params={"q": query})
    assert answer.status_code == 200
    error = re.search(r'<p class="error" role="alert">(.*?)</p>', answer.text, re.S)
    assert error
    assert "1,000 characters" in error.group(1)
    assert "\n" not in error.group(1)
    assert "x" * 50 not in answer.text
    long_id = reader.get("/entities/entity", params={"id": "x" * 2_000})
    assert long_id.status_code == 404
    assert "x" * 50 not in long_id.text


def test_the_entity_timeline_shows_how_each_fact_ended(reader: httpx.Client) -> None:
    page = reader.get(f"/entities/entity?id={quote(ALICE)}").text
    rows = re.findall(
        r'<tr id="[^"]+" class="fact fact-(\w+)">\s*<td>(\w+)</td>\s*<td>([^<]*)</td>', page
    )
    shown = sorted((predicate, value, state) for state, predicate, value in rows)
    # "on-call" was cut short by "release": its row superseded, a closed one left in its
    # place; "away" retracted as never true.
    assert shown == [
        ("leads", "on-call", "closed"),
        ("leads", "on-call", "superseded"),
        ("leads", "release", "open"),
        ("status", "away", "retracted"),
    ]
    assert '<span class="ended retracted">retracted 2024-03-04</span>' in page
    assert 'class="fact-bar fact-bar-retracted"' in page
    assert 'class="chart chart-mentions"' in page
    assert 'class="chart chart-facts"' in page
    assert re.search(
        r'<ol class="related">.*href="/entities/entity\?id=\w+%3Abob%20martins', page, re.S
    )


def test_a_node_links_its_entities(reader: httpx.Client, store: dict[str, Any]) -> None:
    eng = store["ids"]["chat:eng"]
    leaf = drill(reader, eng)[-1]
    node = re.search(r'href="(/nodes/[^"]+)"', main_of(reader.get(leaf).text))
    assert node
    page = reader.get(node.group(1)).text
    assert f'href="/entities/entity?id={quote(ALICE)}"' in page


# -- who reads ---------------------------------------------------------------------------------


def test_the_header_says_who_reads_and_what_it_may(
    reader: httpx.Client, owner: httpx.Client
) -> None:
    page = reader.get("/sources").text
    assert '<strong class="principal">reader</strong>' in page
    assert '<span class="rights">· scopes team · read only</span>' in page
    mine = owner.get("/sources").text
    assert '<strong class="principal">owner</strong>' in mine
    assert '<span class="rights">· every unlocked source</span>' in mine
