"""What connectors produce: source streams of records, and the problems they skipped.

A connector turns a path into one or more :class:`SourceStream` objects. Each stream is one
source (a Slack channel, a mailbox, a notes folder) and yields :class:`Record` objects lazily,
so a 1 GB mailbox never sits in memory. Malformed items are reported through
:meth:`ReadContext.skip` and left out; the rest of the stream goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from stratamem.types import SourceKind


@dataclass(frozen=True, slots=True)
class Record:
    """One message, note or line of a source, as the connector read it.

    ``ref`` is the citation back-pointer: ``file:line`` for line-based formats,
    ``file#<message-id>`` for mail, ``file#<ts>`` for Slack. ``ts`` is timezone-aware UTC.
    """

    text: str
    ref: str
    ts: datetime | None = None
    author: str | None = None
    author_id: str | None = None
    id: str | None = None
    thread: str | None = None
    reply_to: str | None = None
    title: str | None = None
    recipients: tuple[str, ...] = ()
    mentions: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    links: tuple[str, ...] = ()
    quoted: str = ""
    signature: str = ""
    doc: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class SourceStream:
    """One source read from a path; ``records`` is consumed exactly once."""

    scope: str
    kind: SourceKind
    platform: str
    location: str
    records: Iterable[Record]
    title: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Problem:
    """A skipped item: the file, the place in it (line, message index) and why."""

    path: str
    where: str
    reason: str

    def __str__(self) -> str:
        place = f"{self.path}:{self.where}" if self.where else self.path
        return f"{place}: {self.reason}"


@dataclass(slots=True)
class ReadContext:
    """Passed to every connector: the user's scope override and the list of skipped items."""

    scope: str | None = None
    problems: list[Problem] = field(default_factory=list)
    on_problem: Callable[[Problem], None] | None = None

    def skip(self, path: str | Path, where: str, reason: str) -> None:
        problem = Problem(str(path), where, reason)
        self.problems.append(problem)
        if self.on_problem is not None:
            self.on_problem(problem)

    def scope_for(self, default: str, sub: str | None = None) -> str:
        """The scope of a stream: the user's override if given, else ``default``.

        Connectors that yield several streams from one path (one per channel) pass the
        channel as ``sub``; the override then becomes a prefix: ``team/#eng``.
        """
        if self.scope is None:
            return default
        return f"{self.scope}/{sub}" if sub else self.scope


@runtime_checkable
class Connector(Protocol):
    """Reads a path into source streams. ``name`` is what ``--kind`` selects."""

    name: str

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]: ...


def to_utc(value: datetime) -> datetime:
    """A naive datetime is taken as UTC; an aware one is converted to UTC."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def from_epoch(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)
