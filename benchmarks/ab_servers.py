"""Two servers side by side for an A/B benchmark: the same store served by two versions of the
code, each ``create_app`` on uvicorn in a process of its own with ``PYTHONPATH`` pointing at
that version's ``src`` folder.

The base is a commit checked out as a throwaway worktree (``git worktree add``) and removed
at the end; the other is this checkout's ``src``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
SERVER = """
import sys, uvicorn
from stratamem.server.http import create_app
from stratamem.server.service import Service
path, port, embedder = sys.argv[1], int(sys.argv[2]), sys.argv[3]
service = Service(path, embedder=None if embedder == "none" else embedder)
service.warm()
app = create_app(service, access_log=None)
uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
"""


@dataclass(frozen=True, slots=True)
class Served:
    name: str
    url: str
    pid: int


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def base_checkout(commit: str) -> Iterator[Path]:
    """``commit`` checked out in a throwaway worktree; yields its ``src`` folder."""
    folder = Path(tempfile.mkdtemp(prefix=f"base-{commit[:7]}-"))
    shutil.rmtree(folder)
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(folder), commit],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    try:
        yield folder / "src"
    finally:
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(folder)], cwd=ROOT, capture_output=True
        )


@contextmanager
def serving(name: str, src: Path, store: Path, *, embedder: str = "none") -> Iterator[Served]:
    """``store`` served by the code in ``src``; yields once it answers."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATAMEM_")}
    env["PYTHONPATH"] = str(src)
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(store), str(port), embedder],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} server ended: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
            try:
                if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} server did not answer")
            time.sleep(0.1)
        yield Served(name, url, proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q / 100
    low = int(k)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)
