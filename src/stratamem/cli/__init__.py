"""The ``stratamem`` command line: a thin layer over :mod:`stratamem.api`.

Shared helpers live in :mod:`stratamem.cli.common`; the summary-tree commands in
:mod:`stratamem.cli.trees`.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from stratamem.api import Memory
from stratamem.api.limits import MAX_SEARCH_LIMIT
from stratamem.api.parts import known_connectors
from stratamem.api.reports import (
    ChunkingConfig,
    EmbedProgress,
    IngestProgress,
    IngestReport,
    SealProgress,
)
from stratamem.cli import access as access_commands
from stratamem.cli import config as config_commands
from stratamem.cli import consolidate as consolidate_commands
from stratamem.cli import copy as copy_commands
from stratamem.cli import entities as entity_commands
from stratamem.cli import extract as extract_commands
from stratamem.cli import facts as fact_commands
from stratamem.cli import items as item_commands
from stratamem.cli.access import cell, scope_labels, scopes_shown
from stratamem.cli.common import (
    BUDGET,
    AliasedChoice,
    CommandGroup,
    db_path_from_environment,
    err,
    eval_store,
    eval_store_options,
    fail,
    handle_errors,
    identity_options,
    join_option,
    json_option,
    kinds_option,
    limit_range,
    min_relevance_option,
    nothing_relevant_line,
    older_name,
    open_memory,
    out,
    parse_weights,
    print_json,
    reranker_from,
    settings,
    sources_option,
    when,
)
from stratamem.cli.mcp import mcp_command
from stratamem.cli.operations import command_for
from stratamem.cli.serve import inspect, serve
from stratamem.cli.trees import COMMANDS, print_seal_report
from stratamem.config import PROFILES
from stratamem.errors import StoreFull
from stratamem.ops import OPERATIONS
from stratamem.types import RetrievalHit, SearchResponse, rfc3339

# The input formats ``ingest --format`` names: the registered connectors.
FORMATS = [spec.name for spec in known_connectors()]
# ``eval --mode``; ``fts`` is the keyword mode's older name.
EVAL_MODES = ["keyword", "vector", "hybrid", "hybrid+rerank", "all"]
EVAL_MODE_ALIASES = {"fts": "keyword"}


@click.group(
    name="stratamem", cls=CommandGroup, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.option(
    "--db",
    metavar="PATH|URL",
    default=None,
    help=(
        "The store: a file, or a URL such as sqlite:///agent.db or "
        "postgresql://user@host/db (default: $STRATAMEM_DB, "
        "else ~/.local/share/stratamem/stratamem.db)."
    ),
)
@click.option(
    "--debug",
    is_flag=True,
    envvar="STRATAMEM_DEBUG",
    help="Show the traceback of an unexpected error (also: STRATAMEM_DEBUG=1).",
)
@click.option(
    "--as",
    "principal",
    metavar="NAME",
    envvar="STRATAMEM_AS",
    help="Read as this principal: only the sources its scopes allow, and no writes "
    "(also: STRATAMEM_AS).",
)
@click.option(
    "--unlock",
    "unlock",
    metavar="SOURCE",
    multiple=True,
    help="Make a locked source readable in this process only (repeatable); the passphrase "
    "is $STRATAMEM_PASSPHRASE, else the OS keyring's, else asked on a terminal.",
)
@click.version_option(package_name="stratamem")
@click.pass_context
def main(
    ctx: click.Context,
    db: Path | None,
    debug: bool,
    principal: str | None,
    unlock: tuple[str, ...],
) -> None:
    """stratamem: local-first retrieval and memory for AI agents.

    \b
    Examples:
      stratamem ingest ~/Downloads/slack-export.zip
      stratamem search "why did we drop Redis?"
      stratamem entities alice
      stratamem --as ci-bot search "deploy freeze"
    """
    ctx.ensure_object(dict)
    ctx.obj["db"] = db or db_path_from_environment()
    ctx.obj["principal"] = principal
    ctx.obj["unlock"] = unlock


@main.command()
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--format",
    "format_",
    type=click.Choice(FORMATS),
    help="The input format: the connector that reads it (default: detected from the path).",
)
@older_name("--kind", "--format", "format_", type=click.Choice(FORMATS))
@click.option(
    "--scope",
    callback=lambda ctx, param, value: _scope_name(value),
    help="The source scope to file it under (default: from the path).",
)
@click.option(
    "--access",
    metavar="SCOPES",
    callback=lambda ctx, param, value: scope_labels(value),
    help="The access scopes of every source read (eng,team; default: chat team, the rest "
    "private for a new source, and an existing one keeps its own).",
)
@click.option(
    "--embed/--no-embed",
    "embed_now",
    default=None,
    help="Embed the new chunks with the configured model as the ingest ends (the default, "
    "set by ingest.embed), or leave them to `stratamem embed`.",
)
@click.option(
    "--trees/--no-trees",
    default=True,
    help="Seal the summary trees of the sources that changed as the ingest ends (the "
    "default), or leave them queued for `stratamem flush` or the next ingest.",
)
@click.option(
    "--sync",
    is_flag=True,
    help="Take each chat, mail or record source read as the whole truth: remove the records "
    "it lacks (by default they are kept, so a partial export never deletes).",
)
@join_option
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option(
    "--allow-empty",
    is_flag=True,
    help="Exit 0 when nothing could be read from PATH (by default that is an error, "
    "after the report says why).",
)
@click.option(
    "--max-item-size",
    "max_item_bytes",
    metavar="SIZE",
    callback=lambda ctx, param, value: _byte_size(value),
    help="The largest item read (a file, a zip member, a line): 64M (default), 1G, 500K; "
    "larger ones are skipped and reported.",
)
@json_option
@click.pass_context
@handle_errors
def ingest(
    ctx: click.Context,
    path: Path,
    format_: str | None,
    scope: str | None,
    access: tuple[str, ...] | None,
    embed_now: bool | None,
    trees: bool,
    sync: bool,
    join: bool,
    quiet: bool,
    allow_empty: bool,
    max_item_bytes: int | None,
    as_json: bool,
) -> None:
    """Read a Slack/Discord export, mailbox, notes folder, IRC log or JSONL file into the store.

    Chat, mail and record sources merge: new messages are added, edited ones updated, and
    messages a later or partial export lacks are kept (--sync removes them). Notes and
    documents are replaced where they changed.

    \b
    Examples:
      stratamem ingest ./slack-export.zip
      stratamem ingest ./slack-export-march.zip   # adds March to what is there
      stratamem ingest ./discord/general.json --sync
      stratamem ingest ~/Mail/lkml --format maildir --scope mail:lkml
      stratamem ingest ~/notes --no-embed       # embed later with `stratamem embed`
      stratamem ingest ./slack-export.zip --no-trees   # seal later with `stratamem flush`
      stratamem ingest ./huge-export.zip --max-item-size 1G
      stratamem ingest ~/Mail/oncall --access eng,oncall
      stratamem ingest ./maybe-empty-export --allow-empty
    """
    memory = open_memory(ctx)
    settings = ctx.obj["settings"]
    if embed_now is None:
        embed_now = settings["ingest.embed"] and settings.embedder() is not None
    show = not (quiet or as_json)
    with Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        TextColumn("{task.fields[counts]}"),
        TimeElapsedColumn(),
        console=err,
        disable=not show,
        transient=True,
    ) as bar:
        task = bar.add_task("ingesting", counts="", total=None)

        def on_progress(p: IngestProgress) -> None:
            elapsed = max(1e-6, time.perf_counter() - p.started)
            bar.update(
                task,
                description=p.scope,
                counts=f"{p.files:,} files · {p.records:,} items · {p.chunks:,} chunks · "
                f"{p.chunks / elapsed:,.0f} chunks/s",
            )

        def on_seal(p: SealProgress) -> None:
            bar.update(
                task,
                description=f"summarising {p.scope}",
                counts=f"{p.summaries:,} summaries over {p.leaves:,} chunks",
            )

        report = memory.ingest(
            path,
            chunking=ChunkingConfig(**ctx.obj["settings"].chunking()),
            format=format_,
            scope=scope,
            progress=on_progress,
            tree_progress=on_seal,
            max_item_bytes=max_item_bytes,
            sync=sync,
            access=access,
            trees=trees,
            join=join,
        )
    failed = bool(report.sources) and len(report.failed) == len(report.sources)
    if as_json:
        data = report.to_dict()
        if embed_now and not failed:
            try:
                data["embedding"] = _run_embedding(ctx, True, True, reindex=False, emit=False)
            except StoreFull as exc:
                # The ingest is written: its report comes out whatever happens to embedding.
                data["embedding"] = {"error": str(exc)}
                print_json(data)
                raise
        print_json(data)
    else:
        _print_report(report)
        sealed = report.trees
        if sealed is not None and (sealed.trees or sealed.failed or sealed.held):
            print_seal_report(sealed)
        if embed_now and not failed:
            _run_embedding(ctx, quiet, False, reindex=False)
    if failed:
        first = report.failed[0]
        fail(f"nothing was ingested from {path}: {first.scope}: {first.error}")
    if report.stopped:
        kept = sum(s.error is None for s in report.sources)
        fail(f"{path}: {report.stopped} ({kept} source(s) written before it are kept)")
    if report.trees is not None and report.trees.failed:
        fail(
            f"{path}: the sources were written; sealing failed and stays queued "
            f"(`stratamem flush` retries): {report.trees.failed[0]}"
        )
    if report.read_nothing and not allow_empty:
        fail(f"{report.warnings[0]} (--allow-empty accepts that)")


_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _byte_size(value: str | None) -> int | None:
    """``64M`` as bytes (K, M and G are powers of 1024; a trailing ``B`` or ``iB`` is allowed)."""
    if value is None:
        return None
    text = value.strip().upper().removesuffix("B").removesuffix("I")
    unit = text[-1:] if text[-1:] in _SIZE_UNITS else ""
    number = text[: len(text) - len(unit)].strip()
    try:
        size = int(float(number) * _SIZE_UNITS[unit])
    except (ValueError, OverflowError):
        raise click.BadParameter(f"{value!r} is not a size such as 64M, 1G or 500K") from None
    if size < 1:
        raise click.BadParameter(f"{value!r}: the size must be at least one byte")
    if size > _MAX_ITEM_SIZE:
        raise click.BadParameter(f"{value!r}: the size must be at most 1024G")
    return size


_MAX_ITEM_SIZE = 1 << 40


def _scope_name(value: str | None) -> str | None:
    if value is not None and not value.strip():
        raise click.BadParameter("the scope must not be empty")
    return value.strip() if value is not None else None


def _print_report(report: IngestReport) -> None:
    table = Table(title=f"{report.path} ({report.connector})", title_justify="left")
    for column in ("source", "kind", "items", "chunks", "new", "removed", "status"):
        numeric = column in {"items", "chunks", "new", "removed"}
        # A scope is folded, never cut: two long ones must not read the same.
        table.add_column(column, justify="right" if numeric else "left", overflow="fold")
    for s in report.sources:
        status = f"[red]failed: {escape(s.error)}[/]" if s.error else "ok"
        table.add_row(
            escape(s.scope),
            s.kind,
            f"{s.records:,}",
            f"{s.chunks:,}",
            f"{s.added:,}",
            f"{s.removed:,}",
            status,
        )
    out.print(table)
    rate = report.chunks / report.seconds if report.seconds else 0.0
    out.print(
        f"{report.records:,} items → {report.chunks:,} chunks ({report.added:,} new) "
        f"in {report.seconds:.2f}s, {rate:,.0f} chunks/s"
    )
    merged = [s for s in report.sources if s.merged and s.error is None]
    if merged:
        new, updated = sum(s.new for s in merged), sum(s.updated for s in merged)
        kept = sum(s.records_removed for s in merged)
        line = f"records: {new:,} new, {updated:,} updated"
        if report.duplicates:
            line += f", {report.duplicates:,} duplicates folded"
        if kept:
            line += f", {kept:,} removed (--sync)"
        out.print(line)
    if report.problems:
        # Some problems skip an item, others only a field of it ("kept without a time").
        out.print(f"[yellow]{len(report.problems)} problem(s) in the input:[/]")
        for problem in report.problems[:20]:
            out.print(f"  {problem}", highlight=False, markup=False, soft_wrap=True)
        if len(report.problems) > 20:
            out.print(f"  … and {len(report.problems) - 20} more (see --json)")
    for warning in report.warnings:
        out.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)


@main.command()
@json_option
@click.pass_context
@handle_errors
def sources(ctx: click.Context, as_json: bool) -> None:
    """List the ingested sources with their access scopes and chunk counts (or locked).

    \b
    Examples:
      stratamem sources
      stratamem sources --json
    """
    found = open_memory(ctx).sources.list()
    if as_json:
        print_json([s.to_dict() for s in found])
        return
    table = Table()
    # Who made each source, where a principal made any: theirs are in their namespace.
    makers = any(s.created_by for s in found)
    columns = ("scope", "kind", "platform", "access", "chunks", "id")
    for column in (*columns, "created by") if makers else columns:
        folded = column == "scope"  # folded, never cut: two long scopes must not read the same
        table.add_column(
            column,
            no_wrap=not folded,
            overflow="fold" if folded else "ellipsis",
            justify="right" if column == "chunks" else "left",
        )
    for s in found:
        table.add_row(
            cell(escape(s.scope)),
            s.kind.value,
            cell(escape(s.platform)),
            cell(scopes_shown(s.access)),
            cell("[yellow]locked[/]" if s.locked else f"{s.chunk_count:,}"),
            s.id,
            *([cell(escape(s.created_by or "(owner)"))] if makers else []),
        )
    out.print(table)


@main.command()
@json_option
@click.pass_context
@handle_errors
def stats(ctx: click.Context, as_json: bool) -> None:
    """Counts of sources, chunks, tokens, entities and edges in the store.

    \b
    Examples:
      stratamem stats
      stratamem --db team.db stats --json
    """
    data = open_memory(ctx).stats()
    if as_json:
        print_json(data)
        return
    table = Table(show_header=False)
    for key, value in data.items():
        shown = (
            ", ".join(f"{k}: {_stat(v)}" for k, v in value.items())
            if isinstance(value, dict)
            else _stat(value)
        )
        table.add_row(key, escape(shown))
    out.print(table)


def _stat(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "—" if value is None else str(value).lower()
    return f"{value:,}" if isinstance(value, int) else str(value)


@main.command()
@click.argument("query")
@sources_option()
@kinds_option()
@identity_options("read")
@click.option("--since", help="Only content at or after this time (2024-03-12, 24h, 7d).")
@click.option("--until", help="Only content at or before this time.")
@click.option(
    "--limit",
    type=limit_range(MAX_SEARCH_LIMIT),
    default=10,
    show_default=True,
    help="How many hits.",
)
@click.option(
    "--mode",
    type=click.Choice(["hybrid", "keyword", "vector", "graph"]),
    default="hybrid",
    show_default=True,
    help="hybrid fuses keyword, vector and graph legs; the others run one leg.",
)
@click.option(
    "--profile",
    type=click.Choice(sorted(PROFILES)),
    help="Fusion weight profile, instead of any tuned or configured weights.",
)
@click.option(
    "--weights",
    help="Leg weights for this search: keyword=0.5,vector=0.4,graph=0.1 (over the profile's).",
)
@click.option(
    "--budget", type=BUDGET, help="Pack the hits into this many tokens as cards (0: no limit)."
)
@min_relevance_option
@click.option("--explain", is_flag=True, help="Show each hit's score breakdown and the legs.")
@json_option
@click.pass_context
@handle_errors
def search(
    ctx: click.Context,
    query: str,
    sources: tuple[str, ...],
    kinds: tuple[str, ...],
    user: str | None,
    agent: str | None,
    session: str | None,
    since: str | None,
    until: str | None,
    limit: int,
    mode: str,
    profile: str | None,
    weights: str | None,
    budget: int | None,
    min_relevance: float | None,
    explain: bool,
    as_json: bool,
) -> None:
    """Search the store; each hit says where it came from, why it ranks where it does and
    its relevance (0 to 1, comparable across queries).

    \b
    Examples:
      stratamem search "why did we drop Redis?"
      stratamem search release --sources slack:#eng --since 2024-03-01
      stratamem search postmortem --kinds email --json
      stratamem search "queue incident" --budget 800 --explain
      stratamem search "meeting times" --user maya
      stratamem search "code samples python" --min-relevance 0.5
    """
    response = open_memory(ctx).search(
        query,
        sources=sources,
        kinds=kinds,
        user=user,
        agent=agent,
        session=session,
        since=when(since, "--since"),
        until=when(until, "--until"),
        limit=limit,
        mode=mode,
        profile=profile,
        weights=parse_weights(weights, "--weights") if weights else None,
        budget=budget,
        min_relevance=min_relevance,
    )
    if as_json:
        print_json(response.to_dict())
        return
    if explain:
        for leg, state in response.legs.items():
            out.print(f"[dim]{leg}: {escape(state)}[/]", highlight=False)
    elif mode == "hybrid":
        # A leg that could not run changes what the ranking means: say so without --explain.
        for leg, state in response.legs.items():
            if not state.startswith("ok"):
                why = state.removeprefix("off: ")
                out.print(f"[yellow]{leg} leg off: {escape(why)}[/]", highlight=False)
    for note in response.notes:
        out.print(f"[yellow]{escape(note)}[/]", highlight=False)
    plainly = nothing_relevant_line(response.nothing_relevant, len(response.hits))
    if plainly:
        out.print(f"[yellow]{plainly}[/]", highlight=False)
    if response.cards:
        _print_cards(response)
    else:
        _print_hits(response, explain=explain)


def _print_cards(response: SearchResponse) -> None:
    used = sum(card.tokens for card in response.cards)
    limit = f"of {response.budget}" if response.budget else "(no limit)"
    out.print(f"[dim]{len(response.cards)} cards, {used} tokens {limit}[/]")
    for rank, card in enumerate(response.cards, 1):
        pinned = ", tier-0" if card.tier0 else ""
        shown = "" if card.hit.relevance is None else f"relevance {card.hit.relevance:.2f}, "
        out.print(f"[bold]{rank}.[/] [dim]({shown}{card.form}, {card.tokens} tokens{pinned})[/]")
        out.print(card.text, highlight=False, markup=False)
        out.print(f"   [dim]{escape(card.reason)}[/]", highlight=False)


def _print_hits(response: SearchResponse, *, explain: bool = False) -> None:
    if not response.hits:
        if response.total and response.nothing_relevant:
            out.print(
                f"nothing relevant: none of {response.total:,} candidates reached the relevance "
                "floor"
            )
        else:
            out.print("no matches")
        return
    for rank, hit in enumerate(response.hits, 1):
        _print_hit(rank, hit, explain=explain)
    if response.truncated:
        out.print(f"[dim]showing {len(response.hits)} of {response.total:,} candidates[/]")


def _print_hit(rank: int, hit: RetrievalHit, *, explain: bool = False) -> None:
    details = [hit.tree_scope, rfc3339(hit.time_start) or "undated"]
    if hit.author:
        details.append(hit.author)
    title = f"{escape(hit.title)}  " if hit.title else ""
    out.print(f"[bold]{rank}. {title}[/][dim]{escape(' · '.join(details))}[/]", highlight=False)
    text = hit.snippet or hit.content[:240]
    out.print("   " + " ".join(text.split()), highlight=False, markup=False)
    why = hit.explain.get("reason") or ", ".join(f"{k} {v}" for k, v in hit.explain.items())
    cite = escape(hit.source_ref or "")
    relevance = "" if hit.relevance is None else f"relevance {hit.relevance:.2f} · "
    out.print(
        f"   [dim]{hit.node_id} · {cite} · {relevance}score {hit.score:.3f} "
        f"({escape(str(why))})[/]",
        highlight=False,
    )
    breakdown = hit.explain.get("breakdown")
    if explain and isinstance(breakdown, dict):
        parts = " ".join(f"{k}={v}" for k, v in breakdown.items() if v not in (None, 0.0))
        out.print(f"   [dim]breakdown: {escape(parts)}[/]", highlight=False)


@main.command()
@click.argument("node_id", nargs=-1, required=True)
@json_option
@click.pass_context
@handle_errors
def show(ctx: click.Context, node_id: tuple[str, ...], as_json: bool) -> None:
    """Print nodes whole (chunks or summaries), with source, time range and entities.
    Several NODE_IDs are read in one batch, in the order given.

    \b
    Examples:
      stratamem show 8f3c1e0a9b7d4c2e8f3c1e0a9b7d4c2e
      stratamem show sum_3f2a9c0d1e4b5a6c7d8e9f0a1b2c3d4e --json
      stratamem show 8f3c1e0a9b7d4c2e8f3c1e0a9b7d4c2e 0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e
    """
    memory = open_memory(ctx)
    hits = memory.nodes(node_id)
    missing = [i for i in node_id if i not in {h.node_id for h in hits}]
    if not hits:
        fail("no node with id " + ", ".join(repr(i) for i in dict.fromkeys(node_id)))
    if as_json:
        print_json(hits[0].to_dict() if len(node_id) == 1 else [h.to_dict() for h in hits])
        return
    for number, hit in enumerate(hits):
        if number:
            out.rule()
        _print_node_whole(hit)
    for unknown in missing:
        err.print(f"[yellow]no node with id {escape(unknown)}[/]")


def _print_node_whole(hit: RetrievalHit) -> None:
    kind = f"summary L{hit.level} · " if hit.level else ""
    out.print(f"[bold]{escape(kind + (hit.title or hit.node_id))}[/]", highlight=False)
    out.print(
        f"[dim]{hit.node_id} · {escape(hit.tree_scope)} · {escape(hit.source_ref or '')}[/]",
        highlight=False,
    )
    start, end = rfc3339(hit.time_start), rfc3339(hit.time_end)
    out.print(
        f"[dim]{start} → {end}{escape(' · ' + hit.author) if hit.author else ''}[/]",
        highlight=False,
    )
    out.print()
    out.print(hit.content, highlight=False, markup=False)
    if hit.entities:
        out.print()
        out.print("[bold]entities:[/] " + ", ".join(hit.entities), highlight=False)


@main.command()
@click.option("--quiet", is_flag=True, help="No progress bar.")
@json_option
@click.pass_context
@handle_errors
def embed(ctx: click.Context, quiet: bool, as_json: bool) -> None:
    """Embed every chunk that has no vector yet (the bundled MiniLM model by default).

    Resumable: each batch is committed, and a vector already made for the same text is
    reused. Then the search indexes are built and saved beside the store, so the next search
    reads them instead of building them (ingest does the same after it embeds).

    \b
    Examples:
      stratamem embed
      stratamem --db team.db embed --json
    """
    _run_embedding(ctx, quiet, as_json, reindex=False)


@main.command()
@click.option("--quiet", is_flag=True, help="No progress bar.")
@click.option(
    "--tokenizer",
    type=click.Choice(["stemmed", "plain"]),
    help="Rebuild the keyword (full-text) index with this tokenizer instead: stemmed "
    "(default for new stores) or plain. The vectors are left as they are.",
)
@json_option
@click.pass_context
@handle_errors
def reindex(ctx: click.Context, quiet: bool, tokenizer: str | None, as_json: bool) -> None:
    """Switch the store's vectors to the configured model and re-embed every chunk.

    Needed after changing the embedding model or its prefixes: until then the vector leg
    stays off, and search says why. With --tokenizer, rebuilds the keyword index instead.

    \b
    Examples:
      stratamem reindex
      stratamem reindex --tokenizer plain
    """
    if tokenizer is None:
        _run_embedding(ctx, quiet, as_json, reindex=True)
        return
    memory = open_memory(ctx)
    started = time.time()
    changed = memory.indexes.set_keyword_tokenizer(tokenizer)
    data = {"tokenizer": tokenizer, "changed": changed, "seconds": round(time.time() - started, 2)}
    if as_json:
        print_json(data)
    elif changed:
        out.print(
            f"keyword index rebuilt with the {tokenizer} tokenizer in {data['seconds']}s",
            highlight=False,
        )
    else:
        out.print(f"the keyword index already uses the {tokenizer} tokenizer", highlight=False)


def _run_embedding(
    ctx: click.Context, quiet: bool, as_json: bool, *, reindex: bool, emit: bool = True
) -> dict[str, Any]:
    memory = open_memory(ctx)
    with Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:,}/{task.total:,} · {task.fields[rate]}"),
        TimeElapsedColumn(),
        console=err,
        disable=quiet or as_json,
        transient=True,
    ) as bar:
        task = bar.add_task("embedding", total=0, rate="")

        def on_progress(p: EmbedProgress) -> None:
            elapsed = max(1e-6, time.time() - p.started)
            bar.update(task, completed=p.done, total=p.total, rate=f"{p.done / elapsed:,.0f}/s")

        run = memory.indexes.reindex if reindex else memory.indexes.embed
        report = run(progress=on_progress)
        # The indexes a search needs, built now and saved beside the store, rather than by
        # the first search.
        bar.update(task, description="indexing", rate="")
        indexes = memory.indexes.build()
    data = {
        "model": report.model,
        "embedded": report.embedded,
        "reused": report.cached,
        "seconds": round(report.seconds, 2),
        "indexes_seconds": {name: round(took, 2) for name, took in indexes.items()},
    }
    if not emit:
        return data
    if as_json:
        print_json(data)
        return data
    rate = report.embedded / report.seconds if report.seconds else 0.0
    out.print(
        f"embedded {report.embedded:,} chunks ({report.cached:,} reused) with "
        f"{escape(report.model)} in {report.seconds:.1f}s, {rate:,.1f}/s; search indexes "
        f"ready in {sum(indexes.values()):.1f}s",
        highlight=False,
    )
    return data


@main.command("eval")
@click.argument("dataset", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--mode",
    "modes",
    multiple=True,
    type=AliasedChoice(EVAL_MODES, EVAL_MODE_ALIASES),
    default=("all",),
    show_default=True,
    help="Retrieval modes to score; all = keyword, vector, hybrid (and hybrid+rerank if a "
    "reranker is configured).",
)
@click.option("--split", help="Query split to score (default: test; tune/heldout for tuning).")
@click.option("--profile", type=click.Choice(sorted(PROFILES)), help="Fusion weight profile.")
@eval_store_options
@click.option("--name", help="Report file name (default: eval-<dataset>).")
@json_option
@click.pass_context
@handle_errors
def eval_command(
    ctx: click.Context,
    dataset: Path,
    modes: tuple[str, ...],
    split: str | None,
    profile: str | None,
    store_dir: str | None,
    out_dir: Path,
    name: str | None,
    as_json: bool,
) -> None:
    """Score retrieval modes on a BEIR-layout folder or LoCoMo with nDCG@10, recall, MRR.

    The dataset is ingested and embedded into a store of its own, kept between runs. LoCoMo
    is scored by evidence recall@5/10/25/50 per category, each question answered from its
    own conversation only. Hybrid modes run the search pipeline as configured (config files,
    STRATAMEM_SEARCH_* variables); the JSON report keeps those settings.

    \b
    Examples:
      stratamem eval ../shared/data/scifact
      stratamem eval ../shared/data/locomo --mode hybrid --mode keyword
      stratamem eval ../shared/data/cranfield --json
    """
    from stratamem.api.eval import BASELINES, MODES, evaluate, load_dataset, trec_eval, write_report

    trec_eval("stratamem eval")  # before the dataset is read and ingested
    data = load_dataset(dataset)
    chosen = list(MODES) if "all" in modes else list(dict.fromkeys(modes))
    # The pipeline as configured (config files, environment), not the dataset store's own.
    chosen_settings = settings(ctx)
    config = chosen_settings.search_config()
    if profile:
        config = replace(config, profile=profile, weights={})
    reranker = reranker_from(chosen_settings)
    with Memory(eval_store(data, store_dir), reranker=reranker) as memory:
        results = evaluate(
            data,
            memory,
            chosen,
            split=split,
            config=config,
            progress=None if as_json else (lambda m: err.print(f"[dim]{escape(m)}[/]")),
        )
    report_name = name or f"eval-{data.name}"
    json_path, md_path = write_report(
        results,
        out_dir,
        report_name,
        baselines=BASELINES.get(data.name, []),
        search=asdict(config),
    )
    if as_json:
        print_json(json.loads(json_path.read_text()))
        return
    out.print(md_path.read_text(), highlight=False, markup=False)
    out.print(f"[dim]wrote {escape(str(md_path))} and {escape(str(json_path))}[/]")


@main.command("tune")
@click.argument("dataset", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--metric", help="Metric to maximise (default: nDCG@10; LoCoMo: recall@10).")
@click.option(
    "--save",
    is_flag=True,
    help="Keep the chosen weights in the store (--db): its searches use them from then on.",
)
@eval_store_options
@json_option
@click.pass_context
@handle_errors
def tune_command(
    ctx: click.Context,
    dataset: Path,
    metric: str | None,
    save: bool,
    store_dir: str | None,
    out_dir: Path,
    as_json: bool,
) -> None:
    """Learn hybrid fusion weights on one half of a dataset's queries; report the other.

    The test queries are split 50/50 by a fixed hash: weights are chosen on `tune` and the
    reported score is on `heldout`, beside the default profile on the same queries.

    \b
    Examples:
      stratamem tune ../shared/data/scifact
      stratamem tune ../shared/data/locomo --metric recall_25
    """
    from stratamem.api.eval import load_dataset, trec_eval, tune, write_report
    from stratamem.api.stores import shown_location

    trec_eval("stratamem tune")  # before the dataset is read and ingested
    data = load_dataset(dataset)
    # Weights are tuned for the pipeline as configured (config files, environment).
    configured = settings(ctx).search_config()
    with Memory(eval_store(data, store_dir), config=configured) as memory:
        result = tune(
            data,
            memory,
            metric=metric,
            progress=None if as_json else (lambda m: err.print(f"[dim]{escape(m)}[/]")),
        )
    chosen = {
        "dataset": result.dataset,
        "metric": result.metric,
        "split": "tune",
        "weights": result.weights,
        "tune_score": round(result.tune_score, 4),
        "heldout_tuned": round(result.heldout.metrics[result.metric], 4),
        "heldout_default": round(result.default_heldout.metrics[result.metric], 4),
        "tried": result.tried,
    }
    json_path, md_path = write_report(
        [result.default_heldout, result.heldout], out_dir, f"tune-{data.name}", tuned=chosen
    )
    summary = {**chosen, "report": str(md_path)}
    saved_to = shown_location(str(ctx.obj["db"]))
    if save:
        open_memory(ctx).indexes.save_tuned_weights(chosen)
        summary["saved_to"] = saved_to
    if as_json:
        print_json(summary)
        return
    out.print(
        f"best weights on tune: {result.weights} ({result.metric} {result.tune_score:.4f}, "
        f"{result.tried} tried)",
        highlight=False,
    )
    out.print(
        f"heldout {result.metric}: tuned {summary['heldout_tuned']} vs default "
        f"{summary['heldout_default']}",
        highlight=False,
    )
    if save:
        out.print(f"saved the weights in {escape(saved_to)}", highlight=False)
    out.print(f"[dim]wrote {escape(str(md_path))} and {escape(str(json_path))}[/]")


@main.command("calibrate")
@click.argument(
    "datasets",
    nargs=-1,
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
)
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write the calibration (default: the one shipped in the package).",
)
@click.option(
    "--facts/--no-facts",
    default=True,
    show_default=True,
    help="Fit the fact models on LoCoMo's observations written as facts (a copy of its store, "
    "made the first time).",
)
@click.option("--name", help="The calibration's name (default: tuned-<date>).")
@click.option(
    "--store",
    "store_dir",
    help="Folder where the datasets' stores are kept between runs (default: the user cache).",
)
@json_option
@click.pass_context
@handle_errors
def calibrate_command(
    ctx: click.Context,
    datasets: tuple[Path, ...],
    output: Path | None,
    facts: bool,
    name: str | None,
    store_dir: str | None,
    as_json: bool,
) -> None:
    """Fit the relevance calibration on the tune half of datasets' judged queries.

    Needs the default embedder's vectors: the datasets are ingested and embedded into
    stores of their own (as eval keeps them) the first time.

    Each tune query is searched as `stratamem eval` searches it, and again where nothing
    answers it (the next LoCoMo conversation; the next dataset given); every hit is a judged
    pair. Writes the models and the nothing_relevant threshold as JSON (see docs/search.md);
    point search.calibration at a file written elsewhere.

    \b
    Examples:
      stratamem calibrate ../shared/data/locomo ../shared/data/scifact ../shared/data/cranfield
      stratamem calibrate ../shared/data/scifact --no-facts --output my-calibration.json
    """
    from contextlib import ExitStack
    from datetime import UTC, datetime

    from stratamem.api.eval import PACKAGED_CALIBRATION, facts_store, fit_calibration, load_dataset

    config = settings(ctx).search_config()
    target = output or PACKAGED_CALIBRATION
    with ExitStack() as stack:
        stores = []
        fact_memory = None
        for folder in datasets:
            data = load_dataset(folder)
            location = eval_store(data, store_dir)
            memory = stack.enter_context(Memory(location))
            stores.append((data, memory))
            observations = folder / "locomo10.json"
            wanted = facts and fact_memory is None and observations.exists()
            if wanted and isinstance(location, Path):
                err.print("[dim]LoCoMo's observations as facts (written the first time)[/]")
                copy = facts_store(data, location, observations)
                fact_memory = stack.enter_context(Memory(copy))
        calibration, _ = fit_calibration(
            stores,
            facts=fact_memory,
            name=name or f"tuned-{datetime.now(UTC):%Y-%m-%d}",
            config=config,
            progress=None if as_json else (lambda m: err.print(f"[dim]{escape(m)}[/]")),
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    calibration.save(target)
    summary = {
        "calibration": calibration.name,
        "written_to": str(target),
        "threshold": calibration.threshold,
        "models": [m.name for m in calibration.models],
        **calibration.fitted_on,
    }
    if as_json:
        print_json(summary)
        return
    out.print(
        f"calibration {escape(calibration.name)}: {len(calibration.models)} models on "
        f"{summary['chunk_pairs']:,} chunk and {summary['fact_pairs']:,} fact pairs; "
        f"nothing_relevant below {calibration.threshold}",
        highlight=False,
    )
    out.print(f"[dim]wrote {escape(str(target))}[/]")


@main.command()
@click.argument("source")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.pass_context
@handle_errors
def forget(ctx: click.Context, source: str, yes: bool) -> None:
    """Remove a source (by id or scope) and everything derived from it.

    \b
    Examples:
      stratamem forget slack:#random
      stratamem forget src_3d0a9e20c1b2a4f6 --yes
    """
    memory = open_memory(ctx)
    found = memory.sources.get(source)
    if not yes and sys.stdin.isatty():
        click.confirm(f"forget {found.scope} ({found.chunk_count:,} chunks)?", abort=True)
    removed = memory.sources.forget(found.id)
    out.print(f"forgot {escape(found.scope)}: {removed:,} chunks removed", highlight=False)


for _command in (
    *COMMANDS,
    *item_commands.COMMANDS,
    *access_commands.COMMANDS,
    *config_commands.COMMANDS,
    *fact_commands.COMMANDS,
    *extract_commands.COMMANDS,
    *consolidate_commands.COMMANDS,
    *copy_commands.COMMANDS,
    *entity_commands.COMMANDS,
):
    main.add_command(_command)
main.add_command(serve)
main.add_command(inspect)
main.add_command(mcp_command)
# Operations no command above runs get one made from their declaration.
for _op in OPERATIONS.values():
    if _op.cli is None:
        main.add_command(command_for(_op))
