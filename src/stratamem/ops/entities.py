"""The operations on entities by hand: merge, split and their history (see
:mod:`stratamem.entities.merges`).

Merging and splitting are writes: a principal needs the write permission, and may merge or
split only ids it can see named in the sources its scopes admit (an id it cannot see answers
as unknown); the decision is checked against the store as it reads it and recorded as the
owner's write, with the principal's name. A merge counts for a reader only where that reader
can see both ids, so it never shows a reader an id its scopes hide.
"""

from __future__ import annotations

from typing import Any

import stratamem.ops.params as p
from stratamem.entities import merges
from stratamem.ops.context import Context, may_write
from stratamem.ops.spec import Operation, Param


def _entity(name: str, help: str) -> Param:
    return Param(name, "str", help, min_length=1, max_length=500)


def _merge(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    may_write(ctx)
    who = None if ctx.principal is None else ctx.principal.name
    # Checked as the caller reads the store, then written as the owner: two blocks, for a
    # server's memory reads as one principal at a time.
    with ctx.reading() as theirs:
        change = merges.plan_merge(theirs.store, a["entity_a"], a["entity_b"])
    with ctx.writing() as owner:
        done = merges.apply(owner.store, change, by=who)
    return {"decision": merges.as_seen_by(done, who).to_dict()}


def _split(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    may_write(ctx)
    who = None if ctx.principal is None else ctx.principal.name
    # Checked as the caller reads the store, then written as the owner: two blocks, for a
    # server's memory reads as one principal at a time.
    with ctx.reading() as theirs:
        change = merges.plan_split(theirs.store, a["entity_a"], a["entity_b"])
    with ctx.writing() as owner:
        done = merges.apply(owner.store, change, by=who)
    return {"decision": merges.as_seen_by(done, who).to_dict()}


def _history(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    with ctx.reading() as m:
        found = merges.history(m.store, entity_id=a["entity_id"], limit=a["limit"])
        return {"decisions": [d.to_dict() for d in found]}


MERGE = Operation(
    name="merge_entities",
    group="entities",
    access="write",
    description="Say that two entity ids name one entity (entity_a is entity_b, which "
    "stays the canonical id), where the sources do not say so. Recorded with who and when; "
    "split_entities undoes it.",
    params=(
        _entity("entity_a", "The entity id merged away: person:maya."),
        _entity("entity_b", "The entity id it is: person:maya patel."),
    ),
    run=_merge,
    example={"entity_a": "person:maya", "entity_b": "person:maya patel"},
    query_param=None,
    cli="entities merge",
    python="entities.merge",
)

SPLIT = Operation(
    name="split_entities",
    group="entities",
    access="write",
    description="Undo a merge of two entity ids, or stop following an alias a source "
    "states between them (a display name two people share). Recorded with who and when.",
    params=(
        _entity("entity_a", "One entity id: person:maya."),
        _entity("entity_b", "The other: person:maya patel."),
    ),
    run=_split,
    example={"entity_a": "person:maya", "entity_b": "person:maya patel"},
    query_param=None,
    cli="entities split",
    python="entities.split",
)

HISTORY = Operation(
    name="entity_history",
    group="entities",
    description="The merges and splits of entities recorded, newest first, undone ones "
    "too, with who made each and when.",
    params=(
        Param(
            "entity_id",
            "str",
            "Only those of this entity's ids.",
            default=None,
            min_length=1,
            max_length=500,
        ),
        p.limit(100, merges.MAX_HISTORY),
    ),
    run=_history,
    example={"entity_id": "person:maya patel"},
    query_param=None,
    cli="entities history",
    python="entities.history",
)

ENTITIES = (MERGE, SPLIT, HISTORY)
