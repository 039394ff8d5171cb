"""The suite's own plumbing (``suite.py``): the quick tier's sample of the leak suite, what the
quick tier leaves out, and Ctrl-C."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import suite

TESTS = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Probe:
    route: str
    name: str

    @property
    def id(self) -> str:
        return f"{self.route}:{self.name}"


@dataclass
class CallSpec:
    params: dict[str, Any]


@dataclass
class Item:
    """What the tier's selection reads of a pytest item."""

    nodeid: str
    originalname: str
    callspec: CallSpec | None = None
    markers: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.nodeid.split("::")[-1]

    def get_closest_marker(self, name: str) -> str | None:
        return name if name in self.markers else None


PROBES = [Probe(route, f"{route}-{n}") for route in ("search", "tree", "facts") for n in range(5)]
PRINCIPALS = ["ann", "bea", "cat", "fay"]


def matrix(path: str, test: str, **params: list[Any]) -> list[Item]:
    names = sorted(params)
    return [
        Item(
            f"{path}::{test}[{'-'.join(str(getattr(v, 'id', v)) for v in values)}]",
            test,
            CallSpec(dict(zip(names, values, strict=True))),
        )
        for values in itertools.product(*(params[n] for n in names))
    ]


def sampled(items: list[Any], seed: int) -> list[Item]:
    return suite._leak_sample(items, seed)  # type: ignore[arg-type,return-value]


def test_the_sample_draws_every_route_with_every_principal_and_every_test() -> None:
    routes = matrix("tests/security/test_routes.py", "test_route", probe=PROBES, who=PRINCIPALS)
    other = matrix("tests/security/test_routes.py", "test_other", who=PRINCIPALS)
    elsewhere = matrix("tests/ingest/test_x.py", "test_x", probe=PROBES, who=PRINCIPALS)
    kept = sampled([*routes, *other, *elsewhere], seed=3)
    drawn: set[tuple[str, str]] = set()
    for item in kept:
        assert item.callspec is not None
        if item.originalname == "test_route":
            drawn.add((item.callspec.params["probe"].route, item.callspec.params["who"]))
    assert drawn == {(p.route, who) for p in PROBES for who in PRINCIPALS}
    # Every test of the module is kept at least once, and every principal drawn in the module.
    assert {i.originalname for i in kept if i.nodeid.startswith("tests/security")} == {
        "test_route",
        "test_other",
    }
    assert [i for i in kept if i.nodeid.startswith("tests/ingest")] == elsewhere
    assert len([i for i in kept if i.originalname == "test_route"]) < len(routes)


def test_the_sample_is_fixed_by_its_seed_and_moves_with_it() -> None:
    items = matrix("tests/security/test_routes.py", "test_route", probe=PROBES, who=PRINCIPALS)

    def chosen(found: list[Item]) -> frozenset[str]:
        return frozenset(i.nodeid for i in found)

    first = chosen(sampled(items, seed=1))
    assert chosen(sampled(list(reversed(items)), seed=1)) == first  # whatever the order
    assert len({chosen(sampled(items, seed=s)) for s in range(1, 9)}) > 1


def test_the_quick_tier_keeps_the_store_contract_on_both_backends_and_the_rest_on_sqlite() -> None:
    def item(path: str, backend: Any = None, markers: tuple[str, ...] = ()) -> Any:
        spec = None if backend is None else CallSpec({"store_location": backend})
        return Item(f"{path}::test", "test", spec, markers)

    assert suite._in_quick_tier(item("tests/store/test_a.py", "postgresql"))
    assert suite._in_quick_tier(item("tests/ingest/test_a.py", "sqlite"))
    assert not suite._in_quick_tier(item("tests/ingest/test_a.py", "postgresql"))
    assert not suite._in_quick_tier(item("tests/ingest/test_a.py", ("irc", "postgresql")))
    assert suite._in_quick_tier(item("tests/ingest/test_a.py", ("irc", "sqlite")))
    for marker in ("slow", "fuzz", "crash"):
        assert not suite._in_quick_tier(item("tests/store/test_a.py", "sqlite", (marker,)))


INNER_CONFTEST = """
from suite import pytest_runtest_protocol, pytest_sessionfinish, pytest_sessionstart
"""

INNER_TESTS = """
import os, subprocess, sys, time
from pathlib import Path

HERE = Path(os.environ["INNER_DIR"])


def test_a_test_that_swallows_the_interrupt():
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
    )
    (HERE / "child.pid").write_text(str(child.pid))
    (HERE / "ready").write_text("")
    try:
        while True:
            time.sleep(0.01)
    except KeyboardInterrupt:
        pass  # as an event loop or a server thread may


def test_after_it():
    (HERE / "ran-on").write_text("")
"""


def test_ctrl_c_stops_the_run_after_a_test_that_swallows_it_and_kills_its_children(
    tmp_path: Path,
) -> None:
    (tmp_path / "conftest.py").write_text(INNER_CONFTEST)
    (tmp_path / "test_inner.py").write_text(INNER_TESTS)
    env = {**os.environ, "PYTHONPATH": str(TESTS), "INNER_DIR": str(tmp_path)}
    options = ["-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:xdist", "-q"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", *options, "--rootdir", str(tmp_path), "test_inner.py"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + suite.PATIENCE_S
        while not (tmp_path / "ready").exists():
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the inner test never started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=suite.PATIENCE_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, output
    assert "interrupted (SIGINT)" in output
    assert not (tmp_path / "ran-on").exists(), "the run went on after Ctrl-C"
    child = int((tmp_path / "child.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)  # killed and reaped: not even a zombie is left
