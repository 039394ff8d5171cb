"""``scripts/find-browser.sh``, which ``make test-all`` runs before the suite: it names the
browser it finds, installs one with apt-get only as root and only where none is found, bounds
the install in time, and never fails (CI must not turn red because apt is unreachable).

Each run gets a PATH of fakes (a ``chromium``, a ``chromedriver``, an ``apt-get`` that logs
its arguments, an ``id``) beside the few real tools the script needs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from suite import PATIENCE_S

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "find-browser.sh"
SKIPPED = "browser tests will be skipped: no chromium and chromedriver on PATH"


def _system(tool: str) -> str:
    found = shutil.which(tool) or shutil.which(tool, path=os.defpath)
    assert found is not None, f"{tool} is not installed"
    return found


def _fake(folder: Path, name: str, body: str) -> None:
    tool = folder / name
    tool.write_text(f"#!/bin/sh\n{body}\n")
    tool.chmod(0o755)


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """A PATH folder with the real ``timeout`` and ``sh`` (the script's install step needs
    them), and an ``id`` that says root."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in ("timeout", "sh"):
        real = _system(tool)
        (folder / tool).symlink_to(real)
    _fake(folder, "id", "echo 0")
    return folder


def _run(bin_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_system("sh"), str(SCRIPT)],
        env={"PATH": str(bin_dir), **env},
        capture_output=True,
        text=True,
        timeout=PATIENCE_S,
        check=False,
    )


def _apt_log(bin_dir: Path) -> list[str]:
    log = bin_dir.parent / "apt.log"
    return log.read_text().splitlines() if log.exists() else []


def _apt(bin_dir: Path, then: str) -> None:
    """A fake apt-get that logs its arguments, then runs ``then``."""
    _fake(bin_dir, "apt-get", f'echo "$*" >> "{bin_dir.parent / "apt.log"}"\n{then}')


def test_a_browser_on_path_is_named_and_nothing_installed(bin_dir: Path) -> None:
    _fake(bin_dir, "chromium-browser", "")
    _fake(bin_dir, "chromedriver", "")
    _apt(bin_dir, "exit 0")
    done = _run(bin_dir)
    assert done.returncode == 0
    assert done.stdout.strip() == (
        f"browser tests: {bin_dir}/chromium-browser with {bin_dir}/chromedriver"
    )
    assert _apt_log(bin_dir) == []


def test_without_a_browser_root_installs_chromium_and_its_driver(bin_dir: Path) -> None:
    made = " ".join(f'"{bin_dir}/{name}"' for name in ("chromium", "chromedriver"))
    installs = f"{_system('touch')} {made}; {_system('chmod')} +x {made}"
    _apt(bin_dir, f'case "$*" in *install*) {installs};; esac')
    done = _run(bin_dir)
    assert done.returncode == 0
    assert "apt-get install chromium chromium-driver" in done.stdout
    assert done.stdout.splitlines()[-1] == (
        f"browser tests: {bin_dir}/chromium with {bin_dir}/chromedriver"
    )
    log = _apt_log(bin_dir)
    assert len(log) == 2
    assert log[0].endswith("update")
    assert log[1].endswith("install chromium chromium-driver")


def test_an_install_that_fails_only_says_the_browser_tests_are_skipped(bin_dir: Path) -> None:
    _apt(bin_dir, "echo 'E: could not resolve deb.debian.org' >&2; exit 100")
    done = _run(bin_dir)
    assert done.returncode == 0
    assert done.stdout.splitlines()[-1].startswith(SKIPPED)
    assert "apt-get install chromium chromium-driver" in done.stdout.splitlines()[-1]
    assert "could not resolve" not in done.stdout + done.stderr
    assert len(_apt_log(bin_dir)) == 1  # update failed: no install tried


def test_an_install_that_hangs_is_cut_off(bin_dir: Path) -> None:
    # An apt that never returns (an unreachable mirror): the bound ends it, the run goes on.
    _apt(bin_dir, "exec sh -c 'while :; do :; done'")
    done = _run(bin_dir, STRATAMEM_BROWSER_INSTALL_TIMEOUT="1")
    assert done.returncode == 0
    assert done.stdout.splitlines()[-1].startswith(SKIPPED)


def test_not_root_or_no_apt_installs_nothing(bin_dir: Path) -> None:
    _fake(bin_dir, "id", "echo 1000")
    _apt(bin_dir, "exit 0")
    done = _run(bin_dir)
    assert done.returncode == 0
    assert done.stdout.strip().startswith(SKIPPED)
    assert _apt_log(bin_dir) == []
    os.remove(bin_dir / "apt-get")
    _fake(bin_dir, "id", "echo 0")
    assert _run(bin_dir).stdout.strip().startswith(SKIPPED)
