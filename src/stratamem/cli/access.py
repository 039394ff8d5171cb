"""Access commands: principal (add, list, remove, rotate), access, lock and unlock.

They are the owner's: under the global ``--as`` every one of them is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from stratamem.api import Memory
from stratamem.api.access import PASSPHRASE_ENV, keyring_place, parse_scopes, stored_passphrase
from stratamem.api.reports import LockReport
from stratamem.cli.common import (
    ask_passphrase,
    err,
    handle_errors,
    json_option,
    older_name,
    open_memory,
    out,
    print_json,
)
from stratamem.errors import AccessDenied
from stratamem.types import Principal, Source, rfc3339


def scope_labels(
    value: str | Sequence[str] | None, *, allow_any: bool = False
) -> tuple[str, ...] | None:
    """An option's access scopes (``eng,team``, or several such) as labels; a bad label is
    a usage error. None when the option was not given."""
    if value is None:
        return None
    text = value if isinstance(value, str) else ",".join(value)
    try:
        return parse_scopes(text, allow_any=allow_any)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def scopes_shown(scopes: Sequence[str]) -> str:
    """Scopes for a table: ``eng, team``, or a dim note that only the owner reads."""
    return escape(", ".join(scopes)) if scopes else "[dim]owner only[/]"


def cell(markup: str) -> Text:
    """A table cell from markup, with no ``:name:`` emoji codes (a scope may hold colons)."""
    return Text.from_markup(markup, emoji=False)


def _owner_only(memory: Memory, action: str) -> None:
    found = memory.principal
    if found is not None:
        raise AccessDenied(f"principal {found.name!r} may not {action}")


def _principal_dict(p: Principal) -> dict[str, Any]:
    return {
        "name": p.name,
        "scopes": list(p.scopes),
        "sources": list(p.sources),
        "write": p.write,
        "created": rfc3339(p.created_at),
        "rotated": rfc3339(p.rotated_at),
    }


def _print_token(name: str, token: str) -> None:
    """The token alone on stdout (so ``TOKEN=$(…)`` takes it), the warning on stderr."""
    click.echo(token)
    err.print(
        f"[yellow]This token is shown once and cannot be shown again: store it now. "
        f"A lost one is replaced with: stratamem principal rotate {escape(name)}[/]"
    )


@click.group()
def principal() -> None:
    """Principals: agents and services that read only the sources their scopes allow.

    A principal reads through `stratamem --as NAME …`, or in Python through the memory
    that mem.principals.authenticate(token) names. A token is shown once: the store keeps
    only a slow hash of it.

    \b
    Examples:
      stratamem principal add ci-bot --scopes eng,team
      stratamem principal add oncall --scopes eng --sources 'slack:#eng*'
      stratamem principal list
      stratamem principal rotate ci-bot
      stratamem principal remove ci-bot
    """


@principal.command("add")
@click.argument("name")
@click.option(
    "--scopes",
    required=True,
    metavar="SCOPES",
    callback=lambda ctx, param, value: scope_labels(value, allow_any=True),
    help="The access scopes it reads (eng,team); * reads every source that has a scope.",
)
@click.option(
    "--sources",
    "globs",
    multiple=True,
    metavar="GLOB",
    help="Narrow it to sources whose scope or id matches one of these globs (repeatable).",
)
@click.option("--write", is_flag=True, help="Record that it may write (add, change, ingest).")
@json_option
@click.pass_context
@handle_errors
def principal_add(
    ctx: click.Context,
    name: str,
    scopes: tuple[str, ...],
    globs: tuple[str, ...],
    write: bool,
    as_json: bool,
) -> None:
    """Add a principal and print its token, which cannot be shown again.

    \b
    Examples:
      stratamem principal add ci-bot --scopes eng,team
      stratamem principal add oncall --scopes eng --sources 'slack:#eng*' --sources 'mbox:*'
      TOKEN=$(stratamem principal add reader --scopes '*')
      stratamem principal add ci-bot --scopes team --json
    """
    memory = open_memory(ctx)
    _owner_only(memory, "manage principals")
    token = memory.principals.add(name, scopes, sources=globs, write=write)
    added = next(p for p in memory.principals.list() if p.name == name)
    if as_json:
        print_json(_principal_dict(added) | {"token": token})
        return
    reads = ", ".join(added.scopes) + (
        f"; sources {', '.join(added.sources)}" if added.sources else ""
    )
    err.print(f"added principal {escape(name)}: reads {escape(reads)}", emoji=False)
    _print_token(name, token)


@principal.command("list")
@json_option
@click.pass_context
@handle_errors
def principal_list(ctx: click.Context, as_json: bool) -> None:
    """List the principals with their scopes, source globs and dates (never a token).

    \b
    Examples:
      stratamem principal list
      stratamem principal list --json
    """
    memory = open_memory(ctx)
    _owner_only(memory, "list principals")
    found = memory.principals.list()
    if as_json:
        print_json([_principal_dict(p) for p in found])
        return
    if not found:
        out.print("no principals")
        return
    table = Table()
    for column in ("name", "scopes", "sources", "write", "created", "rotated"):
        table.add_column(column, no_wrap=column != "sources")
    for p in found:
        table.add_row(
            escape(p.name),
            cell(escape(", ".join(p.scopes))),
            cell(escape(", ".join(p.sources)) or "[dim]any[/]"),
            "yes" if p.write else "no",
            _minute(p.created_at),
            _minute(p.rotated_at),
        )
    out.print(table)


def _minute(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M") if moment is not None else ""


@principal.command("remove")
@click.argument("name")
@click.pass_context
@handle_errors
def principal_remove(ctx: click.Context, name: str) -> None:
    """Remove a principal: its token stops working at once.

    \b
    Examples:
      stratamem principal remove ci-bot
    """
    memory = open_memory(ctx)
    _owner_only(memory, "manage principals")
    memory.principals.remove(name)
    out.print(f"removed principal {escape(name)}: its token no longer works")


@principal.command("rotate")
@click.argument("name")
@json_option
@click.pass_context
@handle_errors
def principal_rotate(ctx: click.Context, name: str, as_json: bool) -> None:
    """Give a principal a new token; the old one stops working at once.

    \b
    Examples:
      stratamem principal rotate ci-bot
      stratamem principal rotate ci-bot --json
    """
    memory = open_memory(ctx)
    _owner_only(memory, "manage principals")
    token = memory.principals.rotate(name)
    if as_json:
        rotated = next(p for p in memory.principals.list() if p.name == name)
        print_json(_principal_dict(rotated) | {"token": token})
        return
    err.print(f"new token for {escape(name)}; the old one no longer works", emoji=False)
    _print_token(name, token)


def _source_dict(found: Source) -> dict[str, Any]:
    return {
        "id": found.id,
        "scope": found.scope,
        "kind": found.kind.value,
        "access": list(found.access),
        "locked": found.locked,
    }


@click.command("access")
@click.argument("source")
@click.option(
    "--scopes",
    "replace",
    metavar="SCOPES",
    callback=lambda ctx, param, value: scope_labels(value),
    help="Replace its scopes (eng,team; '' leaves it to the owner alone).",
)
@older_name(
    "--set",
    "--scopes",
    "replace",
    metavar="SCOPES",
    callback=lambda ctx, param, value: scope_labels(value),
)
@click.option(
    "--add",
    "added",
    multiple=True,
    metavar="SCOPES",
    callback=lambda ctx, param, value: scope_labels(value),
    help="Add scopes (repeatable).",
)
@click.option(
    "--remove",
    "removed",
    multiple=True,
    metavar="SCOPES",
    callback=lambda ctx, param, value: scope_labels(value),
    help="Remove scopes (repeatable).",
)
@json_option
@click.pass_context
@handle_errors
def access_command(
    ctx: click.Context,
    source: str,
    replace: tuple[str, ...] | None,
    added: tuple[str, ...],
    removed: tuple[str, ...],
    as_json: bool,
) -> None:
    """Show or change a source's access scopes: which principals may read it.

    A principal reads a source that shares one of its scopes; a source with none is read by
    the owner alone.

    \b
    Examples:
      stratamem access "slack:#eng"
      stratamem access "slack:#eng" --scopes eng,team
      stratamem access mbox:lkml --add eng --remove private --json
    """
    memory = open_memory(ctx)
    _owner_only(memory, "manage access")
    before = memory.sources.get(source)
    changing = replace is not None or added or removed
    found = (
        memory.sources.set_access(before.id, scopes=replace, add=added, remove=removed)
        if changing
        else before
    )
    if as_json:
        print_json(_source_dict(found))
        return
    was = f" [dim](was {scopes_shown(before.access)})[/]" if found.access != before.access else ""
    locked = " [yellow]locked[/]" if found.locked else ""
    out.print(f"{escape(found.scope)}{locked}: {scopes_shown(found.access)}{was}", emoji=False)


def passphrase(source: Source, *, file: Path | None = None, confirm: bool = False) -> str:
    """The passphrase to lock or unlock ``source`` with: the first line of ``file``, else
    ``STRATAMEM_PASSPHRASE`` or the OS keyring's (:func:`stored_passphrase`), else typed on a
    terminal (twice with ``confirm``), else :class:`LockError` saying how to give one."""
    if file is not None:
        lines = file.read_text(encoding="utf-8").splitlines()
        if not lines or not lines[0].strip():
            raise ValueError(
                f"{file}: the passphrase file's first line is empty or only whitespace"
            )
        return lines[0]
    found = stored_passphrase(source)
    if found is not None:
        return found
    keyring = keyring_place("the source's scope")
    return ask_passphrase(
        source.scope,
        confirm=confirm,
        unasked=f"no passphrase for {source.scope}: give --passphrase-file FILE, set "
        f"{PASSPHRASE_ENV}, keep it in {keyring} or run the command on a terminal to be asked",
    )


def _passphrase_file_option(func: Any) -> Any:
    return click.option(
        "--passphrase-file",
        "passphrase_file",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="Read the passphrase from the first line of this file (default: "
        "$STRATAMEM_PASSPHRASE, else the OS keyring's, else asked on a terminal).",
    )(func)


def _print_lock_report(report: LockReport, action: str, as_json: bool) -> None:
    if as_json:
        print_json(
            {
                "action": action,
                "source_id": report.source_id,
                "scope": report.scope,
                "chunks": report.chunks,
                "summaries": report.summaries,
                "records": report.records,
                "seconds": round(report.seconds, 3),
            }
        )
        return
    out.print(
        f"{action} {escape(report.scope)}: {report.chunks:,} chunks, {report.summaries:,} "
        f"summaries, {report.records:,} records in {report.seconds:.2f}s",
        emoji=False,
    )


@click.command("lock")
@click.argument("source")
@_passphrase_file_option
@json_option
@click.pass_context
@handle_errors
def lock_command(
    ctx: click.Context, source: str, passphrase_file: Path | None, as_json: bool
) -> None:
    """Encrypt a source at rest; nothing of it can be read until it is unlocked.

    Its text, vectors, entities and summaries are sealed under the passphrase and every
    plaintext copy is purged. A lost passphrase cannot be recovered. Asked on a terminal,
    the passphrase is typed twice.

    \b
    Examples:
      stratamem lock mbox:personal
      STRATAMEM_PASSPHRASE=… stratamem lock "slack:#hr" --json
      stratamem lock notes:journal --passphrase-file ~/.config/stratamem/journal.pass
    """
    memory = open_memory(ctx)
    _owner_only(memory, "lock sources")
    found = memory.sources.get(source)
    secret = passphrase(found, file=passphrase_file, confirm=True)
    _print_lock_report(memory.locks.lock(found.id, passphrase=secret), "locked", as_json)


@click.command("unlock")
@click.argument("source")
@_passphrase_file_option
@json_option
@click.pass_context
@handle_errors
def unlock_command(
    ctx: click.Context, source: str, passphrase_file: Path | None, as_json: bool
) -> None:
    """Decrypt a locked source for good and restore everything derived from it.

    To read a locked source for one command only, without decrypting it on disk, use the
    global --unlock instead.

    \b
    Examples:
      stratamem unlock mbox:personal
      stratamem unlock notes:journal --passphrase-file ~/.config/stratamem/journal.pass --json
    """
    memory = open_memory(ctx)
    _owner_only(memory, "unlock sources")
    found = memory.sources.get(source)
    secret = passphrase(found, file=passphrase_file)
    _print_lock_report(memory.locks.unlock(found.id, passphrase=secret), "unlocked", as_json)


COMMANDS = (principal, access_command, lock_command, unlock_command)
