"""Fact commands: fact add, list, search, history and retract (see ``docs/memory.md``).

Every time option of these commands (``--valid-from``, ``--valid-to``, ``--as-of``,
``--known-at``) takes
the same forms, an ISO 8601 date or time or a span back from now (``24h``, ``7d``, ``2w``); a
time it cannot read is a usage error naming the option."""

from __future__ import annotations

from datetime import datetime

import click
from rich.markup import escape
from rich.table import Table

from stratamem.api.records import DEFAULT_FACT_SOURCE, Fact, FactWrite
from stratamem.cli.common import (
    TIME,
    FiniteRange,
    handle_errors,
    identity_options,
    join_option,
    json_option,
    min_relevance_option,
    nothing_relevant_line,
    older_name,
    open_memory,
    out,
    print_json,
    sources_option,
    when,
)
from stratamem.types import RetrievalHit


def _when(value: datetime | None) -> str:
    """A date, with the time where it is not midnight; ``…`` for an open end."""
    if value is None:
        return "…"
    if (value.hour, value.minute, value.second) == (0, 0, 0):
        return value.strftime("%Y-%m-%d")
    return value.strftime("%Y-%m-%d %H:%M")


def _table(facts: list[Fact], *, history: bool = False) -> None:
    """A list of facts; the history of one subject and predicate leaves those two out."""
    if not facts:
        out.print("no facts", highlight=False)
        return
    table = Table(box=None, pad_edge=False)
    columns = (
        ("object", "from", "to") if history else ("subject", "predicate", "object", "from", "to")
    )
    for column in columns:
        table.add_column(column)
    if history:
        table.add_column("believed until", no_wrap=True)
    table.add_column("id", no_wrap=True)
    for f in facts:
        row = [] if history else [escape(f.subject), escape(f.predicate)]
        row += [escape(f.object), _when(f.valid_from), _when(f.valid_to)]
        if history:
            row.append("now" if f.expired_at is None else _when(f.expired_at))
        row.append(escape(f.id))
        table.add_row(*row)
    if history:
        out.print(f"{escape(facts[0].subject)} {escape(facts[0].predicate)}:", highlight=False)
    out.print(table)


def _report(write: FactWrite, as_json: bool) -> None:
    if as_json:
        print_json(write.to_dict())
        return
    if not write.recorded and not write.expired:
        out.print("nothing changed: the store already says so", highlight=False)
        return
    for f in write.recorded:
        out.print(
            f"recorded {escape(f.subject)} {escape(f.predicate)} {escape(f.object)} "
            f"from {_when(f.valid_from)} to {_when(f.valid_to)} ({escape(f.id)})",
            highlight=False,
        )
    if write.expired:
        out.print(f"no longer believed: {', '.join(write.expired)}", highlight=False)


@click.group()
def fact() -> None:
    """Facts: what is true about an entity, and since when (bitemporal: nothing is deleted by
    an update; see docs/memory.md).

    \b
    Examples:
      stratamem fact add 'person:carol diaz' leads on-call --valid-from 2024-03-01
      stratamem fact add topic:phoenix release_date 2024-04-05 --valid-from 2024-03-20
      stratamem fact list 'person:carol diaz'
      stratamem fact list --as-of 2024-03-10
      stratamem fact search 'who leads on-call' --as-of 30d
      stratamem fact history topic:phoenix release_date
    """


