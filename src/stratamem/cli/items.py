"""Single-item commands: add, edit, rm (one memory at a time, found at once by search) and
history (every version an item had)."""

from __future__ import annotations

import sys
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from stratamem.api.records import DEFAULT_ITEM_SOURCE, UNSET, ItemVersion, ItemWrite
from stratamem.cli.common import (
    SOURCE_KINDS,
    JsonObject,
    fail,
    handle_errors,
    identity_options,
    join_option,
    json_option,
    older_name,
    open_memory,
    out,
    print_json,
    read_time,
)

_KINDS = SOURCE_KINDS
JSON_FORMS = "a JSON object, @FILE or - (standard input)"


def _text(value: str | None) -> str | None:
    """The text given, or read from standard input for ``-``."""
    if value == "-":
        return sys.stdin.read().rstrip("\n")
    return value


def _time(value: str | None) -> Any:
    return None if value is None else read_time(value, "--time")


def _report(write: ItemWrite, as_json: bool) -> None:
    if as_json:
        print_json(write.to_dict())
        return
    detail = f"{len(write.chunks_added)} chunk(s) written, {write.chunks_removed} removed"
    if write.chunks_added:
        detail += (
            f", {write.embedded} embedded" if write.embedded else ", not embedded yet (run embed)"
        )
    out.print(f"{write.action} {escape(write.id)} in {escape(write.scope)}: {detail}")


@click.command()
@click.argument("text")
@click.option(
    "--source",
    default=DEFAULT_ITEM_SOURCE,
    show_default=True,
    help="Source id or scope (a new scope is made as a source).",
)
@click.option(
    "--kind",
    type=click.Choice(_KINDS),
    help="The kind of a new source (default record; not document); a source keeps its kind.",
)
@click.option("--author", help="Who wrote or said it.")
@click.option(
    "--time", "when", help="When it was said or true (2024-03-12T09:30, 2h; default: now)."
)
@click.option(
    "--id", "key", help="Its id (default: a new one); the source's item of that id is replaced."
)
@click.option("--title", help="A title.")
@click.option("--thread", help="The thread it belongs to.")
@click.option("--tags", "tags", multiple=True, metavar="TAG", help="A tag (repeatable).")
@older_name("--tag", "--tags", "tags", multiple=True)
@click.option("--meta", type=JsonObject(), help=f"Any other fields, kept with it: {JSON_FORMS}.")
@identity_options("write")
@join_option
@json_option
@click.pass_context
@handle_errors
def add(
    ctx: click.Context,
    text: str,
    source: str,
    kind: str | None,
    author: str | None,
    when: str | None,
    key: str | None,
    title: str | None,
    thread: str | None,
    tags: tuple[str, ...],
    meta: dict[str, Any] | None,
    user: str | None,
    agent: str | None,
    session: str | None,
    join: bool,
    as_json: bool,
) -> None:
    """Write one item to a source; search finds it as soon as this returns. TEXT "-" reads
    standard input.

    \b
    Examples:
      stratamem add "Carol leads on-call until Friday" --author dan
      stratamem add "release moved to April 5" --source notes:decisions --time 2024-03-20
      stratamem add "prefers morning meetings" --user maya --tags preference
      stratamem add "build 4812 failed" --meta '{"build": 4812, "branch": "main"}'
      git log -1 --format=%B | stratamem add - --source notes:commits --id abc123
    """
    memory = open_memory(ctx)
    write = memory.items.add(
        _text(text) or "",
        source=source,
        kind=kind,
        author=author,
        time=_time(when),
        id=key,
        title=title,
        thread=thread,
        tags=tags,
        meta=meta,
        user=user,
        agent=agent,
        session=session,
        join=join,
    )
    _report(write, as_json)


