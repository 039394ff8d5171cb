"""Facts written to and read from a store: who owns a fact, and the reads a reader may make.

A fact's evidence (node ids: messages, chunks, summaries) names the source it belongs to; a
fact asserted without evidence goes to the source named (``facts:asserted`` by default, made
on first use, ``private`` to the owner). Every read goes through the store's gate, so a
principal sees the facts of the sources it may read and nothing else.

A fact stated for a ``user``, ``agent`` or ``session`` and without evidence goes to that
identity's facts source (``facts/user:maya``, see :class:`~stratamem.types.Identity`), made on
first use ``private`` and readable by the principals holding ``user:maya``; with evidence,
the evidence must lie in that identity's memory. The reads narrow to the facts of the
sources of the users, agents and sessions given.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np

from stratamem.access.writes import refuse_foreign
from stratamem.embed.base import Embedder
from stratamem.errors import LockError, NotFoundError
from stratamem.memory.facts import Statement, as_of, fact_text, reconcile, retract
from stratamem.retrieval import primitives
from stratamem.retrieval.scope import identity_sources
from stratamem.store.access import identity_access
from stratamem.store.base import Store
from stratamem.store.facts import FACTS_LIMIT, Fact, FactWrite, Origin
from stratamem.types import Identity, SourceKind

DEFAULT_SOURCE = "facts:asserted"
# The base of a user's, agent's or session's facts source: ``facts/user:maya``.
IDENTITY_BASE = "facts"
ENTITY_KINDS = frozenset(
    {"person", "email", "handle", "channel", "tag", "url", "topic", "user", "agent"}
)
_ENTITY = re.compile(r"^([a-z]+):(.+)$", re.DOTALL | re.IGNORECASE)


def entity_id(value: str, *, what: str = "subject") -> str:
    """``kind:name`` in canonical form (``person:Carol Diaz`` → ``person:carol diaz``); a
    value without a known kind is refused, naming the kinds."""
    found = _ENTITY.match(value.strip())
    if found is None or found.group(1).lower() not in ENTITY_KINDS:
        raise ValueError(
            f"{what} {value!r} is not an entity id: write kind:name, the kind one of "
            f"{', '.join(sorted(ENTITY_KINDS))} (e.g. person:carol diaz, topic:phoenix)"
        )
    name = " ".join(found.group(2).strip().lower().split())
    if not name:
        raise ValueError(f"{what} {value!r} names no entity")
    return f"{found.group(1).lower()}:{name}"


def predicate_name(value: str) -> str:
    """Lower case, words joined by ``_``: ``Leads On-Call`` → ``leads_on-call``."""
    name = "_".join(value.strip().lower().split())
    if not name:
        raise ValueError("a fact needs a predicate")
    return name


def statement(
    subject: str,
    predicate: str,
    obj: str,
    *,
    valid_from: datetime | None = None,
    valid_to: datetime | None = None,
    evidence: Sequence[str] = (),
    confidence: float = 1.0,
    origin: Origin = "asserted",
    many: bool = False,
) -> Statement:
    """A statement in canonical form: the subject an entity id, the object one too when it
    is written as one (``person:…``), else the literal as given. ``many``: the predicate
    holds many values at once, and this one adds to the others."""
    literal = obj.strip()
    is_entity = False
    found = _ENTITY.match(literal)
    if found is not None and found.group(1).lower() in ENTITY_KINDS:
        literal, is_entity = entity_id(literal, what="object"), True
    return Statement(
        subject=entity_id(subject),
        predicate=predicate_name(predicate),
        object=literal,
        valid_from=_utc(valid_from, "valid_from"),
        valid_to=_utc(valid_to, "valid_to"),
        evidence=tuple(dict.fromkeys(evidence)),
        confidence=confidence,
        origin=origin,
        object_is_entity=is_entity,
        single=not many,
    )


def remember(
    store: Store,
    said: Statement,
    *,
    source: str | None = None,
    user: str | None = None,
    agent: str | None = None,
    session: str | None = None,
    now: datetime | None = None,
    embedder: Embedder | None = None,
    join: bool = True,
) -> FactWrite:
    """Write ``said`` into its source's timeline, in one transaction; with ``embedder``, what
    each recorded row says is embedded in the same transaction (for :func:`search_facts`).
    ``user``, ``agent`` and ``session`` say whose memory holds the fact (``source`` is then
    the base of the identity's source, ``facts`` by default). ``join=False`` refuses a source
    a principal made (see :func:`~stratamem.access.writes.refuse_foreign`)."""
    now = _utc(now or datetime.now(UTC), "now")
    assert now is not None
    whose = Identity.of(user=user, agent=agent, session=session)
    with store.transaction():
        if whose:
            home, evidenced = _identity_home(store, said.evidence, source, whose)
        else:
            home, evidenced = _home(store, said.evidence, source)
        refuse_foreign(store.resolve_source(home), join=join)
        rows = store.fact_rows(home, said.subject, said.predicate)
        said = _starting(said, rows, evidenced or now)
        change = reconcile(rows, said, now, source=home)
        store.write_facts(home, change.expire, change.record, now)
        if embedder is not None and change.record:
            texts = [fact_text(f) for f in change.record]
            vectors = embedder.embed_batch(texts, role="passage")
            store.write_fact_vectors(
                embedder.spec.signature,
                [
                    (f.id, np.asarray(v, dtype="<f4").tobytes())
                    for f, v in zip(change.record, vectors, strict=True)
                ],
            )
    return FactWrite(tuple(change.expire), tuple(replace(f, source_id=home) for f in change.record))


def embed_facts(store: Store, embedder: Embedder, *, batch: int = 256) -> int:
    """Embed every fact (believed or not) that has no vector of ``embedder``'s model, in the
    caller's transaction; how many. For when a store takes a model: the facts written before
    it had one get what those written after get as they are written, so what a store holds
    does not depend on when its model was chosen."""
    rows = store.facts(believed_only=False, limit=1_000_000_000)
    signature = embedder.spec.signature
    done = 0
    for at in range(0, len(rows), batch):
        part = rows[at : at + batch]
        held = store.fact_vectors(signature, [f.id for f in part])
        todo = [f for f in part if f.id not in held]
        if not todo:
            continue
        vectors = embedder.embed_batch([fact_text(f) for f in todo], role="passage")
        store.write_fact_vectors(
            signature,
            [
                (f.id, np.asarray(v, dtype="<f4").tobytes())
                for f, v in zip(todo, vectors, strict=True)
            ],
        )
        done += len(todo)
    return done


def unsay(store: Store, fact: str, *, now: datetime | None = None) -> FactWrite:
    """A correction: fact ``fact`` was never true. It stays in the history, no longer
    believed from now on."""
    now = _utc(now or datetime.now(UTC), "now")
    assert now is not None
    with store.transaction():
        found = store.facts(ids=[fact], believed_only=False)
        if not found:
            raise NotFoundError(f"no fact with id {fact!r}")
        row = found[0]
        change = retract(row, now, store.fact_rows(row.source_id, row.subject, row.predicate))
        store.write_facts(row.source_id, change.expire, (), now)
    return FactWrite(tuple(change.expire), ())


def recall(
    store: Store,
    *,
    subject: str | None = None,
    predicate: str | None = None,
    valid_at: datetime | None = None,
    known_at: datetime | None = None,
    limit: int = FACTS_LIMIT,
    user: str | Sequence[str] | None = None,
    agent: str | Sequence[str] | None = None,
    session: str | Sequence[str] | None = None,
) -> list[Fact]:
    """The facts true at ``valid_at`` (None: now) as known at ``known_at`` (None: now), of
    the memory of ``user``, ``agent`` and ``session`` where given (one id or several each)."""
    homes = identity_sources(store, users=user, agents=agent, sessions=session)
    rows = store.facts(
        subject=None if subject is None else entity_id(subject),
        predicate=None if predicate is None else predicate_name(predicate),
        believed_only=known_at is None,
        # Every row: those of the past sort among those true now, and a page of them could
        # hide what holds.
        limit=1_000_000,
    )
    if homes is not None:
        rows = [r for r in rows if r.source_id in homes]
    when = _utc(valid_at, "as_of") or datetime.now(UTC)
    found = as_of(rows, valid_at=when, known_at=_utc(known_at, "known_at"))
    return found[: max(1, limit)]


def timeline(
    store: Store,
    subject: str,
    predicate: str,
    *,
    known_at: datetime | None = None,
    user: str | Sequence[str] | None = None,
    agent: str | Sequence[str] | None = None,
    session: str | Sequence[str] | None = None,
) -> list[Fact]:
    """Every value ``subject``'s ``predicate`` had, oldest first, as known at ``known_at``;
    with ``known_at`` None, also the rows no longer believed (corrected or replaced), each
    with when it stopped being believed. ``user``, ``agent``, ``session``: as for
    :func:`recall`."""
    homes = identity_sources(store, users=user, agents=agent, sessions=session)
    rows = store.facts(
        subject=entity_id(subject),
        predicate=predicate_name(predicate),
        believed_only=False,
        limit=1_000_000,
    )
    if homes is not None:
        rows = [r for r in rows if r.source_id in homes]
    if known_at is not None:
        when = _utc(known_at, "known_at")
        assert when is not None
        rows = [r for r in rows if r.known_at(when)]
    return sorted(rows, key=lambda r: (r.valid_from is not None, r.valid_from, r.recorded_at, r.id))


def _starting(said: Statement, rows: Sequence[Fact], start: datetime) -> Statement:
    """``said`` starting at ``start`` (its evidence's time, else now) where it gives no
    ``valid_from`` and its timeline already holds a value: a new value then closes the old
    one there rather than replacing it as far back as known. A first value, one of many, or
    one whose ``valid_to`` comes before ``start`` keeps the start it was given."""
    if said.valid_from is not None or not said.single:
        return said
    if not any(r.believed and r.single for r in rows):
        return said
    if said.valid_to is not None and said.valid_to <= start:
        return said
    return replace(said, valid_from=start)


def _home(store: Store, evidence: Sequence[str], source: str | None) -> tuple[str, datetime | None]:
    """The source a fact belongs to: that of its evidence, else ``source``; and the time of
    its latest piece of evidence (None: none has a time). Evidence may be any node id, an
    item's id, or a chunk id an item had before an edit (see
    :mod:`stratamem.retrieval.item_nodes`)."""
    if evidence:
        nodes = primitives.nodes(store, evidence)
        found = {n.node_id for n in nodes}
        missing = [e for e in evidence if e not in found]
        if missing:
            raise NotFoundError(f"no node with id {missing[0]!r} (evidence)")
        owners = {n.source_id for n in nodes}
        if len(owners) > 1:
            raise ValueError("the evidence lies in several sources; state the fact once per source")
        home = owners.pop()
        if source is not None and store.resolve_source(source).id != home:
            raise ValueError(f"the evidence is not in source {source!r}")
        times = [t for n in nodes for t in (n.time_start, n.time_end) if t is not None]
        return home, _utc(max(times), "evidence time") if times else None
    scope = source or DEFAULT_SOURCE
    try:
        found_source = store.resolve_source(scope)
    except NotFoundError:
        if source is not None and source != DEFAULT_SOURCE:
            raise
        return (
            store.upsert_source(
                scope=DEFAULT_SOURCE,
                kind=SourceKind.RECORD,
                platform="facts",
                location="",
                title="Facts asserted without evidence",
            ),
            None,
        )
    if found_source.locked:
        raise LockError(f"source {found_source.scope!r} is locked: unlock it to add facts")
    return found_source.id, None


def _identity_home(
    store: Store, evidence: Sequence[str], source: str | None, whose: Identity
) -> tuple[str, datetime | None]:
    """The source of ``whose`` memory a fact belongs to: that of its evidence, which must be
    of ``whose`` memory (and ``source``, where given), else ``whose`` facts source of base
    ``source`` (``facts``), made on first use."""
    if evidence:
        home, evidenced = _home(store, evidence, source)
        if not Identity.parse(store.resolve_source(home).scope).holds(whose):
            of = ", ".join(f"{kind} {value!r}" for kind, value in whose.parts())
            raise ValueError(f"the evidence is not in the memory of {of}")
        return home, evidenced
    scope = whose.scope(source or IDENTITY_BASE)
    try:
        found = store.resolve_source(scope)
    except NotFoundError:
        made = store.upsert_source(
            scope=scope,
            kind=SourceKind.RECORD,
            platform="facts",
            location="",
            title=f"Facts of {scope.partition('/')[2]}",
            access=identity_access(whose),
        )
        return made, None
    if found.locked:
        raise LockError(f"source {found.scope!r} is locked: unlock it to add facts")
    return found.id, None


def _utc(when: datetime | None, name: str) -> datetime | None:
    if when is None:
        return None
    if when.tzinfo is None:
        raise ValueError(f"{name} needs a time zone (e.g. 2024-03-12T09:00Z)")
    # The store keeps milliseconds: a finer time would never equal the one read back, and
    # the same statement made twice would change the store each time.
    when = when.astimezone(UTC)
    return when.replace(microsecond=when.microsecond // 1000 * 1000)
