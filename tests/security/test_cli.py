"""The read commands under ``stratamem --as NAME``: the same output as for the store built
from only what the principal may see (the database path aside), and no canary in it."""

from __future__ import annotations

import json
from typing import Any

import pytest
import security_kit as kit
from click.testing import CliRunner

from stratamem.cli import main

HAS_AS = any("--as" in param.opts for param in main.params)
pytestmark = pytest.mark.skipif(not HAS_AS, reason="the global --as option is not there yet")

# Nothing from the environment chooses who reads or unlocks; tables are wide enough that no
# cell is cut short (the store's path, masked in the comparison, is shown whole).
CLEAN_ENV: dict[str, str | None] = {
    "STRATAMEM_AS": None,
    "STRATAMEM_PASSPHRASE": None,
    "COLUMNS": "400",
}
HIDDEN_REFS = ("hr-secret", "orphan")


def run(db: str, principal: str, args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(
        main, ["--db", db, "--as", principal, *args], env=CLEAN_ENV, catch_exceptions=False
    )
    # Errors go to stderr, which CliRunner mixes into the output it returns.
    return result.exit_code, kit.masked(result.output, db)


def _ids(*refs: kit.Refs) -> tuple[str, ...]:
    return tuple(
        name
        for ref in refs
        for name in (ref.scope, ref.source_id, ref.tree_id, ref.top, ref.summary, ref.leaf)
    )


def _commands(refs: dict[str, kit.Refs]) -> list[tuple[str, list[str], tuple[str, ...]]]:
    """(name, arguments, what they name, which an error or a heading may echo)."""
    out: list[tuple[str, list[str], tuple[str, ...]]] = []
    for query in ("queue", "zanzibarquux queue @alice", "@zorbhandle"):
        out += [
            (f"search-json:{query}", ["search", query, "--json"], ()),
            (f"search-explain:{query}", ["search", query, "--explain"], ()),
            (f"search-table:{query}", ["search", query, "--limit", "3"], ()),
            (f"search-keyword:{query}", ["search", query, "--mode", "keyword", "--json"], ()),
            (f"search-graph:{query}", ["search", query, "--mode", "graph", "--explain"], ()),
            (f"search-budget:{query}", ["search", query, "--budget", "120"], ()),
        ]
    for name in HIDDEN_REFS:
        ref = refs[name]
        named = _ids(ref)
        out += [
            (f"search-source:{name}", ["search", "queue", "--source", ref.scope, "--json"], named),
            (f"show-leaf:{name}", ["show", ref.leaf], named),
            (f"show-summary-json:{name}", ["show", ref.top, "--json"], named),
            (
                f"show-mixed:{name}",
                ["show", refs["eng"].leaf, ref.leaf, ref.summary],
                named + _ids(refs["eng"]),
            ),
            (f"tree:{name}", ["tree", ref.scope], named),
            (f"tree-json:{name}", ["tree", ref.source_id, "--json"], named),
            (f"drill:{name}", ["drill", ref.top, "--depth", "3", "--json"], named),
            (f"summaries:{name}", ["summaries", "--source", ref.scope, "--json"], named),
        ]
    out += [
        ("show-nowhere", ["show", kit.NOWHERE.leaf], ()),
        ("show-visible", ["show", refs["eng"].leaf, "--json"], _ids(refs["eng"])),
        ("sources", ["sources"], ()),
        ("sources-json", ["sources", "--json"], ()),
        ("stats", ["stats"], ()),
        ("stats-json", ["stats", "--json"], ()),
        ("tree-eng", ["tree", "eng", "--depth", "3"], _ids(refs["eng"])),
        ("summaries", ["summaries", "--json", "--limit", "50"], ()),
        ("summaries-window", ["summaries", "--since", "2024-01-01", "--until", "2024-12-31"], ()),
        ("brief", ["brief", "--since", "2024-01-01", "--until", "2024-12-31", "--json"], ()),
    ]
    for needle in ("zorb", "alice", "canary", "vex", "xylo", "queue"):
        out += [
            (f"entities:{needle}", ["entities", needle], ()),
            (f"entities-json:{needle}", ["entities", needle, "--json", "--limit", "50"], ()),
        ]
    for entity in ("handle:alice", "handle:zorbhandle", "tag:zorbtag", "handle:orphanhandle"):
        out.append((f"topic:{entity}", ["topic", entity, "--json", "--query", "queue"], (entity,)))
    return out


REFS_NEEDED = ("hr-secret", "orphan", "eng")


def _shown(output: str) -> Any:
    """JSON output as data (volatile fields left out), anything else as text."""
    try:
        return kit.plain(json.loads(output))
    except json.JSONDecodeError:
        return output


# The command list depends only on ids that are the same in every run; it is built at
# collection from a throwaway name list and filled in by the fixture.
_PLACEHOLDER = dict.fromkeys(REFS_NEEDED, kit.NOWHERE)
COMMANDS = [name for name, _, _ in _commands(_PLACEHOLDER)]


# One scope, any scope narrowed by a glob, any scope, and none that any source has: each
# command runs two processes' worth of work, so not every principal of the route suite.
CLI_PRINCIPALS = ["ann", "dan", "cat", "fay"]


@pytest.mark.parametrize("principal", CLI_PRINCIPALS)
@pytest.mark.parametrize("command", COMMANDS)
def test_command_as_principal_equals_the_reduced_store(  # type: ignore[no-untyped-def]
    world, refs, command: str, principal: str
) -> None:
    _, args, named = next(c for c in _commands(refs) if c[0] == command)
    got = run(world.full, principal, args)
    want = run(world.reduced(principal), principal, args)
    hidden = world.hidden_from(principal)
    found = kit.leaked(got[1], hidden.canaries, named=named)
    tally = kit.counts("cli commands")
    tally.routes.add(args[0])
    tally.principals.add(principal)
    tally.compared += 1
    tally.checks += len(hidden.canaries)
    assert not found, f"{command} as {principal} shows hidden {found}:\n{got[1]}"
    assert got[0] == want[0], (got, want)
    kit.assert_same(_shown(got[1]), _shown(want[1]))


@pytest.mark.parametrize("principal", [p for p in CLI_PRINCIPALS if p != "cat"])
def test_show_of_a_hidden_id_reads_as_one_that_does_not_exist(  # type: ignore[no-untyped-def]
    world, refs, principal: str
) -> None:
    ref = refs["hr-secret"]
    for hidden, nowhere in ((ref.leaf, kit.NOWHERE.leaf), (ref.top, kit.NOWHERE.top)):
        code, text = run(world.full, principal, ["show", hidden])
        want_code, want_text = run(world.full, principal, ["show", nowhere])
        assert code == want_code != 0
        assert text.replace(hidden, "<id>") == want_text.replace(nowhere, "<id>")


def test_the_placeholder_command_list_matches_the_real_one(refs) -> None:  # type: ignore[no-untyped-def]
    assert [name for name, _, _ in _commands(refs)] == COMMANDS


def test_writes_are_refused_under_as(world) -> None:  # type: ignore[no-untyped-def]
    for args in (["add", "a note", "--source", "eng"], ["forget", "eng", "--yes"]):
        code, text = run(world.full, "cat", args)
        assert code != 0, text
        assert "zanzibarquux" not in text.lower()
