"""The frozen value types shared by every layer.

Times are timezone-aware UTC ``datetime`` values in Python and RFC 3339 strings on the wire.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from typing import Any

from stratamem.timeparse import optional_utc


class SourceKind(StrEnum):
    """What a source holds; decides how it is chunked."""

    CHAT = "chat"
    EMAIL = "email"
    DOCUMENT = "document"
    RECORD = "record"


class NodeKind(StrEnum):
    """A retrieval hit is a raw chunk (leaf), a sealed summary, or a fact (from
    ``query_facts``: in no tree, its id a fact id, see :mod:`stratamem.memory.hits`)."""

    LEAF = "leaf"
    SUMMARY = "summary"
    FACT = "fact"


class TreeKind(StrEnum):
    SOURCE = "source"


@dataclass(frozen=True, slots=True)
class Source:
    """One ingested source: a channel, a mailbox, a notes folder, a JSONL file."""

    id: str
    scope: str
    kind: SourceKind
    platform: str
    location: str
    title: str = ""
    access: tuple[str, ...] = ()
    locked: bool = False
    ingested_at: datetime | None = None
    chunk_count: int = 0
    # The principal that made the source (its new sources are in its namespace, ``bob/…``);
    # None for the store's owner, and for every source made before sources had owners.
    created_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "scope": self.scope,
            "kind": self.kind.value,
            "platform": self.platform,
            "location": self.location,
            "chunks": self.chunk_count,
            "access": list(self.access),
            "locked": self.locked,
            "ingested_at": rfc3339(self.ingested_at),
            "created_by": self.created_by,
        }


# -- whose memory: users, agents and sessions ---------------------------------------------------

# A user or agent id becomes an access scope label (``user:`` or ``agent:`` and the id, up to
# 64 characters in all, see :func:`~stratamem.store.access.parse_scopes`); a session id only
# names a source. None of them may hold a ``/`` (it separates the parts of a scope) or a glob
# character (principals name sources by glob).
_IDENTITY_VALUE = {
    "user": (re.compile(r"[a-z0-9][a-z0-9_.@:-]*"), 58),
    "agent": (re.compile(r"[a-z0-9][a-z0-9_.@:-]*"), 58),
    "session": (re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@:+-]*"), 128),
}
_BASE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def identity_value(kind: str, value: object) -> str:
    """A user, agent or session id as stored: a user or agent id lower-cased (access scopes
    are), a session id as given; a ``ValueError`` naming the rule otherwise."""
    pattern, longest = _IDENTITY_VALUE[kind]
    if not isinstance(value, str):
        raise ValueError(f"a {kind} id is a string, not {type(value).__name__}")
    text = value.strip()
    if kind != "session":
        text = text.lower()
    if not text:
        raise ValueError(f"a {kind} id cannot be blank")
    if len(text) > longest:
        raise ValueError(f"{kind} id {value!r} is longer than {longest} characters")
    if not pattern.fullmatch(text):
        allowed = "letters, digits and _ . @ :" + (" + -" if kind == "session" else " -")
        raise ValueError(f"bad {kind} id {value!r}: use {allowed}, starting with a letter or digit")
    return text


def identity_values(kind: str, values: str | Iterable[str] | None) -> tuple[str, ...]:
    """One id or several (none for None) checked by :func:`identity_value`, repeats dropped."""
    if values is None:
        return ()
    given = [values] if isinstance(values, str) else list(values)
    return tuple(dict.fromkeys(identity_value(kind, v) for v in given))


@dataclass(frozen=True, slots=True)
class Identity:
    """Whose memory a source holds: a user's, an agent's, a session's, or a mix of them.

    It lives in the source's scope, the identity's parts appended to a base name, in this
    order: ``memory/user:maya``, ``memory/user:maya/agent:planner``,
    ``chat/user:maya/session:s-42``, ``facts/agent:planner``. A base holds no ``:`` or ``/``,
    so no connector's scope (``slack:#eng``, ``mbox:team``) reads as one. Built with
    :meth:`of`, which checks and normalises the ids (see :func:`identity_value`)."""

    user: str | None = None
    agent: str | None = None
    session: str | None = None

    @classmethod
    def of(
        cls, *, user: str | None = None, agent: str | None = None, session: str | None = None
    ) -> Identity:
        return cls(
            user=None if user is None else identity_value("user", user),
            agent=None if agent is None else identity_value("agent", agent),
            session=None if session is None else identity_value("session", session),
        )

    def __bool__(self) -> bool:
        return bool(self.user or self.agent or self.session)

    def parts(self) -> tuple[tuple[str, str], ...]:
        """(kind, id) of each part that is set, in scope order."""
        values = (("user", self.user), ("agent", self.agent), ("session", self.session))
        return tuple((kind, value) for kind, value in values if value is not None)

    def scope(self, base: str) -> str:
        """The scope of the source of ``base`` that holds this identity's memory (``base``
        alone for no identity)."""
        if not _BASE.fullmatch(base):
            raise ValueError(
                f"bad base name {base!r} for a user's, agent's or session's source: use "
                "letters, digits and _ . - (up to 64), no : or /"
            )
        return base + "".join(f"/{kind}:{value}" for kind, value in self.parts())

    @property
    def labels(self) -> tuple[str, ...]:
        """The access scopes a source of this identity carries: ``user:<id>`` and
        ``agent:<id>`` (a session is no reader's scope)."""
        return tuple(f"{kind}:{value}" for kind, value in self.parts() if kind != "session")

    @classmethod
    def parse(cls, scope: str) -> Identity:
        """The identity a scope names; the empty identity for a scope that is not of the
        form :meth:`scope` writes."""
        base, *rest = scope.split("/")
        if not rest or not _BASE.fullmatch(base):
            return _NOBODY
        found: dict[str, str] = {}
        order = ("user", "agent", "session")
        last = -1
        for part in rest:
            kind, sep, value = part.partition(":")
            if not sep or kind not in order or order.index(kind) <= last:
                return _NOBODY
            last = order.index(kind)
            try:
                found[kind] = identity_value(kind, value)
            except ValueError:
                return _NOBODY
            if found[kind] != value:
                return _NOBODY
        return cls(**found)

    def holds(self, wanted: Identity) -> bool:
        """Whether this identity has every part ``wanted`` names (``memory/user:maya/agent:x``
        holds user maya's memory)."""
        return all(getattr(self, kind) == value for kind, value in wanted.parts())

    def to_dict(self) -> dict[str, str | None]:
        return {"user": self.user, "agent": self.agent, "session": self.session}


_NOBODY = Identity()


@dataclass(frozen=True, slots=True)
class Principal:
    """Someone (an agent, a service, a person) who reads the store with limited rights.

    ``scopes`` are the access scopes it may read (``*``: every source that has one);
    ``sources``, when given, further narrows it to sources whose scope or id matches one of
    these globs. ``write`` is recorded for the server's write routes; a memory opened for a
    principal refuses every write. The owner (local use, no principal) reads every unlocked
    source.
    """

    name: str
    scopes: tuple[str, ...]
    sources: tuple[str, ...] = ()
    write: bool = False
    created_at: datetime | None = None
    rotated_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Record:
    """One message, note or line of a source, as the connector read it.

    ``ref`` is the citation back-pointer: ``file:line`` for line-based formats,
    ``file#<message-id>`` for mail, ``file#<ts>`` for Slack. ``time`` is timezone-aware UTC.
    """

    text: str
    ref: str
    time: datetime | None = None
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


@dataclass(frozen=True, slots=True)
class Chunk:
    """A leaf: the unit that is indexed, embedded and cited.

    ``id`` is the first 32 hex digits of sha256 over (source id, seq, content), so an unchanged
    re-ingest produces the same ids and adds nothing. A chunk derived from a source's records
    (chat, mail, record sources) names the first of them in ``record_key`` and is identified by
    that key and its fields instead of its seq, so records added before it leave it as it is
    (see :mod:`stratamem.ingest.merge`). ``meta`` is what the chunker noted about
    it (``part`` and ``parts`` of a split text, ``messages`` in a chat window); it is left out
    of equality and hashing.
    """

    id: str
    source_id: str
    seq: int
    content: str
    token_count: int
    time_start: datetime | None
    time_end: datetime | None
    author: str | None = None
    title: str = ""
    tags: tuple[str, ...] = ()
    source_ref: str = ""
    thread: str | None = None
    doc_id: str | None = None
    version: int = 1
    content_sha256: str = ""
    record_key: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __reduce__(self) -> tuple[type[Chunk], tuple[Any, ...]]:
        # Pickled as a call with its field values, at under half the default cost for a
        # slotted dataclass: ingest sends every chunk from its reader process to its writer.
        return (Chunk, _chunk_values(self))


_chunk_values = operator.attrgetter(*(f.name for f in fields(Chunk)))


@dataclass(frozen=True, slots=True)
class SummaryNode:
    """A sealed summary: level ≥ 1 of a source tree, immutable once written.

    ``child_ids`` are chunk ids at level 1 and summary ids above. The time range is the
    min/max of the children's (unknown when any child's is), ``score`` the max of theirs.
    A summary of one document carries its ``doc_id`` and ``version``; a superseded version is
    kept, marked ``deleted``, and never read.
    """

    id: str
    tree_id: str
    source_id: str
    level: int
    parent_id: str | None
    child_ids: tuple[str, ...]
    content: str
    token_count: int
    entities: tuple[str, ...]
    topics: tuple[str, ...]
    time_start: datetime | None
    time_end: datetime | None
    score: float
    sealed_at: datetime | None
    summarizer: str
    deleted: bool = False
    doc_id: str | None = None
    version: int = 1


@dataclass(frozen=True, slots=True)
class Tree:
    """The summary tree of one source: its top node and how many levels it has grown."""

    id: str
    kind: TreeKind
    scope: str
    source_id: str
    root_id: str | None
    max_level: int
    status: str
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Mention:
    """An entity found in a node: canonical id (``person:alice chen``), kind and surface form."""

    entity_id: str
    kind: str
    surface: str

    def __reduce__(self) -> tuple[type[Mention], tuple[str, str, str]]:
        # As for Chunk: ingest sends the mentions of every chunk between processes.
        return (Mention, (self.entity_id, self.kind, self.surface))


@dataclass(frozen=True, slots=True)
class RetrievalHit:
    """The unified hit every primitive and search leg returns."""

    node_id: str
    node_kind: NodeKind
    tree_id: str
    tree_kind: TreeKind
    tree_scope: str
    level: int
    content: str
    entities: tuple[str, ...]
    topics: tuple[str, ...]
    time_start: datetime | None
    time_end: datetime | None
    score: float
    child_ids: tuple[str, ...] = ()
    source_ref: str | None = None
    source_id: str = ""
    author: str | None = None
    title: str = ""
    snippet: str = ""
    explain: dict[str, Any] = field(default_factory=dict)
    # The calibrated chance, in [0, 1], that the hit is relevant to the query, comparable
    # across queries (see ``stratamem.retrieval.relevance``); None where nothing ranked it.
    relevance: float | None = None

    @property
    def identity(self) -> Identity:
        """The user, agent and session whose memory holds the hit (read from its source's
        scope: see :class:`Identity`)."""
        return Identity.parse(self.tree_scope)

    @property
    def user(self) -> str | None:
        return self.identity.user

    @property
    def agent(self) -> str | None:
        return self.identity.agent

    @property
    def session(self) -> str | None:
        return self.identity.session

    def to_dict(self) -> dict[str, Any]:
        """The wire shape: enums as their strings, times as RFC 3339."""
        return {
            "node_id": self.node_id,
            "node_kind": self.node_kind.value,
            "tree_id": self.tree_id,
            "tree_kind": self.tree_kind.value,
            "tree_scope": self.tree_scope,
            "level": self.level,
            "content": self.content,
            "entities": list(self.entities),
            "topics": list(self.topics),
            "time_start": rfc3339(self.time_start),
            "time_end": rfc3339(self.time_end),
            "score": self.score,
            "relevance": None if self.relevance is None else round(self.relevance, 4),
            "child_ids": list(self.child_ids),
            "source_ref": self.source_ref,
            "source_id": self.source_id,
            "author": self.author,
            "title": self.title,
            "snippet": self.snippet,
            **self.identity.to_dict(),
            "explain": dict(self.explain),
        }


@dataclass(frozen=True, slots=True)
class QueryResponse:
    """A capped list of hits with the match count before the cap."""

    hits: tuple[RetrievalHit, ...]
    total: int
    # For a list ranked by relevance to a query: whether no hit reached the floor (see
    # :attr:`SearchResponse.nothing_relevant`); None for a list that is not.
    nothing_relevant: bool | None = None

    @property
    def truncated(self) -> bool:
        return self.total > len(self.hits)

    @classmethod
    def empty(cls) -> QueryResponse:
        return cls(hits=(), total=0)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "hits": [h.to_dict() for h in self.hits],
            "total": self.total,
            "truncated": self.truncated,
        }
        if self.nothing_relevant is not None:
            out["nothing_relevant"] = self.nothing_relevant
        return out


