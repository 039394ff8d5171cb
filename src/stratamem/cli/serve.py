"""``stratamem serve``: the HTTP API (and MCP at ``/mcp``, the inspector at ``/``) on uvicorn;
``stratamem inspect``: the inspector alone for the owner, on a loopback port, in a browser."""

from __future__ import annotations

import contextlib
import logging
import socket
import sys
import webbrowser
from collections.abc import Mapping, Sequence
from typing import Any

import click

from stratamem.api.access import is_loopback
from stratamem.cli.common import (
    ask_passphrase,
    fail,
    handle_errors,
    ingest_root_option,
    interactive,
    summarizer_from_environment,
)
from stratamem.errors import LockError, WrongPassphrase
from stratamem.extras import require
from stratamem.server.service import DEFAULT_READERS, Service

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


@click.command()
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="The address to bind.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="The port to listen on.",
)
@click.option(
    "--allow-writes",
    is_flag=True,
    help="Open ingest and forget (HTTP and MCP) to the owner and to principals with --write.",
)
@ingest_root_option
@click.option(
    "--readers",
    type=click.IntRange(1, 256),
    default=DEFAULT_READERS,
    show_default=True,
    help="Calls served at once, each on its own connection.",
)
@click.option(
    "--no-tokens",
    is_flag=True,
    help="A call without a token reads as the owner; loopback addresses only.",
)
@click.option(
    "--log-queries", is_flag=True, help="Put the query text in the access log (off by default)."
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="HOST",
    help="A Host the server answers besides loopback and --host (repeatable): the name a "
    "proxy or a client reaches it by, mem.example or mem.example:443.",
)
@click.option(
    "--no-inspector", is_flag=True, help="Serve the API alone, without the inspector's pages at /."
)
@click.pass_context
@handle_errors
def serve(
    ctx: click.Context,
    host: str,
    port: int,
    allow_writes: bool,
    ingest_roots: tuple[str, ...],
    readers: int,
    no_tokens: bool,
    log_queries: bool,
    allowed_hosts: tuple[str, ...],
    no_inspector: bool,
) -> None:
    """Serve the store over HTTP: the JSON API under /v1, MCP at /mcp, the inspector at /.

    Each call reads as the principal its bearer token names (stratamem principal add
    prints one). A non-loopback address needs at least one principal, and --no-tokens
    needs a loopback address. API documentation is at /docs. The inspector's pages (at /)
    ask for a token once and keep a login session; --no-tokens pages read as the owner.

    Every route answers only a Host it is reached by: localhost, 127.0.0.1, [::1], the
    --host address (unless 0.0.0.0 or ::) and each --allowed-host; anything else gets 421,
    so a web page cannot reach the server by rebinding its own name to this address.

    \b
    Examples:
      stratamem principal add my-agent --scopes team
      stratamem serve
      stratamem serve --host 0.0.0.0 --port 9000 --allowed-host mem.example
      stratamem serve --no-tokens --allow-writes
      stratamem serve --no-inspector
      stratamem serve --allow-writes --ingest-root ~/exports
      stratamem --unlock mbox:team serve
    """
    for module in ("fastapi", "uvicorn"):
        require(module, "server", "stratamem serve")
    import uvicorn

    from stratamem.api.stores import shown_location
    from stratamem.server.hosts import Hosts, bound_hosts
    from stratamem.server.http import create_app

    if ctx.obj.get("principal"):
        fail("serve reads as the principal each token names; drop --as")
    loopback = is_loopback(host)
    if no_tokens and not loopback:
        fail(
            f"--no-tokens serves the owner to anyone who connects: bind a loopback address, "
            f"not {host}"
        )
    if ingest_roots and not allow_writes:
        fail("--ingest-root is for writes: add --allow-writes")
    hosts = [*bound_hosts(host), *allowed_hosts]
    try:
        Hosts(hosts)
    except ValueError as exc:
        fail(str(exc))
    service = _open_service(
        ctx, readers=readers, allow_writes=allow_writes, ingest_roots=ingest_roots
    )
    try:
        if not loopback and not no_tokens and not service.owner_memory().principals.list():
            fail(
                f"no principal exists, so nobody could use a server on {host}; add one "
                "(stratamem principal add NAME --scopes SCOPES) or bind 127.0.0.1"
            )
        app = create_app(
            service,
            tokens_required=not no_tokens,
            log_queries=log_queries,
            allowed_hosts=hosts,
            inspector=not no_inspector,
        )
        click.echo("loading the indexes…", err=True)
        took = service.warm()
        click.echo(f"indexes loaded in {took:.1f}s", err=True)
        _log_to_stderr()
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{port}"
        click.echo(f"serving {shown_location(service.path)} at {url}")
        click.echo(f"API docs: {url}/docs", err=True)
        if app.state.inspector is not None:
            click.echo(f"inspector: {url}/", err=True)
        elif app.state.inspector_missing:
            click.echo(f"inspector: not served ({app.state.inspector_missing})", err=True)
        if app.state.mcp:
            click.echo(f"MCP: {url}/mcp", err=True)
        elif app.state.mcp_missing:
            click.echo(f"MCP: not served ({app.state.mcp_missing})", err=True)
        click.echo(f"answers Host: {', '.join(Hosts(hosts).listed())}", err=True)
        if no_tokens:
            click.echo("no token needed: every call reads as the owner", err=True)
        else:
            click.echo(
                "calls need 'Authorization: Bearer TOKEN'; get one with "
                "stratamem principal add NAME --scopes SCOPES",
                err=True,
            )
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
        uvicorn.Server(config).run()
    finally:
        service.close()


