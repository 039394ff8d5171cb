"""Headless Chromium for the browser tests, driven by Selenium 4 with the system's own binaries.

A plain module beside ``conftest.py`` (which builds the fixtures from it), so that a test can
import what it checks with (``from browsing import xss_fired, XSS_PAYLOADS``).

Offline by construction: the driver is named in ``Service(executable_path=...)`` and the
browser in ``options.binary_location``, so Selenium never runs Selenium Manager (the tool that
would look up and download a browser or a driver); ``SE_OFFLINE=true`` is set besides, so that
should anything run it, it may not go online. Chromium is started with its background
networking (component updates, sync, safe browsing lists, the first-run pages) off, and with
a proxy that refuses everything, so that a request to anywhere but loopback fails.

Where no browser or no driver is on ``PATH``, :func:`find_binaries` raises
:class:`BrowserMissing`, whose message names what to install.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
DRIVERS = ("chromedriver",)
INSTALL = "apt-get install chromium chromium-driver"
WINDOW = (1280, 900)
DEAD_PROXY = "http://127.0.0.1:9"

# Chromium's own traffic: none of it is needed to render a page from a loopback server.
_FLAGS = (
    "--headless=new",
    "--no-sandbox",  # Chromium will not start as root with its sandbox (CI runs as root)
    "--disable-dev-shm-usage",
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-sync",
    "--disable-extensions",
    "--disable-client-side-phishing-detection",
    "--disable-domain-reliability",
    "--metrics-recording-only",
    "--disable-features=Translate,OptimizationHints,MediaRouter",
    f"--window-size={WINDOW[0]},{WINDOW[1]}",
    # Every request but to loopback (which Chromium never sends through a proxy) goes to a
    # port where nothing listens, and fails there: a page that asks the network for anything
    # (a CDN's script, a font) gets an error in the console, never an answer.
    f"--proxy-server={DEAD_PROXY}",
)
# Chrome's content setting that turns page script off (2: block), read at start.
NO_JS_PREFS = {"profile.managed_default_content_settings.javascript": 2}

# What a test may put in stored text (a note, a title, a query) to see that it is shown as
# text: each would, if the page let it run or parsed it as markup, set ``window.__xss``, set
# the title to XSS_TITLE, or add an element whose id is ``xss`` — what :func:`xss_fired`
# looks for. The last two need no script at all: markup injected past the escaping.
XSS_TITLE = "XSS FIRED"
XSS_PAYLOADS = (
    "<script>window.__xss = 1; document.title = 'XSS FIRED'</script>",
    '<img src="x" onerror="window.__xss = 1">',
    '"><svg onload="document.title=\'XSS FIRED\'">',
    '\'><b id="xss">injected</b>',
    '<a id="xss" href="javascript:window.__xss = 1">link</a>',
)


# The text of the served store's locked note (see ``conftest``): on no page, for anyone.
LOCKED_CANARY = "Quetzalcoatl vault ledger"


@dataclass(frozen=True)
class Served:
    """A live server: its base URL, the store it serves, the tokens of its principals (by
    name; none where the server asks for no token)."""

    url: str
    path: str
    tokens: dict[str, str]


class BrowserMissing(Exception):
    """No browser or no driver was found; the message says what to install."""


@dataclass(frozen=True, slots=True)
class Binaries:
    browser: str
    driver: str


def find_binaries(path: str | None = None) -> Binaries:
    """The first of :data:`BROWSERS` and of :data:`DRIVERS` on ``path`` (default: ``PATH``)."""
    browser = _first(BROWSERS, path)
    driver = _first(DRIVERS, path)
    lacks = [
        f"no browser ({', '.join(BROWSERS)})" if browser is None else "",
        f"no driver ({', '.join(DRIVERS)})" if driver is None else "",
    ]
    if browser is None or driver is None:
        raise BrowserMissing(
            f"browser tests skipped: found {' and '.join(x for x in lacks if x)} on PATH; "
            f"install them with `{INSTALL}`"
        )
    return Binaries(browser, driver)


def binaries_or_skip(path: str | None = None) -> Binaries:
    """:func:`find_binaries`, or the calling test skipped with the message saying what to
    install."""
    import pytest

    try:
        return find_binaries(path)
    except BrowserMissing as missing:
        pytest.skip(str(missing))


def _first(names: tuple[str, ...], path: str | None) -> str | None:
    for name in names:
        found = shutil.which(name, path=path)
        if found:
            return found
    return None


def chrome_options(binaries: Binaries, *, javascript: bool = True) -> Any:
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = binaries.browser
    for flag in _FLAGS:
        options.add_argument(flag)
    if not javascript:
        options.add_experimental_option("prefs", NO_JS_PREFS)
    # The console (messages, uncaught errors, CSP refusals), read by :class:`Console`.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return options


@contextmanager
def selenium_offline() -> Iterator[list[tuple[str, ...]]]:
    """``SE_OFFLINE=true`` for the block, and Selenium Manager replaced by a stub that records
    its arguments and refuses: the list yielded is every call made to it (none, where the
    driver was given)."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.selenium_manager import SeleniumManager

    calls: list[tuple[str, ...]] = []

    def refuse(self: object, args: list[str]) -> dict[str, str]:
        calls.append(tuple(args))
        raise WebDriverException("Selenium Manager may not run in the tests: name the binaries")

    before = os.environ.get("SE_OFFLINE")
    os.environ["SE_OFFLINE"] = "true"
    original = SeleniumManager.binary_paths
    SeleniumManager.binary_paths = refuse  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        SeleniumManager.binary_paths = original  # type: ignore[method-assign]
        if before is None:
            os.environ.pop("SE_OFFLINE", None)
        else:
            os.environ["SE_OFFLINE"] = before