@click.command()
@click.argument("id")
@click.option("--source", help="Source id or scope, when several hold this id.")
@click.option("--text", help='The new text ("-" reads standard input).')
@click.option("--author", help="The new author.")
@click.option("--time", "when", help="The new time.")
@click.option("--title", help="The new title.")
@click.option(
    "--tags",
    "tags",
    multiple=True,
    metavar="TAG",
    help="The new tags (repeatable; replace the old).",
)
@older_name("--tag", "--tags", "tags", multiple=True)
@click.option(
    "--meta",
    type=JsonObject(),
    help=f"The new other fields (all of them: they replace the old): {JSON_FORMS}.",
)
@identity_options("find")
@json_option
@click.pass_context
@handle_errors
def edit(
    ctx: click.Context,
    id: str,
    source: str | None,
    text: str | None,
    author: str | None,
    when: str | None,
    title: str | None,
    tags: tuple[str, ...],
    meta: dict[str, Any] | None,
    user: str | None,
    agent: str | None,
    session: str | None,
    as_json: bool,
) -> None:
    """Correct one item: the fields given change, the others stay. ID is the item's id
    (from add, or a message's: a Slack ts, a Message-ID).

    \b
    Examples:
      stratamem edit item_3f2a9c1b0d4e5f60 --text "Dan leads on-call until Friday"
      stratamem edit 1710147605.000200 --source "slack:#eng" --text "fixed typo"
      stratamem edit item_3f2a9c1b0d4e5f60 --user maya --tags preference --tags meetings
    """
    if all(v is None for v in (text, author, when, title, meta)) and not tags:
        fail("nothing to change: give --text, --author, --time, --title, --tags or --meta")
    memory = open_memory(ctx)
    write = memory.items.edit(
        id,
        source=source,
        text=_text(text),
        author=UNSET if author is None else author,
        time=UNSET if when is None else _time(when),
        title=UNSET if title is None else title,
        tags=tags or None,
        meta=meta,
        user=user,
        agent=agent,
        session=session,
    )
    _report(write, as_json)


@click.command()
@click.argument("id")
@click.option("--source", help="Source id or scope, when several hold this id.")
@identity_options("find")
@json_option
@click.pass_context
@handle_errors
def rm(
    ctx: click.Context,
    id: str,
    source: str | None,
    user: str | None,
    agent: str | None,
    session: str | None,
    as_json: bool,
) -> None:
    """Delete one item by its ID: it leaves every index at once.

    \b
    Examples:
      stratamem rm item_3f2a9c1b0d4e5f60
      stratamem rm "<CAH+w=7a@mail.gmail.com>" --source mbox:lkml
      stratamem rm item_3f2a9c1b0d4e5f60 --user maya
    """
    memory = open_memory(ctx)
    found = memory.items.rm(id, source=source, user=user, agent=agent, session=session)
    _report(found, as_json)


def _stamp(value: Any) -> str:
    return "…" if value is None else value.strftime("%Y-%m-%d %H:%M:%S")


@click.command()
@click.argument("id")
@click.option("--source", help="Source id or scope, when several hold this id.")
@identity_options("find")
@json_option
@click.pass_context
@handle_errors
def history(
    ctx: click.Context,
    id: str,
    source: str | None,
    user: str | None,
    agent: str | None,
    session: str | None,
    as_json: bool,
) -> None:
    """Every version of the item ID, oldest first: what opened it (added, edited, removed),
    when the store held it, and its text.

    \b
    Examples:
      stratamem history item_3f2a9c1b0d4e5f60
      stratamem history item_3f2a9c1b0d4e5f60 --user maya --json
    """
    memory = open_memory(ctx)
    versions: list[ItemVersion] = memory.items.history(
        id, source=source, user=user, agent=agent, session=session
    )
    if as_json:
        print_json({"versions": [v.to_dict() for v in versions]})
        return
    table = Table(box=None, pad_edge=False)
    for column in ("version", "action", "recorded", "closed", "text"):
        table.add_column(column, no_wrap=column != "text")
    for v in versions:
        closed = "now" if v.closed_at is None else _stamp(v.closed_at)
        table.add_row(str(v.version), v.action, _stamp(v.recorded_at), closed, escape(v.text))
    out.print(f"{escape(versions[0].id)}:", highlight=False)
    out.print(table)


COMMANDS = (add, edit, rm, history)
