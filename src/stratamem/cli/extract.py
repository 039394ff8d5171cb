"""The ``stratamem extract`` command: facts extracted by a model (see ``docs/memory.md``)."""

from __future__ import annotations

import click
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from stratamem.api.reports import ExtractProgress, ExtractReport
from stratamem.cli.common import (
    FiniteRange,
    err,
    fail,
    handle_errors,
    json_option,
    open_memory,
    out,
    print_json,
)

MAX_SHOWN = 20


@click.command("extract")
@click.argument("sources", nargs=-1)
@click.option("--endpoint", metavar="URL", help="An OpenAI-compatible base URL (…/v1).")
@click.option("--model", help="The chat model to ask.")
@click.option(
    "--timeout",
    type=FiniteRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="Seconds to wait for one answer.",
)
@click.option(
    "--retries",
    type=click.IntRange(0, 20),
    default=2,
    show_default=True,
    help="How often to ask again after a timeout, a 5xx or an unreadable answer.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(1, 256),
    default=8,
    show_default=True,
    help="The most chunks sent in one request.",
)
@click.option("--redo", is_flag=True, help="Ask for every chunk again, not only the new ones.")
@click.option("--pending", is_flag=True, help="Only run the jobs already queued.")
@click.option(
    "--enable",
    is_flag=True,
    help="Extract after every ingest with --endpoint and --model (stored; the key is not).",
)
@click.option("--disable", is_flag=True, help="Stop extracting after ingest.")
@json_option
@click.pass_context
@handle_errors
def extract(
    ctx: click.Context,
    sources: tuple[str, ...],
    endpoint: str | None,
    model: str | None,
    timeout: float,
    retries: int,
    batch_size: int,
    redo: bool,
    pending: bool,
    enable: bool,
    disable: bool,
    as_json: bool,
) -> None:
    """Extract facts from SOURCES (ids or scopes; all when none) with a model behind an
    OpenAI-compatible chat-completions server: it is shown the facts held about what each
    batch mentions and decides to add, update, retract or keep each, with a reason; its
    decisions are written as facts of origin "model", closing what changed.

    Each source is a durable job: a run that is stopped resumes where it stopped. Only chunks
    not extracted yet are sent; a locked source never is. The API key is read from
    STRATAMEM_EXTRACT_API_KEY, else OPENAI_API_KEY, and never stored.

    \b
    Examples:
      stratamem extract --endpoint http://127.0.0.1:8080/v1 --model qwen2.5:7b
      stratamem extract slack:#eng --endpoint http://localhost:11434 --model llama3.1:8b
      stratamem extract --enable --endpoint http://127.0.0.1:8080/v1 --model qwen2.5:7b
      stratamem extract --pending --json
      stratamem extract --disable
    """
    if enable and disable:
        raise click.UsageError("give --enable or --disable, not both")
    if (enable or disable) and (sources or pending or redo):
        raise click.UsageError("--enable and --disable only configure: give no sources")
    if enable and not (endpoint and model):
        raise click.UsageError("--enable needs --endpoint and --model")
    if pending and (sources or redo):
        raise click.UsageError("--pending runs the queued jobs: give no sources and no --redo")
    if bool(endpoint) != bool(model):
        raise click.UsageError("give --endpoint and --model together")
    memory = open_memory(ctx)
    if enable or disable:
        memory.facts.set_extraction(endpoint if enable else None, model)
        _print_setting(memory.facts.extraction(), as_json)
        return
    with Progress(
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:,}/{task.total:,} chunks · {task.fields[facts]} facts"),
        TimeElapsedColumn(),
        console=err,
        disable=as_json,
        transient=True,
    ) as bar:
        task = bar.add_task("extracting", total=0, facts=0)

        def on_progress(p: ExtractProgress) -> None:
            bar.update(
                task,
                description=escape(p.scope),
                completed=p.chunks,
                total=p.chunks_total,
                facts=f"{p.facts:,}",
            )

        report = memory.facts.extract(
            sources,
            endpoint=endpoint,
            model=model,
            timeout=timeout,
            retries=retries,
            batch_size=batch_size,
            redo=redo,
            pending=pending,
            progress=on_progress,
        )
    if as_json:
        print_json(report.to_dict())
    else:
        _print_report(report)
    if report.failed:
        fail(report.failed[0])


def _print_setting(setting: tuple[str, str] | None, as_json: bool) -> None:
    if as_json:
        print_json(
            {"enabled": setting is not None}
            | ({"endpoint": setting[0], "model": setting[1]} if setting else {})
        )
    elif setting is None:
        out.print("extraction after ingest is off")
    else:
        out.print(f"extraction after ingest is on: {escape(setting[1])} at {escape(setting[0])}")


def _print_report(report: ExtractReport) -> None:
    out.print(
        f"{report.added:,} added, {report.updated:,} updated, {report.retracted:,} retracted, "
        f"{report.kept:,} kept; "
        f"{report.facts:,} facts ({report.recorded:,} rows recorded) from {report.chunks:,} "
        f"chunks of {report.sources:,} sources in {report.batches:,} batches, "
        f"{report.retries:,} retries, {report.seconds:.2f}s ({escape(report.model)} at "
        f"{escape(report.endpoint)})"
    )
    if report.skipped:
        out.print(f"[yellow]{len(report.skipped):,} skipped:[/]")
        for s in report.skipped[:MAX_SHOWN]:
            where = " ".join(
                part
                for part in (
                    s.source,
                    f"batch {s.batch}" if s.batch is not None else "",
                    f"item {s.item}" if s.item is not None else "",
                )
                if part
            )
            out.print(f"  {escape(where)}: {escape(s.reason)}")
        if len(report.skipped) > MAX_SHOWN:
            out.print(f"  … and {len(report.skipped) - MAX_SHOWN:,} more (--json lists them)")


COMMANDS = (extract,)
