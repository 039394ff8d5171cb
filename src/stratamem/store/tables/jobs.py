"""A durable job queue in the store: work that must survive a crash (sealing trees); the
:class:`~stratamem.store.jobs.JobQueue` role, reached as ``store.jobs``.

A job is keyed by ``dedupe_key``: enqueueing a key that is already pending does nothing but
merge the payloads, so ten ingests of one source leave one seal job.

Claims and leases. :meth:`JobQueue.claim` makes a job ``running`` and gives the claim a holder
token, ``<host>/<pid>/<start>/<random>``, where ``start`` names the process itself: the boot id
and the process's start time (:func:`process_start`; empty where they cannot be read).
``leased_at`` is when the holder last showed it was alive. Only the holder renews it
(:meth:`~JobQueue.touch`) or finishes the job (:meth:`~JobQueue.done`, :meth:`~JobQueue.fail`);
each says whether the claim still stood, so a holder whose job was taken from it cannot renew
or finish it. A claim takes a running job again when its holder has not renewed it for
``lease_s``, or at once when the holder ran on this host and that process no longer exists (a
process killed mid-job): no process has its pid, or the one that has it started at another
time or in another boot. A pid alone would not do: a container restarted in a fresh PID
namespace runs its new process as PID 1 again, on the same host, and would take its dead
predecessor for alive until the lease ran out. Nothing else moves the lease: enqueueing a
running job's key sets ``again`` instead, and the job is made pending when its holder
finishes, so work that arrived after the holder read its inputs is run too.

A failed job is retried after ``backoff · 2^(attempts-1)`` seconds, up to ``max_attempts``,
then left ``failed`` with its last error. Columns: ``status`` (pending, running, done,
failed), ``attempts``, ``not_before`` (ms; a retry's earliest start), ``holder`` (the token),
``holder_host``, ``holder_pid``, ``leased_at`` (ms), ``again`` (0/1), ``updated_at`` (ms; the
row's last change, not a lease). A token of three parts (``<host>/<pid>/<random>``, written
before the start was recorded) is checked by its pid alone.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import socket
import time
from collections.abc import Callable, Collection
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from stratamem.store.dialect import Connection, Dialect
from stratamem.store.jobs import Job

HOST = socket.gethostname()


def _now_ms() -> int:
    return int(time.time() * 1000)


@functools.cache
def boot_id() -> str:
    """This boot of this host's kernel (Linux's random boot id); empty where there is none."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_start(pid: int) -> str:
    """What tells this process from any other that has, had or will have its pid on this
    host: ``<boot id>.<start time>``, the start time being field 22 of ``/proc/<pid>/stat``
    (clock ticks since boot). Empty where it cannot be read (not Linux, no such process)."""
    boot = boot_id()
    if not boot:
        return ""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # The fields after the parenthesised command name (which may itself hold parentheses)
    # start at field 3, the state: field 22 is the 20th of them.
    fields = stat[stat.rfind(")") + 2 :].split()
    return f"{boot}.{fields[19]}" if len(fields) > 19 else ""


def holder_token(pid: int, start: str) -> str:
    """A new claim's token: ``<host>/<pid>/<start>/<random>``."""
    return f"{HOST}/{pid}/{start}/{secrets.token_hex(6)}"


def holder_alive(pid: int, token: str | None) -> bool:
    """Whether the process of this host that took a claim (its pid, and the token it
    wrote) still runs. Where either start cannot be told (an older token, another platform),
    the pid alone decides."""
    if not process_exists(pid):
        return False
    parts = (token or "").split("/")
    recorded = parts[-2] if len(parts) >= 4 else ""
    if not recorded:
        return True
    now = process_start(pid)
    return not now or now == recorded


def process_exists(pid: int) -> bool:
    """Whether a process with this id runs on this host (a zombie counts as gone). Where that
    cannot be told (not POSIX), True: the job then waits for its lease."""
    if pid <= 0 or os.name != "posix":
        return pid > 0
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # it exists but belongs to someone else
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # The state follows the parenthesised command name, which may itself hold parentheses.
    return stat[stat.rfind(")") + 2 : stat.rfind(")") + 3] != "Z"


