"""What every command shares: the console, error handling, common options, the store, and
the environment, which the command line alone reads (every variable is listed in
``docs/environment.md``).

Errors. Whatever goes wrong, a command prints one line to stderr, ``error: …``, never wrapped
and never a traceback, and exits non-zero: 2 for a bad option or argument (found while click
parses them), 1 for anything else. Domain errors (:class:`~stratamem.errors.StratamemError`,
``ValueError``, ``OSError``) say what is wrong; so does a full disk, whichever layer reports it
(:func:`~stratamem.errors.is_disk_full`): the store is whole, and the message says what was
kept. Any other exception is reported as the command failing unexpectedly, with the hint to
rerun with ``--debug`` (or ``STRATAMEM_DEBUG=1``), which shows the traceback instead.
"""

from __future__ import annotations

import errno
import functools
import json
import math
import os
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, NoReturn, TypeVar

import click
from rich.console import Console

from stratamem.api import Memory
from stratamem.api.access import check_passphrase
from stratamem.api.parts import RERANKERS, Reranker, Summarizer, get_summarizer
from stratamem.config import TUNED_KEY, Settings
from stratamem.config import load as load_settings
from stratamem.errors import (
    ConfigError,
    LockError,
    StoreBusyError,
    StoreFull,
    StratamemError,
    WrongPassphrase,
    is_disk_full,
)
from stratamem.timeparse import is_time_text, parse_when
from stratamem.types import SourceKind

F = TypeVar("F", bound=Callable[..., Any])
# The source kinds, as ``--kinds`` (and ``add --kind``, a new source's) take them.
SOURCE_KINDS = [k.value for k in SourceKind]
# No automatic highlighting: its regular expressions take minutes over a long id or query
# echoed back, and colour goes where the markup puts it. Soft wrap: a long line on stderr stays
# one line whatever the terminal's width.
# No emoji codes: a scope such as ``jsonl:notes:x`` must print as it is.
out = Console(highlight=False, emoji=False)
err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)

MAX_MESSAGE_CHARS = 1000
DEBUG_HINT = "rerun with --debug (or STRATAMEM_DEBUG=1) for the traceback"
FULL_HINT = (
    "the write that ran out of room was rolled back, what earlier writes committed is kept; "
    "free some space and run the command again"
)

# Ranges of the numeric options; out of range is a one-line usage error.
MAX_DEPTH = 32  # TreeConfig.max_depth: no tree is deeper
MAX_BUDGET = 1_000_000
MAX_DAYS = 365_000.0  # a thousand years


