"""Parameters many operations share, declared once so that they read the same everywhere."""

from __future__ import annotations

from typing import Any

from stratamem.ops.spec import Param
from stratamem.types import Filters, SourceKind

MAX_QUERY_CHARS = 10_000
MAX_NAME = 200
KINDS = tuple(k.value for k in SourceKind)


def limit(default: int | None, maximum: int) -> Param:
    return Param("limit", "int", "At most this many results.", default=default, ge=1, le=maximum)


def query(*, required: bool = False, help: str | None = None) -> Param:
    if required:
        return Param(
            "query",
            "str",
            help or "The question or words to look for.",
            min_length=1,
            max_length=MAX_QUERY_CHARS,
        )
    return Param(
        "query",
        "str",
        help or "Rank the results by relevance to this text instead of by time.",
        default=None,
        max_length=MAX_QUERY_CHARS,
    )


SOURCES = Param(
    "sources",
    "strs",
    "Only these sources (ids or scopes; slack:* is a prefix).",
    default=(),
    max_length=MAX_NAME,
    max_items=100,
)
KINDS_PARAM = Param(
    "kinds", "strs", "Only sources of these kinds.", default=(), choices=KINDS, max_items=4
)
USER = Param("user", "str", "Only this user's memory.", default=None, max_length=MAX_NAME)
AGENT = Param("agent", "str", "Only this agent's memory.", default=None, max_length=MAX_NAME)
SESSION = Param("session", "str", "Only this session.", default=None, max_length=MAX_NAME)
# On a write: whose memory it goes to.
FOR_USER = Param("user", "str", "For this user.", default=None, max_length=MAX_NAME)
FOR_AGENT = Param("agent", "str", "By this agent.", default=None, max_length=MAX_NAME)
IN_SESSION = Param("session", "str", "In this session.", default=None, max_length=MAX_NAME)
# On the owner's write: whether it may go to a source a principal made.
JOIN = Param(
    "join",
    "bool",
    "Write to a source a principal made (the owner's writes refuse one otherwise).",
    default=False,
)

# The filters every read of nodes takes: which sources, of which kinds, whose memory.
FILTERS = (SOURCES, KINDS_PARAM, USER, AGENT, SESSION)


def when(name: str, help: str, *, required: bool = False, default: Any = None) -> Param:
    text = f"{help} ISO 8601 or a span back (7d)."
    if required:
        return Param(name, "time", text)
    return Param(name, "time", text, default=default)


SINCE = when("since", "From this time.")
UNTIL = when("until", "Until this time (default now).")
NODE_ID = Param(
    "node_id", "str", "A node id from an earlier result.", min_length=1, max_length=MAX_NAME
)
SUBJECT = Param(
    "subject",
    "str",
    "An entity id: person:carol diaz, topic:phoenix, user:maya.",
    default=None,
    min_length=1,
    max_length=500,
)
MIN_RELEVANCE = Param(
    "min_relevance",
    "float",
    "Leave out hits whose relevance (a calibrated chance, 0 to 1, that the hit answers the "
    "query) is below this; nothing_relevant then says whether any reached it.",
    default=None,
    ge=0,
    le=1,
)
AS_OF = when("as_of", "True at this time (default now).")
KNOWN_AT = when("known_at", "As the memory knew it then (default now).")


def filters(args: dict[str, Any]) -> Filters | None:
    """The source filters a call names (None: none)."""
    sources = tuple(args.get("sources") or ())
    kinds = tuple(SourceKind(k) for k in args.get("kinds") or ())
    if not sources and not kinds:
        return None
    return Filters(sources=sources, kinds=kinds)


def identity(args: dict[str, Any]) -> dict[str, Any]:
    """The user, agent and session a call names (only those it names)."""
    return {k: args[k] for k in ("user", "agent", "session") if args.get(k) is not None}
