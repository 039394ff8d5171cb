"""Consolidation commands: consolidate (score facts, write rollups) and rollup (show them);
see ``docs/memory.md``."""

from __future__ import annotations

import sys
from typing import Any

import click
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from stratamem.api.records import Rollup
from stratamem.api.reports import ConsolidationProgress, ConsolidationReport
from stratamem.cli.common import (
    FiniteRange,
    err,
    handle_errors,
    json_option,
    open_memory,
    out,
    print_json,
)


def _summary(report: ConsolidationReport) -> str:
    skipped = f", {len(report.rollups_skipped)} skipped" if report.rollups_skipped else ""
    return (
        f"scored {report.facts_scored:,} facts of {report.subjects:,} subjects; rollups: "
        f"{report.rollups_written:,} written, {report.rollups_kept:,} kept, "
        f"{report.rollups_dropped:,} dropped{skipped} in {report.seconds:.2f} s"
    )


@click.command()
@click.option(
    "--min-facts",
    type=click.IntRange(1, 1_000_000),
    help="Roll up a subject with at least this many current facts (kept for later passes; "
    "default 3).",
)
@click.option(
    "--min-score",
    type=FiniteRange(0, 1),
    help="Roll up a subject whose best fact scores at least this (kept; default 0.75).",
)
@click.option(
    "--after-ingest",
    type=click.Choice(["on", "off"]),
    help="Set whether every ingest is followed by a pass, and do nothing else.",
)
@json_option
@click.pass_context
@handle_errors
def consolidate(
    ctx: click.Context,
    min_facts: int | None,
    min_score: float | None,
    after_ingest: str | None,
    as_json: bool,
) -> None:
    """Score every fact true now and bring the rollups (a profile card per important or
    populous subject) up to date: write new and changed ones, keep the unchanged, drop those
    that no longer qualify. Runs the pending after-ingest job too. The owner only, on a store
    opened without --unlock.

    \b
    Examples:
      stratamem consolidate
      stratamem consolidate --min-facts 5 --json
      stratamem consolidate --after-ingest on
    """
    memory = open_memory(ctx)
    if after_ingest is not None:
        on = memory.facts.consolidate_after_ingest(after_ingest == "on")
        if as_json:
            print_json({"after_ingest": on})
        else:
            out.print(f"consolidation after ingest: {'on' if on else 'off'}", highlight=False)
        return
    if as_json or not sys.stderr.isatty():
        report = memory.facts.consolidate(min_facts=min_facts, min_score=min_score)
    else:
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=err,
            transient=True,
        ) as bar:
            task = bar.add_task("reading facts", total=None)

            def tick(state: ConsolidationProgress) -> None:
                bar.update(
                    task,
                    description=state.stage,
                    completed=state.done,
                    total=state.total or None,
                )

            report = memory.facts.consolidate(
                min_facts=min_facts, min_score=min_score, progress=tick
            )
    if as_json:
        print_json(report.to_dict())
        return
    out.print(_summary(report), highlight=False)


def _card(rollup: Rollup) -> None:
    body: dict[str, Any] = rollup.body
    scope = rollup.scope or "owner only"
    facts = body.get("facts", [])
    out.print(
        f"[bold]{escape(rollup.subject)}[/]  scope {escape(scope)}, score {rollup.score:.3f}, "
        f"{len(facts)} facts, built {rollup.built_at:%Y-%m-%d %H:%M}  ({escape(rollup.id)})",
        highlight=False,
    )
    table = Table(box=None, pad_edge=False)
    for column in ("predicate", "object", "from", "score", "evidence"):
        table.add_column(column)
    for fact in facts:
        table.add_row(
            escape(fact["predicate"]),
            escape(fact["object"]),
            (fact["valid_from"] or "…")[:10],
            f"{fact['score']:.3f}",
            escape(", ".join(fact["evidence"][:2]) + ("…" if len(fact["evidence"]) > 2 else "")),
        )
    out.print(table)
    for summary in body.get("summaries", []):
        out.print(
            f"  summary L{summary['level']} {escape(summary['id'])}: "
            f"{escape(summary['text'][:200])}",
            highlight=False,
        )
    for question in body.get("open_questions", []):
        out.print(f"  open: {escape(_question(question))}", highlight=False)
    out.print("")


def _question(q: dict[str, Any]) -> str:
    if q["kind"] == "conflict":
        values = "; ".join(f"{v['object']} ({v['source_id']})" for v in q["values"])
        return f"{q['predicate']}: sources disagree: {values}"
    if q["kind"] == "low_confidence":
        return f"{q['predicate']} {q['object']}: confidence {q['confidence']}"
    return f"{q['predicate']} {q['object']} ended {q['valid_to']}, nothing since"


@click.command()
@click.argument("subject", required=False)
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@json_option
@click.pass_context
@handle_errors
def rollup(ctx: click.Context, subject: str | None, limit: int, as_json: bool) -> None:
    """The rollups (profile cards written by `stratamem consolidate`) the reader may see, best
    first: of SUBJECT (an entity id), or a list of every subject's. Under --as PRINCIPAL,
    only rollups whose every source the principal may read.

    \b
    Examples:
      stratamem rollup
      stratamem rollup 'person:carol diaz'
      stratamem --as agent rollup --json
    """
    memory = open_memory(ctx)
    found = memory.facts.rollups(subject, limit=limit)
    if as_json:
        print_json({"rollups": [r.to_dict() for r in found]})
        return
    if not found:
        out.print("no rollups", highlight=False)
        return
    if subject is not None:
        for one in found:
            _card(one)
        return
    table = Table(box=None, pad_edge=False)
    for column in ("subject", "scope", "facts", "score", "built", "id"):
        table.add_column(column)
    for one in found:
        table.add_row(
            escape(one.subject),
            escape(one.scope or "owner only"),
            str(len(one.body.get("facts", []))),
            f"{one.score:.3f}",
            f"{one.built_at:%Y-%m-%d %H:%M}",
            escape(one.id),
        )
    out.print(table)


COMMANDS = (consolidate, rollup)
