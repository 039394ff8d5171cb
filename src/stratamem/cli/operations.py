"""CLI commands made from the operation table, for the operations that have no command of
their own: each parameter an option of the same name (``time_window_days`` →
``--time-window-days``; a list's option is repeated: ``--sources a --sources b``; JSON
where the operation takes objects, as text, ``@FILE`` or ``-`` for standard input),
the required ones positional, in order. ``--json`` prints the operation's JSON as the HTTP API
and the MCP tool answer it; otherwise a readable rendering of the same."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from typing import Any

import click
from rich.markup import escape

from stratamem.cli.common import handle_errors, open_memory, out, print_json, read_json
from stratamem.ops import MemoryContext, Operation, Param, call


def option_name(param: Param) -> str:
    """The CLI's spelling of a parameter: its name in kebab case (a list's is repeated)."""
    return "--" + param.name.replace("_", "-")


def _click_param(param: Param) -> click.Parameter:
    if param.required:
        nargs = -1 if param.type in ("strs", "objects") else 1
        return click.Argument([param.name], nargs=nargs, required=True)
    attrs: dict[str, Any] = {"help": param.help, "default": None, "show_default": False}
    flag = option_name(param)
    if param.type == "bool":
        stem = flag[2:]
        return click.Option([f"--{stem}/--no-{stem}", param.name], **attrs)
    if param.type in ("strs", "objects"):
        attrs["multiple"] = True
        attrs["default"] = ()
    if param.type == "int":
        attrs["type"] = int
    elif param.type == "float":
        attrs["type"] = float
    if param.choices:
        attrs["type"] = click.Choice(param.choices)
    return click.Option([flag, param.name], **attrs)


def _arguments(op: Operation, given: dict[str, Any]) -> dict[str, Any]:
    """The values given on the command line, as the operation takes them (JSON for objects)."""
    args: dict[str, Any] = {}
    for param in op.params:
        value = given.get(param.name)
        if value is None or (value == () and not param.required):
            continue
        if param.type in ("object", "objects"):
            items = [value] if param.type == "object" else list(value)
            parsed: list[Any] = []
            for item in items:
                found = read_json(item, option_name(param))
                if param.type == "objects" and isinstance(found, list):
                    parsed.extend(found)  # a JSON list given whole
                else:
                    parsed.append(found)
            value = parsed[0] if param.type == "object" else parsed
        elif isinstance(value, tuple):
            value = list(value)
        args[param.name] = value
    return args


def render(data: dict[str, Any]) -> None:
    """A readable rendering of any operation's answer: each listed node or fact on a few
    lines, the other fields as ``key: value``."""
    for key, value in data.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for item in value:
                _item(item)
        elif not isinstance(value, list | dict):
            out.print(f"[dim]{escape(key)}:[/] {escape(str(value))}", highlight=False)


def _item(item: dict[str, Any]) -> None:
    keys = ("type", "node_id", "id", "source", "cite", "time")
    head = [str(item[k]) for k in keys if item.get(k)]
    out.print(f"[bold]{escape(' · '.join(head))}[/]", highlight=False)
    text = item.get("text") or item.get("content") or item.get("object")
    if text:
        out.print(escape(str(text)), highlight=False)


def command_for(op: Operation) -> click.Command:
    """The CLI command of ``op``."""

    @click.pass_context
    @handle_errors
    def run(ctx: click.Context, /, as_json: bool, **given: Any) -> None:
        data = call(MemoryContext(open_memory(ctx)), op.name, _arguments(op, given))
        if as_json:
            print_json(data)
        else:
            render(data)

    params: list[click.Parameter] = [_click_param(p) for p in op.params]
    params.append(click.Option(["--json", "as_json"], is_flag=True, help="Print JSON for scripts."))
    help_text = op.description
    if op.example:
        help_text += f"\n\n\b\nExamples:\n  {example(op)}"
    callback: Callable[..., Any] = run
    return click.Command(
        op.name.replace("_", "-"), params=params, callback=callback, help=help_text
    )


def example(op: Operation) -> str:
    """``op``'s example as a command line: the required parameters positional, the others
    options, a list's items one by one, an object as JSON."""
    words = ["stratamem", op.name.replace("_", "-")]
    for param in op.params:
        value = op.example.get(param.name)
        if value is None:
            continue
        if param.type == "bool":
            flag = option_name(param)
            words.append(flag if value else f"--no-{flag[2:]}")
            continue
        items = value if param.type in ("strs", "objects") else [value]
        for item in items:
            words += [_shell(item)] if param.required else [option_name(param), _shell(item)]
    return " ".join(words)


def _shell(value: Any) -> str:
    """A value as a shell word: text quoted where the shell needs it, other values as JSON."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return shlex.quote(text)
