"""The jobs role: a durable queue of seal work that survives a crash and is resumed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class Job:
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

    def claim(self, *, lease_s: float = 600.0, kind: str | None = None) -> Job | None: ...

    def touch(self, job: Job) -> bool: ...

    def done(self, job: Job) -> bool: ...

    def fail(
        self, job: Job, error: str, *, max_attempts: int = 5, backoff_s: float = 2.0
    ) -> bool: ...

    def counts(self) -> dict[str, int]: ...

    def failed(self) -> list[tuple[str, str]]: ...