@click.command()
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    show_default=True,
    help="The loopback port to listen on (0: a free one).",
)
@click.option("--no-browser", is_flag=True, help="Print the address; do not open a browser.")
@click.pass_context
@handle_errors
def inspect(ctx: click.Context, port: int, no_browser: bool) -> None:
    """Open the memory inspector on the store: its pages, read as the owner, served on
    127.0.0.1 only, in your browser. Ctrl-C stops it.

    No login is asked: the server answers loopback only, as the owner. To read as a
    principal, or to serve others, use stratamem serve (the inspector is at / there).

    \b
    Examples:
      stratamem inspect
      stratamem --db ~/agent.db inspect --no-browser --port 8766
      stratamem --unlock mbox:team inspect
    """
    for module in ("fastapi", "uvicorn", "jinja2"):
        require(module, "server", "stratamem inspect")
    import uvicorn

    from stratamem.api.stores import shown_location
    from stratamem.server.http import create_app

    if ctx.obj.get("principal"):
        fail(
            "inspect reads as the owner on this machine; to read as a principal, log in to "
            "stratamem serve's pages with its token"
        )
    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listening.bind((DEFAULT_HOST, port))
    except OSError as exc:
        listening.close()
        fail(f"cannot listen on {DEFAULT_HOST}:{port}: {exc.strerror or exc}")
    listening.listen(128)
    service = _open_service(ctx, readers=DEFAULT_READERS, allow_writes=False, ingest_roots=())
    try:
        app = create_app(service, tokens_required=False, mount_mcp=False)
        click.echo("loading the indexes…", err=True)
        service.warm()
        _log_to_stderr()
        url = f"http://{DEFAULT_HOST}:{listening.getsockname()[1]}/"
        click.echo(f"inspecting {shown_location(service.path)} at {url}")
        click.echo("Ctrl-C stops it", err=True)
        if not no_browser:
            # The socket already listens: the browser's first request waits in its queue.
            webbrowser.open(url)
        config = uvicorn.Config(app, log_level="warning", access_log=False)
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how it stops: no error
            uvicorn.Server(config).run(sockets=[listening])
        click.echo("stopped", err=True)
    finally:
        listening.close()
        service.close()


def _open_service(ctx: click.Context, **options: Any) -> Service:
    """The store served, with the global ``--unlock`` sources readable in this process
    (passphrases as ``open_memory`` takes them); ``options`` go to :class:`Service`."""
    unlock = list(dict.fromkeys(ctx.obj.get("unlock", ())))

    def opened(passphrases: Mapping[str, str] | Sequence[str]) -> Service:
        return Service(
            ctx.obj["db"],
            summarizer=summarizer_from_environment(),
            unlock=passphrases or None,
            **options,
        )

    try:
        return opened(unlock)
    except LockError as exc:
        if not unlock or isinstance(exc, WrongPassphrase) or not interactive():
            raise
        return opened({source: ask_passphrase(source) for source in unlock})


def _log_to_stderr() -> None:
    """The access log and the server's warnings, one line each, on standard error."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%dT%H:%M:%S"))
    for name in ("stratamem.server",):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False  # one line each, whatever the root logger does
