"""What the inspector's sources, summary-tree and entity pages show, read through a
:class:`~stratamem.api.memory.Memory` opened as the page's reader: plain values, no HTML.

Every read goes through the memory's public methods, so the reader's scopes and the locks
apply as they do on every other door: a source hidden from the reader, and whatever only it
holds, is absent here as if it did not exist (a view of it is None, as for a missing one).

Each function is one page's data: :func:`sources` and :func:`source` (the sources page and one
source), :func:`tree` (one level of a source's summary tree), :func:`entities` and
:func:`entity` (the entity list and one entity with its mentions over time, the entities
mentioned with it and the timeline of its facts). :func:`register` gives a Jinja2
environment the charts and filters the templates use.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from stratamem.errors import NotFoundError
from stratamem.server.inspector.charts import Point, fact_timeline, mentions_chart, score_bars

if TYPE_CHECKING:
    import jinja2

    from stratamem.api.memory import Memory
    from stratamem.types import RetrievalHit, Source

__all__ = [
    "DAILY_SPAN_DAYS",
    "EXCERPT_CHARS",
    "RELATED_LIMIT",
    "EntityDetail",
    "EntityRow",
    "FactEntry",
    "Neighbour",
    "SourceDetail",
    "SourceRow",
    "TreeLevel",
    "TreeNode",
    "entities",
    "entity",
    "register",
    "source",
    "sources",
    "tree",
]

EXCERPT_CHARS = 160
"""The length of a node's one-line excerpt in the tree outline."""

RELATED_LIMIT = 20
"""How many co-mentioned entities an entity's page shows."""

DAILY_SPAN_DAYS = 62
"""Mentions spanning at most this many days are counted per day, longer spans per month."""

MAX_ENTITIES = 100


# -- sources -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SourceRow:
    """One source as the sources page lists it. ``chunks`` is None for a locked source (the
    owner's: a principal never sees one), whose content is sealed and cannot be counted."""

    id: str
    name: str
    scope: str
    kind: str
    platform: str
    chunks: int | None
    access: tuple[str, ...]
    locked: bool
    ingested_at: datetime | None
    created_by: str | None


@dataclass(frozen=True, slots=True)
class SourceDetail:
    """One source's page: its row, where it was read from, and its summary tree's shape
    (``levels``: per level, how many summaries; ``unsealed``: chunks waiting for the next
    seal). ``tree_id`` is None for a source with no tree yet, or a locked one."""

    source: SourceRow
    location: str
    tree_id: str | None
    levels: tuple[tuple[int, int], ...]
    unsealed: int


def sources(memory: Memory) -> list[SourceRow]:
    """The sources the reader may see, by name; a locked source only for the owner."""
    rows = [_row(s) for s in memory.sources.list() if _visible(memory, s)]
    return sorted(rows, key=lambda r: (r.name.lower(), r.id))


def source(memory: Memory, source_id: str) -> SourceDetail | None:
    """One source by id (or scope); None when the reader may not see it or there is none."""
    found = _source(memory, source_id)
    if found is None:
        return None
    tree_id: str | None = None
    levels: tuple[tuple[int, int], ...] = ()
    unsealed = 0
    if not found.locked:
        try:
            tree_id = memory.trees.get(found.id).id
        except NotFoundError:
            tree_id = None
        if tree_id is not None:
            levels = tuple(
                (level, n) for level, (n, _) in sorted(memory.trees.stats(tree_id).items())
            )
            unsealed = memory.trees.unsealed(tree_id)
    return SourceDetail(
        source=_row(found),
        location=found.location,
        tree_id=tree_id,
        levels=levels,
        unsealed=unsealed,
    )


def _source(memory: Memory, ref: str) -> Source | None:
    try:
        found = memory.sources.get(ref)
    except (NotFoundError, ValueError):
        return None
    return found if _visible(memory, found) else None


def _visible(memory: Memory, found: Source) -> bool:
    # The store shows a locked source to the owner alone already; a principal's page never
    # names one, whatever a store of another version would list.
    return not found.locked or memory.principal is None


def _row(found: Source) -> SourceRow:
    return SourceRow(
        id=found.id,
        name=found.title or found.scope,
        scope=found.scope,
        kind=found.kind.value,
        platform=found.platform,
        chunks=None if found.locked else found.chunk_count,
        access=found.access,
        locked=found.locked,
        ingested_at=found.ingested_at,
        created_by=found.created_by,
    )