@dataclass(frozen=True, slots=True)
class EntityMatch:
    """One entity: its canonical id, and the other ids that name it (``aliases``: a mail
    address, a display name, a name a merge joined), whose mentions ``mention_count`` and
    ``last_seen`` include."""

    canonical_id: str
    kind: str
    surface: str
    mention_count: int
    last_seen: datetime | None
    aliases: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "canonical_id": self.canonical_id,
            "kind": self.kind,
            "surface": self.surface,
            "mention_count": self.mention_count,
            "last_seen": rfc3339(self.last_seen),
            "aliases": list(self.aliases),
        }


@dataclass(frozen=True, slots=True)
class EntityDecision:
    """A merge (``entity_a`` is ``entity_b``, the canonical one) or a split (an alias a
    source states between them is not followed) that someone recorded: who (``made_by``,
    None: the store's owner) and when, and, once undone, by whom and when."""

    id: int
    action: str
    entity_a: str
    entity_b: str
    made_by: str | None
    made_at: datetime | None
    undone_by: str | None = None
    undone_at: datetime | None = None

    @property
    def active(self) -> bool:
        return self.undone_at is None

    @property
    def pair(self) -> tuple[str, str]:
        return (self.entity_a, self.entity_b)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "action": self.action,
            "entity_a": self.entity_a,
            "entity_b": self.entity_b,
            "made_by": self.made_by,
            "made_at": rfc3339(self.made_at),
            "undone_by": self.undone_by,
            "undone_at": rfc3339(self.undone_at),
        }


