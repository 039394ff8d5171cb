"""The route probe matrix: every read route of the Python API, as calls that name sources
by their :class:`~security_kit.Refs` (shared by the principal-scope and the locked-source
suites)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import security_kit as kit
from security_kit import NOWHERE, T0, Refs

from stratamem.api import Memory
from stratamem.config import PROFILES, SearchConfig
from stratamem.ingest.items import ItemVersion
from stratamem.types import Filters, QueryResponse, RetrievalHit, SearchResponse, rfc3339

Call = Callable[[Memory, Mapping[str, Refs]], Any]

# The sources a probe names by id: one hidden from most principals, a chat hidden from most,
# the one no principal sees, one some see, and ids that name nothing.
NAMED = ("hr-secret", "legal-chat", "orphan", "eng", "nowhere")
MODES = ("hybrid", "keyword", "vector", "graph")


@dataclass(frozen=True)
class Probe:
    route: str
    name: str
    call: Call
    uses: tuple[str, ...] = ()  # the sources whose ids the call names (echoes are allowed)

    @property
    def id(self) -> str:
        return f"{self.route}:{self.name}"


LONG = " ".join(["queue release sqlite redis alice"] * 120)
CANARY_QUERIES = (
    "zanzibarquux",
    "Zorblat Quimby",
    "@zorbhandle",
    "#zorbtag",
    "zorblat@canary-mail.example",
    "https://canary.example/zx-ledger",
    "QuuxinatorBoard",
    "Merovingian",
    "Vex Morrow @vexhandle",
    "xylophonic",
    "orphan@canary.example",
    "Ophelia Xylo",
    "Frobnicator",
    "gallimaufry",
)
QUERIES = (
    "queue",
    "queue SQLite Redis",
    "Alice Chen",
    "@alice",
    "#release",
    "release",
    "e-mail",
    "queue e-mail thread",
    "",
    "   ",
    "?!.,;",
    '"queue',
    "queue*",
    "queue OR zanzibarquux",
    "NEAR(queue release)",
    LONG,
    *CANARY_QUERIES,
)
FEW = ("queue", "zanzibarquux queue Alice Chen", "release @alice")
ENTITIES = (
    "handle:alice",
    "person:alice chen",
    "topic:sqlite",
    "tag:release",
    "channel:eng",
    "handle:zorbhandle",
    "tag:zorbtag",
    "email:zorblat@canary-mail.example",
    "person:zorblat quimby",
    "topic:quuxinatorboard",
    "handle:vexhandle",
    "handle:orphanhandle",
    "handle:no-such-handle",
    "",
)
NEEDLES = ("zorb", "alice", "canary", "@", "queue", "xylo", "merov", "e", ":", "vex")
WINDOWS = {
    "all": (T0 - timedelta(days=400), T0 + timedelta(days=400)),
    "first-day": (T0, T0 + timedelta(days=1)),
    "hidden-hours": (T0 + timedelta(hours=1), T0 + timedelta(hours=2, minutes=30)),
    "empty": (T0 - timedelta(days=30), T0 - timedelta(days=29)),
}


class _Matrix:
    """Collects probes; ``add`` takes the call's route, a name, the call and what it names."""

    def __init__(self) -> None:
        self.probes: list[Probe] = []

    def add(self, route: str, name: str, call: Call, *uses: str) -> None:
        self.probes.append(Probe(route, name, call, uses))


def _source_filters(named: tuple[str, ...]) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """(label, source refs, the named sources they name) for the search filters."""
    out: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = [
        ("eng", ("eng",), ()),
        ("slack-glob", ("slack:*",), ()),
        ("every-glob", ("*",), ()),
    ]
    for name in named:
        if name in ("eng", "nowhere"):
            continue
        out += [
            (f"{name}-scope", (name,), (name,)),
            (f"{name}-glob", (name[:3] + "*",), (name,)),
            (f"{name}-id", (kit.source_id_for(name),), (name,)),
            (f"eng+{name}", ("eng", name), (name,)),
        ]
    return out


