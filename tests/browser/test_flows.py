"""Whole flows through the inspector in the browser: a person opens the search page, searches,
opens a hit, walks a source's summary tree down to a chunk, opens an entity and its fact
timeline, retracts a fact through its confirmation page and sees the timeline change, and
logs out; as the owner (a server without tokens) and as a principal (the login form with its
token), with page script on and off.

Every page a walk reaches is checked as it is shown: no script error, nothing refused by the
Content-Security-Policy, no asset missing, no XSS payload run or parsed as markup, and, for a
principal, nothing of a source it may not read (the team mailbox's name and scope, a fact
whose evidence is in it, the locked note's scope and text). With script off each page still
shows its content and its forms still submit (search and entity search by GET, the login,
the confirmation and the logout by POST).

Each walk's pages are screenshot as they are reached; with ``STRATAMEM_SCREENSHOTS=docs/images``
the owner's walk and the login write the docs' pictures (``inspector-<page>.png``).

The store is this module's own (the session's shared one is read-only to its tests): the
example Slack export (``team``), the team mailbox (``eng``), a note whose title, author and
text carry the XSS payloads (``team``), a locked note (``team``), and facts about Carol Diaz,
two with evidence in ``#eng`` and one in the mailbox.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import browsing
import pytest
from browsing import LOCKED_CANARY, XSS_PAYLOADS, Served
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait
from serving import live

import stratamem
from stratamem.server.http import create_app
from stratamem.server.service import Service
from stratamem.testing import HashingEmbedder
from suite import PATIENCE_S

pytest.importorskip("stratamem.server.inspector", reason="the server has no inspector yet")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "workspace"
CAROL = "person:carol diaz"
# A fact whose evidence is in the mailbox: the owner's entity page shows it, bot's does not.
MAIL_FACT_VALUE = "mailroom desk nine"
# What no page may show bot (scope ``team``): the mailbox (``eng``) and the locked note.
HIDDEN_FROM_BOT = ("team.mbox", "mbox:team", "notes:vault", MAIL_FACT_VALUE, LOCKED_CANARY)
# Elements the payloads would add if parsed as markup, whether or not the CSP let them run.
INJECTED = "img[src='x'], svg[onload], a[href^='javascript:'], #xss"
NOTE = f"""---
title: 'Escaping {XSS_PAYLOADS[0].replace("'", "''")}'
author: '{XSS_PAYLOADS[1]} onerror=alert(1)'
---

# Escaping notes

{chr(10).join(XSS_PAYLOADS)}

