"""How much of a model's context the MCP server's tool list takes, per caller.

The MCP server lists to each caller only the tools it may call (see ``stratamem.ops.allowed``):
a reader, or anyone where the server runs without ``--allow-writes``, gets the reading tools;
a principal with the write permission on a write-enabled server gets the writing ones too; the
owner there gets every tool. This counts, for each, the tools and the tokens of the list as a
client receives it (each tool's name, description, input schema and annotations, as JSON),
in MiniLM word pieces (``stratamem.embed.tokens.count_tokens``), with a row per tool.

Nothing is timed: the numbers depend on the operation table alone.

    python benchmarks/tool_schemas.py [--out benchmarks/results]

Writes ``benchmarks/results/tool_schemas.md`` and ``tool_schemas.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from run_info import git_state, write_results
from stratamem.embed.tokens import count_tokens, tokenizer_available
from stratamem.ops import OPERATIONS, Operation, allowed
from stratamem.server.mcp import tool_of
from stratamem.types import Principal

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

READER = Principal(name="reader", scopes=("team",))
WRITER = Principal(name="writer", scopes=("team",), write=True)
# (caller, the principal it is (None: the owner), whether the server allows writes)
CALLERS: tuple[tuple[str, Principal | None, bool], ...] = (
    ("reader", READER, True),
    ("writer, writes off", WRITER, False),
    ("writer", WRITER, True),
    ("owner", None, True),
)


def tool_json(op: Operation) -> dict[str, Any]:
    """One tool as ``tools/list`` sends it."""
    found: dict[str, Any] = tool_of(op).model_dump(mode="json", by_alias=True, exclude_none=True)
    return found


def listed(principal: Principal | None, *, writes: bool) -> list[dict[str, Any]]:
    """The tools ``principal`` is listed where writes are (or are not) allowed."""
    return [tool_json(op) for op in allowed(principal, writes=writes)]


def tokens(value: Any) -> int:
    """Word pieces of ``value`` as compact JSON."""
    return count_tokens(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def measure() -> dict[str, Any]:
    callers = []
    for name, principal, writes in CALLERS:
        tools = listed(principal, writes=writes)
        callers.append(
            {
                "caller": name,
                "writes": writes,
                "tools": len(tools),
                "tokens": tokens(tools),
                "chars": len(json.dumps(tools, ensure_ascii=False, separators=(",", ":"))),
                "names": [t["name"] for t in tools],
            }
        )
    per_tool = [
        {
            "tool": op.name,
            "access": op.access,
            "params": len(op.params),
            "tokens": tokens(tool_json(op)),
            "schema_tokens": tokens(op.schema()),
            "description_tokens": count_tokens(op.description),
        }
        for op in OPERATIONS.values()
    ]
    return {
        "tokenizer": "minilm" if tokenizer_available() else "estimate",
        "git": git_state(),
        "callers": callers,
        "tools": per_tool,
    }


def render(report: dict[str, Any]) -> str:
    lines = [
        "# MCP tool list size per caller",
        "",
        "Tokens of the `tools/list` answer (each tool's name, description, input schema and",
        f"annotations as JSON), counted with `count_tokens` ({report['tokenizer']} word pieces).",
        "Written by `python benchmarks/tool_schemas.py`.",
        "",
        "| caller | writes on | tools | tokens | tokens per tool | characters |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for c in report["callers"]:
        per = c["tokens"] / c["tools"] if c["tools"] else 0
        lines.append(
            f"| {c['caller']} | {'yes' if c['writes'] else 'no'} | {c['tools']} | "
            f"{c['tokens']} | {per:.0f} | {c['chars']} |"
        )
    lines += [
        "",
        "Per tool (the whole tool; its input schema alone; its description alone):",
        "",
        "| tool | access | parameters | tokens | schema | description |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for t in sorted(report["tools"], key=lambda t: -t["tokens"]):
        lines.append(
            f"| {t['tool']} | {t['access']} | {t['params']} | {t['tokens']} | "
            f"{t['schema_tokens']} | {t['description_tokens']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    report = measure()
    write_results(args.out, "tool_schemas", report, render(report))


if __name__ == "__main__":
    main()