def _search(m: _Matrix, named: tuple[str, ...], queries: tuple[str, ...]) -> None:
    for mode in MODES:
        for n, query in enumerate(queries):
            m.add("search", f"{mode}:{n}:{query[:30]}", lambda x, r, q=query, md=mode: x.search(
                q, mode=md))  # fmt: skip
    for query in FEW:
        for profile in sorted(PROFILES):
            m.add("search", f"profile={profile}:{query}", lambda x, r, q=query, p=profile: (
                x.search(q, profile=p)))  # fmt: skip
        for budget in (40, 500):
            m.add("search", f"budget={budget}:{query}", lambda x, r, q=query, b=budget: (
                x.search(q, budget=b)))  # fmt: skip
        for rerank in (True, False):
            for diversify in (True, False):
                m.add("search", f"rerank={rerank},diversify={diversify}:{query}",
                      lambda x, r, q=query, rr=rerank, dv=diversify: x.search(
                          q, rerank=rr, diversify=dv))  # fmt: skip
        m.add("search", f"rrf:{query}", lambda x, r, q=query: x.search(
            q, config=SearchConfig(fusion="rrf")))  # fmt: skip
        m.add("search", f"no-expansion:{query}", lambda x, r, q=query: x.search(
            q, config=SearchConfig(expand_seeds=0)))  # fmt: skip
        for limit in (1, 3, 1000):
            m.add("search", f"limit={limit}:{query}", lambda x, r, q=query, k=limit: x.search(
                q, limit=k))  # fmt: skip
        for mode in MODES:
            for label, refs, uses in _source_filters(named):
                m.add("search", f"{mode}:sources={label}:{query}", lambda x, r, q=query, s=refs,
                      md=mode: x.search(q, sources=s, mode=md), *uses)  # fmt: skip
            for kind in ("record", "chat", "document", "email"):
                m.add("search", f"{mode}:kind={kind}:{query}", lambda x, r, q=query, k=kind,
                      md=mode: x.search(q, kinds=[k], mode=md))  # fmt: skip
            for label, (since, until) in WINDOWS.items():
                m.add("search", f"{mode}:window={label}:{query}", lambda x, r, q=query, s=since,
                      u=until, md=mode: x.search(q, since=s, until=u, mode=md))  # fmt: skip


def _summaries(m: _Matrix, named: tuple[str, ...]) -> None:
    now = T0 + timedelta(days=3)
    since, until = WINDOWS["all"]
    m.add("query_source", "all", lambda x, r: x.query_source())
    m.add("query_source", "all-query", lambda x, r: x.query_source(query="queue"))
    m.add("query_source", "canary-query", lambda x, r: x.query_source(query="zanzibarquux"))
    m.add("query_source", "days", lambda x, r: x.query_source(time_window_days=1, now=now))
    m.add("query_source", "limit-1", lambda x, r: x.query_source(limit=1))
    for kind in ("record", "chat", "document", "email", "memory", "slack", "irc", "mbox"):
        m.add("query_source", f"kind={kind}", lambda x, r, k=kind: x.query_source(
            source_kind=k, query="queue release"))  # fmt: skip
    for name in named:
        m.add("query_source", f"scope:{name}", lambda x, r, n=name: x.query_source(
            r[n].scope, query="queue"), name)  # fmt: skip
        m.add("query_source", f"id:{name}", lambda x, r, n=name: x.query_source(
            r[n].source_id), name)  # fmt: skip
        m.add("query_source", f"filtered:{name}", lambda x, r, n=name: x.query_source(
            filters=Filters(sources=(r[n].scope,))), name)  # fmt: skip
        m.add("cover_window", f"filtered:{name}", lambda x, r, n=name: x.cover_window(
            since=since, until=until, filters=Filters(sources=(r[n].scope,))), name)  # fmt: skip
    for label, (a, b) in WINDOWS.items():
        m.add("query_global", label, lambda x, r, a=a, b=b: x.query_global(since=a, until=b))
        m.add("query_global", f"{label}:query", lambda x, r, a=a, b=b: x.query_global(
            since=a, until=b, query="zanzibarquux queue"))  # fmt: skip
        m.add("cover_window", label, lambda x, r, a=a, b=b: x.cover_window(since=a, until=b))
        m.add("cover_window", f"{label}:limit-2", lambda x, r, a=a, b=b: x.cover_window(
            since=a, until=b, limit=2))  # fmt: skip
    for kind in ("record", "chat", "slack"):
        m.add("query_global", f"kind={kind}", lambda x, r, k=kind: x.query_global(
            since=since, until=until, source_kind=k))  # fmt: skip