class JobQueue:
    """The ``jobs`` table as a :class:`stratamem.store.jobs.JobQueue`."""

    def __init__(
        self,
        conn: Connection,
        transaction: Callable[[], AbstractContextManager[Any]],
        dialect: Dialect,
    ) -> None:
        self.conn = conn
        self._transaction = transaction  # how a write transaction is opened on ``conn``
        self.dialect = dialect

    def enqueue(self, kind: str, dedupe_key: str, payload: dict[str, Any] | None = None) -> None:
        """Add a job, or make a finished or failed one with the same key pending again.

        A pending or running job's payload is merged with the new one (a ``force`` flag is kept
        once set); a running one is marked to run again once its holder finishes, and its lease
        is left alone. A finished job starts over from the new payload.
        """
        d = self.dialect
        now = _now_ms()
        body = json.dumps(payload or {}, sort_keys=True)
        with self._transaction():
            row = self.conn.execute(
                f"SELECT status, payload FROM jobs WHERE dedupe_key = {d.p}", (dedupe_key,)
            ).fetchone()
            if row is None:
                self.conn.execute(
                    f"""INSERT INTO jobs (kind, dedupe_key, payload, created_at, updated_at)
                       VALUES ({d.marks(5)})""",
                    (kind, dedupe_key, body, now, now),
                )
                return
            if row["status"] in ("pending", "running"):
                old = json.loads(row["payload"])
                new = payload or {}
                merged = {k: old.get(k) or new.get(k) for k in {*old, *new}}
                self.conn.execute(
                    f"""UPDATE jobs SET payload = {d.p}, updated_at = {d.p},
                         again = CASE WHEN status = 'running' THEN 1 ELSE again END
                       WHERE dedupe_key = {d.p}""",
                    (json.dumps(merged, sort_keys=True), now, dedupe_key),
                )
                return
            self.conn.execute(
                f"""UPDATE jobs SET status = 'pending', payload = {d.p}, attempts = 0,
                     not_before = 0,
                     last_error = NULL, again = 0, updated_at = {d.p} WHERE dedupe_key = {d.p}""",
                (body, now, dedupe_key),
            )

    def claim(
        self, *, lease_s: float = 600.0, kind: str | None = None, key: str | None = None
    ) -> Job | None:
        """Take the oldest ready job (of ``kind``; the one keyed ``key`` only, where given):
        pending and due, or running with its holder silent for ``lease_s`` or its holder's
        process gone from this host."""
        d = self.dialect
        now = _now_ms()
        stale = now - int(lease_s * 1000)
        pid = os.getpid()
        holder = holder_token(pid, process_start(pid))
        with self._transaction():
            self._expire_orphans()
            if key is None:
                row = self._oldest_ready(now, stale, kind)
            else:
                row = self._ready_of(key, now, stale, kind)
            if row is None:
                return None
            self.conn.execute(
                f"""UPDATE jobs SET status = 'running', attempts = attempts + 1, again = 0,
                     holder = {d.p}, holder_host = {d.p}, holder_pid = {d.p}, leased_at = {d.p},
                     updated_at = {d.p}
                   WHERE id = {d.p}""",
                (holder, HOST, pid, now, now, row["id"]),
            )
        return Job(
            row["id"],
            row["kind"],
            row["dedupe_key"],
            json.loads(row["payload"]),
            row["attempts"] + 1,
            holder,
        )

    def _oldest_ready(self, now: int, stale: int, kind: str | None) -> Any:
        """The row of the oldest ready job: pending and due at ``now``, or running with its
        lease taken before ``stale``; None when there is none.

        Three reads, each in id order from few rows: the pending jobs never put off (the
        ``jobs_ready`` index holds them in id order, so the first that fits ends the read),
        the pending ones put off until now (retries), the running ones. One read of them all
        together sorted every pending job on each claim, and an ingest queues a seal per
        source it changed: the claims of one ingest cost the square of its sources.
        """
        d = self.dialect
        found = [
            self.conn.execute(sql, params).fetchone()
            for sql, params in (
                (
                    f"""SELECT * FROM jobs WHERE status = 'pending' AND not_before = 0
                         AND ({d.p} IS NULL OR kind = {d.p}) ORDER BY id LIMIT 1""",
                    (kind, kind),
                ),
                (
                    f"""SELECT * FROM jobs
                       WHERE status = 'pending' AND not_before > 0 AND not_before <= {d.p}
                         AND ({d.p} IS NULL OR kind = {d.p}) ORDER BY id LIMIT 1""",
                    (now, kind, kind),
                ),
                (
                    f"""SELECT * FROM jobs WHERE status = 'running' AND leased_at <= {d.p}
                         AND ({d.p} IS NULL OR kind = {d.p}) ORDER BY id LIMIT 1""",
                    (stale, kind, kind),
                ),
            )
        ]
        return min((row for row in found if row is not None), key=lambda r: r["id"], default=None)

    def _ready_of(self, key: str, now: int, stale: int, kind: str | None) -> Any:
        """The row of the job keyed ``key`` where it is ready (see :meth:`_oldest_ready`)."""
        d = self.dialect
        return self.conn.execute(
            f"""SELECT * FROM jobs WHERE dedupe_key = {d.p} AND ({d.p} IS NULL OR kind = {d.p})
                 AND ((status = 'pending' AND not_before <= {d.p})
                      OR (status = 'running' AND leased_at <= {d.p}))""",
            (key, kind, kind, now, stale),
        ).fetchone()

    def _expire_orphans(self) -> None:
        """End the leases of running jobs whose holder was a process of this host that is
        gone."""
        d = self.dialect
        orphans = [
            int(job_id)
            for job_id, pid, token in self.conn.execute(
                f"""SELECT id, holder_pid, holder FROM jobs
                   WHERE status = 'running' AND leased_at > 0 AND holder_host = {d.p}""",
                (HOST,),
            )
            if pid is not None and not holder_alive(int(pid), token)
        ]
        self.conn.executemany(
            f"UPDATE jobs SET leased_at = 0 WHERE id = {d.p}", [(i,) for i in orphans]
        )

    def touch(self, job: Job) -> bool:
        """Renew the lease of a long job; False when this claim no longer holds it."""
        d = self.dialect
        now = _now_ms()
        with self._transaction():  # one statement; a write that fails is a store error
            cur = self.conn.execute(
                f"""UPDATE jobs SET leased_at = {d.p}, updated_at = {d.p}
                   WHERE id = {d.p} AND holder = {d.p} AND status = 'running'""",
                (now, now, job.id, job.holder),
            )
        return cur.rowcount == 1

    def done(self, job: Job) -> bool:
        """Finish the job, unless it was asked for again while it ran: then it is pending.
        False (and nothing changed) when this claim no longer holds it."""
        d = self.dialect
        with self._transaction():
            cur = self.conn.execute(
                f"""UPDATE jobs SET status = CASE WHEN again = 1 THEN 'pending' ELSE 'done' END,
                     again = 0, attempts = 0, not_before = 0, last_error = NULL, holder = NULL,
                     holder_host = NULL, holder_pid = NULL, leased_at = 0, updated_at = {d.p}
                   WHERE id = {d.p} AND holder = {d.p} AND status = 'running'""",
                (_now_ms(), job.id, job.holder),
            )
        return cur.rowcount == 1

    def fail(self, job: Job, error: str, *, max_attempts: int = 5, backoff_s: float = 2.0) -> bool:
        """Record a failure: pending again after a backoff, or ``failed`` after the last
        attempt. False (and nothing changed) when this claim no longer holds the job."""
        d = self.dialect
        now = _now_ms()
        last = job.attempts >= max_attempts
        delay = 0 if last else int(backoff_s * 1000 * 2 ** (job.attempts - 1))
        with self._transaction():
            cur = self.conn.execute(
                f"""UPDATE jobs SET status = {d.p}, last_error = {d.p}, not_before = {d.p},
                     again = 0,
                     holder = NULL, holder_host = NULL, holder_pid = NULL, leased_at = 0,
                     updated_at = {d.p}
                   WHERE id = {d.p} AND holder = {d.p} AND status = 'running'""",
                ("failed" if last else "pending", error, now + delay, now, job.id, job.holder),
            )
        return cur.rowcount == 1

    def counts(self, *, kind: str | None = None) -> dict[str, int]:
        d = self.dialect
        return {
            str(status): int(n)
            for status, n in self.conn.execute(
                f"""SELECT status, count(*) FROM jobs WHERE {d.p} IS NULL OR kind = {d.p}
                   GROUP BY status ORDER BY status""",
                (kind, kind),
            )
        }

    def held(
        self, *, kind: str | None = None, keys: Collection[str] | None = None
    ) -> list[tuple[str, str]]:
        """(dedupe key, holder token) of the running jobs (of ``kind``, or all; keyed among
        ``keys``, where given), oldest first: work a claim now would not get while its
        holder lives."""
        d = self.dialect
        return [
            (str(key), str(holder or ""))
            for key, holder in self.conn.execute(
                f"""SELECT dedupe_key, holder FROM jobs
                   WHERE status = 'running' AND ({d.p} IS NULL OR kind = {d.p}) ORDER BY id""",
                (kind, kind),
            )
            if keys is None or key in keys
        ]

    def failed(self) -> list[tuple[str, str]]:
        return [
            (str(key), str(err or ""))
            for key, err in self.conn.execute(
                "SELECT dedupe_key, last_error FROM jobs WHERE status = 'failed' ORDER BY id"
            )
        ]
