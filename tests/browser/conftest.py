"""Browser tests: pages the server renders, loaded in a real headless Chromium.

One browser per test session (per xdist worker), started through Selenium 4 with the system's
Chromium and chromedriver (``/usr/bin/chromium``, ``/usr/bin/chromedriver`` on Debian: the
first of ``chromium``, ``chromium-browser``, ``google-chrome`` and ``chromedriver`` on
``PATH``), never Selenium Manager: nothing is downloaded, no network is asked (see
``browsing``, the plain module beside this file). Where either binary is missing, every test
that needs the browser is skipped with one message naming what to install (``apt-get install
chromium chromium-driver``; ``make test-all`` installs them where it can).

Every test in this folder is marked ``slow`` and ``browser``: it runs in the full tier
(``make test-all``, CI), not in the quick one. To run them alone::

    python -m pytest -n 0 --tier all tests/browser

Fixtures:

- ``chromium`` / ``chromium_without_js``: the session's WebDriver, with page script on / off
  (Chrome's content-setting pref); the second is started only where a test asks for it.
- ``page`` / ``page_without_js``: a new window of one of them for the test, 1280×900, every
  cookie cleared, the console emptied; closed after the test.
- ``screenshot(name, of=None)``: the test's page (``of``: which, where it opened two) as
  ``name``.png in the test's ``tmp_path``, and in ``$STRATAMEM_SCREENSHOTS`` where that is set
  (to regenerate the pictures in the docs); returns the ``tmp_path`` file.
- ``js_errors()`` / ``csp_violations()``: the console messages of the test's pages so far
  that are uncaught errors or ``console.error`` / refusals by the Content-Security-Policy;
  ``assert js_errors() == []``. ``failed_loads()``: what the pages asked for and did not get
  (a 404; a request past loopback, which the browser's dead proxy refuses).
- ``xss_fired(page)`` (a function of ``browsing``): whether a payload of
  ``browsing.XSS_PAYLOADS`` ran or was parsed as markup on the page shown.
- ``log_in(page, url, token)`` (a function of ``browsing``): the inspector's login form at
  ``url``/login filled in and sent, waiting for the page after it.
- ``served_owner`` / ``served_with_tokens``: the HTTP app (``create_app``) over one store,
  served on a loopback port: without tokens (every call reads as the owner) or with them
  (``.tokens``: ``bot`` reads scope ``team``, ``mailer`` scope ``eng``). The store holds the
  example Slack export (``team``; scopes ``slack:#eng``, ``slack:#general``,
  ``slack:#incidents``), the team mailbox (``eng``; ``mbox:team``), a note carrying every XSS
  payload (``team``; ``notes:xss``) and a note locked at rest (``team``; ``notes:vault``, its
  text holds ``browsing.LOCKED_CANARY``): no page may show the mailbox to ``bot``, the locked
  note's text to anyone, the locked source to a principal, or run a payload. SQLite only: what
  these tests check is the page, the store under it is tested on both backends elsewhere.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import browsing
import pytest
from serving import live

import stratamem
from stratamem.server.http import create_app
from stratamem.server.service import Service
from stratamem.testing import HashingEmbedder

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "workspace"
SCREENSHOTS_ENV = "STRATAMEM_SCREENSHOTS"
LOCK_PASSPHRASE = "browser tests lock"


def pytest_itemcollected(item: pytest.Item) -> None:
    # Marked here, at collection, so the tier's filter (tests/suite.py) sees it.
    item.add_marker(pytest.mark.slow)
    item.add_marker(pytest.mark.browser)
    # A skip mark rather than a skip in the fixture: pytest's summary folds the tests a mark
    # skips into one line per module.
    missing = _missing_browser()
    if missing and "browser_binaries" in getattr(item, "fixturenames", ()):
        item.add_marker(pytest.mark.skip(reason=missing))


@functools.cache
def _missing_browser() -> str:
    """Why the browser tests cannot run here, or ''."""
    try:
        browsing.find_binaries()
    except browsing.BrowserMissing as missing:
        return str(missing)
    return ""


# -- the browser -----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def browser_binaries() -> browsing.Binaries:
    return browsing.binaries_or_skip()


@pytest.fixture(scope="session")
def chromium_started(browser_binaries: browsing.Binaries) -> Iterator[browsing.Started]:
    started = browsing.start(browser_binaries)
    yield started
    started.driver.quit()


@pytest.fixture(scope="session")
def chromium(chromium_started: browsing.Started) -> Any:
    return chromium_started.driver


@pytest.fixture(scope="session")
def chromium_without_js(browser_binaries: browsing.Binaries) -> Iterator[Any]:
    started = browsing.start(browser_binaries, javascript=False)
    yield started.driver
    started.driver.quit()


@dataclass
class _Opened:
    """The windows a test opened, with their consoles."""

    consoles: list[browsing.Console] = field(default_factory=list)

    def console_of(self, of: Any | None) -> browsing.Console:
        if of is None:
            if len(self.consoles) != 1:
                raise ValueError(f"the test opened {len(self.consoles)} pages: name one with of=")
            return self.consoles[0]
        for console in self.consoles:
            if console.driver is of:
                return console
        raise ValueError("of= must be a page this test opened")


@pytest.fixture
def _opened() -> _Opened:
    return _Opened()


def _emptied(console: browsing.Console) -> browsing.Console:
    console.clear()
    return console


@pytest.fixture
def page(chromium: Any, _opened: _Opened) -> Iterator[Any]:
    with browsing.fresh_window(chromium) as window:
        _opened.consoles.append(_emptied(browsing.Console(window)))
        yield window


@pytest.fixture
def page_without_js(chromium_without_js: Any, _opened: _Opened) -> Iterator[Any]:
    with browsing.fresh_window(chromium_without_js) as window:
        _opened.consoles.append(_emptied(browsing.Console(window)))
        yield window


@pytest.fixture
def screenshot(_opened: _Opened, tmp_path: Path) -> Callable[..., Path]:
    def take(name: str, of: Any | None = None) -> Path:
        folders = [tmp_path]
        if os.environ.get(SCREENSHOTS_ENV):
            folders.append(Path(os.environ[SCREENSHOTS_ENV]))
        return browsing.save_screenshot(_opened.console_of(of).driver, name, folders)[0]

    return take


@pytest.fixture
def js_errors(_opened: _Opened) -> Callable[[], list[str]]:
    return lambda: [m for c in _opened.consoles for m in c.js_errors()]


@pytest.fixture
def csp_violations(_opened: _Opened) -> Callable[[], list[str]]:
    return lambda: [m for c in _opened.consoles for m in c.csp_violations()]


@pytest.fixture
def failed_loads(_opened: _Opened) -> Callable[[], list[str]]:
    return lambda: [m for c in _opened.consoles for m in c.failed_loads()]


# -- a served store ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def browser_store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("browser-store")
    notes = folder / "notes"
    notes.mkdir()
    (notes / "xss.md").write_text(
        "# Escaping " + browsing.XSS_PAYLOADS[0] + "\n\n" + "\n\n".join(browsing.XSS_PAYLOADS)
    )
    vault = folder / "vault"
    vault.mkdir()
    (vault / "ledger.md").write_text(
        f"# Ledger\n\n{browsing.LOCKED_CANARY}: the queue budget figures.\n"
    )
    path = str(folder / "served.db")
    with stratamem.open(path, embedder=HashingEmbedder()) as memory:
        memory.ingest(EXAMPLES / "slack-export", parallel=False)
        memory.ingest(EXAMPLES / "mail" / "team.mbox", access="eng", parallel=False)
        memory.ingest(notes, scope="notes:xss", access="team", parallel=False)
        vault_report = memory.ingest(vault, scope="notes:vault", access="team", parallel=False)
        memory.indexes.embed()
        for source in _source_names(vault_report):
            memory.locks.lock(source, passphrase=LOCK_PASSPHRASE)
        tokens = {
            "bot": memory.principals.add("bot", "team"),
            "mailer": memory.principals.add("mailer", "eng"),
        }
    return {"path": path, "tokens": tokens}


def _source_names(report: Any) -> list[str]:
    return [s.source_id for s in report.sources]


@pytest.fixture(scope="session")
def browser_service(browser_store: dict[str, Any]) -> Iterator[Service]:
    with Service(browser_store["path"], embedder=HashingEmbedder(), allow_writes=True) as served:
        yield served


@pytest.fixture(scope="session")
def served_owner(
    browser_service: Service, browser_store: dict[str, Any]
) -> Iterator[browsing.Served]:
    app = create_app(browser_service, tokens_required=False, access_log=None)
    with live(app) as url:
        yield browsing.Served(url, browser_store["path"], {})


@pytest.fixture(scope="session")
def served_with_tokens(
    browser_service: Service, browser_store: dict[str, Any]
) -> Iterator[browsing.Served]:
    app = create_app(browser_service, access_log=None)
    with live(app) as url:
        yield browsing.Served(url, browser_store["path"], dict(browser_store["tokens"]))