@dataclass
class Started:
    """A running browser, and how it was started."""

    driver: Any
    binaries: Binaries
    manager_calls: list[tuple[str, ...]]
    javascript: bool


def start(binaries: Binaries, *, javascript: bool = True) -> Started:
    """Headless Chromium from ``binaries``, Selenium Manager kept out (see the module)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with selenium_offline() as calls:
        driver = webdriver.Chrome(
            service=Service(executable_path=binaries.driver),
            options=chrome_options(binaries, javascript=javascript),
        )
    return Started(driver, binaries, calls, javascript)


@contextmanager
def fresh_window(driver: Any) -> Iterator[Any]:
    """A new window of ``driver``, 1280×900, with no cookie left by another test (nor by this
    one before); closed after the block, the browser back on the window it was on."""
    home = driver.current_window_handle
    driver.switch_to.new_window("window")
    driver.set_window_size(*WINDOW)
    # Cookies belong to the profile, not the window: clear them all, whatever their site.
    driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
    driver.get_log("browser")  # what earlier tests left in the console
    try:
        yield driver
    finally:
        driver.close()
        driver.switch_to.window(home)


# -- the console -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogEntry:
    level: str
    source: str
    message: str

    @property
    def is_csp_violation(self) -> bool:
        return "Content Security Policy" in self.message

    @property
    def is_js_error(self) -> bool:
        """An uncaught exception, or ``console.error`` (not a refused load or a CSP refusal)."""
        return (
            self.level == "SEVERE"
            and self.source in {"javascript", "console-api"}
            and not self.is_csp_violation
        )


_MARKER = "stratamem-console-mark-"


@dataclass
class Console:
    """What one browser's console said since :meth:`clear`. Chromium's log is read once (each
    read takes what is new), so the entries are kept here for every question asked of them.

    The log reaches the driver after the page has moved on: an error a script raised while
    the page loaded may not be in it yet when ``get`` returns. So each read first writes a
    marker of its own to the console and reads until the marker comes back, with what the
    page said before it."""

    driver: Any
    entries: list[LogEntry] = field(default_factory=list)
    patience_s: float = 600.0
    _marks: int = 0

    def read(self) -> list[LogEntry]:
        self._marks += 1
        marker = f"{_MARKER}{self._marks}"
        self.driver.execute_script("console.info(arguments[0])", marker)
        deadline = time.monotonic() + self.patience_s
        while True:
            raw = self.driver.get_log("browser")
            found = [
                LogEntry(str(r["level"]), str(r.get("source", "")), str(r["message"])) for r in raw
            ]
            self.entries.extend(e for e in found if _MARKER not in e.message)
            if any(f'"{marker}"' in e.message for e in found):
                return list(self.entries)
            if time.monotonic() > deadline:
                raise AssertionError(f"the console did not show {marker!r} in {self.patience_s} s")

    def clear(self) -> None:
        self.read()
        self.entries.clear()

    def js_errors(self) -> list[str]:
        return [e.message for e in self.read() if e.is_js_error]

    def csp_violations(self) -> list[str]:
        return [e.message for e in self.read() if e.is_csp_violation]

    def failed_loads(self) -> list[str]:
        """Resources the page asked for and did not get (a 404, a refused connection)."""
        return [e.message for e in self.read() if e.source == "network" and e.level == "SEVERE"]


# -- checks --------------------------------------------------------------------------------------


def xss_fired(page: Any) -> bool:
    """Whether a canary of :data:`XSS_PAYLOADS` ran on the page now shown: ``window.__xss`` set,
    the title :data:`XSS_TITLE`, or an element of id ``xss``. Read through the driver (the
    title, the DOM) and, where the page runs script, through script as well."""
    from selenium.webdriver.common.by import By

    if page.title == XSS_TITLE or page.find_elements(By.ID, "xss"):
        return True
    return bool(page.execute_script("return Boolean(window.__xss)"))


# What chromedriver answers when the page it was asked about is being replaced under it (a
# click that navigates, or a check on an element of the page being left): the page moved on.
_PAGE_LEFT = "does not belong to the document"


def click_away(page: Any, target: Any, gone: Any | None = None, *, patience_s: float) -> None:
    """``target`` clicked, and the wait until ``gone`` (default: ``target``) has left the page:
    a new page loaded, or the part htmx swapped replaced. Where the driver loses track of the
    element while the page is replaced, that is the page having moved on, not an error."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.expected_conditions import staleness_of
    from selenium.webdriver.support.wait import WebDriverWait

    stale = target if gone is None else gone
    try:
        target.click()
    except WebDriverException as exc:
        if _PAGE_LEFT not in str(exc):
            raise
    gone_yet = staleness_of(stale)

    def left(driver: Any) -> bool:
        try:
            return bool(gone_yet(driver))
        except WebDriverException as exc:
            if _PAGE_LEFT in str(exc):
                return True
            raise

    WebDriverWait(page, patience_s).until(left)


