"""Entity commands: ``entities QUERY`` finds entities; ``entities merge``, ``split`` and
``history`` say by hand which ids name one entity (see ``docs/memory.md``)."""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from stratamem.api.limits import MAX_ENTITY_HISTORY as MAX_HISTORY
from stratamem.api.limits import MAX_ENTITY_LIMIT
from stratamem.cli.common import (
    handle_errors,
    json_option,
    limit_range,
    older_name,
    open_memory,
    out,
    print_json,
)
from stratamem.ops import MemoryContext, call
from stratamem.types import rfc3339


class _SearchOrCommand(click.Group):
    """``entities QUERY`` runs the search; a first word that names a sub-command
    (``merge``, ``split``, ``history``) runs that instead."""

    # Options after the query (``entities alice --json``), as a plain command takes them.
    allow_interspersed_args = True

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] in self.commands:
            click.Command.parse_args(self, ctx, [])
            ctx._protected_args, ctx.args = args[:1], args[1:]
            return ctx.args
        return click.Command.parse_args(self, ctx, args)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, "QUERY [OPTIONS] | merge | split | history")


@click.group(cls=_SearchOrCommand, invoke_without_command=True)
@click.argument("query", required=False)
@click.option(
    "--kinds",
    "kinds",
    multiple=True,
    metavar="KIND",
    help="Only entities of this kind (repeatable): person, user, agent, email, handle, "
    "channel, tag, url, topic.",
)
@older_name("--entity-kind", "--kinds", "kinds", multiple=True)
@older_name("--kind", "--kinds", "kinds", multiple=True)
@click.option("--limit", type=limit_range(MAX_ENTITY_LIMIT), default=10, show_default=True)
@json_option
@click.pass_context
@handle_errors
def entities(
    ctx: click.Context, query: str | None, kinds: tuple[str, ...], limit: int, as_json: bool
) -> None:
    """Find entities by part of their name, with mention counts, the other ids that name
    them (aliases) and who they go with; or merge and split them by hand.

    \b
    Examples:
      stratamem entities alice
      stratamem entities redis --kinds topic
      stratamem entities merge 'person:maya' 'person:maya patel'
      stratamem entities split 'person:maya' 'person:maya patel'
      stratamem entities history
    """
    if ctx.invoked_subcommand is not None:
        return
    if query is None:
        raise click.UsageError("Missing argument 'QUERY' (or a command: merge, split, history).")
    memory = open_memory(ctx)
    matches = memory.search_entities(query, kinds=kinds, limit=limit)
    related = {m.canonical_id: memory.related(m.canonical_id, limit=3) for m in matches}
    if as_json:
        print_json(
            [m.to_dict() | {"related": [e for e, _ in related[m.canonical_id]]} for m in matches]
        )
        return
    if not matches:
        out.print("no matching entities")
        return
    table = Table()
    for column in ("entity", "kind", "mentions", "last seen", "also named", "often with"):
        table.add_column(column)
    for m in matches:
        table.add_row(
            escape(m.canonical_id),
            m.kind,
            str(m.mention_count),
            rfc3339(m.last_seen) or "",
            escape(", ".join(m.aliases)),
            escape(", ".join(e for e, _ in related[m.canonical_id])),
        )
    out.print(table)


def _decision_line(d: dict[str, Any]) -> str:
    verb = "merged into" if d["action"] == "merge" else "split from"
    who = d["made_by"] or "owner"
    line = f"#{d['id']} {d['entity_a']} {verb} {d['entity_b']} by {who} at {d['made_at']}"
    if d["undone_at"]:
        line += f" (undone by {d['undone_by'] or 'owner'} at {d['undone_at']})"
    return line


def _decided(ctx: click.Context, op: str, entity_a: str, entity_b: str, as_json: bool) -> None:
    data = call(MemoryContext(open_memory(ctx)), op, {"entity_a": entity_a, "entity_b": entity_b})
    if as_json:
        print_json(data)
        return
    out.print(escape(_decision_line(data["decision"])), highlight=False)


@entities.command("merge")
@click.argument("entity_a")
@click.argument("entity_b")
@json_option
@click.pass_context
@handle_errors
def merge(ctx: click.Context, entity_a: str, entity_b: str, as_json: bool) -> None:
    """Say that ENTITY_A is ENTITY_B (the canonical id), where the sources do not.

    Recorded with who and when, never destructive: `entities split` undoes it.

    \b
    Examples:
      stratamem entities merge 'person:maya' 'person:maya patel'
    """
    _decided(ctx, "merge_entities", entity_a, entity_b, as_json)


@entities.command("split")
@click.argument("entity_a")
@click.argument("entity_b")
@json_option
@click.pass_context
@handle_errors
def split(ctx: click.Context, entity_a: str, entity_b: str, as_json: bool) -> None:
    """Undo a merge of ENTITY_A and ENTITY_B, or stop following an alias a source states
    between them.

    \b
    Examples:
      stratamem entities split 'person:maya' 'person:maya patel'
    """
    _decided(ctx, "split_entities", entity_a, entity_b, as_json)


@entities.command("history")
@click.option("--entity-id", "entity_id", default=None, help="Only those of this entity's ids.")
@click.option("--limit", type=limit_range(MAX_HISTORY), default=100, show_default=True)
@json_option
@click.pass_context
@handle_errors
def history(ctx: click.Context, entity_id: str | None, limit: int, as_json: bool) -> None:
    """The merges and splits recorded, newest first, undone ones too.

    \b
    Examples:
      stratamem entities history
      stratamem entities history --entity-id 'person:maya patel'
    """
    args: dict[str, Any] = {"limit": limit}
    if entity_id is not None:
        args["entity_id"] = entity_id
    data = call(MemoryContext(open_memory(ctx)), "entity_history", args)
    if as_json:
        print_json(data)
        return
    if not data["decisions"]:
        out.print("no merges or splits")
        return
    for d in data["decisions"]:
        out.print(escape(_decision_line(d)), highlight=False)


COMMANDS = (entities,)