class FiniteRange(click.FloatRange):
    """A float range that also refuses ``nan``, which compares false to both bounds."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if math.isnan(number):
            self.fail(f"{value!r} is not a number", param, ctx)
        return number


DEPTH = click.IntRange(0, MAX_DEPTH)
BUDGET = click.IntRange(0, MAX_BUDGET)
DAYS = FiniteRange(0, MAX_DAYS)
RELEVANCE = FiniteRange(0, 1)


def min_relevance_option(func: F) -> F:
    """``--min-relevance``: leave out hits less likely than this to answer the query."""
    return click.option(
        "--min-relevance",
        type=RELEVANCE,
        help="Leave out hits whose relevance (0 to 1, comparable across queries) is below this.",
    )(func)


def nothing_relevant_line(nothing: bool, count: int) -> str | None:
    """What a ranked list of ``count`` hits says plainly when none is likely to answer (an
    empty list says "no matches" itself)."""
    if not nothing or not count:
        return None
    return "nothing relevant: no hit is likely to answer this (the closest are below)"


def limit_range(maximum: int) -> click.IntRange:
    """A ``--limit``: at least 1, at most what the command can return."""
    return click.IntRange(1, maximum)


class AliasedChoice(click.Choice):  # type: ignore[type-arg]  # generic from click 8.2 on
    """A choice that also takes older names for some of its values, read as the current one
    and never listed (``fts`` for ``keyword``)."""

    def __init__(self, choices: Sequence[str], aliases: dict[str, str]) -> None:
        super().__init__(choices)
        self.aliases = aliases

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return super().convert(self.aliases.get(value, value), param, ctx)


def older_name(old: str, new: str, dest: str, **attrs: Any) -> Callable[[F], F]:
    """Keep ``old``, a name an option had before, working as a hidden spelling of ``new``.

    Scripts written for the older name go on running; ``--help`` shows only ``new``. The
    value lands in the parameter ``dest`` (``new``'s). For an option taken several times the
    values of both spellings are kept; for a single one, giving both with different values
    is a usage error. ``attrs`` are ``new``'s own (its type, ``multiple``), so both spellings
    accept the same values.
    """
    legacy = f"{dest}__{old.lstrip('-').replace('-', '_')}"

    def decorator(func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            given = kwargs.pop(legacy)
            current = kwargs.get(dest)
            if attrs.get("multiple"):
                kwargs[dest] = (*(current or ()), *given)
            elif given is not None:
                if current is not None and current != given:
                    raise click.UsageError(
                        f"{old} is the older name of {new}; give one of them",
                        ctx=click.get_current_context(silent=True),
                    )
                kwargs[dest] = given
            return func(*args, **kwargs)

        return click.option(old, legacy, hidden=True, **attrs)(wrapper)  # type: ignore[return-value]

    return decorator


def one_line(message: str, *, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``message`` on one line, cut to ``limit`` characters. A message carrying a traceback
    (a reader process's crash report) keeps its first line and the traceback's last one."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if len(lines) > 1 and any(line.startswith("Traceback (most recent") for line in lines):
        lines = [lines[0], lines[-1]]
    text = " ".join(" ".join(lines).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def fail(message: str, *, code: int = 1) -> NoReturn:
    """Print ``error: message`` as one line on stderr and exit with ``code``."""
    click.echo(f"{click.style('error:', fg='red', bold=True)} {one_line(message)}", err=True)
    sys.exit(code)


def debugging(ctx: click.Context | None = None) -> bool:
    """Whether ``--debug`` or ``STRATAMEM_DEBUG`` asks for tracebacks."""
    ctx = ctx or click.get_current_context(silent=True)
    if ctx is not None and ctx.find_root().params.get("debug"):
        return True
    return os.environ.get("STRATAMEM_DEBUG", "").strip().lower() in {"1", "true", "yes", "on"}


def handle_errors(func: F) -> F:
    """Domain errors and bad arguments become one-line messages and exit code 1."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except StoreBusyError as exc:
            if debugging():
                traceback.print_exc()
            fail(f"{exc}; try again when that process is done")
        except OSError as exc:
            if debugging():
                traceback.print_exc()
            if is_disk_full(exc):
                fail(f"disk full: {exc}; {FULL_HINT}")
            fail(str(exc) or type(exc).__name__)
        except (StratamemError, ValueError) as exc:
            if debugging():
                traceback.print_exc()
            fail(str(exc) or type(exc).__name__)

    return wrapper  # type: ignore[return-value]


class CommandGroup(click.Group):
    """The top-level group: click's own errors as one line, and any exception a command did
    not expect as one line naming the command (the traceback with ``--debug``)."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as exc:
            hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
            fail(exc.format_message() + hint, code=exc.exit_code)
        except click.ClickException as exc:
            fail(exc.format_message(), code=exc.exit_code)
        except click.Abort:
            fail("aborted")
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise
            sys.exit(1)  # the reader went away: nobody is left to tell
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except Exception as exc:
            if debugging(ctx):
                raise
            command = " ".join(filter(None, ["stratamem", ctx.invoked_subcommand]))
            if isinstance(exc, StoreFull):
                fail(str(exc))
            if is_disk_full(exc):
                fail(f"{command}: disk full ({one_line(str(exc), limit=300)}); {FULL_HINT}")
            fail(
                f"{command} failed unexpectedly: {type(exc).__name__}: "
                f"{one_line(str(exc), limit=300)}; {DEBUG_HINT}"
            )


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
        help="Where the dataset's store is kept between runs: a folder (default: the user "
        "cache), or a postgresql:// URL of the database to hold it.",
    )(func)


def eval_store(dataset: Any, given: str | None) -> str | Path:
    """The dataset's store: the database a ``postgresql://`` URL names, or a file named by the
    dataset's contents in the folder given (the user cache by default)."""
    from stratamem.api.eval import store_path
    from stratamem.api.stores import url_scheme

    if given is not None and url_scheme(given) is not None:
        return given
    folder = Path(given) if given is not None else cache_dir_from_environment() / "eval"
    return store_path(dataset, folder)


def sources_option(*, older: bool = True) -> Callable[[F], F]:
    """``--sources`` (repeatable): only these sources, as every operation names the filter;
    with ``older``, ``--source`` is still taken as its older name."""

    def decorator(func: F) -> F:
        if older:
            func = older_name("--source", "--sources", "sources", multiple=True)(func)
        return click.option(
            "--sources",
            "sources",
            multiple=True,
            metavar="SOURCE",
            help="Only this source, id or scope; slack:* is a prefix (repeatable).",
        )(func)

    return decorator


def kinds_option(*, older: bool = True) -> Callable[[F], F]:
    """``--kinds`` (repeatable): only sources of these kinds; with ``older``, ``--kind`` is
    still taken as its older name."""
    kinds = click.Choice(SOURCE_KINDS)

    def decorator(func: F) -> F:
        if older:
            func = older_name("--kind", "--kinds", "kinds", multiple=True, type=kinds)(func)
        return click.option(
            "--kinds",
            "kinds",
            multiple=True,
            type=kinds,
            help="Only sources of this kind (repeatable).",
        )(func)

    return decorator


# What ``--user``, ``--agent`` and ``--session`` say, by what the command does with them.
IDENTITY_HELP = {
    "read": "Only the memory of this {}.",
    "write": "Write it to the memory of this {}.",
    "find": "The item in the memory of this {} (where several sources hold its id).",
}


def identity_options(use: Literal["read", "write", "find"]) -> Callable[[F], F]:
    """``--user``, ``--agent`` and ``--session``: whose memory a command reads (``read``),
    writes to (``write``) or finds an item in (``find``); see ``docs/memory.md``."""
    text = IDENTITY_HELP[use]

    def decorator(func: F) -> F:
        for name in ("session", "agent", "user"):
            func = click.option(f"--{name}", name, metavar="ID", help=text.format(name))(func)
        return func

    return decorator


def read_json(text: str, where: str) -> Any:
    """A JSON value given on the command line: as text, ``@FILE`` for a file's, ``-`` for
    standard input's; a usage error naming ``where`` when it is not JSON."""
    source = text
    if text == "-":
        source = sys.stdin.read()
    elif text.startswith("@"):
        try:
            with open(text[1:], encoding="utf-8") as file:
                source = file.read()
        except OSError as exc:
            raise click.BadParameter(f"{text[1:]}: {exc.strerror}", param_hint=where) from None
    try:
        return json.loads(source)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint=where) from None