@fact.command("add")
@click.argument("subject")
@click.argument("predicate")
@click.argument("object")
@click.option(
    "--valid-from",
    type=TIME,
    help="True from (ISO 8601 or a span back: 7d; default for a new value: the time of its "
    "evidence, else now).",
)
@older_name("--from", "--valid-from", "valid_from", type=TIME)
@click.option("--valid-to", type=TIME, help="True until (default: until said otherwise).")
@older_name("--to", "--valid-to", "valid_to", type=TIME)
@click.option("--evidence", multiple=True, help="A node id the fact rests on (repeatable).")
@click.option(
    "--source",
    help=f"The source a fact without evidence belongs to (default {DEFAULT_FACT_SOURCE}; with "
    "--user: facts/user:<id>).",
)
@click.option("--confidence", type=FiniteRange(0, 1), default=1.0, show_default=True)
@click.option(
    "--many", is_flag=True, help="The predicate holds many values: this one adds to the others."
)
@identity_options("write")
@join_option
@json_option
@click.pass_context
@handle_errors
def fact_add(
    ctx: click.Context,
    subject: str,
    predicate: str,
    object: str,
    valid_from: datetime | None,
    valid_to: datetime | None,
    evidence: tuple[str, ...],
    source: str | None,
    confidence: float,
    many: bool,
    user: str | None,
    agent: str | None,
    session: str | None,
    join: bool,
    as_json: bool,
) -> None:
    """State that SUBJECT's PREDICATE is OBJECT. SUBJECT is an entity id (person:carol diaz,
    topic:phoenix); OBJECT an entity id or any text. A new value closes the old one at
    --valid-from (by default the time of its evidence, else now) and keeps it in the history;
    the same value again changes nothing.

    \b
    Examples:
      stratamem fact add 'person:carol diaz' leads on-call --valid-from 2024-03-01
      stratamem fact add user:maya prefers 'morning meetings' --user maya
    """
    memory = open_memory(ctx)
    write = memory.facts.remember(
        subject,
        predicate,
        object,
        valid_from=valid_from,
        valid_to=valid_to,
        evidence=evidence,
        source=source,
        confidence=confidence,
        many=many,
        user=user,
        agent=agent,
        session=session,
        join=join,
    )
    _report(write, as_json)