# -- the summary tree --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TreeNode:
    """A node of the outline: a summary (``kind`` ``summary``, ``level`` ≥ 1) or a chunk
    (``leaf``, level 0), its time range, a one-line excerpt and how many children it has."""

    id: str
    kind: str
    level: int
    time_start: datetime | None
    time_end: datetime | None
    excerpt: str
    children: int
    author: str | None = None


@dataclass(frozen=True, slots=True)
class TreeLevel:
    """One step of the drill-down through a source's summary tree.

    At the top (``node`` None): the tree's summaries that have no parent yet, highest level
    first, and ``unsealed``, the chunks waiting for the next seal. Below: ``node`` and its
    whole ``text``, its ``children`` (summaries, or at level 1 the chunks it covers), and
    ``path``, the summaries above it, the top first. ``time_start``/``time_end`` are the
    node's, or at the top those of every summary there."""

    source_id: str
    source_name: str
    tree_id: str | None
    node: TreeNode | None
    text: str
    time_start: datetime | None
    time_end: datetime | None
    children: tuple[TreeNode, ...]
    path: tuple[TreeNode, ...]
    unsealed: int = 0


def tree(memory: Memory, source_id: str, node_id: str | None = None) -> TreeLevel | None:
    """The outline of a source's summary tree at ``node_id`` (None: the top). None when the
    reader may not see the source or there is none, and when ``node_id`` is not a node of
    that source the reader may see."""
    found = _source(memory, source_id)
    if found is None:
        return None
    name = found.title or found.scope
    tree_id: str | None = None
    if not found.locked:
        try:
            tree_id = memory.trees.get(found.id).id
        except NotFoundError:
            tree_id = None
    if node_id is None:
        tops = [] if tree_id is None else memory.trees.tops(tree_id)
        children = tuple(_node(h) for h in tops)
        return TreeLevel(
            source_id=found.id,
            source_name=name,
            tree_id=tree_id,
            node=None,
            text="",
            time_start=_earliest(c.time_start for c in children),
            time_end=_latest(c.time_end for c in children),
            children=children,
            path=(),
            unsealed=0 if tree_id is None else memory.trees.unsealed(tree_id),
        )
    hits = memory.nodes([node_id])
    if not hits or hits[0].source_id != found.id:
        return None
    hit = hits[0]
    below = memory.drill_down(hit.node_id, max_depth=1) if hit.level > 0 else []
    return TreeLevel(
        source_id=found.id,
        source_name=name,
        tree_id=tree_id,
        node=_node(hit),
        text=hit.content,
        time_start=hit.time_start,
        time_end=hit.time_end,
        children=tuple(_node(h) for h in below),
        path=tuple(_node(h) for h in memory.trees.ancestors(hit.node_id)),
    )


