"""Summary-tree commands: tree, brief, summaries, topic, drill, flush."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import click
from rich.markup import escape
from rich.tree import Tree as RichTree

from stratamem.api import Memory
from stratamem.api.limits import MAX_PRIMITIVE_LIMIT
from stratamem.api.reports import SealReport
from stratamem.cli.common import (
    DAYS,
    DEPTH,
    SOURCE_KINDS,
    fail,
    handle_errors,
    identity_options,
    json_option,
    kinds_option,
    limit_range,
    older_name,
    open_memory,
    out,
    print_json,
    read_time,
    sources_option,
    when,
)
from stratamem.types import NodeKind, QueryResponse, RetrievalHit, rfc3339


@click.command()
@click.argument("source")
@click.option(
    "--depth", type=DEPTH, default=2, show_default=True, help="Levels to draw below the top."
)
@click.option(
    "--children",
    type=click.IntRange(1, MAX_PRIMITIVE_LIMIT),
    default=8,
    show_default=True,
    help="Children drawn per node.",
)
@json_option
@click.pass_context
@handle_errors
def tree(ctx: click.Context, source: str, depth: int, children: int, as_json: bool) -> None:
    """Draw a source's summary tree: levels, sizes and the time each node covers.

    \b
    Examples:
      stratamem tree "slack:#eng"
      stratamem tree notes:til --depth 1 --json
    """
    memory = open_memory(ctx)
    found = memory.trees.get(source)
    stats = memory.trees.stats(found.id)
    unsealed = memory.trees.unsealed(found.id)
    tops = memory.trees.tops(found.id)
    if as_json:
        print_json(
            {
                "tree_id": found.id,
                "scope": found.scope,
                "root_id": found.root_id,
                "max_level": found.max_level,
                "levels": {str(k): {"summaries": n, "open": o} for k, (n, o) in stats.items()},
                "unsealed_leaves": unsealed,
                "top": [_node_json(memory, hit, depth) for hit in tops],
            }
        )
        return
    sizes = " · ".join(f"L{k}: {n}" for k, (n, _) in stats.items()) or "no summaries yet"
    root = RichTree(
        f"[bold]{escape(found.scope)}[/] [dim]{found.id} · {sizes} · "
        f"{unsealed:,} leaves waiting in the buffer[/]"
    )
    for hit in tops:
        _draw(memory, root.add(_label(hit)), hit, depth, children)
    out.print(root)


def _draw(memory: Memory, branch: Any, hit: RetrievalHit, depth: int, limit: int) -> None:
    if depth <= 0 or hit.node_kind is NodeKind.LEAF:
        return
    below = memory.drill_down(hit.node_id, max_depth=1)
    for child in below[:limit]:
        _draw(memory, branch.add(_label(child)), child, depth - 1, limit)
    if len(below) > limit:
        branch.add(f"[dim]… {len(below) - limit} more[/]")


def _node_json(memory: Memory, hit: RetrievalHit, depth: int) -> dict[str, Any]:
    data = hit.to_dict()
    if depth > 0 and hit.node_kind is NodeKind.SUMMARY:
        data["children"] = [
            _node_json(memory, child, depth - 1)
            for child in memory.drill_down(hit.node_id, max_depth=1)
        ]
    return data


def _label(hit: RetrievalHit) -> str:
    span = _span(hit)
    first = " ".join(hit.content.split())[:90]
    if hit.node_kind is NodeKind.LEAF:
        who = f"{hit.author}: " if hit.author and not first.startswith(hit.author) else ""
        return f"[dim]{span}[/] {escape(who + first)} [dim]{hit.node_id}[/]"
    return (
        f"[bold]L{hit.level}[/] [dim]{span} · {len(hit.child_ids)} children ·[/] "
        f"{escape(first)} [dim]{hit.node_id}[/]"
    )


def _span(hit: RetrievalHit) -> str:
    start, end = hit.time_start, hit.time_end
    if start is None:
        return "undated"
    if end is None or end == start:
        return start.strftime("%Y-%m-%d %H:%M")
    return f"{start:%Y-%m-%d %H:%M} → {end:%Y-%m-%d %H:%M}"


def _print_response(response: QueryResponse, *, full: bool, empty: str) -> None:
    if not response.hits:
        out.print(f"[dim]{empty}[/]")
        return
    scope = None
    for hit in response.hits:
        if hit.tree_scope != scope:
            scope = hit.tree_scope
            out.print(f"\n[bold]{escape(scope or '(no source)')}[/]")
        _print_node(hit, full=full)
    if response.truncated:
        out.print(f"\n[dim]{len(response.hits)} of {response.total}; raise --limit for more[/]")


def _print_node(hit: RetrievalHit, *, full: bool) -> None:
    if hit.node_kind is NodeKind.SUMMARY:
        head = f"[bold cyan]summary L{hit.level}[/] [dim]{_span(hit)} · {hit.node_id}[/]"
    else:
        who = f" · {escape(hit.author)}" if hit.author else ""
        head = f"[bold]leaf[/] [dim]{_span(hit)}{who} · {hit.node_id}[/]"
    out.print(head, highlight=False)
    text = hit.content if full else " ".join(hit.content.split())[:300]
    out.print("  " + text.replace("\n", "\n  "), highlight=False, markup=False)


@click.command()
@click.option("--since", default="24h", show_default=True, help="Start (2024-03-12, 24h, 7d).")
@click.option("--until", help="End (default: now).")
@sources_option()
@kinds_option()
@identity_options("read")
@click.option(
    "--limit",
    type=limit_range(MAX_PRIMITIVE_LIMIT),
    default=200,
    show_default=True,
    help="At most this many nodes.",
)
@json_option
@click.pass_context
@handle_errors
def brief(
    ctx: click.Context,
    since: str,
    until: str | None,
    sources: tuple[str, ...],
    kinds: tuple[str, ...],
    user: str | None,
    agent: str | None,
    session: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """What happened in a window, from the fewest nodes: whole summaries where a summary lies
    inside the window, raw messages elsewhere, per source in time order.

    \b
    Examples:
      stratamem brief --since 24h
      stratamem brief --since 2024-03-11 --until 2024-03-12 --sources "slack:#eng"
      stratamem brief --since 7d --user maya
    """
    start = read_time(since, "--since")
    end = when(until, "--until") or datetime.now(UTC)
    response = open_memory(ctx).cover_window(
        since=start,
        until=end,
        limit=limit,
        sources=sources,
        kinds=kinds,
        user=user,
        agent=agent,
        session=session,
    )
    if as_json:
        print_json(response.to_dict())
        return
    out.print(f"[bold]{rfc3339(start)} → {rfc3339(end)}[/]", highlight=False)
    _print_response(response, full=True, empty="nothing in this window")


@click.command()
@click.option("--source", help="One source (id or scope).")
@click.option(
    "--source-kind",
    metavar="KIND|PLATFORM",
    help="Only sources of this kind (" + ", ".join(SOURCE_KINDS) + ") or platform (slack, "
    "mbox, markdown, …).",
)
# The older names: --kind a source kind (or, as older scripts wrote it, a platform) and
# --platform a platform; a kind given beside a platform narrows through the filters.
@click.option("--kind", "kind", hidden=True)
@click.option("--platform", "platform", hidden=True)
@click.option("--time-window-days", type=DAYS, help="Only summaries overlapping the last N days.")
@older_name("--days", "--time-window-days", "time_window_days", type=DAYS)
@click.option("--since", help="With --until: summaries of every source overlapping the window.")
@click.option("--until", help="End of the --since window (default: now).")
@click.option("--query", help="Rank by similarity to this text (needs embedded summaries).")
@sources_option(older=False)
@kinds_option(older=False)
@identity_options("read")
@click.option("--limit", type=limit_range(MAX_PRIMITIVE_LIMIT), default=10, show_default=True)
@json_option
@click.pass_context
@handle_errors
def summaries(
    ctx: click.Context,
    source: str | None,
    source_kind: str | None,
    kind: str | None,
    platform: str | None,
    time_window_days: float | None,
    since: str | None,
    until: str | None,
    query: str | None,
    sources: tuple[str, ...],
    kinds: tuple[str, ...],
    user: str | None,
    agent: str | None,
    session: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Sealed summaries of a source, a kind or platform of source, or everything: newest
    first, or ranked by --query.

    \b
    Examples:
      stratamem summaries --source "slack:#eng" --time-window-days 7
      stratamem summaries --source-kind email --query "release schedule"
      stratamem summaries --source-kind slack --time-window-days 30
      stratamem summaries --since 2024-03-01 --until 2024-03-31
    """
    picked, narrowed = _source_kind(source_kind, kind, platform)
    kinds = (*kinds, *narrowed)
    memory = open_memory(ctx)
    if since is not None:
        response = memory.query_global(
            since=read_time(since, "--since"),
            until=when(until, "--until") or datetime.now(UTC),
            source_kind=picked,
            query=query,
            limit=limit,
            sources=(source, *sources) if source else sources,
            kinds=kinds,
            user=user,
            agent=agent,
            session=session,
        )
    else:
        response = memory.query_source(
            source,
            source_kind=picked,
            time_window_days=time_window_days,
            query=query,
            limit=limit,
            sources=sources,
            kinds=kinds,
            user=user,
            agent=agent,
            session=session,
        )
    if as_json:
        print_json(response.to_dict())
        return
    _print_response(response, full=False, empty="no summaries match")


