"""What every folder's tests share about the run: the backends, the tier, and the patience of a
wait that only guards against a hang.

Two tiers (``--tier``, or ``STRATAMEM_TEST_TIER``):

- ``quick`` (the default, ``make test``): every behaviour test once, on SQLite; the store-layer
  contract (``tests/store/``) on both backends; and a sample of the leak suite's matrices in
  which every value of every parameter (each read route, principal, fact or lock probe) is
  drawn at least once. The sample is drawn from a seed shown in the run's header
  (``--sample-seed`` replays it; by default it is pytest-randomly's seed, so one
  ``-p randomly --randomly-seed=N`` replays both the order and the sample). Tests marked
  ``slow``, ``fuzz`` or ``crash`` are left out.
- ``all`` (``make test-all``, what CI runs): everything, the leak suite's whole matrix on both
  backends included.

``STRATAMEM_TEST_BACKENDS=sqlite`` narrows either tier to one backend.

Ctrl-C stops the run after the test it lands in, even where that test's code (an event loop,
a server's thread, a child process) swallows the ``KeyboardInterrupt``; the session's fixtures
are torn down as usual (servers stopped, PostgreSQL shut down), and any child process a test
left running is killed.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import zlib
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

BACKENDS: tuple[str, ...] = tuple(
    os.environ.get("STRATAMEM_TEST_BACKENDS", "sqlite,postgresql").split(",")
)
TIERS = ("quick", "all")
TIER_ENV = "STRATAMEM_TEST_TIER"
# Left out of the quick tier: end-to-end runs on real data, the bounded fuzz seeds past the
# first of each input kind, and the tests that kill processes mid-write.
FULL_ONLY_MARKERS = ("slow", "fuzz", "crash")
# The folder whose tests are the store-layer contract: both backends in every tier.
CONTRACT = "tests/store/"
# The folder whose route × principal matrices are sampled in the quick tier.
LEAK_SUITE = "tests/security/"
# How long a wait that guards against a hang may take before the test gives up: minutes, so
# that a loaded machine slows a test down without failing it. What a test checks never
# depends on it.
PATIENCE_S = 600.0
_POSTGRES = "postgresql"


def is_postgres(location: object) -> bool:
    return str(location).startswith(("postgresql:", "postgres:"))


class Deadline(BaseException):
    """Raised by :func:`deadline`; a BaseException so that no ``except Exception`` in the code
    under test swallows it."""


def scratch_database(request: pytest.FixtureRequest, copy_of: str | None = None) -> str:
    """A new database on the session's PostgreSQL server (a copy of the one at ``copy_of``
    when given), dropped when whatever asked for it ends: the test, or a fixture of a wider
    scope whose ``request`` this is. Each database holds megabytes on disk; a run keeping
    all of them (thousands) fills a small disk."""
    server = request.getfixturevalue("postgres_server")
    url = str(server.new_database() if copy_of is None else server.copy_database(copy_of))
    request.addfinalizer(lambda: server.drop_database(url))
    return url


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`Deadline` into the block if it has not returned after ``seconds`` (an
    alarm signal: the main thread only)."""

    def fire(signum: int, frame: object) -> None:
        raise Deadline

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextmanager
def hang_guard(what: str, seconds: float = PATIENCE_S) -> Iterator[None]:
    """Fail the test if the block has not returned after ``seconds``.

    For a test whose point is that pathological input is read in linear time: its input is
    made big enough that the quadratic path would take hours, the linear one a second, so a
    bound of minutes tells them apart on any machine, loaded or not."""
    try:
        with deadline(seconds):
            yield
    except Deadline:
        pytest.fail(f"{what} had not returned after {seconds:g} s", pytrace=False)


class _Interrupts:
    """SIGINTs received by this process since the session started."""

    count = 0


def _on_sigint(signum: int, frame: object) -> None:
    _Interrupts.count += 1
    raise KeyboardInterrupt


def pytest_sessionstart(session: pytest.Session) -> None:
    # Our own handler, not Python's default: asyncio's runner (anyio.run, the MCP client)
    # then leaves SIGINT to us rather than turning it into a cancellation a test may absorb.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_sigint)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    try:
        return (yield)
    finally:
        if _Interrupts.count:
            item.session.shouldstop = "interrupted (SIGINT)"


@pytest.hookimpl(trylast=True)  # after the session's fixtures are torn down
def pytest_sessionfinish(session: pytest.Session) -> None:
    if session.config.pluginmanager.hasplugin("dsession"):
        return  # the xdist controller: its children are the workers, who reap their own
    _kill_children()


def _kill_children() -> None:
    """SIGKILL every process this one started that still runs (a test's server or writer
    that an interrupt or a failure left behind), and reap it."""
    me = str(os.getpid())
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if fields[1] != me or fields[0] == "Z":
            continue
        pid = int(stat.parent.name)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("stratamem", "stratamem's test tiers")
    group.addoption(
        "--tier",
        choices=TIERS,
        default=os.environ.get(TIER_ENV, "quick"),
        help="quick (default): each behaviour test once on SQLite, a covering sample of the "
        "leak suite, no slow/fuzz/crash tests; all: everything on every backend.",
    )
    group.addoption(
        "--sample-seed",
        type=int,
        default=None,
        help="The seed of the quick tier's leak-suite sample (default: pytest-randomly's).",
    )


def pytest_configure(config: pytest.Config) -> None:
    # Read by :func:`examples` while the test modules are imported (in every xdist worker too).
    _RUN_TIER[0] = tier(config)
    for name, what in (
        ("slow", "end-to-end tests on real data or subprocesses (tier all only)"),
        ("fuzz", "fuzzed inputs past the first of each kind (tier all only)"),
        ("crash", "processes killed mid-write (tier all only)"),
    ):
        config.addinivalue_line("markers", f"{name}: {what}")
    config.addinivalue_line(
        "markers", "browser: pages loaded in headless Chromium (tests/browser; also slow)"
    )


