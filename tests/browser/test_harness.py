"""The browser harness itself: the browser is the system's, started offline; each test gets a
clean window; the console collectors, the XSS canary and screenshots see what they claim to;
the page without script runs none; the served stores answer as their principals.

The pages here are a tiny Starlette app of the test's own (one with the inspector's CSP, one
without, as the control) and what the HTTP server already serves (``/healthz``)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import browsing
import httpx
import pytest
from selenium.webdriver.support.wait import WebDriverWait
from serving import bearer, live
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from suite import PATIENCE_S

ROOT = Path(__file__).resolve().parents[2]
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'; connect-src 'self'"
)
# An inline script, an inline handler and the canaries of every payload, beside a script from
# the page's own origin that the CSP allows: it marks the page with #ran.
PAGE = (
    "<!doctype html><html><head><title>harness</title>"
    '<script src="/ran.js"></script></head><body>'
    '<h1>harness page</h1><noscript><p id="noscript">script is off</p></noscript>'
    "<script>window.__xss = 1</script>"
    '<img src="/missing.png" onerror="window.__xss = 1">'
    "</body></html>"
)
# A login form of the inspector's shape: a hidden csrf, a #token, a submit button.
LOGIN = (
    "<!doctype html><title>Log in</title>"
    '<form method="post" action="/login"><input type="hidden" name="csrf" value="fixed">'
    '<input id="token" name="token" type="password"><button type="submit">Log in</button></form>'
)
FAVICON = '<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"/>'
RAN_JS = (
    "document.addEventListener('DOMContentLoaded', () => {"
    " const p = document.createElement('p'); p.id = 'ran'; document.body.append(p); });"
)


def _html(body: str, csp: bool) -> Response:
    headers = {"Content-Security-Policy": CSP} if csp else {}
    return HTMLResponse(body, headers=headers)


def _app() -> Starlette:
    def guarded(request: Request) -> Response:
        return _html(PAGE, csp=True)

    def open_page(request: Request) -> Response:
        return _html(PAGE, csp=False)

    def escaped(request: Request) -> Response:
        from html import escape

        shown = "".join(f"<p>{escape(p)}</p>" for p in browsing.XSS_PAYLOADS)
        return _html(f"<!doctype html><title>escaped</title><body>{shown}</body>", csp=False)

    def broken(request: Request) -> Response:
        return _html('<!doctype html><title>broken</title><script src="/boom.js"></script>', True)

    def ran_js(request: Request) -> Response:
        return Response(RAN_JS, media_type="text/javascript")

    def boom_js(request: Request) -> Response:
        return Response("undefinedFunction();", media_type="text/javascript")

    async def login(request: Request) -> Response:
        if request.method == "GET":
            return _html(LOGIN, csp=True)
        form = await request.form()
        if form.get("csrf") != "fixed" or form.get("token") != "good-token":
            return _html(LOGIN.replace("<form", '<p role="alert">no such token</p><form'), True)
        answer = Response(status_code=303, headers={"Location": "/whoami"})
        answer.set_cookie("stratamem_session", "s1", httponly=True, samesite="strict")
        return answer

    async def echo_origin(request: Request) -> Response:
        return _html(
            f"<!doctype html><title>origin</title><p id=origin>{request.headers.get('origin')}</p>",
            csp=True,
        )

    def form_to_echo(request: Request) -> Response:
        page = (
            '<!doctype html><title>form</title><form method="post" action="/origin">'
            '<button type="submit">go</button></form>'
        )
        headers = {
            "Content-Security-Policy": CSP,
            "Referrer-Policy": request.query_params["referrer"],
        }
        return HTMLResponse(page, headers=headers)

    def remote(request: Request) -> Response:
        return _html(
            '<!doctype html><title>remote</title><script src="/ran.js"></script>'
            '<script src="http://cdn.example.com/lib.js"></script>',
            csp=False,
        )

    def favicon(request: Request) -> Response:
        return Response(FAVICON, media_type="image/svg+xml")

    def whoami(request: Request) -> Response:
        who = "logged in" if request.cookies.get("stratamem_session") == "s1" else "nobody"
        return _html(f"<!doctype html><title>who</title><p id=who>{who}</p>", csp=True)

    return Starlette(
        routes=[
            Route("/login", login, methods=["GET", "POST"]),
            Route("/whoami", whoami),
            Route("/favicon.ico", favicon),
            Route("/remote", remote),
            Route("/origin", echo_origin, methods=["POST"]),
            Route("/form", form_to_echo),
            Route("/", guarded),
            Route("/open", open_page),
            Route("/escaped", escaped),
            Route("/broken", broken),
            Route("/ran.js", ran_js),
            Route("/boom.js", boom_js),
        ]
    )


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    with live(_app()) as url:
        yield url


def _has(page: Any, element_id: str) -> bool:
    from selenium.webdriver.common.by import By

    return bool(page.find_elements(By.ID, element_id))


# -- the browser and its start ---------------------------------------------------------------------


def test_every_test_here_is_marked_slow_and_browser(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("slow") is not None
    assert request.node.get_closest_marker("browser") is not None


def test_the_browser_is_the_systems_and_selenium_manager_never_ran(
    chromium_started: browsing.Started, page: Any
) -> None:
    assert chromium_started.manager_calls == []
    assert chromium_started.driver.service.path == chromium_started.binaries.driver
    assert chromium_started.driver.capabilities["browserName"] == "chrome"
    page.get("chrome://version")
    command_line = page.find_element("id", "command_line").text
    assert "--disable-background-networking" in command_line
    assert "--headless" in command_line


def test_nothing_past_loopback_is_reached(
    page: Any, site: str, failed_loads: Callable[[], list[str]]
) -> None:
    page.get(f"{site}/remote")
    # Refused by the dead proxy: the name was not even looked up.
    assert failed_loads() == [
        "http://cdn.example.com/lib.js - Failed to load resource: net::ERR_PROXY_CONNECTION_FAILED"
    ]
    assert _has(page, "ran")  # loopback is reached directly


def test_selenium_manager_is_refused_offline_where_no_driver_is_named(
    browser_binaries: browsing.Binaries,
) -> None:
    from selenium import webdriver
    from selenium.common.exceptions import NoSuchDriverException

    seen: list[str | None] = []
    with browsing.selenium_offline() as calls:
        seen.append(os.environ.get("SE_OFFLINE"))
        with pytest.raises(NoSuchDriverException):
            webdriver.Chrome(options=browsing.chrome_options(browser_binaries))
    assert seen == ["true"]
    assert calls
    assert calls[0][:2] == ("--browser", "chrome")
    assert "--browser-path" in calls[0]


def test_where_no_browser_is_found_the_tests_skip_saying_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(pytest.skip.Exception) as skipped:
        browsing.binaries_or_skip(str(tmp_path))
    message = str(skipped.value)
    assert "found no browser (chromium, chromium-browser, google-chrome)" in message
    assert "and no driver (chromedriver) on PATH" in message
    assert "apt-get install chromium chromium-driver" in message
    assert "\n" not in message


def test_a_run_without_a_browser_skips_its_browser_tests_in_one_line(tmp_path: Path) -> None:
    # The suite itself, on a PATH with nothing on it: the test that needs no browser runs, the
    # one that needs it is skipped, the summary says why once for the module.
    chosen = "marked_slow_and_browser or healthz_renders"
    # One process, in file order, nothing cached, the full tier (where browser tests are).
    plain_run = ("-n", "0", "-p", "no:randomly", "-p", "no:cacheprovider", "--tier", "all")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *plain_run, "-q", "-rs", "-k", chosen, __file__],
        env={**os.environ, "PATH": str(tmp_path)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=PATIENCE_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skipped == [
        "SKIPPED [1] tests/browser/test_harness.py: browser tests skipped: found no browser "
        "(chromium, chromium-browser, google-chrome) and no driver (chromedriver) on PATH; "
        "install them with `apt-get install chromium chromium-driver`"
    ]
    assert "1 passed, 1 skipped" in done.stdout


def test_a_browser_without_its_driver_is_named_as_what_lacks(tmp_path: Path) -> None:
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    with pytest.raises(browsing.BrowserMissing) as missing:
        browsing.find_binaries(str(tmp_path))
    assert "found no driver (chromedriver) on PATH" in str(missing.value)
    assert "browser (" not in str(missing.value)


# -- each test's window ----------------------------------------------------------------------------


def test_each_window_is_1280_by_900_and_starts_without_cookies(
    page: Any, chromium: Any, site: str
) -> None:
    assert page.get_window_size() == {"width": 1280, "height": 900}
    page.get(f"{site}/open")
    page.add_cookie({"name": "left", "value": "behind"})
    assert page.get_cookie("left") is not None
    with browsing.fresh_window(chromium) as other:
        other.get(f"{site}/open")
        assert other.get_cookies() == []
    assert page.get_cookies() == []  # cookies are the profile's: the new window cleared them


def test_a_window_left_with_an_alert_open_does_not_spoil_the_next(
    page: Any, chromium: Any, site: str
) -> None:
    from selenium.common.exceptions import UnexpectedAlertPresentException

    home = page.current_window_handle
    with browsing.fresh_window(chromium) as other:
        other.get(f"{site}/open")
        other.execute_script("setTimeout(() => alert('left open'), 0)")
        with contextlib.suppress(UnexpectedAlertPresentException):
            other.find_elements("id", "ran")
    assert chromium.current_window_handle == home
    page.get(f"{site}/open")
    assert page.title == "harness"


# -- console, CSP, XSS canary ----------------------------------------------------------------------


def test_the_csp_blocks_inline_script_and_the_collector_sees_it(
    page: Any,
    site: str,
    csp_violations: Callable[[], list[str]],
    js_errors: Callable[[], list[str]],
) -> None:
    page.get(f"{site}/")
    assert _has(page, "ran")  # script from the page's origin runs
    refused = csp_violations()
    assert any("inline script" in m for m in refused), refused
    assert any("inline event handler" in m for m in refused), refused
    assert not browsing.xss_fired(page)
    assert js_errors() == []


def test_without_a_csp_the_canary_fires(
    page: Any,
    site: str,
    csp_violations: Callable[[], list[str]],
    failed_loads: Callable[[], list[str]],
) -> None:
    page.get(f"{site}/open")
    assert browsing.xss_fired(page)
    assert csp_violations() == []
    missing = failed_loads()
    assert len(missing) == 1
    assert missing[0].startswith(f"{site}/missing.png - ")
    assert "status of 404" in missing[0]


def test_payloads_shown_escaped_fire_nothing_and_injected_markup_does(page: Any, site: str) -> None:
    page.get(f"{site}/escaped")
    assert not browsing.xss_fired(page)
    assert browsing.XSS_PAYLOADS[3] in page.find_element("tag name", "body").text
    page.execute_script("document.body.insertAdjacentHTML('beforeend', arguments[0])", "<b id=xss>")
    assert browsing.xss_fired(page)


def test_an_uncaught_error_is_a_js_error(
    page: Any,
    site: str,
    js_errors: Callable[[], list[str]],
    csp_violations: Callable[[], list[str]],
) -> None:
    page.get(f"{site}/broken")
    errors = js_errors()
    assert len(errors) == 1
    assert "undefinedFunction" in errors[0]
    assert js_errors() == errors  # read twice, the same (the log is kept, not drained)
    assert csp_violations() == []


def test_the_page_without_javascript_runs_no_script(page_without_js: Any, site: str) -> None:
    page_without_js.get(f"{site}/open")
    assert not _has(page_without_js, "ran")
    assert page_without_js.find_element("id", "noscript").is_displayed()
    assert not browsing.xss_fired(page_without_js)


def test_both_browsers_in_one_test_keep_their_consoles_apart(
    page: Any, page_without_js: Any, site: str, csp_violations: Callable[[], list[str]]
) -> None:
    page.get(f"{site}/broken")
    page_without_js.get(f"{site}/")
    assert csp_violations() == []  # the page without script has no script to refuse
    page.get(f"{site}/")
    assert len(csp_violations()) >= 2


@pytest.mark.parametrize("script", ["on", "off"])
def test_log_in_sends_the_form_and_waits_for_the_next_page(
    request: pytest.FixtureRequest, site: str, script: str
) -> None:
    page = request.getfixturevalue("page" if script == "on" else "page_without_js")
    browsing.log_in(page, site, "good-token")
    assert page.find_element("id", "who").text == "logged in"
    cookie = page.get_cookie("stratamem_session")
    assert cookie is not None
    assert cookie["httpOnly"]
    with pytest.raises(AssertionError, match="the login was refused: no such token"):
        browsing.log_in(page, site, "bad-token")


@pytest.mark.parametrize(("policy", "origin"), [("no-referrer", "null"), ("same-origin", "{site}")])
def test_a_form_sent_from_a_page_without_referrer_says_origin_null(
    page: Any, site: str, policy: str, origin: str
) -> None:
    # What a server's Origin check must expect of its own forms: Chromium sends ``Origin:
    # null`` with a same-origin form POST from a page sent with ``Referrer-Policy:
    # no-referrer`` (the Fetch standard's rule), its origin under a policy that keeps it.
    page.get(f"{site}/form?referrer={policy}")
    page.find_element("tag name", "button").click()
    shown = WebDriverWait(page, PATIENCE_S).until(lambda p: p.find_elements("id", "origin"))
    assert shown[0].text == origin.format(site=site)


# -- screenshots -----------------------------------------------------------------------------------


def test_a_screenshot_is_a_png_in_the_tests_folder_and_the_named_one(
    page: Any,
    site: str,
    screenshot: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    docs = tmp_path / "docs-pictures"
    monkeypatch.setenv("STRATAMEM_SCREENSHOTS", str(docs))
    page.get(f"{site}/")
    written = screenshot("harness")
    assert written == tmp_path / "harness.png"
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (docs / "harness.png").read_bytes() == written.read_bytes()
    with pytest.raises(ValueError, match="plain file name"):
        screenshot("../escape")


def test_a_screenshot_of_two_pages_must_say_which(
    page: Any, page_without_js: Any, site: str, screenshot: Callable[..., Path]
) -> None:
    page_without_js.get(f"{site}/open")
    with pytest.raises(ValueError, match="name one with of="):
        screenshot("either")
    assert screenshot("without-js", of=page_without_js).is_file()


# -- the served stores -----------------------------------------------------------------------------


def test_healthz_renders_in_the_browser(
    page: Any, served_owner: Any, js_errors: Callable[[], list[str]]
) -> None:
    page.get(f"{served_owner.url}/healthz")
    assert '"status":"ok"' in page.find_element("tag name", "body").text.replace(" ", "")
    assert js_errors() == []


def test_the_served_stores_answer_as_their_principals(
    served_owner: Any, served_with_tokens: Any
) -> None:
    def sources(url: str, token: str | None = None) -> dict[str, dict[str, Any]]:
        headers = bearer(token) if token else {}
        response = httpx.get(f"{url}/v1/sources", headers=headers, timeout=PATIENCE_S)
        assert response.status_code == 200, response.text
        return {s["scope"]: s for s in response.json()["sources"]}

    assert httpx.get(f"{served_with_tokens.url}/v1/sources", timeout=PATIENCE_S).status_code == 401
    assert served_owner.tokens == {}
    owner = sources(served_owner.url)
    bot = sources(served_with_tokens.url, served_with_tokens.tokens["bot"])
    mailer = sources(served_with_tokens.url, served_with_tokens.tokens["mailer"])
    assert set(mailer) == {"mbox:team"}
    assert set(bot) == {"notes:xss", "slack:#eng", "slack:#general", "slack:#incidents"}
    assert set(owner) == set(bot) | set(mailer) | {"notes:vault"}
    assert owner["notes:vault"]["locked"]
    assert not owner["notes:xss"]["locked"]