def _source_kind(
    given: str | None, kind: str | None, platform: str | None
) -> tuple[str | None, tuple[str, ...]]:
    """``summaries``' --source-kind, with its older names --kind and --platform: the one word,
    a source kind or a platform, the API takes, and the source kinds that narrow it further
    (a kind given beside a platform)."""
    kind, platform = _kind_and_platform(kind, platform)
    if given is not None:
        given = given.strip().lower()
        older = kind if given in SOURCE_KINDS else platform
        if older is not None and older != given:
            raise click.UsageError(
                "--kind and --platform are older names of --source-kind; give one of them",
                ctx=click.get_current_context(silent=True),
            )
        if given in SOURCE_KINDS:
            kind = given
        else:
            platform = given
    return platform or kind, (kind,) if kind and platform else ()


def _kind_and_platform(kind: str | None, platform: str | None) -> tuple[str | None, str | None]:
    """``summaries``' --kind (a source kind) and --platform, lower-cased. A --kind that is no
    source kind is a platform, as older scripts wrote it (``--kind slack``)."""
    kind = kind.strip().lower() if kind is not None else None
    platform = platform.strip().lower() if platform is not None else None
    if kind is None or kind in SOURCE_KINDS:
        return kind, platform
    if platform is not None and platform != kind:
        raise click.UsageError(
            f"--kind {kind!r} is not a source kind ({', '.join(SOURCE_KINDS)}); "
            "a platform goes in --source-kind",
            ctx=click.get_current_context(silent=True),
        )
    return None, kind