def tier(config: pytest.Config) -> str:
    return str(config.getoption("tier"))


# The share of a property test's examples the quick tier draws: the same properties on fewer
# inputs, so that a contributor's run stays short; the full tier draws every example.
QUICK_SHARE = 3
_RUN_TIER = ["quick"]


def examples(full: int) -> int:
    """How many examples a property test draws in this run's tier: ``full`` in tier ``all``,
    a third of it (at least 5) in the quick tier."""
    if _RUN_TIER[0] == "all":
        return full
    return min(full, max(5, full // QUICK_SHARE))


def sample_seed(config: pytest.Config) -> int:
    given = config.getoption("sample_seed")
    if given is not None:
        return int(given)
    randomly = getattr(config.option, "randomly_seed", None)
    return randomly if isinstance(randomly, int) else 0


def pytest_report_header(config: pytest.Config) -> str:
    backends = ", ".join(BACKENDS)
    if tier(config) == "all":
        return f"stratamem tier: all (every test on {backends})"
    seed = sample_seed(config)
    return (
        f"stratamem tier: quick (behaviour on sqlite, {CONTRACT} on {backends}, "
        f"no {'/'.join(FULL_ONLY_MARKERS)}); leak sample seed {seed} "
        f"(--sample-seed={seed} replays it)"
    )


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if tier(config) != "all":
        kept = [item for item in items if _in_quick_tier(item)]
        kept = _leak_sample(kept, sample_seed(config))
        chosen = {id(item) for item in kept}
        dropped = [item for item in items if id(item) not in chosen]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept
    if config.getoption("dist", "no") == "loadgroup":
        for item in items:
            item.add_marker(pytest.mark.xdist_group(_worker_group(item)))


def _worker_group(item: pytest.Item) -> str:
    """What one worker runs whole under ``-n N --dist loadgroup``: a module (its module-scoped
    stores are built once), or the leak suite on one backend (its canary stores, built once a
    session, are the suite's dearest fixtures)."""
    path = _nodepath(item)
    if not path.startswith(LEAK_SUITE):
        return path
    backends = [v for v in _raw_params(item).values() if isinstance(v, str) and v in BACKENDS]
    return f"leak-{backends[0] if backends else BACKENDS[0]}"


def _in_quick_tier(item: pytest.Item) -> bool:
    if any(item.get_closest_marker(name) for name in FULL_ONLY_MARKERS):
        return False
    if _nodepath(item).startswith(CONTRACT):
        return True
    return not any(_on_postgres(value) for value in _raw_params(item).values())


def _leak_sample(items: list[pytest.Item], seed: int) -> list[pytest.Item]:
    """Of each leak-suite module, the items that draw each of its tests, each value of each
    parameter (each principal, say) and, for a test over probes, each probe's route with each
    value of its other parameters, at least once: greedily, in an order fixed by ``seed``.
    Which of a route's probes stands for it, and which test a principal is drawn in, is the
    seed's choice."""
    modules: dict[str, list[pytest.Item]] = defaultdict(list)
    for item in items:
        if _nodepath(item).startswith(LEAK_SUITE):
            modules[_nodepath(item)].append(item)
    dropped: set[int] = set()
    for group in modules.values():
        covered: set[tuple[str, ...]] = set()
        for item in sorted(group, key=lambda i: zlib.crc32(f"{seed}:{i.nodeid}".encode())):
            draws = _draws(item)
            if draws <= covered:
                dropped.add(id(item))
            covered |= draws
    return [item for item in items if id(item) not in dropped]


def _draws(item: pytest.Item) -> set[tuple[str, ...]]:
    test = getattr(item, "originalname", item.name)
    raw = _raw_params(item)
    named = {name: _label(value) for name, value in raw.items()}
    found: set[tuple[str, ...]] = {("test", test), *named.items()}
    for name, value in raw.items():
        if isinstance(getattr(value, "route", None), str):
            found.update(
                (test, name, named[name], other, label)
                for other, label in named.items()
                if other != name
            )
    return found


def _nodepath(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _raw_params(item: pytest.Item) -> dict[str, object]:
    callspec = getattr(item, "callspec", None)
    return {} if callspec is None else dict(callspec.params)


def _on_postgres(value: object) -> bool:
    if isinstance(value, tuple):
        return any(isinstance(part, str) and part == _POSTGRES for part in value)
    return isinstance(value, str) and value == _POSTGRES


def _label(value: object) -> str:
    if isinstance(value, str):
        return value
    for name in ("route", "id"):
        found = getattr(value, name, None)
        if isinstance(found, str):
            return found
    return repr(value)


_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


def postgres_spelling(sql: str) -> str:
    """A test's own statement, written once in SQLite's spelling (``?``, ``:name``), for a
    PostgreSQL connection (``%s``, ``%(name)s``, a literal ``%`` doubled). Only for what a test
    reads or tampers with past the store: the store builds its SQL from its dialect."""
    return _NAMED.sub(r"%(\1)s", sql.replace("%", "%%")).replace("?", "%s")


class PastTheStore:
    """A PostgreSQL connection of a test's own that takes SQLite's spelling of a statement
    (see :func:`postgres_spelling`); everything else is the connection's."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self.conn.execute(postgres_spelling(sql), params)

    def executemany(self, sql: str, rows: Any) -> Any:
        return self.conn.executemany(postgres_spelling(sql), rows)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)