def rfc3339(value: datetime | None) -> str | None:
    """``2024-05-01T09:30:00Z`` for a UTC time, ``None`` for none."""
    if value is None:
        return None
    return value.isoformat().replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Filters:
    """Narrowing applied inside every query, before any limit.

    ``sources`` matches source ids or scopes; a scope ending in ``*`` is a prefix
    (``slack:*``). ``kinds`` are :class:`SourceKind` values. Times are inclusive.
    ``users``, ``agents`` and ``sessions`` keep the sources whose :class:`Identity` has one
    of the ids given, for each that is given (a user or agent id any case); they are turned
    into source ids by :func:`~stratamem.retrieval.scope.resolve` before a store reads them.
    """

    sources: tuple[str, ...] = ()
    kinds: tuple[SourceKind, ...] = ()
    since: datetime | None = None
    until: datetime | None = None
    users: tuple[str, ...] = ()
    agents: tuple[str, ...] = ()
    sessions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for kind in ("user", "agent", "session"):
            name = kind + "s"
            given = getattr(self, name)
            object.__setattr__(self, name, identity_values(kind, given) if given else ())
        # Held as aware UTC (a naive time taken as UTC), so naive and aware times compare.
        object.__setattr__(self, "since", optional_utc(self.since, name="since"))
        object.__setattr__(self, "until", optional_utc(self.until, name="until"))
        if self.since and self.until and self.until < self.since:
            raise ValueError(f"until ({self.until}) is before since ({self.since})")

    @property
    def names_identity(self) -> bool:
        """Whether the filters name users, agents or sessions."""
        return bool(self.users or self.agents or self.sessions)

    def admits(self, identity: Identity) -> bool:
        """Whether a source of ``identity`` passes the users, agents and sessions given."""
        return (
            (not self.users or identity.user in self.users)
            and (not self.agents or identity.agent in self.agents)
            and (not self.sessions or identity.session in self.sessions)
        )


