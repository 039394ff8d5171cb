"""A durable job queue in the SQLite file: work that must survive a crash (sealing trees).

A job is keyed by ``dedupe_key``: enqueueing a key that is already pending does nothing, so
ten ingests of one source leave one seal job. A claimed job is ``running`` with a lease; a
process that dies mid-job leaves it running, and the next claim after the lease takes it
again. A failed job is retried after ``backoff · 2^(attempts-1)`` seconds, up to
``max_attempts``, then left ``failed`` with its last error.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from stratamem.store.sqlite.connection import atomic


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    kind: str
    dedupe_key: str
    payload: dict[str, Any]
    attempts: int


def _now_ms() -> int:
    return int(time.time() * 1000)


class JobQueue:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def enqueue(self, kind: str, dedupe_key: str, payload: dict[str, Any] | None = None) -> None:
        """Add a job, or make a finished or failed one with the same key pending again.

        A pending job's payload is merged with the new one (a ``force`` flag is kept once set).
        """
        now = _now_ms()
        body = json.dumps(payload or {}, sort_keys=True)
        with atomic(self.conn):
            row = self.conn.execute(
                "SELECT status, payload FROM jobs WHERE dedupe_key = ?", (dedupe_key,)
            ).fetchone()
            if row is None:
                self.conn.execute(
                    """INSERT INTO jobs (kind, dedupe_key, payload, created_at, updated_at)
                       VALUES (?, ?, ?, ?, ?)""",
                    (kind, dedupe_key, body, now, now),
                )
                return
            merged = {**json.loads(row["payload"]), **(payload or {})}
            if row["status"] in ("pending", "running"):
                old = json.loads(row["payload"])
                merged = {k: old.get(k) or merged.get(k) for k in {*old, *merged}}
                self.conn.execute(
                    "UPDATE jobs SET payload = ?, updated_at = ? WHERE dedupe_key = ?",
                    (json.dumps(merged, sort_keys=True), now, dedupe_key),
                )
                if row["status"] == "running":
                    # The runner may have read its plan already: run it once more afterwards.
                    self.conn.execute(
                        "UPDATE jobs SET payload = json_set(payload, '$.again', 1) "
                        "WHERE dedupe_key = ?",
                        (dedupe_key,),
                    )
                return
            self.conn.execute(
                """UPDATE jobs SET status = 'pending', payload = ?, attempts = 0, not_before = 0,
                     last_error = NULL, updated_at = ? WHERE dedupe_key = ?""",
                (json.dumps(merged, sort_keys=True), now, dedupe_key),
            )

    def claim(self, *, lease_s: float = 600.0, kind: str | None = None) -> Job | None:
        """Take the oldest ready job (pending and due, or running past its lease)."""
        now = _now_ms()
        stale = now - int(lease_s * 1000)
        with atomic(self.conn):
            row = self.conn.execute(
                """SELECT * FROM jobs
                   WHERE ((status = 'pending' AND not_before <= ?)
                          OR (status = 'running' AND updated_at <= ?))
                     AND (? IS NULL OR kind = ?)
                   ORDER BY id LIMIT 1""",
                (now, stale, kind, kind),
            ).fetchone()
            if row is None:
                return None
            self.conn.execute(
                """UPDATE jobs SET status = 'running', attempts = attempts + 1,
                     payload = json_remove(payload, '$.again'), updated_at = ? WHERE id = ?""",
                (now, row["id"]),
            )
        payload = json.loads(row["payload"])
        payload.pop("again", None)
        return Job(row["id"], row["kind"], row["dedupe_key"], payload, row["attempts"] + 1)

    def touch(self, job: Job) -> None:
        """Renew the lease of a long job."""
        self.conn.execute("UPDATE jobs SET updated_at = ? WHERE id = ?", (_now_ms(), job.id))

    def done(self, job: Job) -> None:
        """Finish the job, unless it was asked for again while it ran: then it is pending."""
        with atomic(self.conn):
            self.conn.execute(
                """UPDATE jobs SET status = CASE WHEN json_extract(payload, '$.again') = 1
                       THEN 'pending' ELSE 'done' END,
                     payload = json_remove(payload, '$.again'), attempts = 0,
                     last_error = NULL, updated_at = ? WHERE id = ?""",
                (_now_ms(), job.id),
            )

    def fail(self, job: Job, error: str, *, max_attempts: int = 5, backoff_s: float = 2.0) -> None:
        now = _now_ms()
        if job.attempts >= max_attempts:
            self.conn.execute(
                """UPDATE jobs SET status = 'failed', last_error = ?, updated_at = ?
                   WHERE id = ?""",
                (error, now, job.id),
            )
            return
        delay = int(backoff_s * 1000 * 2 ** (job.attempts - 1))
        self.conn.execute(
            """UPDATE jobs SET status = 'pending', last_error = ?, not_before = ?, updated_at = ?
               WHERE id = ?""",
            (error, now + delay, now, job.id),
        )

    def counts(self) -> dict[str, int]:
        return {
            str(status): int(n)
            for status, n in self.conn.execute(
                "SELECT status, count(*) FROM jobs GROUP BY status ORDER BY status"
            )
        }

    def failed(self) -> list[tuple[str, str]]:
        return [
            (str(key), str(err or ""))
            for key, err in self.conn.execute(
                "SELECT dedupe_key, last_error FROM jobs WHERE status = 'failed' ORDER BY id"
            )
        ]
