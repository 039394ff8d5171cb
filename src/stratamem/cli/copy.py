"""``stratamem copy SRC DST``: a whole store into a new one, across backends or within one
(see :mod:`stratamem.store.copy`). Progress goes to stderr, a line per table; the report to
stdout (``--json`` for scripts)."""

from __future__ import annotations

import time

import click
from rich.markup import escape

from stratamem.api.stores import CopyProgress, copy_store
from stratamem.cli.common import err, fail, handle_errors, json_option, out, print_json


@click.command("copy")
@click.argument("src", metavar="SRC")
@click.argument("dst", metavar="DST")
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
@click.option(
    "--no-verify",
    "no_verify",
    is_flag=True,
    help="Skip the checks after writing (row counts, settings and keyword searches compared).",
)
@json_option
@click.pass_context
@handle_errors
def copy_command(
    ctx: click.Context, src: str, dst: str, quiet: bool, no_verify: bool, as_json: bool
) -> None:
    """Copy the store SRC into DST, a new store: every source, chunk, vector, tree, fact,
    principal and setting, locked sources still sealed (same passphrases).

    SRC and DST are paths or URLs (sqlite:///file.db, postgresql://host/db) and may be of
    either backend. DST must be empty (a new file, or a new database); the copy is written
    in one transaction, so a copy that fails leaves DST as it was. It keeps the store's id,
    and is checked before it commits: row counts, settings and keyword searches the same.

    \b
    Examples:
      stratamem copy ~/.local/share/stratamem/stratamem.db postgresql://db.internal/agents
      stratamem copy postgresql://db.internal/agents backup.db --json
    """
    if ctx.obj.get("principal") or ctx.obj.get("unlock"):
        fail("copy reads the whole store as its owner: drop --as and --unlock")
    shown: set[str] = set()

    def on_progress(p: CopyProgress) -> None:
        if quiet or not p.done or p.table in shown:
            return
        shown.add(p.table)
        err.print(
            f"  {p.table:<17} {p.copied:>12,} rows  {time.perf_counter() - p.started:7.1f}s",
            highlight=False,
        )

    report = copy_store(src, dst, progress=on_progress, verify=not no_verify)
    if as_json:
        print_json(report.to_dict())
        return
    checked = (
        f"verified: row counts, settings and {report.queries} keyword searches the same"
        if report.verified
        else "not verified"
    )
    out.print(
        f"copied {report.rows:,} rows in {len(report.tables)} tables to "
        f"{escape(report.destination)} in {report.seconds:.1f}s; {checked}",
        highlight=False,
        soft_wrap=True,
    )


COMMANDS = (copy_command,)