class JsonObject(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2 on
    """A JSON object (as :func:`read_json` reads it), for an option such as ``--meta``."""

    name = "JSON"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, dict):
            return value
        where = param.opts[0] if param is not None and param.opts else "value"
        found = read_json(value, where)
        if not isinstance(found, dict):
            self.fail(f"must be a JSON object ({{...}}), got {type(found).__name__}", param, ctx)
        return found


def ingest_root_option(func: F) -> F:
    """``--ingest-root DIR`` (repeatable): the folders a principal writing through a server may
    ingest from."""
    return click.option(
        "--ingest-root",
        "ingest_roots",
        multiple=True,
        type=click.Path(exists=True, file_okay=False, resolve_path=True),
        help="A folder principals may ingest from (repeatable); without one they ingest nothing.",
    )(func)


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(func)


def join_option(func: F) -> F:
    """``--join``: the owner's write may go to a source a principal made."""
    return click.option(
        "--join",
        is_flag=True,
        help="Write to a source a principal made (its scopes are that principal's; by "
        "default such a source is refused).",
    )(func)


def open_memory(ctx: click.Context) -> Memory:
    """The store the command works on, read as the global ``--as`` principal (if any), with
    the ``--unlock`` sources readable in this process. Their passphrase is
    ``STRATAMEM_PASSPHRASE``, else the OS keyring's, else asked on a terminal."""
    db: str | Path = ctx.obj["db"]
    unlock = list(dict.fromkeys(ctx.obj.get("unlock", ())))

    chosen = settings(ctx)

    def opened(passphrases: Mapping[str, str] | Sequence[str]) -> Memory:
        return Memory(
            db,
            embedder=chosen.embedder(),
            reranker=reranker_from(chosen),
            config=chosen.search_config(),
            summarizer=summarizer_from(chosen),
            tree_config=chosen.tree_config(),
            principal=ctx.obj.get("principal"),
            unlock=passphrases or None,
        )

    try:
        memory = opened(unlock)
    except LockError as exc:
        # Neither the environment nor the keyring holds one: a person can type them.
        if not unlock or isinstance(exc, WrongPassphrase) or not interactive():
            raise
        memory = opened({source: ask_passphrase(source) for source in unlock})
    ctx.call_on_close(memory.close)
    # The weights ``tune --save`` kept in this store sit between the user's file and the
    # store's own file; read them now that the store is open.
    tuned = memory.store.get_setting(TUNED_KEY)
    if tuned:
        chosen = settings(ctx, tuned=tuned)
        memory.config = chosen.search_config()
    ctx.obj["settings"] = chosen
    return memory


def settings(ctx: click.Context, *, tuned: str | None = None) -> Settings:
    """The effective settings of the command's store: defaults, the user's config file, the
    store's tuned weights (``tuned``), the store's config file, the environment."""
    return load_settings(os.environ, store=ctx.obj["db"], tuned=tuned)


