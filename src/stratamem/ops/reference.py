"""The operations' reference page (``docs/operations.md``), written from the table so that it
cannot drift: ``python -m stratamem.ops.reference > docs/operations.md``; a test compares."""

from __future__ import annotations

import json

from stratamem.ops.spec import Operation, Param
from stratamem.ops.table import OPERATIONS

WHO = {
    "read": "anyone who may read (a principal sees only its sources)",
    "write": "the owner, or a principal with write permission (where writes are on)",
    "owner": "the owner only",
}

HEADER = """\
# Operations

Every operation is declared once (`src/stratamem/ops/`) and every door is built from that
declaration: the MCP tool and the HTTP route of the same name, the CLI command and the Python
method listed with it. A parameter has one name on every door (the CLI writes it in kebab
case, `time_window_days` → `--time-window-days`, a list's option repeated: `--sources a
--sources b`); the same check answers a bad argument with the same one-line error
on every door; HTTP and MCP answer with the same JSON. A caller is listed only the tools it
may call.

Times take ISO 8601 (`2024-03-12`, `2024-03-12T09:00Z`) or a span back from now (`24h`,
`7d`, `2w`) on every door, a `datetime` in Python too.

This page is written from the table (`python -m stratamem.ops.reference`); a test keeps it
in step.
"""


def _type(param: Param) -> str:
    text = {
        "str": "text",
        "int": "integer",
        "float": "number",
        "bool": "boolean",
        "time": "time",
        "strs": "list of text",
        "object": "object",
        "objects": "list of objects",
    }[param.type]
    if param.choices:
        text += " (" + " \\| ".join(param.choices) + ")"
    bounds = []
    if param.ge is not None:
        bounds.append(f"≥ {param.ge:g}")
    if param.gt is not None:
        bounds.append(f"> {param.gt:g}")
    if param.le is not None:
        bounds.append(f"≤ {param.le:g}")
    if param.max_items is not None:
        bounds.append(f"≤ {param.max_items} items")
    return text + (", " + ", ".join(bounds) if bounds else "")


def _default(param: Param) -> str:
    if param.required:
        return "**required**"
    if param.default is None or param.default == ():
        return ""
    return f"`{json.dumps(param.default)}`"


def section(op: Operation) -> str:
    method, path = op.shown_route
    lines = [f"## `{op.name}`", "", op.description, ""]
    lines.append(f"- Who: {WHO[op.access]}")
    lines.append(f"- HTTP: `{method} {path}` · MCP tool: `{op.name}`")
    if op.cli:
        lines.append(f"- CLI: `stratamem {op.cli}`")
    else:
        lines.append(f"- CLI: `stratamem {op.name.replace('_', '-')}`")
    if op.python:
        lines.append(f"- Python: `mem.{op.python}(…)`")
    if op.example:
        lines.append(f"- Example: `{json.dumps(dict(op.example), ensure_ascii=False)}`")
    lines.append("")
    if op.params:
        lines += ["| parameter | type | default | |", "| --- | --- | --- | --- |"]
        for param in op.params:
            help_text = param.help.replace("|", "\\|")
            lines.append(f"| `{param.name}` | {_type(param)} | {_default(param)} | {help_text} |")
        lines.append("")
    return "\n".join(lines)


def page() -> str:
    groups: dict[str, list[Operation]] = {}
    for op in OPERATIONS.values():
        groups.setdefault(op.group, []).append(op)
    index = ["| operation | group | who |", "| --- | --- | --- |"]
    for op in OPERATIONS.values():
        index.append(f"| [`{op.name}`](#{op.name}) | {op.group} | {op.access} |")
    body = [section(op) for ops in groups.values() for op in ops]
    return "\n".join([HEADER, *index, "", *body]).rstrip() + "\n"


if __name__ == "__main__":
    print(page(), end="")
