"""The operations on facts: recall_facts, history, query, rollups; remember and retract.

A principal states facts only on evidence it can read, into a source it can read (a name it
reads, else that name in its namespace: ``<name>/<source>``); one without evidence or source
goes to its own ``<name>/facts:asserted``, made with its scopes (or to its ``facts:<name>``
where it has that one from before). It retracts only a fact it can read. The owner's facts go
to a source a principal made only with ``join``.
"""

from __future__ import annotations

from typing import Any

import stratamem.ops.params as p
import stratamem.ops.wire as wire
from stratamem.access import writes
from stratamem.errors import NotFoundError
from stratamem.memory.remember import DEFAULT_SOURCE as DEFAULT_FACTS_SOURCE
from stratamem.memory.remember import statement
from stratamem.ops.context import Context, may_write
from stratamem.ops.items import readable
from stratamem.ops.spec import Operation, Param
from stratamem.types import Identity

MAX_FACT_LIMIT = 1000
MAX_ROLLUP_LIMIT = 1000
PREDICATE = Param(
    "predicate", "str", "Only this predicate.", default=None, min_length=1, max_length=p.MAX_NAME
)


def _recall_facts(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.reading() as m:
        found = m.facts.recall(
            a["subject"],
            predicate=a["predicate"],
            as_of=a["as_of"],
            known_at=a["known_at"],
            limit=a["limit"],
            **p.identity(a),
        )
        return {"facts": [wire.fact(f) for f in found]}


RECALL_FACTS = Operation(
    name="recall_facts",
    group="facts",
    description="What is true about an entity (facts: subject, predicate, object, since "
    "when), as of now or of a time, with the evidence each rests on. Use for 'who leads "
    "on-call', 'what is the release date'; `fact_history` shows how a value changed.",
    params=(
        p.SUBJECT,
        PREDICATE,
        p.AS_OF,
        p.KNOWN_AT,
        p.USER,
        p.AGENT,
        p.SESSION,
        p.limit(100, 10_000),
    ),
    run=_recall_facts,
    example={"subject": "person:carol diaz"},
    query_param=None,
    cli="fact list",
    python="facts.recall",
)


def _fact_history(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.reading() as m:
        found = m.facts.history(
            a["subject"], a["predicate"], known_at=a["known_at"], **p.identity(a)
        )
        return {"facts": [wire.fact(f) for f in found]}


FACT_HISTORY = Operation(
    name="fact_history",
    group="facts",
    description="Every value one entity's predicate had, oldest first, including values "
    "later replaced or corrected (each with when it stopped being believed).",
    params=(
        Param("subject", "str", "An entity id.", min_length=1, max_length=500),
        Param("predicate", "str", "The predicate.", min_length=1, max_length=p.MAX_NAME),
        p.KNOWN_AT,
        p.USER,
        p.AGENT,
        p.SESSION,
    ),
    run=_fact_history,
    example={"subject": "topic:phoenix", "predicate": "release_date"},
    query_param=None,
    cli="fact history",
    python="facts.history",
)


def _query_facts(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.reading() as m:
        found = m.facts.query(
            a["query"],
            subject=a["subject"],
            sources=a["sources"],
            as_of=a["as_of"],
            known_at=a["known_at"],
            limit=a["limit"],
            min_relevance=a["min_relevance"],
            **p.identity(a),
        )
        return {
            "facts": [wire.fact_hit(h) for h in found.hits],
            "total": found.total,
            "truncated": found.truncated,
            "nothing_relevant": bool(found.nothing_relevant),
        }


QUERY_FACTS = Operation(
    name="query_facts",
    group="facts",
    description="The facts that best match a question (what each says, by its words and "
    "meaning), true now or `as_of` a time, as known `known_at` a time: each with its "
    "validity, source, evidence (node ids, cited), score and `relevance` (0-1); "
    "`nothing_relevant` is true when none is likely to answer. `recall_facts` lists an entity's "
    "facts without a query.",
    params=(
        p.query(required=True),
        p.SUBJECT,
        p.SOURCES,
        p.AS_OF,
        p.KNOWN_AT,
        p.USER,
        p.AGENT,
        p.SESSION,
        p.limit(10, MAX_FACT_LIMIT),
        p.MIN_RELEVANCE,
    ),
    run=_query_facts,
    example={"query": "when is the release"},
    cli="fact search",
    python="facts.query",
)


def _rollups(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.reading() as m:
        return {"rollups": [r.to_dict() for r in m.facts.rollups(a["subject"], limit=a["limit"])]}


ROLLUPS = Operation(
    name="rollups",
    group="facts",
    description="Profile cards (rollups) of an entity, or of every entity, built from the "
    "facts of the sources you read: what is known about someone at a glance, best first.",
    params=(p.SUBJECT, p.limit(20, MAX_ROLLUP_LIMIT)),
    run=_rollups,
    http=("GET", "/v1/rollups"),
    example={"subject": "person:carol diaz"},
    query_param=None,
    cli="rollup",
    python="facts.rollups",
)


def _remember(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    may_write(ctx)
    who = ctx.principal
    evidence, source = a["evidence"], a["source"]
    whose = Identity.of(user=a["user"], agent=a["agent"], session=a["session"])
    writes.check_identity(who, whose)
    if who is not None:
        with ctx.reading() as theirs:
            # Evidence or a source hidden from it answers as one that does not exist.
            seen = {n.node_id for n in theirs.nodes(list(evidence))}
            for ident in evidence:
                if ident not in seen:
                    raise NotFoundError(f"no node with id {ident!r}")
            if source is not None and whose:
                theirs.sources.get(source)
            elif source is not None:
                target = writes.write_target(who, source, lambda name: readable(theirs, name))
                if target is None:
                    raise NotFoundError(f"no source with id or scope {source!r}")
                source = target
            elif not evidence and not whose:
                legacy = readable(theirs, f"facts:{who.name}")
                source = None if legacy is None else legacy.id
        if not evidence and source is None and not whose:
            # Checked first, so that a bad statement leaves no empty source behind.
            statement(
                a["subject"],
                a["predicate"],
                a["object"],
                valid_from=a["valid_from"],
                valid_to=a["valid_to"],
            )
            source = writes.own_name(who, DEFAULT_FACTS_SOURCE)
            with ctx.writing() as owner:
                writes.own_facts_source(owner.store, source, who)
    with ctx.writing() as owner:
        found = owner.facts.remember(
            a["subject"],
            a["predicate"],
            a["object"],
            valid_from=a["valid_from"],
            valid_to=a["valid_to"],
            evidence=evidence,
            source=source,
            join=a["join"] or who is not None,
            **p.identity(a),
        )
    return found.to_dict()


REMEMBER = Operation(
    name="remember",
    group="facts",
    access="write",
    description="State a fact: SUBJECT's PREDICATE is OBJECT from `valid_from` (until "
    "`valid_to` or said otherwise). A new value closes the old one and keeps it in the "
    "history; the same value again changes nothing. Give `evidence` (node ids) it rests on.",
    params=(
        Param(
            "subject",
            "str",
            "An entity id: person:carol diaz, user:maya.",
            min_length=1,
            max_length=500,
        ),
        Param(
            "predicate",
            "str",
            "leads, status, release_date, prefers, …",
            min_length=1,
            max_length=p.MAX_NAME,
        ),
        Param("object", "str", "An entity id or any text.", min_length=1, max_length=10_000),
        p.when("valid_from", "True from (default: the time of its evidence, else now)."),
        p.when("valid_to", "True until (default: until said otherwise)."),
        Param(
            "evidence",
            "strs",
            "Node ids the fact rests on.",
            default=(),
            min_length=1,
            max_length=p.MAX_NAME,
            max_items=100,
        ),
        Param(
            "source",
            "str",
            "The source a fact without evidence goes to (default: facts:asserted; a "
            "principal's: <its name>/facts:asserted; with a user: facts/user:<id>).",
            default=None,
            min_length=1,
            max_length=p.MAX_NAME,
        ),
        p.FOR_USER,
        p.FOR_AGENT,
        p.IN_SESSION,
        p.JOIN,
    ),
    run=_remember,
    http=("POST", "/v1/facts"),
    example={"subject": "user:maya", "predicate": "prefers", "object": "morning meetings"},
    query_param=None,
    cli="fact add",
    python="facts.remember",
)


def _retract(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    may_write(ctx)
    fact_id = a["fact_id"]
    with ctx.reading() as theirs:
        if not theirs.store.facts(ids=[fact_id], believed_only=False):
            raise NotFoundError(f"no fact with id {fact_id!r}")
    with ctx.writing() as owner:
        return owner.facts.retract(fact_id).to_dict()


RETRACT = Operation(
    name="retract",
    group="facts",
    access="write",
    description="Correct a fact (by id) that was never true: it stays in the history, no "
    "longer believed.",
    params=(
        Param(
            "fact_id",
            "str",
            "A fact id from recall_facts or query_facts.",
            min_length=1,
            max_length=p.MAX_NAME,
        ),
    ),
    run=_retract,
    http=("DELETE", "/v1/facts/{fact_id}"),
    destructive=True,
    example={"fact_id": "<a fact id>"},
    query_param=None,
    cli="fact retract",
    python="facts.retract",
)

FACTS = (RECALL_FACTS, FACT_HISTORY, QUERY_FACTS, ROLLUPS, REMEMBER, RETRACT)