def parse_weights(text: str, where: str) -> dict[str, float]:
    """Leg weights from ``keyword=0.5,vector=0.4``; a bad one is a usage error naming
    ``where``."""
    try:
        return dict(load_settings({}).over({"search.weights": text}, where)["search.weights"])
    except ConfigError as exc:
        message = str(exc).removeprefix(f"{where}: search.weights: ")
        raise click.BadParameter(message, param_hint=f"'{where}'") from None


def reranker_from(chosen: Settings) -> Reranker | None:
    """The configured reranker (``rerank.model``), made now, or None. Its API key, if the
    server needs one, is ``STRATAMEM_RERANK_API_KEY``."""
    picked = chosen.reranker_options()
    if picked is None:
        return None
    name, options = picked
    if name == "http":
        if "base_url" not in options:
            said = chosen.origin("rerank.model")
            raise ConfigError(f"rerank.model is http but rerank.base_url is not set ({said})")
        if os.environ.get("STRATAMEM_RERANK_API_KEY"):
            options["api_key"] = os.environ["STRATAMEM_RERANK_API_KEY"]
    elif name == "cross-encoder" and "model" not in options:
        raise ConfigError("rerank.model is cross-encoder but rerank.name (the model) is not set")
    return RERANKERS.create(name, **options)


def interactive() -> bool:
    """Whether a person is at the keyboard to be asked for a passphrase."""
    return sys.stdin.isatty()


def ask_passphrase(what: str, *, confirm: bool = False, unasked: str = "") -> str:
    """A passphrase typed without echo; with ``confirm`` typed twice, and a mismatch is
    refused (:class:`LockError`). Off a terminal, :class:`LockError` with ``unasked``, which
    says how else to give one."""
    if not interactive():
        raise LockError(unasked or f"no passphrase for {what}")
    given: str = click.prompt(f"passphrase for {what}", hide_input=True, err=True)
    check_passphrase(given, "as typed")
    if confirm:
        again: str = click.prompt("the same passphrase again", hide_input=True, err=True)
        if again != given:
            raise LockError("the two passphrases differ; nothing was done")
    return given


def db_path_from_environment() -> str | Path:
    """The store when ``--db`` is not given: ``$STRATAMEM_DB`` (a path, or a URL such as
    ``sqlite:///agent.db``, kept as it is), else ``stratamem.db`` in the per-user data
    directory (``$XDG_DATA_HOME``, default ``~/.local/share``)."""
    env = os.environ.get("STRATAMEM_DB")
    if env:
        return env if "://" in env else Path(env).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "stratamem" / "stratamem.db"


def cache_dir_from_environment() -> Path:
    """Where the evaluation commands keep their stores: ``stratamem`` in ``$XDG_CACHE_HOME``
    (default ``~/.cache``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "stratamem"


def summarizer_from_environment() -> Summarizer | None:
    """The summarizer the config files and environment choose (see :func:`summarizer_from`)."""
    return summarizer_from(load_settings(os.environ))


def summarizer_from(chosen: Settings) -> Summarizer | None:
    """``summarizer.name`` (``extractive``, the default, or ``llm``); the LLM one is set up
    by ``summarizer.base_url`` and ``summarizer.model`` (``STRATAMEM_LLM_BASE_URL``,
    ``STRATAMEM_LLM_MODEL``) and, from the environment only, ``STRATAMEM_LLM_API_KEY``."""
    name = chosen["summarizer.name"]
    if name == "extractive":
        return None
    return get_summarizer(
        name,
        base_url=chosen["summarizer.base_url"],
        model=chosen["summarizer.model"],
        api_key=os.environ.get("STRATAMEM_LLM_API_KEY") or None,
    )


def read_time(value: str, option: str | None = None) -> datetime:
    """The time the option ``option`` gives (see :func:`~stratamem.timeparse.parse_when`).
    As ``docs/cli.md`` says: a value that cannot be read as a time is a usage error naming
    the option (exit code 2); one that reads but falls outside years 1–9999 (``99999999w``)
    is a ``ValueError`` (exit code 1)."""
    try:
        return parse_when(value)
    except ValueError as exc:
        if is_time_text(value):
            raise
        raise click.BadParameter(str(exc), param_hint=option) from None


class TimeText(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2 on
    """A time option read as it is parsed (:func:`read_time`), so that an error names the
    spelling given, an older name included: unreadable text is a usage error (exit code 2),
    a time outside years 1–9999 an error (exit code 1)."""

    name = "time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, datetime):
            return value
        where = param.opts[0] if param is not None and param.opts else None
        try:
            return read_time(value, where)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None


TIME = TimeText()


def when(value: str | None, option: str | None = None) -> datetime | None:
    """:func:`read_time`, None where the option is not given."""
    return None if value is None else read_time(value, option)


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))
