"""The operation that runs extraction by a model: facts read from a source's chunks by the
model the store is configured with (``stratamem extract --enable``), on every door, as a job.

The owner extracts from any source. A principal with the write permission extracts only from
the sources it reads (it writes what it reads: see :mod:`stratamem.access.writes`); a source
hidden from it answers as one that does not exist. The model is shown only the facts the
principal reads, and a decision naming any other fact is skipped without saying what that
fact holds (see :mod:`stratamem.memory.decide`). The endpoint and model are the store's
configuration, never a caller's: a caller cannot point the server at another address. The
API key comes from the server's environment and is kept nowhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stratamem.ops.context import Context, may_write
from stratamem.ops.spec import Operation, Param
from stratamem.store.facts import Fact

MAX_SOURCES = 100


class PrincipalReader:
    """A principal's view of the facts, for the extractor: those of the sources it reads
    (``readable``, the ids of the sources it read when the call began)."""

    def __init__(self, ctx: Context, readable: Sequence[str]) -> None:
        self.ctx = ctx
        self.readable = frozenset(readable)
        self.principal = None if ctx.principal is None else ctx.principal.name

    def facts_about(self, subjects: Sequence[str]) -> list[Fact]:
        out: list[Fact] = []
        with self.ctx.reading() as theirs:
            for subject in subjects:
                out.extend(theirs.store.facts(subject=subject, believed_only=True, limit=1000))
        return [f for f in out if f.source_id in self.readable]

    def may_change(self, fact: Fact) -> bool:
        return fact.source_id in self.readable


def run_extraction(
    ctx: Context, sources: Sequence[str], *, redo: bool = False, batch_size: int = 8
) -> dict[str, Any]:
    """Extraction over ``sources`` (all the caller reads when none) as the caller: the owner,
    or a principal (see the module docstring); the report as JSON."""
    may_write(ctx)
    if ctx.principal is None:
        with ctx.writing() as owner:
            report = owner.facts.extract(sources, redo=redo, batch_size=batch_size)
        return report.to_dict()
    with ctx.reading() as theirs:
        readable = [s.id for s in theirs.sources.list() if not s.locked]
        chosen = [theirs.sources.get(s).id for s in sources] or readable
    reader = PrincipalReader(ctx, readable)
    with ctx.writing() as owner:
        report = owner.facts.extract(chosen, redo=redo, batch_size=batch_size, reader=reader)
    return report.to_dict()


def _extract(ctx: Context, a: dict[str, Any]) -> dict[str, Any]:
    return run_extraction(ctx, a["sources"], redo=a["redo"], batch_size=a["batch_size"])


EXTRACT = Operation(
    name="extract",
    group="facts",
    access="write",
    description="Have the store's configured model read sources (ids or scopes; all the "
    "caller reads when none) and keep the facts up to date: it is shown the facts held "
    "about what each batch mentions and decides to add, update, retract or keep each, with "
    "a reason. Runs as a durable job: only chunks not read yet are sent. Returns what was "
    "decided, written and skipped.",
    params=(
        Param(
            "sources",
            "strs",
            "The sources to read (ids or scopes; default: all the caller reads).",
            default=(),
            min_length=1,
            max_length=200,
            max_items=MAX_SOURCES,
        ),
        Param("redo", "bool", "Send every chunk again, not only the new ones.", default=False),
        Param("batch_size", "int", "The most chunks sent in one request.", default=8, ge=1, le=256),
    ),
    run=_extract,
    cli="extract",
    python="facts.extract",
    example={"sources": ["slack:#eng"]},
    query_param=None,
)

EXTRACTION = (EXTRACT,)
