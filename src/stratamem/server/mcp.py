"""The MCP server: the read side of :mod:`stratamem.api` as tools a model can call.

:func:`build_server` registers the tools on the official SDK's ``MCPServer``; ``stratamem mcp``
runs it over stdio, and :func:`mcp_http_app` serves it over streamable HTTP for the HTTP
server to mount at ``/mcp``. Every call runs inside :meth:`Service.reading` for the principal
the caller is, so a principal's session sees its scopes and nothing else; a node it may not
see answers exactly like one that does not exist. Calls run on the service's reader threads.

On a server started with writes allowed, ``ingest`` and ``forget`` are added; each runs as a
job on the service's writer thread and is refused to a principal without write permission.
Sources and nodes are also resources: ``stratamem://sources``, ``stratamem://sources/{id}``,
``stratamem://nodes/{id}``.

Outputs are compact JSON: each node carries its id (``node_id``), which ``show``,
``drill_down`` and ``fetch_leaves`` take, and a citation (``cite``) naming where it came from.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field
from starlette.types import Receive, Scope, Send

from stratamem.api import Memory
from stratamem.entities.search import MAX_LIMIT as MAX_ENTITY_LIMIT
from stratamem.errors import AccessError, NotFoundError, StratamemError
from stratamem.retrieval.hybrid import MAX_LIMIT as MAX_SEARCH_LIMIT
from stratamem.retrieval.primitives import COVER_DEFAULT_LIMIT, MAX_BATCH, MAX_LIMIT
from stratamem.server.bodies import MAX_FACT_LIMIT, MAX_ROLLUP_LIMIT
from stratamem.server.service import Service
from stratamem.store.facts import Fact
from stratamem.timeparse import parse_when
from stratamem.types import (
    Card,
    Filters,
    NodeKind,
    QueryResponse,
    RetrievalHit,
    SearchResponse,
    SourceKind,
    rfc3339,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

NAME = "stratamem"
MAX_BUDGET = 1_000_000
MAX_DEPTH = 32
# A node's text in a list of results is cut to this many characters; ``show`` gives it whole.
PREVIEW_CHARS = 600
LOOPBACK_HOSTS = ("127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*")

INSTRUCTIONS = """\
stratamem is a memory of ingested conversations, mail, notes and records. Start with
`search` for a question; use `brief` for "what happened lately", `query_source` or
`query_global` for summaries of a source or a period, `query_topic` for everything about a
person or topic (find its id with `search_entities`), `query_facts` for what is known (facts,
with their validity and evidence), `rollups` for an entity's profile card. Summaries carry
child ids: open them with `drill_down`, read nodes whole with `show` or `fetch_leaves`. Cite
with each node's `cite`. Times are ISO 8601 (2024-03-12, 2024-03-12T09:00Z) or spans back
from now (24h, 7d)."""
READ_ONLY_NOTE = "Read only: nothing here changes the store."
WRITES_NOTE = (
    "`ingest` reads a path on the server into the memory and `forget` removes a source, "
    "for callers with write permission."
)

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)

Kind = Literal["chat", "email", "document", "record"]
Sources = Annotated[
    list[str],
    Field(
        description="Only these sources: ids or scopes (see `sources`); a scope ending in * "
        "is a prefix, e.g. slack:*.",
        max_length=100,
    ),
]
Kinds = Annotated[list[Kind], Field(description="Only sources of these kinds.", max_length=4)]
When = Annotated[
    str | None,
    Field(description="ISO 8601 date or time (2024-03-12), or a span back from now (24h, 7d)."),
]
Query = Annotated[
    str | None,
    Field(description="Rank the results by relevance to this text instead of by time."),
]
NodeId = Annotated[str, Field(description="A node id from an earlier result.", min_length=1)]


def _limit(default: int, maximum: int) -> Any:
    return Field(default=default, ge=1, le=maximum, description="At most this many results.")


def build_server(service: Service, principal: Callable[[], str | None]) -> MCPServer:
    """An ``MCPServer`` whose tools read ``service`` as ``principal()`` (None: the owner),
    asked afresh on every call."""
    # The SDK configures the root logger when a server is made (``logging.basicConfig``); a
    # library must leave the host's logging as it found it.
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        note = WRITES_NOTE if service.allow_writes else READ_ONLY_NOTE
        server: MCPServer = MCPServer(
            NAME, instructions=f"{INSTRUCTIONS}\n{note}", log_level="WARNING"
        )
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)

    async def read(work: Callable[[Memory], T]) -> T:
        who = principal()

        def job() -> T:
            with service.reading(who) as memory:
                return work(memory)

        try:
            return await service.read(job)
        except (StratamemError, ValueError) as exc:
            raise ToolError(_one_line(str(exc) or type(exc).__name__)) from exc

    async def call(work: Callable[[Memory], dict[str, Any]]) -> CallToolResult:
        return _result(await read(work))

    def tool(description: str) -> Callable[[Callable[..., Any]], Any]:
        return server.tool(description=description, annotations=READ_ONLY, structured_output=False)

    @tool(
        "Search everything for evidence about a question: hybrid keyword + semantic + entity "
        "search, each hit with its text, a citation and why it ranks there. Start here for "
        "any question. Give `budget` (tokens) to get the hits packed as prompt-ready cards "
        "that fit it."
    )
    async def search(
        query: Annotated[str, Field(description="The question or words to look for.")],
        sources: Sources = [],  # noqa: B006  # pydantic copies defaults
        kinds: Kinds = [],  # noqa: B006
        since: When = None,
        until: When = None,
        limit: Annotated[int, _limit(10, MAX_SEARCH_LIMIT)] = 10,
        budget: Annotated[
            int | None,
            Field(
                ge=0,
                le=MAX_BUDGET,
                description="Pack the hits into this many tokens (0: every hit whole).",
            ),
        ] = None,
        mode: Annotated[
            Literal["hybrid", "keyword", "vector", "graph"],
            Field(description="hybrid (best), or one leg alone: keyword, vector, graph."),
        ] = "hybrid",
    ) -> CallToolResult:
        return await call(
            lambda m: _search_dict(
                m.search(
                    query,
                    sources=sources,
                    kinds=kinds,
                    since=_when(since),
                    until=_when(until),
                    limit=limit,
                    budget=budget,
                    mode=mode,
                )
            )
        )

    @tool(
        "Sealed summaries of one source (or a kind of source, or all), newest first or ranked "
        "by `query`. Use for the gist of a channel, mailbox or notebook; each summary's "
        "`children` open with drill_down."
    )
    async def query_source(
        source: Annotated[str | None, Field(description="A source id or scope.")] = None,
        source_kind: Annotated[
            str | None,
            Field(description="A source kind (chat, email, ...) or platform (slack, mbox, ...)."),
        ] = None,
        days: Annotated[
            float | None, Field(gt=0, le=365_000, description="Only the last N days.")
        ] = None,
        query: Query = None,
        limit: Annotated[int, _limit(10, MAX_LIMIT)] = 10,
    ) -> CallToolResult:
        def work(memory: Memory) -> dict[str, Any]:
            if source is not None and "*" not in source:
                memory.sources.get(source)  # an unknown source is an error, not an empty answer
            found = memory.query_source(
                source, source_kind=source_kind, time_window_days=days, query=query, limit=limit
            )
            return _query_dict(found)

        return await call(work)

    @tool(
        "Summaries of every source overlapping a time window, newest first or ranked by "
        "`query`. Use for 'what went on across everything in March'."
    )
    async def query_global(
        since: Annotated[str, Field(description="Window start: ISO 8601 or a span (7d).")],
        until: When = None,
        sources: Sources = [],  # noqa: B006
        source_kind: Annotated[str | None, Field(description="A source kind or platform.")] = None,
        query: Query = None,
        limit: Annotated[int, _limit(10, MAX_LIMIT)] = 10,
    ) -> CallToolResult:
        return await call(
            lambda m: _query_dict(
                m.query_global(
                    since=parse_when(since),
                    until=_when(until) or datetime.now(UTC),
                    source_kind=source_kind,
                    query=query,
                    limit=limit,
                    filters=Filters(sources=tuple(sources)) if sources else None,
                )
            )
        )

    @tool(
        "Summaries and messages about one entity (a person, topic, channel, email address). "
        "`entity` is a canonical id from search_entities (topic:phoenix, person:alice chen) or "
        "a name, looked up as the best matching entity."
    )
    async def query_topic(
        entity: Annotated[str, Field(description="Canonical entity id or a name.", min_length=1)],
        since: When = None,
        until: When = None,
        query: Query = None,
        limit: Annotated[int, _limit(10, MAX_LIMIT)] = 10,
    ) -> CallToolResult:
        def work(memory: Memory) -> dict[str, Any]:
            entity_id = _entity_id(memory, entity)
            found = memory.query_topic(
                entity_id, since=_when(since), until=_when(until), query=query, limit=limit
            )
            return {"entity_id": entity_id, **_query_dict(found)}

        return await call(work)

    @tool(
        "The fewest nodes that cover every message in a time window: whole summaries where "
        "one lies inside the window, raw messages elsewhere, in time order. Use to read a "
        "period completely; brief does the same for 'lately' with source grouping."
    )
    async def cover_window(
        since: Annotated[str, Field(description="Window start: ISO 8601 or a span (7d).")],
        until: When = None,
        sources: Sources = [],  # noqa: B006
        kinds: Kinds = [],  # noqa: B006
        limit: Annotated[int, _limit(COVER_DEFAULT_LIMIT, MAX_LIMIT)] = COVER_DEFAULT_LIMIT,
    ) -> CallToolResult:
        return await call(
            lambda m: _query_dict(
                m.cover_window(
                    since=parse_when(since),
                    until=_when(until) or datetime.now(UTC),
                    limit=limit,
                    filters=_filters(sources, kinds),
                )
            )
        )

    @tool(
        "What happened lately, per source in time order, read whole: summaries where they "
        "fit the window, messages elsewhere. Defaults to the last 24 hours."
    )
    async def brief(
        since: Annotated[str, Field(description="Window start (default 24h).")] = "24h",
        until: When = None,
        sources: Sources = [],  # noqa: B006
        kinds: Kinds = [],  # noqa: B006
        limit: Annotated[int, _limit(COVER_DEFAULT_LIMIT, MAX_LIMIT)] = COVER_DEFAULT_LIMIT,
    ) -> CallToolResult:
        def work(memory: Memory) -> dict[str, Any]:
            start, end = parse_when(since), _when(until) or datetime.now(UTC)
            found = memory.cover_window(
                since=start, until=end, limit=limit, filters=_filters(sources, kinds)
            )
            grouped: dict[str, list[dict[str, Any]]] = {}
            for hit in found.hits:
                grouped.setdefault(hit.tree_scope, []).append(_node(hit, whole=True))
            return {
                "since": rfc3339(start),
                "until": rfc3339(end),
                "sources": [{"source": s, "nodes": n} for s, n in grouped.items()],
                "total": found.total,
                "truncated": found.truncated,
            }

        return await call(work)

    @tool(
        "Find entities (people, topics, channels, emails, tags) by part of their name, with "
        "mention counts. Use to get the canonical id query_topic takes."
    )
    async def search_entities(
        query: Annotated[str, Field(description="Part of a name.", min_length=1)],
        kinds: Annotated[
            list[str],
            Field(description="Entity kinds: person, email, handle, channel, tag, url, topic."),
        ] = [],  # noqa: B006
        limit: Annotated[int, _limit(10, MAX_ENTITY_LIMIT)] = 10,
    ) -> CallToolResult:
        return await call(
            lambda m: {
                "entities": [
                    e.to_dict() for e in m.search_entities(query, kinds=kinds, limit=limit)
                ]
            }
        )

    @tool(
        "Open a summary: its children (summaries or messages), `depth` levels down, optionally "
        "ranked by `query`. Use after a summary looks relevant, to reach the messages under it."
    )
    async def drill_down(
        node_id: NodeId,
        depth: Annotated[int, Field(ge=1, le=MAX_DEPTH, description="Levels to descend.")] = 1,
        query: Query = None,
        limit: Annotated[int | None, Field(ge=1, le=MAX_LIMIT)] = None,
    ) -> CallToolResult:
        def work(memory: Memory) -> dict[str, Any]:
            node = memory.get(node_id)  # unknown or out of scope: NotFoundError
            if node.node_kind is NodeKind.LEAF:
                raise ValueError(f"{node_id!r} is a message, not a summary: nothing lies below")
            below = memory.drill_down(node_id, max_depth=depth, query=query, limit=limit)
            return {"node_id": node_id, "nodes": [_node(h) for h in below]}

        return await call(work)

    @tool(
        f"Read up to {MAX_BATCH} messages or chunks whole by id, in the order given. Ids it "
        "cannot find are listed under `missing`."
    )
    async def fetch_leaves(
        node_ids: Annotated[list[str], Field(min_length=1, max_length=MAX_BATCH)],
    ) -> CallToolResult:
        def work(memory: Memory) -> dict[str, Any]:
            found = memory.fetch_leaves(node_ids)
            seen = {h.node_id for h in found}
            missing = [i for i in dict.fromkeys(node_ids) if i not in seen]
            return {"nodes": [_node(h, whole=True) for h in found], "missing": missing}

        return await call(work)

    @tool(
        "One node whole by id (a message, chunk or summary), with its source, time range, "
        "author, entities and, for a summary, its children."
    )
    async def show(node_id: NodeId) -> CallToolResult:
        return await call(lambda m: _node(m.get(node_id), whole=True, entities=True))

    @tool(
        "The sources you can read (channels, mailboxes, notes folders, files) with their ids, "
        "scopes, kinds and sizes. Use to pick `sources` filters."
    )
    async def sources() -> CallToolResult:
        return await call(
            lambda m: {
                "sources": [
                    {
                        "id": s.id,
                        "scope": s.scope,
                        "kind": s.kind.value,
                        "platform": s.platform,
                        "title": s.title,
                        "chunks": s.chunk_count,
                        "ingested_at": rfc3339(s.ingested_at),
                    }
                    for s in m.sources.list()
                ]
            }
        )

    @tool(
        "What is true about an entity (facts: subject, predicate, object, since when), as of "
        "now or of a time, with the evidence each rests on. Use for 'who leads on-call', "
        "'what is the release date'; `fact_history` shows how a value changed."
    )
    async def recall(
        subject: Annotated[
            str | None, Field(description="An entity id: person:carol diaz, topic:phoenix.")
        ] = None,
        predicate: Annotated[str | None, Field(description="Only this predicate.")] = None,
        as_of: When = None,
        known_at: Annotated[
            str | None, Field(description="As the memory knew it then (ISO 8601 or a span).")
        ] = None,
        limit: Annotated[int, _limit(50, 1000)] = 50,
    ) -> CallToolResult:
        return await call(
            lambda m: {
                "facts": [
                    _fact(f)
                    for f in m.facts.recall(
                        subject,
                        predicate=predicate,
                        as_of=_when(as_of),
                        known_at=_when(known_at),
                        limit=limit,
                    )
                ]
            }
        )

    @tool(
        "Every value one entity's predicate had, oldest first, including values later "
        "replaced or corrected (each with when it stopped being believed)."
    )
    async def fact_history(
        subject: Annotated[str, Field(description="An entity id.", min_length=1)],
        predicate: Annotated[str, Field(description="The predicate.", min_length=1)],
    ) -> CallToolResult:
        return await call(
            lambda m: {"facts": [_fact(f) for f in m.facts.history(subject, predicate)]}
        )

    @tool(
        "The facts that best match a question (what each says, by its words and meaning), "
        "true now or `as_of` a time, as known `known_at` a time: each with its validity, "
        "source, evidence (node ids, cited) and score. Use for 'what do we know about the "
        "release date'; `recall` lists an entity's facts without a query."
    )
    async def query_facts(
        query: Annotated[
            str, Field(description="The question or words to look for.", min_length=1)
        ],
        subject: Annotated[
            str | None, Field(description="Only facts of this entity: person:carol diaz.")
        ] = None,
        sources: Sources = [],  # noqa: B006
        as_of: When = None,
        known_at: Annotated[
            str | None, Field(description="As the memory knew it then (ISO 8601 or a span).")
        ] = None,
        limit: Annotated[int, _limit(10, MAX_FACT_LIMIT)] = 10,
    ) -> CallToolResult:
        def work(memory: Memory) -> dict[str, Any]:
            found = memory.facts.query(
                query,
                subject=subject,
                sources=sources,
                as_of=_when(as_of),
                known_at=_when(known_at),
                limit=limit,
            )
            return {
                "facts": [_fact_hit(h) for h in found.hits],
                "total": found.total,
                "truncated": found.truncated,
            }

        return await call(work)

    @tool(
        "Profile cards (rollups) of an entity, or of every entity, built from the facts of "
        "the sources you read: what is known about someone or something at a glance, best "
        "first."
    )
    async def rollups(
        subject: Annotated[
            str | None, Field(description="An entity id: person:carol diaz, topic:phoenix.")
        ] = None,
        limit: Annotated[int, _limit(20, MAX_ROLLUP_LIMIT)] = 20,
    ) -> CallToolResult:
        return await call(
            lambda m: {"rollups": [r.to_dict() for r in m.facts.rollups(subject, limit=limit)]}
        )

    _add_resources(server, read)
    if service.allow_writes:
        _add_write_tools(server, service, principal)
    return server


def _fact(found: Fact) -> dict[str, Any]:
    """A fact on the wire: what it says, when it was true, and what it rests on."""
    out = {
        "id": found.id,
        "subject": found.subject,
        "predicate": found.predicate,
        "object": found.object,
        "valid_from": rfc3339(found.valid_from),
        "valid_to": rfc3339(found.valid_to),
        "evidence": list(found.evidence),
    }
    if found.expired_at is not None:
        out["believed_until"] = rfc3339(found.expired_at)
    return out


def _fact_hit(hit: RetrievalHit) -> dict[str, Any]:
    """A fact found by a query: what it says, when it was true, where it is from, what it
    rests on (with citations), and its score."""
    explain = hit.explain
    out: dict[str, Any] = {
        "id": hit.node_id,
        "subject": explain["subject"],
        "predicate": explain["predicate"],
        "object": explain["object"],
        "valid_from": rfc3339(hit.time_start),
        "valid_to": rfc3339(hit.time_end),
        "source": hit.tree_scope,
        "evidence": list(explain["evidence"]),
    }
    if explain["cites"]:
        out["cites"] = dict(explain["cites"])
    if explain["expired_at"] is not None:
        out["believed_until"] = explain["expired_at"]
    if explain["origin"] != "asserted":
        out["origin"] = explain["origin"]
    if explain["confidence"] != 1.0:
        out["confidence"] = explain["confidence"]
    out["score"] = round(hit.score, 4)
    return out


def _result(data: dict[str, Any]) -> CallToolResult:
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def _add_resources(server: MCPServer, read: Callable[[Callable[[Memory], Any]], Any]) -> None:
    """Sources and nodes as resources, for clients that attach context by URI."""

    @server.resource(
        "stratamem://sources",
        name="sources",
        description="The sources you can read, as the sources tool lists them.",
        mime_type="application/json",
    )
    async def sources() -> str:
        found = await read(lambda m: [s.to_dict() for s in m.sources.list()])
        return json.dumps({"sources": found}, ensure_ascii=False)

    @server.resource(
        "stratamem://sources/{source_id}",
        name="source",
        description="One source by id: what it is and the summaries at the top of its tree.",
        mime_type="application/json",
    )
    async def source(source_id: str) -> str:
        def work(memory: Memory) -> dict[str, Any]:
            found = memory.sources.get(source_id)
            tops = memory.query_source(found.id, limit=MAX_LIMIT)
            return {**found.to_dict(), "summaries": [_node(h) for h in tops.hits]}

        return json.dumps(await read(work), ensure_ascii=False)

    @server.resource(
        "stratamem://nodes/{node_id}",
        name="node",
        description="One node (message, chunk or summary) whole, as the show tool gives it.",
        mime_type="application/json",
    )
    async def node(node_id: str) -> str:
        found = await read(lambda m: _node(m.get(node_id), whole=True, entities=True))
        return json.dumps(found, ensure_ascii=False)


WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
FORGET = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)


def _add_write_tools(
    server: MCPServer, service: Service, principal: Callable[[], str | None]
) -> None:
    """``ingest`` and ``forget``, on a server started with writes allowed; each call is
    refused unless its principal holds the write permission (see
    :mod:`stratamem.access.writes`)."""

    async def write(action: str, work: Callable[[], dict[str, Any]]) -> CallToolResult:
        job = service.submit(action, principal(), work)
        try:
            data = await asyncio.wrap_future(job.future)
        except (StratamemError, ValueError) as exc:
            raise ToolError(_one_line(str(exc) or type(exc).__name__)) from exc
        return _result({"job": job.id, **data})

    @server.tool(
        description="Read a file or folder on the server's machine into the memory (Slack "
        "or Discord export, mbox, Maildir, Markdown notes, IRC logs, JSONL), then embed it "
        "so every search finds it. Chat and mail merge with what is there. Needs write "
        "permission; a principal reads only under the server's ingest roots.",
        annotations=WRITE,
        structured_output=False,
    )
    async def ingest(
        path: Annotated[str, Field(description="A path on the server.", min_length=1)],
        format: Annotated[
            str | None, Field(description="The connector, when detection is not enough.")
        ] = None,
        scope: Annotated[str | None, Field(description="Name the source this.")] = None,
        access: Annotated[
            list[str] | None,
            Field(description="Access scopes for the sources read (default: your own)."),
        ] = None,
        sync: Annotated[
            bool, Field(description="Remove what the export lacks (default: keep it).")
        ] = False,
        embed: Annotated[bool, Field(description="Embed the new chunks now.")] = True,
    ) -> CallToolResult:
        who = principal()
        return await write(
            "ingest",
            lambda: service.ingest(
                who, path, kind=format, scope=scope, access=access, sync=sync, embed=embed
            ),
        )

    @server.tool(
        description="Remember a fact: SUBJECT's PREDICATE is OBJECT from `valid_from` (until "
        "`valid_to` or said otherwise). A new value closes the old one and keeps it in the "
        "history; the same value again changes nothing. Give `evidence` (node ids) it rests "
        "on. Needs write permission.",
        annotations=WRITE,
        structured_output=False,
    )
    async def remember(
        subject: Annotated[str, Field(description="An entity id: person:carol diaz.")],
        predicate: Annotated[str, Field(description="leads, status, release_date, …")],
        object: Annotated[str, Field(description="An entity id or any text.", min_length=1)],
        valid_from: Annotated[str | None, Field(description="True from (ISO 8601).")] = None,
        valid_to: Annotated[str | None, Field(description="True until (ISO 8601).")] = None,
        evidence: Annotated[
            list[str], Field(description="Node ids the fact rests on.", max_length=100)
        ] = [],  # noqa: B006
        source: Annotated[
            str | None,
            Field(description="The source a fact without evidence goes to (default: yours)."),
        ] = None,
    ) -> CallToolResult:
        who = principal()
        return await write(
            "remember",
            lambda: service.remember(
                who,
                subject,
                predicate,
                object,
                valid_from=_when(valid_from),
                valid_to=_when(valid_to),
                evidence=evidence,
                source=source,
            ),
        )

    @server.tool(
        description="Correct a fact (by id) that was never true: it stays in the history, no "
        "longer believed. Needs write permission.",
        annotations=FORGET,
        structured_output=False,
    )
    async def retract(
        fact: Annotated[str, Field(description="A fact id from recall.", min_length=1)],
    ) -> CallToolResult:
        who = principal()
        return await write("retract", lambda: service.retract(who, fact))

    @server.tool(
        description="Remove a source (by id or scope) and everything derived from it, for "
        "good. Needs write permission and a source you can read.",
        annotations=FORGET,
        structured_output=False,
    )
    async def forget(
        source: Annotated[str, Field(description="A source id or scope.", min_length=1)],
    ) -> CallToolResult:
        who = principal()
        return await write(
            "forget", lambda: {"source": source, "removed": service.forget(who, source)}
        )


# -- wire shapes -------------------------------------------------------------------------------


def _node(hit: RetrievalHit, *, whole: bool = False, entities: bool = False) -> dict[str, Any]:
    """One node, compact: what a model needs to read it, cite it and go further."""
    text = hit.snippet or hit.content if not whole else hit.content
    if not whole and len(text) > PREVIEW_CHARS:
        text = text[: PREVIEW_CHARS - 1] + "…"
    data: dict[str, Any] = {"node_id": hit.node_id, "kind": hit.node_kind.value}
    if hit.node_kind is NodeKind.SUMMARY:
        data["level"] = hit.level
    data["source"] = hit.tree_scope
    if hit.source_ref:
        data["cite"] = hit.source_ref
    data["time_start"] = rfc3339(hit.time_start)
    if hit.time_end is not None and hit.time_end != hit.time_start:
        data["time_end"] = rfc3339(hit.time_end)
    if hit.author:
        data["author"] = hit.author
    if hit.title:
        data["title"] = hit.title
    data["text"] = text
    if hit.node_kind is NodeKind.SUMMARY:
        data["children"] = list(hit.child_ids)
    if entities and hit.entities:
        data["entities"] = list(hit.entities)
    return data


def _hit(hit: RetrievalHit) -> dict[str, Any]:
    data = _node(hit)
    data["score"] = round(hit.score, 4)
    reason = hit.explain.get("reason")
    if reason:
        data["why"] = str(reason)
    return data


def _card(card: Card) -> dict[str, Any]:
    hit = card.hit
    return {
        "node_id": hit.node_id,
        "source": hit.tree_scope,
        "cite": hit.source_ref,
        "text": card.text,
        "tokens": card.tokens,
        "why": card.reason,
        **({"tier0": True} if card.tier0 else {}),
    }


def _search_dict(response: SearchResponse) -> dict[str, Any]:
    data: dict[str, Any]
    if response.budget is not None:
        data = {
            "cards": [_card(c) for c in response.cards],
            "budget": response.budget,
            "used": sum(c.tokens for c in response.cards),
        }
    else:
        data = {"hits": [_hit(h) for h in response.hits]}
    data["total"] = response.total
    data["truncated"] = response.truncated
    if response.notes:
        data["notes"] = list(response.notes)
    return data


def _query_dict(response: QueryResponse) -> dict[str, Any]:
    return {
        "nodes": [_node(h) for h in response.hits],
        "total": response.total,
        "truncated": response.truncated,
    }


# -- arguments ---------------------------------------------------------------------------------


def _when(value: str | None) -> datetime | None:
    return parse_when(value) if value else None


def _filters(sources: Sequence[str], kinds: Sequence[str]) -> Filters | None:
    if not sources and not kinds:
        return None
    return Filters(sources=tuple(sources), kinds=tuple(SourceKind(k) for k in kinds))


def _entity_id(memory: Memory, entity: str) -> str:
    """A canonical id as given (``topic:phoenix``), or the best match for a bare name."""
    entity_id = entity.strip()
    if entity_id and ":" not in entity_id:
        matches = memory.search_entities(entity_id, limit=1)
        if not matches:
            raise NotFoundError(f"no entity matches {entity!r}")
        entity_id = matches[0].canonical_id
    return entity_id


def _one_line(message: str, *, limit: int = 500) -> str:
    text = " ".join(message.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- streamable HTTP ---------------------------------------------------------------------------

# The principal of the HTTP request being served; the SDK carries a request's context
# variables into the tool call it delivers.
_caller: contextvars.ContextVar[str | None] = contextvars.ContextVar("mcp_caller", default=None)


class MCPHTTPApp:
    """The MCP server as an ASGI app for the streamable HTTP transport.

    Every request must carry ``Authorization: Bearer <token>`` naming a principal (see
    :meth:`Service.authenticate`); a missing or bad token is answered 401 with a JSON error,
    and the calls it carries read as that principal. Built with ``tokens=False`` (the owner
    serving on loopback alone) no token is asked for and every call reads as the owner.

    The app answers on any path, so mount it where it should live (Starlette/FastAPI:
    ``Route("/mcp", app)``, which matches ``/mcp`` with no trailing-slash redirect). Its
    session manager must be running while it serves: enter :meth:`lifespan` in the host
    app's lifespan. Run on its own (``uvicorn.run(app)``) it handles the ASGI lifespan
    itself.
    """

    def __init__(
        self,
        service: Service,
        *,
        tokens: bool = True,
        allowed_hosts: Sequence[str] | None = None,
        json_response: bool = False,
    ) -> None:
        self.service = service
        self.tokens = tokens
        self.server = build_server(service, _caller.get)
        hosts = list(allowed_hosts) if allowed_hosts is not None else list(LOOPBACK_HOSTS)
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection="*" not in hosts,
            allowed_hosts=hosts,
            allowed_origins=[f"http://{h}" for h in hosts] + [f"https://{h}" for h in hosts],
        )
        # Builds the session manager; the Starlette app around it is not used.
        self.server.streamable_http_app(
            json_response=json_response, transport_security=security, host=""
        )
        self.session_manager = self.server.session_manager

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Run the session manager (once per app) while the host app serves."""
        async with self.session_manager.run():
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._serve_lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        principal: str | None = None
        if self.tokens:
            try:
                principal = await self._principal(scope)
            except AccessError as exc:
                await _unauthorized(send, str(exc))
                return
        reset = _caller.set(principal)
        try:
            await self.session_manager.handle_request(scope, receive, send)
        finally:
            _caller.reset(reset)

    async def _principal(self, scope: Scope) -> str:
        header = ""
        for key, value in scope.get("headers", ()):
            if key == b"authorization":
                header = value.decode("latin-1")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AccessError("a bearer token is required (Authorization: Bearer <token>)")
        found = await self.service.read(lambda: self.service.authenticate(token.strip()))
        return found.name

    async def _serve_lifespan(self, receive: Receive, send: Send) -> None:
        message = await receive()
        if message["type"] != "lifespan.startup":
            return
        async with self.lifespan():
            await send({"type": "lifespan.startup.complete"})
            while (await receive())["type"] != "lifespan.shutdown":
                pass
        await send({"type": "lifespan.shutdown.complete"})


async def _unauthorized(send: Send, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer realm="stratamem"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def mcp_http_app(
    service: Service,
    *,
    tokens: bool = True,
    allowed_hosts: Sequence[str] | None = None,
    json_response: bool = False,
) -> MCPHTTPApp:
    """The streamable HTTP transport of the MCP server over ``service``, as an ASGI app.

    ``tokens``: ask every request for a bearer token and read as its principal (False: no
    token, every call as the owner; only for a server bound to loopback). ``allowed_hosts``:
    the ``Host`` values accepted (``host:port``, ``host:*``; ``*`` turns the check off);
    default the loopback names, which guards a local server against DNS rebinding.
    ``json_response``: answer each request with one JSON body instead of an event stream.
    """
    return MCPHTTPApp(
        service, tokens=tokens, allowed_hosts=allowed_hosts, json_response=json_response
    )