def _entities(m: _Matrix, named: tuple[str, ...]) -> None:
    for entity in ENTITIES:
        m.add("query_topic", entity, lambda x, r, e=entity: x.query_topic(e))
        m.add("query_topic", f"{entity}:query", lambda x, r, e=entity: x.query_topic(
            e, query="queue zanzibarquux"))  # fmt: skip
        m.add("related", entity, lambda x, r, e=entity: x.related(e, limit=50))
        m.add("entity_history", entity, lambda x, r, e=entity: x.entities.history(entity_id=e))
    for name in named:
        # Every entity the source mentions, those it shares with others too.
        m.add("query_topic", f"of:{name}", lambda x, r, n=name: [
            x.query_topic(e, limit=100) for e in r[n].entities], name)  # fmt: skip
        m.add("related", f"of:{name}", lambda x, r, n=name: [
            x.related(e, limit=100) for e in r[n].entities], name)  # fmt: skip
    m.add("entity_history", "all", lambda x, r: x.entities.history(limit=1000))
    for needle in NEEDLES:
        m.add("search_entities", needle, lambda x, r, q=needle: x.search_entities(q, limit=100))
        m.add("search_entities", f"{needle}:handle", lambda x, r, q=needle: x.search_entities(
            q, kinds=["handle", "email"], limit=100))  # fmt: skip


def _by_id(m: _Matrix, named: tuple[str, ...]) -> None:
    for name in named:
        m.add("drill_down", f"top:{name}", lambda x, r, n=name: x.drill_down(
            r[n].top, max_depth=32), name)  # fmt: skip
        m.add("drill_down", f"summary:{name}", lambda x, r, n=name: x.drill_down(
            r[n].summary, query="queue"), name)  # fmt: skip
        m.add("drill_down", f"leaf:{name}", lambda x, r, n=name: x.drill_down(r[n].leaf), name)
        m.add("fetch_leaves", name, lambda x, r, n=name: x.fetch_leaves(
            [r["eng"].leaf, r[n].leaf, r[n].summary, NOWHERE.leaf]), name, "eng")  # fmt: skip
        m.add("nodes", name, lambda x, r, n=name: x.nodes(
            [r[n].top, r["eng"].summary, r[n].leaf, r[n].summary, "x"]), name, "eng")  # fmt: skip
        m.add("get", f"leaf:{name}", lambda x, r, n=name: x.get(r[n].leaf), name)
        m.add("get", f"summary:{name}", lambda x, r, n=name: x.get(r[n].top), name)
        m.add("source", f"scope:{name}", lambda x, r, n=name: x.sources.get(r[n].scope), name)
        m.add("source", f"id:{name}", lambda x, r, n=name: x.sources.get(r[n].source_id), name)
        m.add("tree", name, lambda x, r, n=name: x.trees.get(r[n].scope), name)
        m.add("tree_stats", name, lambda x, r, n=name: x.trees.stats(r[n].tree_id), name)
        m.add("tree_tops", name, lambda x, r, n=name: x.trees.tops(r[n].tree_id), name)
        m.add("unsealed_leaves", name, lambda x, r, n=name: x.trees.unsealed(r[n].tree_id), name)
        m.add("item", name, lambda x, r, n=name: x.items.get(r[n].item or "none"), name)
        m.add("item", f"in:{name}", lambda x, r, n=name: x.items.get(
            r["eng"].item or "none", source=r[n].scope), name, "eng")  # fmt: skip
    m.add("sources", "all", lambda x, r: x.sources.list())
    m.add("stats", "all", lambda x, r: x.stats())
    m.add("trees", "all", lambda x, r: x.trees.list())
    m.add("item", "key-of-one", lambda x, r: x.items.get("eng0"))
    m.add("item", "key-of-two", lambda x, r: x.items.get("shared-key"))
    m.add("item", "key-of-two-in-eng", lambda x, r: x.items.get("shared-key", source="eng"))
    _items(m, named)


