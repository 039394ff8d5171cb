"""``stratamem mcp``: the MCP server over stdio, for a client that starts it as a subprocess."""

from __future__ import annotations

import logging

import click

from stratamem.cli.common import handle_errors, summarizer_from_environment


@click.command("mcp")
@click.pass_context
@handle_errors
def mcp_command(ctx: click.Context) -> None:
    """Serve the store to an MCP client over stdio (read only; stdout carries the protocol,
    logs go to stderr). Reads as the global --as principal when one is given.

    \b
    Client configuration (Claude Desktop, Claude Code):
      {"command": "stratamem", "args": ["--db", "/path/agent.db", "mcp"]}

    \b
    Examples:
      stratamem --db agent.db mcp
      stratamem --db team.db --as ci-bot mcp
    """
    from stratamem.server.mcp import build_server
    from stratamem.server.service import Service

    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    principal: str | None = ctx.obj.get("principal")
    unlock = list(dict.fromkeys(ctx.obj.get("unlock", ())))
    with Service(
        ctx.obj["db"], summarizer=summarizer_from_environment(), unlock=unlock or None
    ) as service:
        with service.reading(principal):
            pass  # an unknown principal fails here, before the client connects
        build_server(service, lambda: principal).run("stdio")