A [javascript link](javascript:window.__xss=1) and <span onerror="window.__xss = 1">an
onerror= attribute</span>.
"""


# -- the store and its servers ---------------------------------------------------------------


@pytest.fixture(scope="module")
def flow_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("flow-store")
    notes = folder / "notes"
    notes.mkdir()
    (notes / "escaping.md").write_text(NOTE)
    vault = folder / "vault"
    vault.mkdir()
    (vault / "ledger.md").write_text(f"# Ledger\n\n{LOCKED_CANARY}: the budget figures.\n")
    path = str(folder / "flows.db")
    with stratamem.open(path, embedder=HashingEmbedder()) as memory:
        slack = memory.ingest(EXAMPLES / "slack-export", parallel=False)
        mail = memory.ingest(EXAMPLES / "mail" / "team.mbox", access="eng", parallel=False)
        memory.ingest(notes, scope="notes:xss", access="team", parallel=False)
        vault_report = memory.ingest(vault, scope="notes:vault", access="team", parallel=False)
        memory.indexes.embed()
        for source in vault_report.sources:
            memory.locks.lock(source.source_id, passphrase="flows lock")
        eng = next(s.source_id for s in slack.sources if s.scope == "slack:#eng")
        mailbox = mail.sources[0].source_id
        eng_chunk = _a_chunk(memory, eng)
        mail_chunk = _a_chunk(memory, mailbox)
        said = {"valid_from": "2024-03-01", "now": "2024-03-02"}
        memory.facts.remember(CAROL, "leads", "on-call rota", evidence=[eng_chunk], **said)
        memory.facts.remember(CAROL, "status", "away in april", evidence=[eng_chunk], **said)
        memory.facts.remember(CAROL, "sits at", MAIL_FACT_VALUE, evidence=[mail_chunk], **said)
        tokens = {"bot": memory.principals.add("bot", "team")}
    return {"path": path, "tokens": tokens, "eng": eng, "mailbox": mailbox}


def _a_chunk(memory: stratamem.Memory, source_id: str) -> str:
    row = memory.store.conn.execute(
        "SELECT id FROM chunks WHERE source_id = ? ORDER BY rowid LIMIT 1", (source_id,)
    ).fetchone()
    return str(row[0])


@pytest.fixture(scope="module")
def flow_service(flow_store: dict[str, Any]) -> Iterator[Service]:
    with Service(flow_store["path"], embedder=HashingEmbedder(), allow_writes=True) as served:
        yield served


@pytest.fixture(scope="module")
def owner_server(flow_service: Service, flow_store: dict[str, Any]) -> Iterator[Served]:
    app = create_app(flow_service, tokens_required=False, access_log=None)
    with live(app) as url:
        yield Served(url, flow_store["path"], {})


@pytest.fixture(scope="module")
def token_server(flow_service: Service, flow_store: dict[str, Any]) -> Iterator[Served]:
    app = create_app(flow_service, access_log=None)
    with live(app) as url:
        yield Served(url, flow_store["path"], dict(flow_store["tokens"]))


@pytest.fixture
def clean(
    js_errors: Callable[[], list[str]],
    csp_violations: Callable[[], list[str]],
    failed_loads: Callable[[], list[str]],
) -> Callable[[Any], None]:
    """A check of the page now shown: nothing injected, and the console clean so far."""

    def check(page: Any) -> None:
        assert not browsing.xss_fired(page), page.current_url
        assert page.find_elements(By.CSS_SELECTOR, INJECTED) == [], page.current_url
        assert LOCKED_CANARY not in page.page_source
        assert js_errors() == []
        assert csp_violations() == []
        assert failed_loads() == []

    return check


# -- moving about --------------------------------------------------------------------------------


def _body(page: Any) -> str:
    return str(page.find_element(By.TAG_NAME, "body").text)


def _path(page: Any) -> str:
    return urlsplit(page.current_url).path


def _click(page: Any, target: Any, gone: Any | None = None) -> None:
    browsing.click_away(page, target, gone, patience_s=PATIENCE_S)


def _one(page: Any, css: str) -> Any:
    found = page.find_elements(By.CSS_SELECTOR, css)
    assert found, f"{page.current_url} has no {css}"
    return found[0]


def _search(page: Any, query: str) -> None:
    """``query`` typed into the search form and sent with its button (htmx swaps the results
    in with script on; the browser loads the page by GET with it off)."""
    field = page.find_element(By.ID, "q")
    field.clear()
    field.send_keys(query)
    button = field.find_element(By.XPATH, "ancestor::form//button[@type='submit']")
    _click(page, button, gone=page.find_element(By.ID, "results"))
    WebDriverWait(page, PATIENCE_S).until(lambda p: "q=" in p.current_url)


def _walk_to_a_hit(page: Any, base: str, query: str) -> None:
    page.get(base + "/")
    _search(page, query)
    assert page.find_elements(By.CSS_SELECTOR, "#results .hit")
    assert "q=" + quote(query.split()[0]) in page.current_url


def _walk_tree_to_a_leaf(
    page: Any,
    shot: Callable[[str], Any] | None = None,
    check: Callable[[Any], None] = lambda page: None,
) -> None:
    """From the sources page: ``#eng``, its tree outline, then the first child down to a
    chunk; ``check`` run on each page reached."""
    _click(page, page.find_element(By.LINK_TEXT, "#eng"))
    check(page)
    assert _path(page).startswith("/sources/")
    assert "Summary tree" in _body(page)
    if shot:
        shot("inspector-source")
    _click(page, _one(page, "a.drill"))
    assert _path(page).endswith("/tree")
    check(page)
    for _ in range(10):  # a tree's levels, with room to spare
        if page.find_element(By.TAG_NAME, "h1").text == "Chunk":
            break
        _click(page, _one(page, ".tree-children a"))
        check(page)
    assert page.find_element(By.TAG_NAME, "h1").text == "Chunk"
    assert _one(page, "pre.summary-text").text
    if shot:
        shot("inspector-tree")


def _open_carol(page: Any, base: str, check: Callable[[Any], None] = lambda page: None) -> None:
    """The entities page, a search there for Carol, her page; ``check`` run on each."""
    page.get(base + "/entities")
    check(page)
    field = page.find_element(By.ID, "q")
    field.send_keys("carol")
    _click(page, field.find_element(By.XPATH, "ancestor::form//button[@type='submit']"))
    assert "q=carol" in page.current_url
    check(page)
    _click(page, page.find_element(By.LINK_TEXT, "Carol Diaz"))
    assert _path(page) == "/entities/entity"
    assert page.find_element(By.TAG_NAME, "h1").text.startswith("Carol Diaz")


def _fact_row(page: Any, value: str) -> Any:
    for row in page.find_elements(By.CSS_SELECTOR, "table.fact-timeline tr.fact"):
        if value in row.text:
            return row
    raise AssertionError(f"no fact row shows {value!r} on {page.current_url}")


def _retract(page: Any, value: str, shot: Callable[[str], Any] | None = None) -> None:
    """The open fact showing ``value`` retracted through its confirmation page, back on the
    entity page, where its row and its bar are now the retracted ones."""
    fact_id = _fact_row(page, value).get_attribute("id")
    assert "fact-open" in _fact_row(page, value).get_attribute("class")
    bars = len(page.find_elements(By.CSS_SELECTOR, "svg .fact-bar-retracted"))
    link = _one(page, f"a.fix[href*='/fix/retract'][href*='{quote(fact_id)}']")
    _click(page, link)
    assert _path(page) == "/fix/retract"
    assert value in _body(page)
    if shot:
        shot("inspector-confirm")
    _click(page, _one(page, "form.confirm-form button[type='submit']"))
    assert _path(page) == "/entities/entity"
    row = _fact_row(page, value)
    assert row.get_attribute("id") == fact_id
    assert "fact-retracted" in row.get_attribute("class")
    assert "retracted" in row.text
    assert len(page.find_elements(By.CSS_SELECTOR, "svg .fact-bar-retracted")) == bars + 1


def _nothing_hidden(page: Any) -> None:
    source = page.page_source
    for name in HIDDEN_FROM_BOT:
        assert name not in source, f"{page.current_url} shows {name!r}"


# -- the owner ---------------------------------------------------------------------------------


def test_the_owner_walks_search_hit_tree_entity_and_retracts_a_fact(
    page: Any,
    owner_server: Served,
    screenshot: Callable[..., Path],
    clean: Callable[[Any], None],
) -> None:
    base = owner_server.url
    _walk_to_a_hit(page, base, "queue migration sqlite")
    clean(page)
    screenshot("inspector-search")
    hit = _one(page, "#results .hit a[href^='/nodes/']")
    _click(page, hit)
    assert _path(page).startswith("/nodes/")
    assert _one(page, "pre.text").text
    clean(page)
    screenshot("inspector-node")

    page.get(base + "/sources")
    assert "team.mbox" in _body(page)  # the owner reads every source
    assert "notes:vault" in page.page_source
    assert "locked" in _body(page)
    clean(page)
    screenshot("inspector-sources")
    _walk_tree_to_a_leaf(page, screenshot)
    clean(page)

    _open_carol(page, base)
    assert MAIL_FACT_VALUE in _body(page)
    assert _one(page, "figure.chart-figure svg")
    clean(page)
    screenshot("inspector-entity")
    _retract(page, "away in april", screenshot)
    clean(page)


def test_the_entities_page_lists_and_finds(
    page: Any, owner_server: Served, screenshot: Callable[..., Path], clean: Callable[[Any], None]
) -> None:
    page.get(owner_server.url + "/entities")
    assert "Carol Diaz" in _body(page)
    assert "Alice Chen" in _body(page)
    clean(page)
    screenshot("inspector-entities")


def test_the_payload_note_is_searched_and_opened_as_text(
    page: Any,
    owner_server: Served,
    js_errors: Callable[[], list[str]],
    csp_violations: Callable[[], list[str]],
    failed_loads: Callable[[], list[str]],
) -> None:
    _walk_to_a_hit(page, owner_server.url, "Escaping javascript link onerror")
    hits = page.find_elements(By.CSS_SELECTOR, "#results .hit")
    note = next(h for h in hits if "Escaping" in h.text)
    assert XSS_PAYLOADS[0] in note.text  # its title, as text
    _click(page, note.find_element(By.CSS_SELECTOR, "a[href^='/nodes/']"))
    shown = _body(page)
    for payload in XSS_PAYLOADS:
        assert payload in shown
    assert "javascript:window.__xss=1" in shown
    assert not browsing.xss_fired(page)
    assert page.find_elements(By.CSS_SELECTOR, INJECTED) == []
    assert js_errors() == []
    # A refusal by the CSP would be a payload parsed as markup and stopped there: the
    # escaping keeps them text, so there is none at all.
    assert csp_violations() == []
    assert failed_loads() == []


# -- a principal -------------------------------------------------------------------------------


def test_a_principal_logs_in_walks_every_page_and_logs_out(
    page: Any,
    token_server: Served,
    screenshot: Callable[..., Path],
    clean: Callable[[Any], None],
) -> None:
    base = token_server.url
    page.get(base + "/")
    assert _path(page) == "/login"
    clean(page)
    screenshot("inspector-login")
    browsing.log_in(page, base, token_server.tokens["bot"])
    assert "bot" in _one(page, ".who").text

    _walk_to_a_hit(page, base, "queue migration sqlite")
    _nothing_hidden(page)
    clean(page)
    _click(page, _one(page, "#results .hit a[href^='/nodes/']"))
    _nothing_hidden(page)
    clean(page)

    page.get(base + "/sources")
    assert "#eng" in _body(page)
    _nothing_hidden(page)
    _walk_tree_to_a_leaf(page, check=_nothing_hidden)
    clean(page)

    _open_carol(page, base, check=_nothing_hidden)
    assert "on-call rota" in _body(page)
    assert _one(page, "figure.chart-figure svg .fact-bar")  # the timeline of what it may read
    assert page.find_elements(By.CSS_SELECTOR, "a.fix") == []  # bot may not write
    _nothing_hidden(page)
    clean(page)

    page.get(base + "/")
    _click(page, _one(page, "form.logout button[type='submit']"))
    assert _path(page) == "/login"
    page.get(base + "/sources")
    assert page.find_elements(By.ID, "token")  # logged out: every page is the login form
    clean(page)


def test_a_principal_typing_a_hidden_sources_address_gets_the_missing_page(
    page: Any, token_server: Served, flow_store: dict[str, Any]
) -> None:
    base = token_server.url
    browsing.give_session(page, base, token_server.tokens["bot"])
    page.get(f"{base}/sources/src_0000000000000000")
    missing = _body(page)
    assert page.find_element(By.TAG_NAME, "h1").text == "404"
    for hidden in (flow_store["mailbox"], "mbox:team"):
        for path in (f"/sources/{quote(hidden)}", f"/sources/{quote(hidden)}/tree"):
            page.get(base + path)
            assert _body(page) == missing, path
            _nothing_hidden(page)


# -- script off --------------------------------------------------------------------------------


def test_with_script_off_every_page_shows_its_content_and_its_forms_submit(
    page_without_js: Any, owner_server: Served, clean: Callable[[Any], None]
) -> None:
    page = page_without_js
    base = owner_server.url
    _walk_to_a_hit(page, base, "queue migration sqlite")
    assert _path(page) == "/search"  # the form sent by GET, the page loaded whole
    clean(page)
    _click(page, _one(page, "#results .hit a[href^='/nodes/']"))
    assert _one(page, "pre.text").text
    page.get(base + "/sources")
    assert "#eng" in _body(page)
    _walk_tree_to_a_leaf(page)
    clean(page)
    _open_carol(page, base)
    assert "on-call rota" in _body(page)
    assert _one(page, "figure.chart-figure svg")
    _retract(page, "on-call rota")  # the confirmation's POST form, sent without script
    clean(page)


def test_with_script_off_a_principal_logs_in_reads_and_logs_out(
    page_without_js: Any, token_server: Served, clean: Callable[[Any], None]
) -> None:
    page = page_without_js
    base = token_server.url
    browsing.log_in(page, base, token_server.tokens["bot"])
    for path in ("/", "/sources", "/entities"):
        page.get(base + path)
        assert page.find_element(By.TAG_NAME, "h1").text
        _nothing_hidden(page)
    _open_carol(page, base, check=_nothing_hidden)
    _nothing_hidden(page)
    clean(page)
    _click(page, _one(page, "form.logout button[type='submit']"))
    assert _path(page) == "/login"