@click.command()
@click.argument("entity_id")
@click.option("--since", help="Only nodes at or after this time.")
@click.option("--until", help="Only nodes at or before this time.")
@click.option("--query", help="Rank by similarity to this text.")
@sources_option()
@kinds_option()
@identity_options("read")
@click.option("--limit", type=limit_range(MAX_PRIMITIVE_LIMIT), default=10, show_default=True)
@json_option
@click.pass_context
@handle_errors
def topic(
    ctx: click.Context,
    entity_id: str,
    since: str | None,
    until: str | None,
    query: str | None,
    sources: tuple[str, ...],
    kinds: tuple[str, ...],
    user: str | None,
    agent: str | None,
    session: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Summaries and messages about one entity. ENTITY_ID is a canonical id (topic:phoenix,
    person:alice chen, email:alice@example.com) or a name to look it up by.

    \b
    Examples:
      stratamem topic topic:phoenix --since 90d
      stratamem topic alice --query "on-call handover"
      stratamem topic topic:phoenix --kinds email
    """
    memory = open_memory(ctx)
    found = entity_id.strip()
    note = ""
    if found and ":" not in found:
        matches = memory.search_entities(found, limit=1)
        if matches:
            found = matches[0].canonical_id
            note = f"{entity_id!r} is {found}"
    response = memory.query_topic(
        found,
        since=when(since, "--since"),
        until=when(until, "--until"),
        query=query,
        limit=limit,
        sources=sources,
        kinds=kinds,
        user=user,
        agent=agent,
        session=session,
    )
    if as_json:
        print_json({"entity_id": found, **response.to_dict()})
        return
    if note:
        out.print(f"[dim]{escape(note)}[/]")
    _print_response(response, full=False, empty=f"nothing indexed under {found!r}")


@click.command()
@click.argument("node_id")
@click.option("--max-depth", type=DEPTH, help="Levels to descend (default 1).")
@older_name("--depth", "--max-depth", "max_depth", type=DEPTH)
@click.option("--query", help="Rank the nodes found by similarity to this text.")
@sources_option()
@kinds_option()
@identity_options("read")
@click.option("--limit", type=limit_range(MAX_PRIMITIVE_LIMIT), help="At most this many nodes.")
@json_option
@click.pass_context
@handle_errors
def drill(
    ctx: click.Context,
    node_id: str,
    max_depth: int | None,
    query: str | None,
    sources: tuple[str, ...],
    kinds: tuple[str, ...],
    user: str | None,
    agent: str | None,
    session: str | None,
    limit: int | None,
    as_json: bool,
) -> None:
    """Open a summary: its children (summaries or messages), --max-depth levels down.

    \b
    Examples:
      stratamem drill sum_3f2a9c0d1e4b5a6c7d8e9f0a1b2c3d4e
      stratamem drill sum_3f2a9c0d1e4b5a6c7d8e9f0a1b2c3d4e --max-depth 2 --query redis
    """
    hits = open_memory(ctx).drill_down(
        node_id,
        max_depth=1 if max_depth is None else max_depth,
        query=query,
        limit=limit,
        sources=sources,
        kinds=kinds,
        user=user,
        agent=agent,
        session=session,
    )
    if as_json:
        print_json([h.to_dict() for h in hits])
        return
    if not hits:
        out.print(f"[dim]{escape(node_id)} is not a summary you can open (or --max-depth is 0)[/]")
        return
    for hit in hits:
        _print_node(hit, full=False)


@click.command()
@click.option("--source", "sources_", multiple=True, help="Only these sources (id or scope).")
@json_option
@click.pass_context
@handle_errors
def flush(ctx: click.Context, sources_: tuple[str, ...], as_json: bool) -> None:
    """Seal every partly filled message buffer now, so the newest content has summaries too.
    Upper levels still wait for a full set of children. Exits 1 when a tree could not be
    sealed, or was left alone because another process holds its seal job.

    \b
    Examples:
      stratamem flush
      stratamem flush --source "slack:#eng" --json
    """
    memory = open_memory(ctx)
    for ref in sources_:
        memory.sources.get(ref)  # an unknown source is an error, not a quiet no-op
    report = memory.trees.flush(sources_)
    if as_json:
        print_json(report.to_dict())
    else:
        print_seal_report(report)
    if report.failed:
        fail(
            f"{len(report.failed)} tree(s) could not be sealed, and will be retried: "
            f"{report.failed[0]}"
        )
    if report.held:
        fail(
            f"{len(report.held)} tree(s) were not sealed: another process holds their seal "
            f"job ({report.held[0]}); run flush again once it is done, or when its lease runs out"
        )


def print_seal_report(report: SealReport) -> None:
    levels = ", ".join(f"L{k}: {v}" for k, v in sorted(report.by_level.items()))
    out.print(
        f"sealed {report.summaries:,} summaries ({levels or 'none due'}) over "
        f"{report.leaves:,} leaves in {report.trees} tree(s), {report.seconds:.2f}s"
    )
    for failure in report.failed:
        out.print(f"[red]failed:[/] {escape(failure)}")
    for held in report.held:
        out.print(f"[yellow]not sealed, held by another process:[/] {escape(held)}")


COMMANDS = (tree, brief, summaries, topic, drill, flush)
