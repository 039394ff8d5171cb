"""The writing operations: items (add, edit, rm), ingest and forget.

The owner writes anywhere. A principal with the write permission writes only what it could
read: an item to a source it reads, or by default to its own (``memory:<name>``, made with
its scopes); an edit or removal only of an item it reads (one in a source hidden from it
answers as one that does not exist); an ingest only under the ingest roots; a forget only of
a source it reads.
"""

from __future__ import annotations

from typing import Any

import stratamem.ops.params as p
from stratamem.access import writes
from stratamem.ingest.items import find_item
from stratamem.ops.context import Context, may_write
from stratamem.ops.spec import Operation, Param

DEFAULT_ITEM_SOURCE = "memory"
MAX_TAGS = 50
KINDS = ("chat", "email", "record")


def item_source(ctx: Context, source: str | None) -> str:
    """The source an item goes to: the one named (a principal: one it reads, else its own
    of that name) or the default — the owner's ``memory``, a principal's ``memory:<name>``."""
    who = ctx.principal
    if who is None:
        return source or DEFAULT_ITEM_SOURCE
    scope = source or f"{DEFAULT_ITEM_SOURCE}:{who.name}"
    with ctx.reading() as theirs:
        try:
            found = theirs.source(scope)
        except Exception:
            found = None
    if found is not None:
        return found.id
    with ctx.writing() as owner:
        writes.own_source(owner.store, scope, who, platform="memory", title=f"Memory of {who.name}")
    return scope


def _add(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    may_write(ctx)
    source = item_source(ctx, a["source"])
    with ctx.writing() as owner:
        done = owner.add(
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
    ),
    run=_add,
    example={"text": "Maya prefers morning meetings", "tags": ["preference"]},
    query_param=None,
)


def _find(ctx: Context, ident: str, source: str | None) -> str:
    """The id of the source holding item ``ident`` as the caller reads the store."""
    with ctx.reading() as theirs:
        if source is not None:
            source = theirs.source(source).id
        found, _ = find_item(theirs.store, ident, source=source)
    return found


def _edit(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    may_write(ctx)
    source = _find(ctx, a["id"], a["source"])
    changes: dict[str, Any] = {}
    for name in ("text", "author", "time", "title", "tags", "meta"):
        if a[name] is not None:
            changes[name] = a[name]
    with ctx.writing() as owner:
        done = owner.update(a["id"], source=source, **changes)
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
    ),
    run=_edit,
    example={"id": "item_0123456789abcdef", "text": "Maya prefers afternoon meetings"},
    query_param=None,
)


def _rm(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    may_write(ctx)
    source = _find(ctx, a["id"], a["source"])
    with ctx.writing() as owner:
        done = owner.delete(a["id"], source=source)
    return done.to_dict()


RM = Operation(
    name="rm",
    group="items",
    access="write",
    description="Remove one memory by id: it leaves every index at once.",
    params=(ITEM_ID, ITEM_SOURCE),
    run=_rm,
    destructive=True,
    example={"id": "item_0123456789abcdef"},
    query_param=None,
)


def _ingest(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    may_write(ctx)
    who = ctx.principal
    target = writes.check_path(a["path"], ctx.ingest_roots, owner=who is None)
    access = a["access"]
    writes.check_access(who, access)

    def admit(before: Any, after: Any) -> tuple[str, ...] | None:
        return writes.admit_source(who, before, after, named=access is not None)

    with ctx.writing() as owner:
        report = owner.ingest(
            target,
            kind=a["format"],
            scope=a["scope"],
            access=access,
            sync=a["sync"],
            parallel=False,
            trees=a["trees"],
            admit=admit,
        )
        out: dict[str, Any] = report.to_dict()
        out["embedded"] = 0
        if a["embed"] and owner.embedder is not None and owner.pending_embeddings():
            out["embedded"] = owner.embed().embedded
    return out


INGEST = Operation(
    name="ingest",
    group="sources",
    access="write",
    description="Read a file or folder on the server's machine into the memory (Slack or "
    "Discord export, mbox, Maildir, Markdown notes, IRC logs, JSONL), then embed it so "
    "every search finds it. Chat and mail merge with what is there. A principal reads "
    "only under the server's ingest roots.",
    params=(
        Param("path", "str", "A path on the server.", min_length=1, max_length=4096),
        Param(
            "format",
            "str",
            "The connector, when detection is not enough.",
            default=None,
            max_length=100,
        ),
        Param("scope", "str", "Name the source this.", default=None, max_length=p.MAX_NAME),
        Param(
            "access",
            "strs",
            "Access scopes for the sources read (default: a principal's own).",
            default=None,
            max_length=64,
            max_items=100,
            nullable=True,
        ),
        Param("sync", "bool", "Remove what the export lacks (default: keep it).", default=False),
        Param("embed", "bool", "Embed the new chunks now.", default=True),
        Param(
            "trees",
            "bool",
            "Seal the summary trees of what changed (false: leave them queued).",
            default=True,
        ),
    ),
    run=_ingest,
    example={"path": "/data/slack-export.zip"},
    query_param=None,
)


def _forget(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    may_write(ctx)
    with ctx.reading() as theirs:
        # Resolved as the caller sees the store: a source hidden from it is missing.
        found = theirs.source(a["source"])
    writes.require_readable(ctx.principal, found)
    with ctx.writing() as owner:
        removed = owner.forget(found.id)
    return {"source": a["source"], "removed": removed}


FORGET = Operation(
    name="forget",
    group="sources",
    access="write",
    description="Remove a source (by id or scope) and everything derived from it, for good.",
    params=(Param("source", "str", "A source id or scope.", min_length=1, max_length=p.MAX_NAME),),
    run=_forget,
    http=("DELETE", "/v1/sources/{source}"),
    destructive=True,
    example={"source": "slack:#random"},
    query_param=None,
)

WRITES = (ADD, EDIT, RM, INGEST, FORGET)