def _items(m: _Matrix, named: tuple[str, ...]) -> None:
    """An item's history, and its id read as a node id (its versions' transaction times
    left out: the two stores are written at different moments)."""
    for name in named:
        m.add("item_history", name, lambda x, r, n=name: _versions(x.items.history(
            r[n].item or "none")), name)  # fmt: skip
        m.add("item_history", f"in:{name}", lambda x, r, n=name: _versions(x.items.history(
            r["eng"].item or "none", source=r[n].scope)), name, "eng")  # fmt: skip
        m.add("item", f"as_of:{name}", lambda x, r, n=name: x.items.get(
            r[n].item or "none", as_of=T0 + timedelta(days=3650)), name)  # fmt: skip
        m.add("get", f"item:{name}", lambda x, r, n=name: _timeless(x.get(
            r[n].item or "none")), name)  # fmt: skip
    m.add("item_history", "key-of-two", lambda x, r: _versions(x.items.history("shared-key")))
    m.add("nodes", "items", lambda x, r: [_timeless(h) for h in x.nodes(
        ["eng0", "shared-key", "no-such-item"])])  # fmt: skip


def _versions(found: list[ItemVersion]) -> list[tuple[Any, ...]]:
    return [(v.source_id, v.id, v.version, v.action, v.text, v.nodes) for v in found]


def _timeless(hit: RetrievalHit) -> RetrievalHit:
    item = {
        k: v
        for k, v in hit.explain.get("item", {}).items()
        if k not in ("recorded_at", "closed_at", "removed_at")
    }
    return dataclasses.replace(hit, explain={**hit.explain, "item": item})


def _matched(found: QueryResponse) -> dict[str, Any]:
    """Fact hits without what differs between two stores built at different moments: the
    facts the structure of a source states at ingest are recorded then, and their ids and
    ``recorded_at`` hold that time. What remains (what each says, where from, its validity,
    evidence and score, the total) is the same when no hidden source shapes it; the order
    of equal scores goes by id, so the hits are compared as a set."""
    rows = []
    for hit in found.hits:
        explain = {k: v for k, v in hit.explain.items() if k != "recorded_at"}
        rows.append(
            (hit.content, hit.source_id, hit.tree_scope, rfc3339(hit.time_start),
             rfc3339(hit.time_end), round(hit.score, 9), repr(sorted(explain.items())))
        )  # fmt: skip
    return {"total": found.total, "hits": sorted(rows)}


def _facts(m: _Matrix, named: tuple[str, ...], queries: tuple[str, ...]) -> None:
    """The facts read as hits (those stated by the sources' structure at ingest) and the
    rollups; naming a source the reader may not see answers as naming none."""
    for n, query in enumerate(queries):
        m.add("query_facts", f"{n}:{query[:30]}", lambda x, r, q=query: _matched(x.facts.query(
            q, limit=1000)))  # fmt: skip
    for query in FEW:
        for label, (since, _) in WINDOWS.items():
            m.add("query_facts", f"as_of={label}:{query}", lambda x, r, q=query, w=since: (
                _matched(x.facts.query(q, as_of=w, limit=1000))))  # fmt: skip
        for label, refs, uses in _source_filters(named):
            m.add("query_facts", f"sources={label}:{query}", lambda x, r, q=query, s=refs: (
                _matched(x.facts.query(q, sources=s, limit=1000))), *uses)  # fmt: skip
    for entity in ENTITIES:
        m.add("query_facts", f"subject={entity}", lambda x, r, e=entity: _matched(x.facts.query(
            "queue release alice", subject=e or "topic:none", limit=1000)))  # fmt: skip
        m.add("rollups", entity or "all", lambda x, r, e=entity: x.facts.rollups(e or None))
    for name in named:
        m.add("query_facts", f"source:{name}", lambda x, r, n=name: _matched(x.facts.query(
            "queue release", sources=[r[n].scope], limit=1000)), name)  # fmt: skip