@fact.command("list")
@click.argument("subject", required=False)
@click.option("--predicate", help="Only this predicate.")
@click.option("--as-of", "as_of", help="True at this time (default: now).")
@click.option("--known-at", help="As the store knew it at this time (default: now).")
@identity_options("read")
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True)
@json_option
@click.pass_context
@handle_errors
def fact_list(
    ctx: click.Context,
    subject: str | None,
    predicate: str | None,
    as_of: str | None,
    known_at: str | None,
    user: str | None,
    agent: str | None,
    session: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """The facts true now (or --as-of a time, as known --known-at a time), of SUBJECT or of
    everything.

    \b
    Examples:
      stratamem fact list 'person:carol diaz'
      stratamem fact list --as-of 2024-03-10 --json
      stratamem fact list --user maya
    """
    memory = open_memory(ctx)
    found = memory.facts.recall(
        subject,
        predicate=predicate,
        as_of=when(as_of, "--as-of"),
        known_at=when(known_at, "--known-at"),
        limit=limit,
        user=user,
        agent=agent,
        session=session,
    )
    if as_json:
        print_json({"facts": [f.to_dict() for f in found]})
        return
    _table(found)


@fact.command("search")
@click.argument("query")
@click.option("--subject", help="Only facts of this entity (person:carol diaz).")
@sources_option()
@click.option("--as-of", "as_of", help="True at this time (default: now).")
@click.option("--known-at", help="As the store knew it at this time (default: now).")
@identity_options("read")
@click.option("--limit", type=click.IntRange(1, 1000), default=10, show_default=True)
@min_relevance_option
@json_option
@click.pass_context
@handle_errors
def fact_search(
    ctx: click.Context,
    query: str,
    subject: str | None,
    sources: tuple[str, ...],
    as_of: str | None,
    known_at: str | None,
    user: str | None,
    agent: str | None,
    session: str | None,
    limit: int,
    min_relevance: float | None,
    as_json: bool,
) -> None:
    """The facts that best match QUERY (what each says, by its words and, where the store
    has vectors, its meaning), true now or --as-of a time, as known --known-at a time; each
    with its validity, source and the evidence it rests on.

    \b
    Examples:
      stratamem fact search 'who leads on-call'
      stratamem fact search 'release date' --subject topic:phoenix --as-of 2024-03-15
      stratamem fact search 'release date' --known-at 7d --json
    """
    memory = open_memory(ctx)
    found = memory.facts.query(
        query,
        subject=subject,
        sources=sources,
        as_of=when(as_of, "--as-of"),
        known_at=when(known_at, "--known-at"),
        limit=limit,
        user=user,
        agent=agent,
        session=session,
        min_relevance=min_relevance,
    )
    if as_json:
        print_json(found.to_dict())
        return
    plainly = nothing_relevant_line(bool(found.nothing_relevant), len(found.hits))
    if plainly:
        out.print(f"[yellow]{plainly}[/]", highlight=False)
    if not found.hits:
        out.print("no facts match", highlight=False)
        return
    for rank, hit in enumerate(found.hits, 1):
        _card(rank, hit)
    if found.truncated:
        out.print(f"[dim]{len(found.hits)} of {found.total}; raise --limit for more[/]")


def _card(rank: int, hit: RetrievalHit) -> None:
    """One fact as ``search`` prints a hit: what it says, where and when it holds, its id,
    citation and score, and the evidence it rests on."""
    explain = hit.explain
    valid = f"{_when(hit.time_start)} → {_when(hit.time_end) if hit.time_end else 'now'}"
    details = [hit.tree_scope, f"valid {valid}", str(explain.get("origin", ""))]
    if explain.get("expired_at"):
        details.append(f"believed until {explain['expired_at']}")
    out.print(f"[bold]{rank}.[/] [dim]{escape(' · '.join(details))}[/]", highlight=False)
    said = f"{explain.get('subject')} {explain.get('predicate')} {explain.get('object')}"
    out.print("   " + " ".join(said.split()), highlight=False, markup=False)
    where = [hit.node_id, *([hit.source_ref] if hit.source_ref else [])]
    if hit.relevance is not None:
        where.append(f"relevance {hit.relevance:.2f}")
    where += [f"score {hit.score:.3f}", f"confidence {explain.get('confidence')}"]
    # Ids and citations are never wrapped inside: a script can cut them out of a line.
    out.print(f"   [dim]{escape(' · '.join(where))}[/]", highlight=False, soft_wrap=True)
    cites = explain.get("cites") or {}
    evidence = [f"{n} ({cites[n]})" if n in cites else n for n in explain.get("evidence", ())]
    if evidence:
        out.print(
            f"   [dim]evidence: {escape(', '.join(evidence))}[/]", highlight=False, soft_wrap=True
        )


@fact.command("history")
@click.argument("subject")
@click.argument("predicate")
@click.option("--known-at", help="As the store knew it at this time (ISO 8601 or a span: 7d).")
@identity_options("read")
@json_option
@click.pass_context
@handle_errors
def fact_history(
    ctx: click.Context,
    subject: str,
    predicate: str,
    known_at: str | None,
    user: str | None,
    agent: str | None,
    session: str | None,
    as_json: bool,
) -> None:
    """Every value SUBJECT's PREDICATE had, oldest first, with the rows since corrected or
    replaced and when they stopped being believed.

    \b
    Examples:
      stratamem fact history topic:phoenix release_date
      stratamem fact history user:maya prefers --user maya --json
    """
    memory = open_memory(ctx)
    found = memory.facts.history(
        subject,
        predicate,
        known_at=when(known_at, "--known-at"),
        user=user,
        agent=agent,
        session=session,
    )
    if as_json:
        print_json({"facts": [f.to_dict() for f in found]})
        return
    _table(found, history=True)


@fact.command("retract")
@click.argument("fact_id")
@json_option
@click.pass_context
@handle_errors
def fact_retract(ctx: click.Context, fact_id: str, as_json: bool) -> None:
    """A correction: FACT_ID was never true. It stays in the history, no longer believed."""
    memory = open_memory(ctx)
    _report(memory.facts.retract(fact_id), as_json)


COMMANDS = (fact,)
