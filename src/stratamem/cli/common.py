"""What every command shares: the console, error handling, common options, the store."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.markup import escape

from stratamem.api import Memory
from stratamem.errors import StratamemError
from stratamem.timeparse import parse_when
from stratamem.tree.summarizer import Summarizer
from stratamem.tree.summarizers import get_summarizer

F = TypeVar("F", bound=Callable[..., Any])
out = Console()
err = Console(stderr=True)


def handle_errors(func: F) -> F:
    """Domain errors and bad arguments become one-line messages and exit code 1."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (StratamemError, ValueError, OSError) as exc:
            err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def eval_store_options(func: F) -> F:
    """--store and --out, shared by the commands that evaluate on datasets."""
    func = click.option(
        "--out",
        "out_dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path("benchmarks/results"),
        show_default=True,
        help="Folder for the Markdown and JSON report.",
    )(func)
    return click.option(
        "--store",
        "store_dir",
        type=click.Path(file_okay=False, path_type=Path),
        help="Where the dataset's store is kept between runs (default: the user cache).",
    )(func)


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(func)


def open_memory(ctx: click.Context) -> Memory:
    db: Path = ctx.obj["db"]
    memory = Memory(db, summarizer=summarizer_from_environment())
    ctx.call_on_close(memory.close)
    return memory


def summarizer_from_environment() -> Summarizer | None:
    """``STRATAMEM_SUMMARIZER`` (``extractive``, the default, or ``llm``); the LLM one is set
    up by ``STRATAMEM_LLM_BASE_URL``, ``STRATAMEM_LLM_MODEL`` and ``STRATAMEM_LLM_API_KEY``."""
    name = os.environ.get("STRATAMEM_SUMMARIZER", "").strip()
    if not name or name == "extractive":
        return None
    options: dict[str, Any] = {}
    if name == "llm":
        options = {
            "base_url": os.environ.get("STRATAMEM_LLM_BASE_URL", ""),
            "model": os.environ.get("STRATAMEM_LLM_MODEL", ""),
            "api_key": os.environ.get("STRATAMEM_LLM_API_KEY") or None,
        }
    return get_summarizer(name, **options)


def when(value: str | None) -> datetime | None:
    return parse_when(value) if value else None


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))
