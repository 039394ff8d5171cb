"""Saving index files off the search path: one worker thread per index, the newest save wins.

A search that brings an index up to date hands the save over and returns; the worker takes a
snapshot under the index's lock (a copy in memory) and writes it without the lock, so no
search waits for a multi-megabyte write and fsync. Saves asked for while one runs collapse
into one more. :meth:`BackgroundSaver.flush` waits for the worker (on close, after a forget).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

_log = logging.getLogger(__name__)

SaveJob = Callable[[], None]


class BackgroundSaver:
    """Runs save jobs on a daemon thread started on demand; it exits when idle."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._cond = threading.Condition()
        self._pending: SaveJob | None = None
        self._busy = False

    def submit(self, job: SaveJob) -> None:
        """Run ``job`` on the worker, replacing any job not yet started."""
        with self._cond:
            self._pending = job
            if not self._busy:
                self._busy = True
                threading.Thread(target=self._run, name=self._name, daemon=True).start()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until no save is pending or running; False if ``timeout`` ran out first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._busy, timeout)

    @property
    def busy(self) -> bool:
        with self._cond:
            return self._busy

    def _run(self) -> None:
        while True:
            with self._cond:
                job, self._pending = self._pending, None
                if job is None:
                    self._busy = False
                    self._cond.notify_all()
                    return
            try:
                job()
            except Exception:
                # A save that fails leaves the old file (the write is atomic); the index is
                # rebuilt or saved again later. It must not take the worker down with it.
                _log.warning("%s: saving an index failed", self._name, exc_info=True)
