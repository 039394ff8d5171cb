"""``stratamem mcp``: the MCP server over stdio, for a client that starts it as a subprocess."""

from __future__ import annotations

import logging

import click

from stratamem.cli.common import (
    fail,
    handle_errors,
    ingest_root_option,
    summarizer_from_environment,
)
from stratamem.extras import require


@click.command("mcp")
@click.option(
    "--allow-writes",
    is_flag=True,
    help="Add the ingest and forget tools (for the owner, or an --as principal with --write).",
)
@ingest_root_option
@click.pass_context
@handle_errors
def mcp_command(ctx: click.Context, allow_writes: bool, ingest_roots: tuple[str, ...]) -> None:
    """Serve the store to an MCP client over stdio (read only unless --allow-writes; stdout
    carries the protocol, logs go to stderr). Reads as the global --as principal when one is
    given.

    \b
    Client configuration (Claude Desktop, Claude Code):
      {"command": "stratamem", "args": ["--db", "/path/agent.db", "mcp"]}

    \b
    Examples:
      stratamem --db agent.db mcp
      stratamem --db team.db --as ci-bot mcp
      stratamem --db agent.db mcp --allow-writes
    """
    require("mcp", "mcp", "stratamem mcp")
    from stratamem.server.mcp import build_server
    from stratamem.server.service import Service

    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    principal: str | None = ctx.obj.get("principal")
    unlock = list(dict.fromkeys(ctx.obj.get("unlock", ())))
    if ingest_roots and not allow_writes:
        fail("--ingest-root is for writes: add --allow-writes")
    with Service(
        ctx.obj["db"],
        summarizer=summarizer_from_environment(),
        unlock=unlock or None,
        allow_writes=allow_writes,
        ingest_roots=ingest_roots,
    ) as service:
        with service.reading(principal):
            pass  # an unknown principal fails here, before the client connects
        build_server(service, lambda: principal).run("stdio")
