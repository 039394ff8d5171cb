"""The operations on items, an agent's single memories: add, edit, rm, a conversation's
turns (add_messages) and an item's history.

The owner writes anywhere, but not to a source a principal made unless it passes ``join``. A
principal with the write permission writes only what it could read: an item to a source it
reads, or to one of that name in its namespace (``<name>/<source>``, made with its scopes; by
default ``<name>/memory``, or ``memory:<name>`` where it has that one from before), or for a
user or agent it holds the scope of; an edit or removal only of an item it reads (one in a
source hidden from it answers as one that does not exist).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import stratamem.ops.params as p
from stratamem.access import writes
from stratamem.errors import AccessDenied, NotFoundError
from stratamem.ingest.conversation import MAX_MESSAGES
from stratamem.ingest.items import find_item
from stratamem.ops.context import Context, may_write
from stratamem.ops.extract import run_extraction
from stratamem.ops.spec import Operation, Param
from stratamem.types import Identity, Source

if TYPE_CHECKING:
    from stratamem.api import Memory

DEFAULT_ITEM_SOURCE = "memory"
MAX_TAGS = 50
KINDS = ("chat", "email", "record")


def item_source(ctx: Context, source: str | None) -> str:
    """The source an item goes to: the one named, or the default ``memory``; for a principal
    one of that name it reads, else its own of that name (:func:`writes.write_target`), by
    default its ``memory:<name>`` from before where it reads one."""
    who = ctx.principal
    if who is None:
        return source or DEFAULT_ITEM_SOURCE
    with ctx.reading() as theirs:
        found = None
        if source is None:
            found = readable(theirs, f"{DEFAULT_ITEM_SOURCE}:{who.name}")
        target = found.id if found is not None else None
        if target is None:
            target = writes.write_target(
                who, source or DEFAULT_ITEM_SOURCE, lambda name: readable(theirs, name)
            )
    if target is not None:
        return target
    scope = writes.own_name(who, source or DEFAULT_ITEM_SOURCE)
    with ctx.writing() as owner:
        writes.own_source(owner.store, scope, who, platform="memory", title=f"Memory of {who.name}")
    return scope


def readable(memory: Memory, name: str) -> Source | None:
    """The source of ``name`` as ``memory`` reads the store, None for none (or one hidden)."""
    try:
        return memory.sources.get(name)
    except NotFoundError:
        return None


def _add(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    may_write(ctx)
    whose = Identity.of(user=a["user"], agent=a["agent"], session=a["session"])
    if whose:
        # A user's memory is a source of its own, readable by that user's scope.
        writes.check_identity(ctx.principal, whose)
        source = a["source"] or DEFAULT_ITEM_SOURCE
    else:
        source = item_source(ctx, a["source"])
    with ctx.writing() as owner:
        done = owner.items.add(
            a["text"],
            source=source,
            kind=a["kind"],
            author=a["author"],
            time=a["time"],
            id=a["id"],
            title=a["title"],
            thread=a["thread"],
            tags=a["tags"],
            meta=a["meta"],
            join=a["join"] or ctx.principal is not None,
            **p.identity(a),
        )
    return done.to_dict()


ITEM_ID = Param("id", "str", "The item's id (from add).", min_length=1, max_length=p.MAX_NAME)
ITEM_SOURCE = Param(
    "source",
    "str",
    "The source (id or scope) holding the item; needed only where several hold its id.",
    default=None,
    max_length=p.MAX_NAME,
)

ADD = Operation(
    name="add",
    group="items",
    access="write",
    description="Write one memory (a note, a preference, a message) to a source; every "
    "search finds it as soon as this returns. Returns its `id`, which edit and rm take.",
    params=(
        Param("text", "str", "What to remember.", min_length=1),
        Param(
            "source",
            "str",
            "The source to write to (default: memory; a principal's: memory:<its name>).",
            default=None,
            min_length=1,
            max_length=p.MAX_NAME,
        ),
        Param(
            "kind",
            "str",
            "The kind of a new source (default record).",
            default=None,
            choices=KINDS,
        ),
        Param("author", "str", "Who said or wrote it.", default=None, max_length=p.MAX_NAME),
        p.when("time", "When it was said (default now)."),
        Param(
            "id",
            "str",
            "Its id (default: a new one); an id the source holds already is replaced.",
            default=None,
            min_length=1,
            max_length=p.MAX_NAME,
        ),
        Param("title", "str", "A title.", default=None, max_length=1000),
        Param("thread", "str", "A thread it belongs to.", default=None, max_length=p.MAX_NAME),
        Param("tags", "strs", "Tags.", default=(), max_length=100, max_items=MAX_TAGS),
        Param("meta", "object", "Any other fields, kept with it.", default=None),
        p.FOR_USER,
        p.FOR_AGENT,
        p.IN_SESSION,
        p.JOIN,
    ),
    run=_add,
    example={"text": "Maya prefers morning meetings", "tags": ["preference"]},
    query_param=None,
    cli="add",
    python="items.add",
)


def _find(ctx: Context, a: dict[str, Any]) -> str:
    """The id of the source holding the item ``a`` names, as the caller reads the store."""
    source = a["source"]
    with ctx.reading() as theirs:
        if source is not None:
            source = theirs.sources.get(source).id
        found, _ = find_item(theirs.store, a["id"], source=source, **p.identity(a))
    return found


def _edit(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    may_write(ctx)
    source = _find(ctx, a)
    changes: dict[str, Any] = {}
    for name in ("text", "author", "time", "title", "tags", "meta"):
        if a[name] is not None:
            changes[name] = a[name]
    with ctx.writing() as owner:
        done = owner.items.edit(a["id"], source=source, **changes)
    return done.to_dict()


EDIT = Operation(
    name="edit",
    group="items",
    access="write",
    description="Correct one memory by id: the fields given change, the others stay. The "
    "id stays the same.",
    params=(
        ITEM_ID,
        ITEM_SOURCE,
        Param("text", "str", "The new text.", default=None, min_length=1),
        Param("author", "str", "The new author.", default=None, max_length=p.MAX_NAME),
        p.when("time", "The new time."),
        Param("title", "str", "The new title.", default=None, max_length=1000),
        Param(
            "tags",
            "strs",
            "The new tags (all of them).",
            default=None,
            max_items=MAX_TAGS,
            nullable=True,
        ),
        Param("meta", "object", "The new other fields (all of them).", default=None),
        p.USER,
        p.AGENT,
        p.SESSION,
    ),
    run=_edit,
    example={"id": "item_0123456789abcdef", "text": "Maya prefers afternoon meetings"},
    query_param=None,
    cli="edit",
    python="items.edit",
)


def _rm(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    may_write(ctx)
    source = _find(ctx, a)
    with ctx.writing() as owner:
        done = owner.items.rm(a["id"], source=source)
    return done.to_dict()


RM = Operation(
    name="rm",
    group="items",
    access="write",
    description="Remove one memory by id: it leaves every index at once.",
    params=(ITEM_ID, ITEM_SOURCE, p.USER, p.AGENT, p.SESSION),
    run=_rm,
    destructive=True,
    example={"id": "item_0123456789abcdef"},
    query_param=None,
    cli="rm",
    python="items.rm",
)


def _add_messages(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    may_write(ctx)
    whose = Identity.of(user=a["user"], agent=a["agent"], session=a["session"])
    writes.check_identity(ctx.principal, whose)
    if ctx.principal is not None and not whose:
        raise AccessDenied(
            f"principal {ctx.principal.name!r} writes a conversation for a user or agent "
            "it holds: name the user (or agent)"
        )
    with ctx.writing() as owner:
        if a["extract"]:  # refused before anything is written
            owner.facts.extraction_required()
        done = owner.items.add_messages(a["messages"], **p.identity(a))
    if not a["extract"]:
        return done.to_dict()
    return done.to_dict() | {"extracted": run_extraction(ctx, [done.source_id])}


ADD_MESSAGES = Operation(
    name="add_messages",
    group="items",
    access="write",
    description="Write the turns of a conversation ({role, content} messages, optionally "
    "name, time, id) to the chat source of a user, agent and session, in one call: every "
    "search finds them at once. A retried call changes nothing; a bad message is skipped "
    "with a reason.",
    params=(
        Param(
            "messages",
            "objects",
            'The turns: {"role": "user"|"assistant"|"system"|"tool", '
            '"content": text, optional "name", "time", "id"}.',
            max_items=MAX_MESSAGES,
        ),
        Param(
            "user", "str", "The user the conversation is with.", default=None, max_length=p.MAX_NAME
        ),
        Param("agent", "str", "The agent that held it.", default=None, max_length=p.MAX_NAME),
        Param(
            "session",
            "str",
            "The session (one chat source each).",
            default=None,
            max_length=p.MAX_NAME,
        ),
        Param(
            "extract",
            "bool",
            "Then have the configured model read the new turns and bring the facts up to "
            "date (add, update, retract); its report is `extracted`.",
            default=False,
        ),
    ),
    run=_add_messages,
    python="items.add_messages",
    example={
        "messages": [{"role": "user", "content": "I moved the demo to Friday"}],
        "user": "maya",
        "session": "s1",
    },
    query_param=None,
)


def _item_history(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    source = a["source"]
    with ctx.reading() as theirs:
        if source is not None:
            source = theirs.sources.get(source).id
        if source is None and Identity.of(user=a["user"], agent=a["agent"], session=a["session"]):
            source = _find(ctx, a)
        versions = theirs.items.history(a["id"], source=source)
    return {"id": a["id"], "versions": [v.to_dict() for v in versions]}


ITEM_HISTORY = Operation(
    name="item_history",
    group="items",
    description="Every version of one memory by id, oldest first: its text and fields, "
    "what opened it (added, edited, removed) and when the store held it (recorded_at to "
    "closed_at). An edit or a removal never loses the earlier text.",
    params=(ITEM_ID, ITEM_SOURCE, p.USER, p.AGENT, p.SESSION),
    run=_item_history,
    cli="history",
    python="items.history",
    example={"id": "item_0123456789abcdef"},
    query_param=None,
)

ITEMS = (ADD, EDIT, RM, ADD_MESSAGES, ITEM_HISTORY)
