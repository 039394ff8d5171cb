"""The jobs role: a durable queue of seal work that survives a crash and is resumed.

A job is keyed by its ``dedupe_key``: queueing a key that is already pending only merges the
payloads, so ten ingests of one source leave one seal job. A tree's seal job is of kind
:data:`SEAL_KIND` and keyed ``seal:<tree id>`` (:func:`seal_job_key`), whoever queues or
drops it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Protocol

SEAL_KIND = "seal"
SEAL_JOB_PREFIX = "seal:"


def seal_job_key(tree_id: str) -> str:
    """The dedupe key of a tree's seal job: ``seal:`` + the tree id."""
    return SEAL_JOB_PREFIX + tree_id


@dataclass(frozen=True, slots=True)
class Job:
    """A claimed job. ``attempts`` counts this one; ``holder`` is the claim's token, which
    renewing and finishing the job must show."""

    id: int
    kind: str
    dedupe_key: str
    payload: dict[str, Any]
    attempts: int
    holder: str = ""


class JobQueue(Protocol):
    def enqueue(
        self, kind: str, dedupe_key: str, payload: dict[str, Any] | None = None
    ) -> None: ...

    def claim(
        self, *, lease_s: float = 600.0, kind: str | None = None, key: str | None = None
    ) -> Job | None:
        """Take the oldest ready job of ``kind`` (or any), or only the one keyed ``key``."""
        ...

    def touch(self, job: Job) -> bool: ...

    def done(self, job: Job) -> bool: ...

    def fail(
        self, job: Job, error: str, *, max_attempts: int = 5, backoff_s: float = 2.0
    ) -> bool: ...

    def counts(self, *, kind: str | None = None) -> dict[str, int]:
        """How many jobs (of ``kind``, or all) there are in each status."""
        ...

    def held(
        self, *, kind: str | None = None, keys: Collection[str] | None = None
    ) -> list[tuple[str, str]]:
        """(dedupe key, holder token) of the running jobs (of ``kind``, or all; keyed among
        ``keys``, where given), oldest first."""
        ...

    def failed(self) -> list[tuple[str, str]]: ...
