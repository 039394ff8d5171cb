"""The operations that read a path into the store or remove a source: ingest and forget.

The owner ingests from anywhere, into a source a principal made only with ``join``; a
principal with the write permission only under the server's ingest roots, into sources it
reads, and its new sources are made in its namespace (``<name>/<scope>``: the report names
the scope each source was written under). A forget removes only a source the caller
reads (a hidden one answers as one that does not exist).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import stratamem.ops.params as p
from stratamem.access import writes
from stratamem.errors import StratamemError
from stratamem.ingest import confine
from stratamem.ops.context import Context, may_write
from stratamem.ops.extract import run_extraction
from stratamem.ops.spec import Operation, Param

log = logging.getLogger(__name__)


def _ingest(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    may_write(ctx)
    who = ctx.principal
    target = writes.check_path(a["path"], ctx.ingest_roots, owner=who is None)
    access = a["access"]
    writes.check_access(who, access)

    def admit(before: Any, after: Any) -> tuple[str, ...] | None:
        return writes.admit_source(who, before, after, named=access is not None)

    # A principal's reads go from the roots' folders through no link (see ingest.confine).
    reads: AbstractContextManager[None] = (
        nullcontext() if who is None else confine.confined(ctx.ingest_roots)
    )
    with reads, ctx.writing() as owner:
        report = owner.ingest(
            target,
            format=a["format"],
            scope=a["scope"],
            access=access,
            sync=a["sync"],
            parallel=False,
            trees=a["trees"],
            admit=admit,
            embed=a["embed"],
            join=a["join"] or who is not None,
            writer=None if who is None else who.name,
        )
        out: dict[str, Any] = report.to_dict()
        out.setdefault("embedded", 0)
    if who is not None:
        _extract_after(ctx, [s.source_id for s in report.sources if s.error is None and s.added])
    return out


def _extract_after(ctx: Context, changed: Sequence[str]) -> None:
    """Where the store extracts after every ingest, a principal's ingest extracts as that
    principal: the model is shown only the facts it reads and changes only those, whatever
    the text it wrote asks of the model. A failure is logged and leaves the jobs queued, as
    after the owner's ingest."""
    if not changed:
        return
    with ctx.reading() as theirs:
        if theirs.facts.extraction() is None:
            return
    try:
        run_extraction(ctx, changed)
    except (StratamemError, ValueError) as exc:
        log.warning("extracting facts after ingest failed: %s", exc)


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
        p.JOIN,
    ),
    run=_ingest,
    example={"path": "/data/slack-export.zip"},
    query_param=None,
    cli="ingest",
    python="ingest",
)


def _forget(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    may_write(ctx)
    with ctx.reading() as theirs:
        # Resolved as the caller sees the store: a source hidden from it is missing.
        found = theirs.sources.get(a["source"])
    writes.require_readable(ctx.principal, found)
    with ctx.writing() as owner:
        removed = owner.sources.forget(found.id)
    return {"source": a["source"], "removed": removed}


FORGET = Operation(
    name="forget",
    group="sources",
    access="write",
    description="Remove a source (by id or scope) and everything derived from it, for good.",
    params=(Param("source", "str", "A source id or scope.", min_length=1, max_length=p.MAX_NAME),),
    run=_forget,
    http=("DELETE", "/v1/sources/{source:path}"),
    destructive=True,
    example={"source": "slack:#random"},
    query_param=None,
    cli="forget",
    python="sources.forget",
)

SOURCE_WRITES = (INGEST, FORGET)
