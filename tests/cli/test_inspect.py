"""``stratamem inspect``: the owner's pages on a loopback port, stopped by Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from click.testing import CliRunner

import stratamem
from stratamem.cli import main
from suite import PATIENCE_S

ROOT = Path(__file__).resolve().parents[2]
NOTES = ROOT / "examples" / "workspace" / "notes"
ENV = {
    **{k: v for k, v in os.environ.items() if not k.startswith("STRATAMEM_")},
    "PYTHONPATH": str(Path(stratamem.__file__).parents[1]),
}


def test_inspect_serves_the_owners_pages_until_ctrl_c(tmp_path: Path) -> None:
    db = tmp_path / "notes.db"
    with stratamem.open(db, embedder=None) as memory:
        memory.ingest(NOTES, parallel=False)
    proc = subprocess.Popen(
        [sys.executable, "-m", "stratamem", "--db", str(db), "inspect", "--no-browser"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # waits for the line, or for the process to end
        assert line.startswith("inspecting "), (line, proc.stderr and proc.stderr.read())
        url = line.rsplit(" at ", 1)[1].strip()
        assert url.startswith("http://127.0.0.1:")
        with httpx.Client(base_url=url, timeout=PATIENCE_S) as browser:
            page = browser.get("/")
            assert page.status_code == 200
            assert '<strong class="principal">owner</strong>' in page.text
            assert browser.post("/mcp", json={}).status_code == 404  # the inspector alone
        proc.send_signal(signal.SIGINT)
        _, errors = proc.communicate(timeout=PATIENCE_S)
        assert proc.returncode == 0, errors
        assert "Traceback" not in errors
        assert errors.rstrip().endswith("stopped")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=PATIENCE_S)


def test_inspect_reads_as_the_owner_only(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    stratamem.open(db, embedder=None).close()
    result = CliRunner().invoke(main, ["--db", str(db), "--as", "bot", "inspect", "--no-browser"])
    assert result.exit_code == 1
    assert "reads as the owner" in result.output
