"""The inspector's pages in the browser, with script on and off: each loads with no script
error, nothing refused by its Content-Security-Policy and no asset missing, runs none of the
XSS payloads the store holds, and shows a principal nothing of what it may not read.

Skipped while the server has no inspector (``stratamem.server.inspector``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import browsing
import pytest
from browsing import LOCKED_CANARY, Served
from selenium.webdriver.support.wait import WebDriverWait

from suite import PATIENCE_S

pytest.importorskip("stratamem.server.inspector", reason="the server has no inspector yet")

# The team mailbox's scope (access ``eng``), which the owner's pages list and ``bot`` may not
# read.
MAIL_ONLY = "mbox:team"
PAGES = ("/", "/search?q=" + quote("queue " + browsing.XSS_PAYLOADS[0]))


@pytest.fixture(params=["on", "off"])
def any_page(request: pytest.FixtureRequest) -> Any:
    """A page with script on, then one with it off."""
    return request.getfixturevalue("page" if request.param == "on" else "page_without_js")


def _body(page: Any) -> str:
    return str(page.find_element("tag name", "body").text)


@pytest.mark.parametrize("path", PAGES)
def test_the_owners_pages_load_clean(
    any_page: Any,
    served_owner: Served,
    path: str,
    js_errors: Callable[[], list[str]],
    csp_violations: Callable[[], list[str]],
    failed_loads: Callable[[], list[str]],
) -> None:
    any_page.get(served_owner.url + path)
    assert any_page.title
    assert not browsing.xss_fired(any_page)
    assert js_errors() == []
    assert csp_violations() == []
    assert failed_loads() == []  # every asset ships with the package, none from elsewhere
    assert LOCKED_CANARY not in any_page.page_source
    assert MAIL_ONLY in any_page.page_source  # what a principal's page must not show, shown


def test_a_search_for_the_payload_note_shows_it_as_text(
    page: Any, served_owner: Served, screenshot: Callable[..., Path]
) -> None:
    page.get(f"{served_owner.url}/search?q=" + quote("Escaping injected link"))
    assert not browsing.xss_fired(page)
    shown = _body(page)
    for payload in browsing.XSS_PAYLOADS:
        assert payload in shown
    screenshot("inspector-search-escaped")


def test_a_node_page_reached_from_a_hit_loads_clean(
    any_page: Any,
    served_owner: Served,
    js_errors: Callable[[], list[str]],
    csp_violations: Callable[[], list[str]],
    failed_loads: Callable[[], list[str]],
) -> None:
    any_page.get(f"{served_owner.url}/search?q=" + quote("Escaping injected link"))
    links = any_page.find_elements("css selector", "a[href*='/nodes/']")
    assert links
    target = links[0].get_attribute("href")
    links[0].click()
    WebDriverWait(any_page, PATIENCE_S).until(lambda p: p.current_url == target)
    assert not browsing.xss_fired(any_page)
    assert browsing.XSS_PAYLOADS[1] in _body(any_page)
    assert js_errors() == []
    assert csp_violations() == []
    assert failed_loads() == []


@pytest.mark.parametrize("path", PAGES)
def test_a_principal_sees_nothing_of_what_it_may_not_read(
    any_page: Any,
    served_with_tokens: Served,
    path: str,
    js_errors: Callable[[], list[str]],
    csp_violations: Callable[[], list[str]],
    failed_loads: Callable[[], list[str]],
) -> None:
    browsing.give_session(any_page, served_with_tokens.url, served_with_tokens.tokens["bot"])
    any_page.get(served_with_tokens.url + path)
    assert "bot" in _body(any_page)  # logged in: the page says who it reads as
    assert not any_page.find_elements("id", "token")
    source = any_page.page_source
    assert MAIL_ONLY not in source
    assert "notes:vault" not in source
    assert LOCKED_CANARY not in source
    assert not browsing.xss_fired(any_page)
    assert js_errors() == []
    assert csp_violations() == []
    assert failed_loads() == []


def test_the_login_form_logs_in_with_a_strict_http_only_cookie(
    any_page: Any, served_with_tokens: Served
) -> None:
    browsing.log_in(any_page, served_with_tokens.url, served_with_tokens.tokens["bot"])
    session = any_page.get_cookie("stratamem_session")
    assert session is not None
    assert session["httpOnly"]
    assert session["sameSite"] == "Strict"
    assert "bot" in _body(any_page)


def test_without_a_login_a_page_is_the_login_form(page: Any, served_with_tokens: Served) -> None:
    page.get(served_with_tokens.url + "/")
    assert page.find_elements("id", "token")
    assert "Log in" in _body(page)