def _node(hit: RetrievalHit) -> TreeNode:
    return TreeNode(
        id=hit.node_id,
        kind=hit.node_kind.value,
        level=hit.level,
        time_start=hit.time_start,
        time_end=hit.time_end,
        excerpt=excerpt(hit.content),
        children=len(hit.child_ids),
        author=hit.author,
    )


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """``text`` on one line, cut at a word to at most ``limit`` characters (``…`` marks a
    cut)."""
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    cut = line[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


def _earliest(times: Iterable[datetime | None]) -> datetime | None:
    known = [t for t in times if t is not None]
    return min(known) if known else None


def _latest(times: Iterable[datetime | None]) -> datetime | None:
    known = [t for t in times if t is not None]
    return max(known) if known else None


# -- entities ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EntityRow:
    """One entity as the entity list shows it: its canonical id, name and kind, how often
    the reader's sources mention it (facts naming it included), in how many sources, when
    last, and its other ids."""

    id: str
    name: str
    kind: str
    mentions: int
    sources: int
    last_seen: datetime | None
    aliases: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Neighbour:
    """An entity mentioned together with another, and how strongly (the co-mention weight)."""

    id: str
    weight: float


@dataclass(frozen=True, slots=True)
class FactEntry:
    """One row of an entity's facts, as the timeline shows it.

    ``ended`` says how the row stopped, where it did: ``""`` (believed and still true),
    ``closed`` (believed, true until ``valid_to``), ``superseded`` (no longer believed: a
    later statement replaced it: ``superseded_by`` that statement's row, ``superseded_with``
    the value it says) or ``retracted``
    (no longer believed: corrected as never true). A locked source's facts are sealed with
    it and are not shown at all (see :attr:`EntityDetail.sealed`)."""

    id: str
    subject: str
    predicate: str
    value: str
    value_is_entity: bool
    valid_from: datetime | None
    valid_to: datetime | None
    recorded_at: datetime
    expired_at: datetime | None
    source_id: str
    origin: str
    confidence: float
    ended: str
    superseded_by: str | None = None
    superseded_with: str | None = None


@dataclass(frozen=True, slots=True)
class EntityDetail:
    """One entity's page. ``timeline`` counts its mentions per ``bucket`` (``day`` for a
    span of up to :data:`DAILY_SPAN_DAYS` days, else ``month``; empty buckets included),
    ``undated`` those without a time. ``sources`` are (id, name) of the sources that mention
    it; ``related`` the entities mentioned with it, strongest first; ``facts`` every fact
    about it, by predicate then valid time. ``sealed`` names the locked sources (the owner's
    view only), whose facts and mentions are sealed and not shown."""

    id: str
    name: str
    kind: str
    aliases: tuple[str, ...]
    mentions: int
    last_seen: datetime | None
    sources: tuple[tuple[str, str], ...]
    timeline: tuple[Point, ...]
    bucket: str
    undated: int
    related: tuple[Neighbour, ...]
    facts: tuple[FactEntry, ...]
    sealed: tuple[str, ...] = ()


def entities(memory: Memory, query: str = "", limit: int = 50) -> list[EntityRow]:
    """The entities whose id or name contains ``query`` (all of them for a blank one), most
    mentioned first; at most ``limit`` (up to 100)."""
    limit = max(1, min(limit, MAX_ENTITIES))
    if query.strip():
        found = memory.search_entities(query, limit=limit)
    else:
        found = memory.entities.top(limit=limit)
    return [
        EntityRow(
            id=m.canonical_id,
            name=m.surface,
            kind=m.kind,
            mentions=m.mention_count,
            sources=len({c.source_id for c in memory.entities.mentions(m.canonical_id)}),
            last_seen=m.last_seen,
            aliases=m.aliases,
        )
        for m in found
    ]


def entity(memory: Memory, entity_id: str) -> EntityDetail | None:
    """One entity (by any of its ids) as the reader's sources know it; None when none of
    them mentions it or states a fact about it (hidden and unknown alike)."""
    entity_id = entity_id.strip()
    if not entity_id:
        return None
    match = next(
        (
            m
            for m in memory.search_entities(entity_id, limit=MAX_ENTITIES)
            if m.canonical_id == entity_id or entity_id in m.aliases
        ),
        None,
    )
    canonical = match.canonical_id if match is not None else entity_id
    counts = memory.entities.mentions(canonical)
    try:
        rows = memory.facts.about(canonical)
    except ValueError:  # an id of a kind no fact's subject can be
        rows = []
    if match is None and not counts and not rows:
        return None
    names = {s.id: s.title or s.scope for s in memory.sources.list()}
    mentioned = sorted({c.source_id for c in counts} | {r.source_id for r in rows})
    days: dict[date, int] = defaultdict(int)
    undated = 0
    for c in counts:
        if c.day is None:
            undated += c.count
        else:
            days[c.day] += c.count
    timeline, bucket = buckets(days)
    sealed: tuple[str, ...] = ()
    if memory.principal is None:
        sealed = tuple(sorted(s.title or s.scope for s in memory.sources.list() if s.locked))
    return EntityDetail(
        id=canonical,
        name=match.surface if match is not None else canonical.partition(":")[2] or canonical,
        kind=match.kind if match is not None else canonical.partition(":")[0],
        aliases=match.aliases if match is not None else (),
        mentions=match.mention_count if match is not None else sum(c.count for c in counts),
        last_seen=match.last_seen if match is not None else None,
        sources=tuple((s, names.get(s, s)) for s in mentioned),
        timeline=timeline,
        bucket=bucket,
        undated=undated,
        related=tuple(
            Neighbour(other, weight)
            for other, weight in memory.related(canonical, limit=RELATED_LIMIT)
        ),
        facts=tuple(fact_entries(rows)),
        sealed=sealed,
    )


def buckets(days: dict[date, int]) -> tuple[tuple[Point, ...], str]:
    """Mention counts per day as a chart's points: per day over a span of up to
    :data:`DAILY_SPAN_DAYS` days, else per month, from the first to the last, empty ones
    included; and which of the two (``day`` or ``month``)."""
    if not days:
        return (), "day"
    first, last = min(days), max(days)
    if (last - first).days < DAILY_SPAN_DAYS:
        span = (first + timedelta(days=i) for i in range((last - first).days + 1))
        return tuple(Point(d.isoformat(), days.get(d, 0)) for d in span), "day"
    months: dict[tuple[int, int], int] = defaultdict(int)
    for day, count in days.items():
        months[(day.year, day.month)] += count
    year, month = first.year, first.month
    out: list[Point] = []
    while (year, month) <= (last.year, last.month):
        out.append(Point(f"{year:04d}-{month:02d}", months.get((year, month), 0)))
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return tuple(out), "month"


class Fact(Protocol):
    """A row of the fact store as ``mem.facts`` gives it (see ``docs/memory.md``)."""

    @property
    def id(self) -> str: ...
    @property
    def subject(self) -> str: ...
    @property
    def predicate(self) -> str: ...
    @property
    def object(self) -> str: ...
    @property
    def object_is_entity(self) -> bool: ...
    @property
    def valid_from(self) -> datetime | None: ...
    @property
    def valid_to(self) -> datetime | None: ...
    @property
    def recorded_at(self) -> datetime: ...
    @property
    def expired_at(self) -> datetime | None: ...
    @property
    def source_id(self) -> str: ...
    @property
    def origin(self) -> str: ...
    @property
    def confidence(self) -> float: ...
    @property
    def single(self) -> bool: ...


def fact_entries(rows: Sequence[Fact]) -> list[FactEntry]:
    """The rows as timeline entries, each with how it ended (see :class:`FactEntry`).

    A statement that changes a timeline expires the rows it overlaps and records, at the
    same transaction time, its own row and what of the old rows still holds (see
    :func:`stratamem.memory.facts.reconcile`); a correction records nothing. So a row no
    longer believed was superseded where its timeline (its source's, subject's and
    predicate's) recorded a row overlapping it when it expired: the statement's own row,
    the one that says something else, or failing that covers another span. Otherwise it
    was retracted."""
    timelines: dict[tuple[str, str, str], list[Fact]] = defaultdict(list)
    for row in rows:
        timelines[(row.source_id, row.subject, row.predicate)].append(row)
    out: list[FactEntry] = []
    for row in rows:
        ended = ""
        successor: Fact | None = None
        if row.expired_at is not None:
            successor = _successor(row, timelines[(row.source_id, row.subject, row.predicate)])
            ended = "retracted" if successor is None else "superseded"
        elif row.valid_to is not None:
            ended = "closed"
        out.append(
            FactEntry(
                id=row.id,
                subject=row.subject,
                predicate=row.predicate,
                value=row.object,
                value_is_entity=row.object_is_entity,
                valid_from=row.valid_from,
                valid_to=row.valid_to,
                recorded_at=row.recorded_at,
                expired_at=row.expired_at,
                source_id=row.source_id,
                origin=row.origin,
                confidence=row.confidence,
                ended=ended,
                superseded_by=None if successor is None else successor.id,
                superseded_with=None if successor is None else successor.object,
            )
        )
    return out


def _successor(row: Fact, timeline: Sequence[Fact]) -> Fact | None:
    recorded = [
        r
        for r in timeline
        if r.id != row.id
        and r.recorded_at == row.expired_at
        and (row.single or r.object == row.object)
        and _overlap(r, row)
    ]
    if not recorded:
        return None
    recorded.sort(
        key=lambda r: (
            r.object == row.object,
            (r.valid_from, r.valid_to) == (row.valid_from, row.valid_to),
            r.id,
        )
    )
    return recorded[0]


def _overlap(a: Fact, b: Fact) -> bool:
    a_start = a.valid_from or datetime.min.replace(tzinfo=UTC)
    b_start = b.valid_from or datetime.min.replace(tzinfo=UTC)
    a_end = a.valid_to or datetime.max.replace(tzinfo=UTC)
    b_end = b.valid_to or datetime.max.replace(tzinfo=UTC)
    return a_start < b_end and b_start < a_end


# -- templates ---------------------------------------------------------------------------------


def register(env: jinja2.Environment) -> None:
    """Give ``env`` what the sources, tree and entity templates use: the charts
    (``mentions_chart``, ``fact_timeline``, ``score_bars``) and the filter ``when`` (a time
    as ``2024-03-12 09:30`` UTC, ``—`` for none)."""
    globals_: dict[str, Any] = {
        "mentions_chart": mentions_chart,
        "fact_timeline": fact_timeline,
        "score_bars": score_bars,
    }
    env.globals.update(globals_)
    env.filters["when"] = when


def when(value: datetime | date | None) -> str:
    """A time for a page: ``2024-03-12 09:30`` (UTC), ``2024-03-12`` for midnight or a
    day, ``—`` for none."""
    if value is None:
        return "—"
    if isinstance(value, datetime):
        at = value.astimezone(UTC)
        if (at.hour, at.minute, at.second, at.microsecond) == (0, 0, 0, 0):
            return at.strftime("%Y-%m-%d")
        return at.strftime("%Y-%m-%d %H:%M")
    return value.isoformat()