def log_in(page: Any, base_url: str, token: str, *, patience_s: float = 600.0) -> None:
    """Log ``page`` in at ``base_url``/login: the token typed into the form's ``#token``, the
    form sent with its submit button (a click, so it works with script off too), and the wait
    until the browser has left the form's page. Where it is shown again (a refused token), the
    assertion says what it said."""
    from selenium.webdriver.common.by import By

    page.get(f"{base_url}/login")
    field = page.find_element(By.ID, "token")
    field.send_keys(token)
    button = field.find_element(By.XPATH, "ancestor::form//button[@type='submit']")
    click_away(page, button, field, patience_s=patience_s)
    if urlsplit(page.current_url).path == "/login":  # the form again, or an error answered
        alerts = page.find_elements(By.CSS_SELECTOR, "[role=alert]")
        said = alerts[0].text if alerts else page.find_element(By.TAG_NAME, "body").text
        raise AssertionError(f"the login was refused: {said}")


def give_session(page: Any, base_url: str, token: str, *, patience_s: float = 600.0) -> None:
    """Log ``page`` in at ``base_url`` without its form: the login made over HTTP (the form's
    ``csrf`` read from it, as a browser would send it), and its session cookie handed to the
    browser. For a test whose point is what a logged-in page shows, not the login."""
    import re

    import httpx

    with httpx.Client(base_url=base_url, timeout=patience_s) as client:
        form = client.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        if csrf is None:
            raise AssertionError(f"{base_url}/login has no csrf field: {form.text[:200]}")
        answer = client.post("/login", data={"token": token, "csrf": csrf.group(1)})
        if answer.status_code != 303:
            raise AssertionError(f"the login was refused ({answer.status_code}): {answer.text}")
        session = client.cookies["stratamem_session"]
    page.get(f"{base_url}/login")  # a cookie is set for the site the browser is on
    cookie = {"name": "stratamem_session", "value": session, "path": "/", "httpOnly": True}
    page.add_cookie({**cookie, "sameSite": "Strict"})


def save_screenshot(page: Any, name: str, folders: list[Path]) -> list[Path]:
    """The page as ``name``.png in each of ``folders`` (made where missing)."""
    if not name or Path(name).name != name or name.startswith("."):
        raise ValueError(f"screenshot name must be a plain file name, got {name!r}")
    png = page.get_screenshot_as_png()
    written = []
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{name.removesuffix('.png')}.png"
        target.write_bytes(png)
        written.append(target)
    return written