def _recalled(found: SearchResponse) -> dict[str, Any]:
    """A recall's hits as :func:`_matched` takes facts: without what differs between two
    stores built at different moments (a fact's id and ``recorded_at``) nor what follows from
    it (a fact's place among facts of equal score, hence its merged score and rank), so the
    hits are compared as a set, each with its raw signals."""
    rows = []
    for hit in found.hits:
        explain = {k: v for k, v in hit.explain.items() if k not in ("recorded_at", "recall")}
        fact = hit.node_kind.value == "fact"
        rows.append(
            ("" if fact else hit.node_id, hit.content, hit.source_id, hit.tree_scope,
             rfc3339(hit.time_start), rfc3339(hit.time_end), hit.source_ref,
             repr(sorted(explain.items())))
        )  # fmt: skip
    return {"total": found.total, "hits": sorted(rows), "nothing": found.nothing_relevant}


def _recall(m: _Matrix, named: tuple[str, ...], queries: tuple[str, ...]) -> None:
    """The one list of chunks and facts: every query, and filters naming sources, kinds,
    windows and times for the facts."""
    for n, query in enumerate(queries):
        m.add("recall", f"{n}:{query[:30]}", lambda x, r, q=query: _recalled(x.recall(
            q, limit=1000)))  # fmt: skip
    for query in FEW:
        m.add("recall", f"budget=300:{query}", lambda x, r, q=query: _recalled(x.recall(
            q, limit=1000, budget=300)))  # fmt: skip
        m.add("recall", f"facts:{query}", lambda x, r, q=query: _recalled(x.recall(
            q, types=["fact"], limit=1000)))  # fmt: skip
        # A fact's relevance is read from its BM25 share (the Σ idf over the facts ranked):
        # the floor and nothing_relevant must come out as on a store of the visible alone.
        m.add("recall", f"floor=0.2:{query}", lambda x, r, q=query: _recalled(x.recall(
            q, limit=1000, min_relevance=0.2)))  # fmt: skip
        m.add("recall", f"facts-floor=0.2:{query}", lambda x, r, q=query: _recalled(x.recall(
            q, types=["fact"], limit=1000, min_relevance=0.2)))  # fmt: skip
        for label, refs, uses in _source_filters(named):
            m.add("recall", f"sources={label}:{query}", lambda x, r, q=query, s=refs: (
                _recalled(x.recall(q, sources=s, limit=1000))), *uses)  # fmt: skip
        for kind in ("record", "chat", "document", "email"):
            m.add("recall", f"kind={kind}:{query}", lambda x, r, q=query, k=kind: _recalled(
                x.recall(q, kinds=[k], limit=1000)))  # fmt: skip
        for label, (since, until) in WINDOWS.items():
            m.add("recall", f"window={label}:{query}", lambda x, r, q=query, s=since,
                  u=until: _recalled(x.recall(q, since=s, until=u, limit=1000)))  # fmt: skip
            m.add("recall", f"as_of={label}:{query}", lambda x, r, q=query, w=since: (
                _recalled(x.recall(q, as_of=w, limit=1000))))  # fmt: skip


def probes_for(named: tuple[str, ...], *, canaries: tuple[str, ...] = ()) -> list[Probe]:
    """The matrix, naming the sources ``named`` by id and querying ``canaries`` too."""
    m = _Matrix()
    _search(m, named, (*QUERIES, *canaries))
    _summaries(m, named)
    _entities(m, named)
    _by_id(m, named)
    _facts(m, named, (*QUERIES, *canaries))
    _recall(m, named, (*QUERIES, *canaries))
    return m.probes


PROBES = probes_for(NAMED)


def echoes(refs: Mapping[str, Refs], uses: tuple[str, ...]) -> list[str]:
    """Every id of the sources ``uses`` names: an answer may echo them."""
    out: list[str] = []
    for name in uses:
        ref = refs[name]
        out += [ref.scope, ref.source_id, ref.tree_id, ref.top, ref.summary, ref.leaf]
        out += [ref.item or "", *ref.entities]
    return [n for n in out if n]
