"""``stratamem config show``: the effective settings and where each came from."""

from __future__ import annotations

import click
from rich.markup import escape
from rich.table import Table

from stratamem.cli.common import handle_errors, json_option, out, print_json, settings
from stratamem.config import KEYS, TUNED_KEY, env_name, store_file, user_file


@click.group("config")
def config_group() -> None:
    """The settings: per-user and per-store TOML files, the environment, tuned weights.

    \b
    Examples:
      stratamem config show
      stratamem --db team.db config show --json
    """


@config_group.command("show")
@json_option
@click.pass_context
@handle_errors
def config_show(ctx: click.Context, as_json: bool) -> None:
    """Every setting's effective value and where it came from: default, a config file, the
    store's tuned weights, or an environment variable.

    \b
    Examples:
      stratamem config show
      STRATAMEM_SEARCH_PROFILE=lexical stratamem config show --json
    """
    import os

    from stratamem.api import Memory

    db = ctx.obj["db"]
    tuned = None
    beside = store_file(db)
    exists = beside is None or beside.with_suffix("").exists() or "://" in str(db)
    if exists:
        with Memory(db, embedder=None) as memory:
            tuned = memory.store.get_setting(TUNED_KEY)
    chosen = settings(ctx, tuned=tuned)
    files = {"user": str(user_file(os.environ)), "store": str(beside) if beside else None}
    if as_json:
        print_json({"files": files, "settings": chosen.to_dict()})
        return
    table = Table("setting", "value", "from")
    for key in KEYS:
        value = chosen[key]
        shown = (
            ",".join(f"{k}={v:g}" for k, v in value.items()) if isinstance(value, dict) else value
        )
        table.add_row(key, escape(str(shown) or "—"), escape(chosen.origin(key)))
    out.print(table)
    out.print(
        f"[dim]each setting's variable: {env_name('search.weights')} for search.weights[/]",
        highlight=False,
    )
    out.print(f"[dim]user file: {escape(str(files['user']))}[/]", highlight=False)
    if beside is not None:
        out.print(f"[dim]store file: {escape(str(beside))}[/]", highlight=False)


COMMANDS = (config_group,)