@dataclass(frozen=True, slots=True)
class ScoreBreakdown:
    """Why a hit ranks where it does: each signal's weighted share of ``final``.

    ``keyword``, ``vector``, ``graph`` and ``freshness`` are the fused contributions (already
    weighted), ``context`` the part of the keyword and vector shares that a chat turn got from
    the turns around it; ``expansion`` is what a hit reached through the graph inherited from
    its seed; ``boost`` the multiplier applied (1.0 = none); ``rerank`` the reranker's score if
    one ran.
    """

    keyword: float = 0.0
    vector: float = 0.0
    graph: float = 0.0
    freshness: float = 0.0
    expansion: float = 0.0
    boost: float = 1.0
    rerank: float | None = None
    final: float = 0.0
    context: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "keyword": round(self.keyword, 6),
            "vector": round(self.vector, 6),
            "graph": round(self.graph, 6),
            "freshness": round(self.freshness, 6),
            "expansion": round(self.expansion, 6),
            "context": round(self.context, 6),
            "boost": round(self.boost, 6),
            "rerank": None if self.rerank is None else round(self.rerank, 6),
            "final": round(self.final, 6),
        }


@dataclass(frozen=True, slots=True)
class Card:
    """A hit packed for a prompt: its text at the detail the token budget allowed.

    ``form`` is ``full`` (the whole chunk), ``compact`` (cut to a share of the budget at a
    token boundary) or ``line`` (title, source and time only).
    """

    hit: RetrievalHit
    text: str
    tokens: int
    form: str
    reason: str
    breakdown: ScoreBreakdown
    tier0: bool = False  # a pinned item or decision, paid from the budget's kept share

    def to_dict(self) -> dict[str, Any]:
        return {
            "node_id": self.hit.node_id,
            "text": self.text,
            "tokens": self.tokens,
            "form": self.form,
            "tier0": self.tier0,
            "reason": self.reason,
            "breakdown": self.breakdown.to_dict(),
            "hit": self.hit.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class SearchResponse:
    """The hybrid search result: ranked hits, their cards when a budget was given, and what
    each stage did (legs that ran or were off and why, rerank status)."""

    hits: tuple[RetrievalHit, ...]
    total: int
    cards: tuple[Card, ...] = ()
    budget: int | None = None
    legs: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    # No hit's relevance reached the floor (``min_relevance``, else the calibration's
    # default threshold): what is stored does not answer the query.
    nothing_relevant: bool = False

    @property
    def truncated(self) -> bool:
        return self.total > len(self.hits)

    def to_dict(self) -> dict[str, Any]:
        return {
            "hits": [h.to_dict() for h in self.hits],
            "total": self.total,
            "truncated": self.truncated,
            "nothing_relevant": self.nothing_relevant,
            "cards": [c.to_dict() for c in self.cards],
            "budget": self.budget,
            "legs": dict(self.legs),
            "notes": list(self.notes),
        }
