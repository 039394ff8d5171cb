"""The reading operations: search, the seven primitives, a brief, nodes, sources and stats."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import stratamem.ops.params as p
import stratamem.ops.wire as wire
from stratamem.config import PROFILES
from stratamem.entities.search import MAX_LIMIT as MAX_ENTITY_LIMIT
from stratamem.errors import NotFoundError
from stratamem.memory.recall import TYPES as RECALL_TYPES
from stratamem.ops.context import Context
from stratamem.ops.spec import Operation, Param
from stratamem.retrieval.hybrid import MAX_LIMIT as MAX_SEARCH_LIMIT
from stratamem.retrieval.primitives import COVER_DEFAULT_LIMIT, MAX_BATCH
from stratamem.retrieval.primitives import MAX_LIMIT as MAX_LIMIT
from stratamem.types import NodeKind, rfc3339

MAX_BUDGET = 1_000_000
MAX_DEPTH = 32
BUDGET = Param(
    "budget",
    "int",
    "Pack the hits into cards so that the whole answer fits this many tokens (0: every hit whole).",
    default=None,
    ge=0,
    le=MAX_BUDGET,
)


def _ranked(a: dict[str, Any]) -> dict[str, Any]:
    """The arguments ``search`` and ``recall`` share: filters, limit and relevance floor."""
    return {
        "sources": a["sources"],
        "kinds": a["kinds"],
        "since": a["since"],
        "until": a["until"],
        "limit": a["limit"],
        "min_relevance": a["min_relevance"],
        **p.identity(a),
    }


def _search(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.reading() as m:
        found = m.search(a["query"], mode=a["mode"], profile=a["profile"], **_ranked(a))
        return wire.search(found, budget=a["budget"], explain=a["explain"])


SEARCH = Operation(
    name="search",
    group="search",
    description="Search everything for evidence about a question: hybrid keyword + semantic "
    "+ entity search, each hit with its text, a citation (`cite`), why it ranks there and "
    "its `relevance` (0-1, comparable across questions); `nothing_relevant` is true when "
    "no hit is likely to answer. "
    "Start here for any question. Give `budget` (tokens) to get the hits packed as cards "
    "whose whole answer fits it.",
    params=(
        p.query(required=True),
        *p.FILTERS,
        p.SINCE,
        p.UNTIL,
        p.limit(10, MAX_SEARCH_LIMIT),
        BUDGET,
        Param(
            "mode",
            "str",
            "hybrid (best), or one leg alone: keyword, vector, graph.",
            default="hybrid",
            choices=("hybrid", "keyword", "vector", "graph"),
        ),
        Param(
            "profile",
            "str",
            "Fusion weights (default: balanced, or the tuned ones).",
            default=None,
            choices=tuple(sorted(PROFILES)),
        ),
        p.MIN_RELEVANCE,
        Param("explain", "bool", "Add each hit's score per leg.", default=False),
    ),
    run=_search,
    example={"query": "why did we drop Redis?", "limit": 5},
    cli="search",
    python="search",
)


def _recall(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.reading() as m:
        found = m.recall(a["query"], types=a["types"], as_of=a["as_of"], **_ranked(a))
        return wire.search(found, budget=a["budget"], explain=a["explain"])


RECALL = Operation(
    name="recall",
    group="search",
    description="One call for a question: the best turns, messages, documents, items and "
    "facts true now (or `as_of` a time) in one ranked list, each with its `type`, text and "
    "citation (`cite`; a fact cites its evidence) and its `relevance` (0-1, comparable "
    "across questions); `nothing_relevant` is true when no hit is likely to answer. Prefer "
    "it to search when facts were remembered. Give `budget` (tokens) to get the hits packed "
    "as cards that fit it.",
    params=(
        p.query(required=True),
        Param(
            "types",
            "strs",
            "Only these types (default all): turn, message, document, record, item, fact.",
            default=(),
            choices=RECALL_TYPES,
            max_items=len(RECALL_TYPES),
        ),
        *p.FILTERS,
        p.SINCE,
        p.UNTIL,
        p.AS_OF,
        p.limit(10, MAX_SEARCH_LIMIT),
        BUDGET,
        p.MIN_RELEVANCE,
        Param("explain", "bool", "Add each hit's raw scores.", default=False),
    ),
    run=_recall,
    example={"query": "when is the atlas deadline", "limit": 5},
    python="recall",
)


def _query_source(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.reading() as m:
        source = a["source"]
        if source is not None and "*" not in source:
            m.sources.get(source)  # an unknown source is an error, not an empty answer
        found = m.query_source(
            source,
            source_kind=a["source_kind"],
            time_window_days=a["time_window_days"],
            query=a["query"],
            limit=a["limit"],
            filters=p.filters(a),
            **p.identity(a),
        )
        return wire.nodes(found)


QUERY_SOURCE = Operation(
    name="query_source",
    group="primitives",
    description="Sealed summaries of one source (or a kind of source, or all), newest first "
    "or ranked by `query`. Use for the gist of a channel, mailbox or notebook; each "
    "summary's `children` open with drill_down.",
    params=(
        Param("source", "str", "A source id or scope.", default=None, max_length=p.MAX_NAME),
        Param(
            "source_kind",
            "str",
            "A source kind (chat, email, document, record) or platform (slack, mbox, …).",
            default=None,
            max_length=100,
        ),
        Param(
            "time_window_days",
            "float",
            "Only the last N days.",
            default=None,
            gt=0,
            le=365_000,
        ),
        p.query(),
        *p.FILTERS,
        p.limit(10, MAX_LIMIT),
    ),
    run=_query_source,
    example={"source": "slack:#eng", "limit": 3},
    cli="summaries",
    python="query_source",
)


def _query_global(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.reading() as m:
        found = m.query_global(
            since=a["since"],
            until=a["until"] or datetime.now(UTC),
            source_kind=a["source_kind"],
            query=a["query"],
            limit=a["limit"],
            filters=p.filters(a),
            **p.identity(a),
        )
        return wire.nodes(found)


QUERY_GLOBAL = Operation(
    name="query_global",
    group="primitives",
    description="Summaries of every source overlapping a time window, newest first or "
    "ranked by `query`. Use for 'what went on across everything in March'.",
    params=(
        p.when("since", "Window start.", required=True),
        p.UNTIL,
        Param(
            "source_kind",
            "str",
            "A source kind or platform.",
            default=None,
            max_length=100,
        ),
        p.query(),
        *p.FILTERS,
        p.limit(10, MAX_LIMIT),
    ),
    run=_query_global,
    example={"since": "2024-03-01", "until": "2024-03-31"},
    cli="summaries",
    python="query_global",
)


def entity_id(memory: Any, entity: str) -> str:
    """A canonical id as given (``topic:phoenix``), or the best match for a bare name."""
    found = entity.strip()
    if found and ":" not in found:
        matches = memory.search_entities(found, limit=1)
        if not matches:
            raise NotFoundError(f"no entity matches {entity!r}")
        found = matches[0].canonical_id
    return found


def _query_topic(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.reading() as m:
        ident = entity_id(m, a["entity_id"])
        found = m.query_topic(
            ident,
            since=a["since"],
            until=a["until"],
            query=a["query"],
            limit=a["limit"],
            filters=p.filters(a),
            **p.identity(a),
        )
        return {"entity_id": ident, **wire.nodes(found)}


QUERY_TOPIC = Operation(
    name="query_topic",
    group="primitives",
    description="Summaries and messages about one entity (a person, topic, channel, email "
    "address). `entity_id` is a canonical id from search_entities (topic:phoenix, "
    "person:alice chen) or a name, looked up as the best matching entity.",
    params=(
        Param(
            "entity_id",
            "str",
            "A canonical entity id, or a name.",
            min_length=1,
            max_length=500,
        ),
        p.SINCE,
        p.UNTIL,
        p.query(),
        *p.FILTERS,
        p.limit(10, MAX_LIMIT),
    ),
    run=_query_topic,
    example={"entity_id": "person:alice chen"},
    cli="topic",
    python="query_topic",
)


def _cover_window(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.reading() as m:
        found = m.cover_window(
            since=a["since"],
            until=a["until"] or datetime.now(UTC),
            limit=a["limit"],
            filters=p.filters(a),
            **p.identity(a),
        )
        return wire.nodes(found)


COVER_WINDOW = Operation(
    name="cover_window",
    group="primitives",
    description="The fewest nodes that cover every message in a time window: whole "
    "summaries where one lies inside the window, raw messages elsewhere, in time order. "
    "Use to read a period completely; brief does the same for 'lately' by source.",
    params=(
        p.when("since", "Window start.", required=True),
        p.UNTIL,
        *p.FILTERS,
        p.limit(COVER_DEFAULT_LIMIT, MAX_LIMIT),
    ),
    run=_cover_window,
    example={"since": "7d"},
    cli="brief",
    python="cover_window",
)


def _brief(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.reading() as m:
        start, end = a["since"], a["until"] or datetime.now(UTC)
        found = m.cover_window(
            since=start, until=end, limit=a["limit"], filters=p.filters(a), **p.identity(a)
        )
        grouped: dict[str, list[dict[str, Any]]] = {}
        for hit in found.hits:
            grouped.setdefault(hit.tree_scope, []).append(wire.node(hit, whole=True))
        return {
            "since": rfc3339(start),
            "until": rfc3339(end),
            "sources": [{"source": s, "nodes": n} for s, n in grouped.items()],
            "total": found.total,
            "truncated": found.truncated,
        }


BRIEF = Operation(
    name="brief",
    group="primitives",
    description="What happened lately, per source in time order, read whole: summaries "
    "where they fit the window, messages elsewhere. Defaults to the last 24 hours.",
    params=(
        p.when("since", "Window start (default 24h).", default="24h"),
        p.UNTIL,
        *p.FILTERS,
        p.limit(COVER_DEFAULT_LIMIT, MAX_LIMIT),
    ),
    run=_brief,
    example={"since": "24h"},
    cli="brief",
    python="cover_window",
)


def _search_entities(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.reading() as m:
        found = m.search_entities(a["query"], kinds=a["kinds"], limit=a["limit"])
        return {"entities": [e.to_dict() for e in found]}


SEARCH_ENTITIES = Operation(
    name="search_entities",
    group="primitives",
    description="Find entities (people, users, topics, channels, emails, tags) by part of "
    "their name, with mention counts. Use to get the canonical id query_topic takes.",
    params=(
        p.query(required=True, help="Part of a name."),
        Param(
            "kinds",
            "strs",
            "Entity kinds: person, user, agent, email, handle, channel, tag, url, topic.",
            default=(),
            max_length=64,
            max_items=20,
        ),
        p.limit(10, MAX_ENTITY_LIMIT),
    ),
    run=_search_entities,
    example={"query": "alice"},
    cli="entities",
    python="search_entities",
)


def _drill_down(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.reading() as m:
        node_id = a["node_id"]
        node = m.get(node_id)  # unknown or out of scope: NotFoundError
        if node.node_kind is NodeKind.LEAF:
            raise ValueError(f"{node_id!r} is a message, not a summary: nothing lies below")
        below = m.drill_down(
            node_id,
            max_depth=a["max_depth"],
            query=a["query"],
            limit=a["limit"],
            filters=p.filters(a),
            **p.identity(a),
        )
        return {"node_id": node_id, "nodes": [wire.node(h) for h in below]}


DRILL_DOWN = Operation(
    name="drill_down",
    group="primitives",
    description="Open a summary: its children (summaries or messages), `max_depth` levels "
    "down, optionally ranked by `query`. Use after a summary looks relevant, to reach the "
    "messages under it.",
    params=(
        p.NODE_ID,
        Param("max_depth", "int", "Levels to descend.", default=1, ge=1, le=MAX_DEPTH),
        p.query(),
        *p.FILTERS,
        p.limit(None, MAX_LIMIT),
    ),
    run=_drill_down,
    example={"node_id": "<a summary's node_id>", "max_depth": 1},
    cli="drill",
    python="drill_down",
)


def _fetch_leaves(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.reading() as m:
        ids = a["ids"]
        found = m.fetch_leaves(ids, filters=p.filters(a), **p.identity(a))
        seen = {h.node_id for h in found}
        missing = [i for i in dict.fromkeys(ids) if i not in seen]
        return {"nodes": [wire.node(h, whole=True) for h in found], "missing": missing}


FETCH_LEAVES = Operation(
    name="fetch_leaves",
    group="primitives",
    description=f"Read up to {MAX_BATCH} messages or chunks whole by id, in the order given. "
    "Ids it cannot find are listed under `missing`.",
    params=(
        Param(
            "ids",
            "strs",
            "Node ids from earlier results.",
            min_length=1,
            max_length=p.MAX_NAME,
            max_items=MAX_BATCH,
        ),
        *p.FILTERS,
    ),
    run=_fetch_leaves,
    example={"ids": ["<a node_id>"]},
    query_param=None,
    python="fetch_leaves",
)


def _show(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.reading() as m:
        return wire.node(m.get(a["node_id"]), whole=True, entities=True)


SHOW = Operation(
    name="show",
    group="store",
    description="One node whole by id (a message, chunk or summary), with its source, time "
    "range, author, entities and, for a summary, its children.",
    params=(p.NODE_ID,),
    run=_show,
    http=("GET", "/v1/nodes/{node_id}"),
    example={"node_id": "<a node_id>"},
    query_param=None,
    cli="show",
    python="get",
)


def _sources(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.reading() as m:
        return {"sources": [s.to_dict() for s in m.sources.list()]}


SOURCES = Operation(
    name="sources",
    group="sources",
    description="The sources you can read (channels, mailboxes, notes folders, files, "
    "memories) with their ids, scopes, kinds and sizes. Use to pick `sources` filters.",
    params=(),
    run=_sources,
    http=("GET", "/v1/sources"),
    query_param=None,
    cli="sources",
    python="sources.list",
)


def _stats(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.reading() as m:
        found: dict[str, Any] = m.stats()
        return found


STATS = Operation(
    name="stats",
    group="store",
    description="Counts of sources, chunks, tokens, entities and edges you can read.",
    params=(),
    run=_stats,
    http=("GET", "/v1/stats"),
    query_param=None,
    cli="stats",
    python="stats",
)

READS = (
    SEARCH,
    RECALL,
    QUERY_SOURCE,
    QUERY_GLOBAL,
    QUERY_TOPIC,
    COVER_WINDOW,
    BRIEF,
    SEARCH_ENTITIES,
    DRILL_DOWN,
    FETCH_LEAVES,
    SHOW,
    SOURCES,
    STATS,
)
