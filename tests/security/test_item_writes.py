"""Items that principals write over the server's doors, in a copy of the canary store served
with writes on (see ``serve_kit``; every principal there may write).

Each principal adds a memory over HTTP and corrects it, and adds another over MCP and removes
it. Checked for every principal, with the read rule written out again (``security_kit.sees``)
as the oracle:

- its items go to ``<its name>/memory``, made with its scopes; where its source globs would
  leave that source out of its own reads the add is refused, on both doors alike, and nothing
  is left behind;
- an item is read (searched, fetched, shown) by exactly the principals that source's scopes
  let read it, over HTTP and MCP, and no answer of another shows a word or an id of it;
- editing or removing an item of a source hidden from it (another's memory, a named source of
  the canary store) answers exactly as an id that does not exist, on both doors, and leaves the
  item as it was;
- a principal that may read none of the memories written reads after the writes exactly what
  it read before them: the hidden items shape nothing (ids, order, scores, totals, counts).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
import security_kit as kit
from mcp.client.session import ClientSession
from security_kit import NOWHERE, Refs
from serve_kit import Served, serve_copy
from serving import call_http, call_mcp, connected, data, tool_error

from stratamem.store.sources import source_id_for

PRINCIPALS = [p.name for p in kit.PRINCIPALS]
HIDEABLE = ("hr-secret", "legal-chat", "orphan")  # named sources of the world with items
WINDOW = {"since": "2000-01-01", "until": "2100-01-01"}


def words(name: str) -> tuple[str, str, str]:
    """The words only ``name``'s items hold: its first text, its correction, the one it removes."""
    return f"zqitem{name}first", f"zqitem{name}second", f"zqitem{name}gone"


ALL_WORDS = " ".join(w for name in PRINCIPALS for w in words(name))
# What every principal reads, before the writes and after: the scan for what it must not see,
# and for one that sees none of the writes, the same answers both times.
READS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("sources", {}),
    ("stats", {}),
    ("search", {"query": "queue"}),
    ("search", {"query": "plan note queue", "limit": 100}),
    ("search", {"query": ALL_WORDS, "mode": "keyword", "limit": 100}),
    ("search", {"query": ALL_WORDS, "mode": "vector", "limit": 20}),
    ("search", {"query": "plan note", "budget": 2000}),
    ("cover_window", {**WINDOW, "limit": 1000}),
    ("brief", {**WINDOW, "limit": 1000}),
    ("query_source", {"limit": 100}),
    ("query_global", {**WINDOW, "limit": 100}),
    ("search_entities", {"query": "zqitem", "limit": 100}),
)


def spec(name: str) -> kit.PrincipalSpec:
    return next(p for p in kit.PRINCIPALS if p.name == name)


def own_access(name: str) -> tuple[str, ...]:
    """The scopes a principal's own new source gets: its own but ``*``; a record source's
    default where that leaves none."""
    return tuple(s for s in spec(name).scopes if s != "*") or ("private",)


def sees_memory_of(reader: str, writer: str) -> bool:
    return kit.sees(spec(reader), own_access(writer), f"{writer}/memory")


@dataclass
class Written:
    """What one principal's writes did: refused (with the message), or its kept item (added,
    then corrected) and the ids of the one it removed."""

    name: str
    refused: str | None = None
    kept: str = ""  # the item's id
    kept_node: str = ""  # the chunk the correction made
    ids: tuple[str, ...] = ()  # every item and chunk id its writes made

    @property
    def scope(self) -> str:
        return f"{self.name}/memory"


def reads_of(served: Served, name: str) -> list[Any]:
    """The answers of :data:`READS` for ``name``, over HTTP, as plain data."""
    out = []
    for route, args in READS:
        response = call_http(served.clients[name], route, args)
        assert response.status_code == 200, response.text
        out.append(kit.plain(response.json()))
    return out


@pytest.fixture(scope="module")
def items_served(  # type: ignore[no-untyped-def]
    world, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    with serve_copy(world, tmp_path_factory.mktemp("items-served")) as found:
        yield found


@pytest.fixture(scope="module")
def before(items_served: Served) -> dict[str, list[Any]]:
    """What each principal reads before any item is written."""
    return {name: reads_of(items_served, name) for name in PRINCIPALS}


async def add_and_remove(served: Served, name: str, refused: bool) -> Any:
    """Over MCP, as ``name``: an item added, then removed; or (``refused``) the add's error."""
    async with connected(served.url, served.tokens[name]) as session:
        gone = words(name)[2]
        result = await call_mcp(session, "add", {"text": f"{name} drops the {gone} note"})
        if refused:
            return tool_error(result)
        added = data(result)
        removed = data(await call_mcp(session, "rm", {"id": added["id"]}))
        assert (removed["id"], removed["action"]) == (added["id"], "deleted")
        return added


@pytest.fixture(scope="module")
def written(items_served: Served, before: dict[str, list[Any]]) -> dict[str, Written]:
    """Every principal's writes: over HTTP an item added and corrected, over MCP one added
    and removed."""
    out: dict[str, Written] = {}
    for name in PRINCIPALS:
        first, second, _ = words(name)
        client = items_served.clients[name]
        response = call_http(client, "add", {"text": f"{name} keeps the {first} plan note"})

        if response.status_code == 403:
            message = response.json()["error"]["message"]
            assert anyio.run(add_and_remove, items_served, name, True) == message
            out[name] = Written(name, refused=message)
            continue
        assert response.status_code == 200, response.text
        added = response.json()
        assert (added["scope"], added["action"]) == (f"{name}/memory", "added")
        edited = call_http(
            client, "edit", {"id": added["id"], "text": f"{name} keeps the {second} plan note"}
        )
        assert edited.status_code == 200, edited.text
        changed = edited.json()
        assert (changed["id"], changed["action"]) == (added["id"], "updated")
        removed = anyio.run(add_and_remove, items_served, name, False)
        out[name] = Written(
            name,
            kept=added["id"],
            kept_node=changed["chunks_added"][0],
            ids=(
                added["id"],
                *added["chunks_added"],
                *changed["chunks_added"],
                removed["id"],
                *removed["chunks_added"],
            ),
        )
    return out


def canaries(written: dict[str, Written], reader: str) -> set[str]:
    """What of the writes ``reader`` must not be shown: every word and id of a memory hidden
    from it, and the words of every item version that no longer is."""
    out: set[str] = set()
    for w in written.values():
        first, second, gone = words(w.name)
        out |= {first.lower(), gone.lower()}
        if w.refused is None and not sees_memory_of(reader, w.name):
            out |= {second.lower(), source_id_for(w.scope), w.scope, *w.ids}
    return out


# -- where a principal's items go ------------------------------------------------------------


def test_a_principals_items_go_to_its_own_source_made_with_its_scopes(
    items_served: Served, written: dict[str, Written]
) -> None:
    with items_served.service.reading(None) as owner:
        sources = {s.scope: s for s in owner.sources.list()}
    for name, w in written.items():
        assert (w.refused is None) == writes_own(name), (name, w.refused)
        if w.refused is not None:
            assert w.refused == (
                f"principal {name!r} may not write to {w.scope!r}: "
                "write to a source it reads, or to its own"
            )
            assert w.scope not in sources  # nothing left behind
            continue
        assert sources[w.scope].access == own_access(name)
        assert sources[w.scope].chunk_count == 1  # the corrected item; the removed one gone
    assert {w.name for w in written.values() if w.refused} == {"dan", "eve", "gil"}


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_an_item_is_read_by_exactly_the_principals_its_scopes_let(  # type: ignore[no-untyped-def]
    world, refs: dict[str, Refs], items_served: Served, written: dict[str, Written], principal: str
) -> None:
    client = items_served.clients[principal]
    wrong: list[str] = []
    hidden = canaries(written, principal) | world.hidden_from(principal).canaries
    for w in (w for w in written.values() if w.refused is None):
        second = words(w.name)[1]
        sees = sees_memory_of(principal, w.name)
        found = call_http(client, "search", {"query": second, "mode": "keyword", "limit": 100})
        shown = [h["node_id"] for h in found.json()["hits"]]
        if shown != ([w.kept_node] if sees else []):
            wrong.append(f"search {second}: {shown} (sees: {sees})")
        fetched = call_http(client, "fetch_leaves", {"ids": [w.kept_node]}).json()
        if [n["node_id"] for n in fetched["nodes"]] != ([w.kept_node] if sees else []):
            wrong.append(f"fetch_leaves {w.kept_node}: {fetched}")
        got = call_http(client, "show", {"node_id": w.kept_node})
        if got.status_code != (200 if sees else 404):
            wrong.append(f"show {w.kept_node}: {got.status_code}")
    for (route, args), answer in zip(READS, reads_of(items_served, principal), strict=True):
        leaked = kit.leaked(answer, hidden)
        if leaked:
            wrong.append(f"{route} {args} shows hidden {leaked}")

    async def over_mcp(session: ClientSession) -> None:
        for w in (w for w in written.values() if w.refused is None):
            second = words(w.name)[1]
            args = {"query": second, "mode": "keyword", "limit": 100}
            found = data(await call_mcp(session, "search", args))
            seen = [h["node_id"] for h in found["hits"]]
            if seen != ([w.kept_node] if sees_memory_of(principal, w.name) else []):
                wrong.append(f"mcp search {second}: {seen}")
        for route, args in READS:
            answer = data(await call_mcp(session, route, args))
            leaked = kit.leaked(answer, hidden)
            if leaked:
                wrong.append(f"mcp {route} {args} shows hidden {leaked}")

    async def scenario() -> None:
        async with connected(items_served.url, items_served.tokens[principal]) as session:
            await over_mcp(session)

    anyio.run(scenario)
    tally = kit.counts("item writes")
    tally.routes.update(route for route, _ in READS)
    tally.principals.add(principal)
    tally.compared += len(written)
    tally.checks += len(hidden) * len(READS) * 2
    assert not wrong, f"as {principal}:\n" + "\n".join(wrong[:10])


# -- an item hidden from a principal answers as one that does not exist ----------------------


def hidden_items(
    world: Any, refs: dict[str, Refs], written: dict[str, Written], principal: str
) -> list[tuple[str, str]]:
    """(item id, the scope of its source) of every item hidden from ``principal``: another's
    memory it may not read, the named sources of the world it may not see."""
    out = [
        (w.kept, w.scope)
        for w in written.values()
        if w.refused is None and not sees_memory_of(principal, w.name)
    ]
    gone = world.hidden_from(principal).source_ids
    out += [(refs[n].item, refs[n].scope) for n in HIDEABLE if refs[n].source_id in gone]
    assert all(item for item, _ in out)
    return out  # type: ignore[return-value]


def asks(item: str, scope: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("edit", {"id": item, "text": "overwritten by another"}),
        ("edit", {"id": item, "source": scope, "tags": ["taken"]}),
        ("rm", {"id": item}),
        ("rm", {"id": item, "source": scope}),
    ]


def masked(text: str, item: str, scope: str) -> str:
    for name in sorted((item, scope, source_id_for(scope)), key=len, reverse=True):
        text = text.replace(name, "<ref>")
    return text


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_editing_or_removing_a_hidden_item_answers_as_a_missing_one(  # type: ignore[no-untyped-def]
    world, refs: dict[str, Refs], items_served: Served, written: dict[str, Written], principal: str
) -> None:
    client = items_served.clients[principal]
    cases = hidden_items(world, refs, written, principal)
    assert cases, f"no item is hidden from {principal}"
    nowhere = (str(NOWHERE.item), NOWHERE.scope)
    wrong: list[str] = []
    for item, scope in cases:
        for (route, args), (_, other) in zip(asks(item, scope), asks(*nowhere), strict=True):
            got, want = call_http(client, route, args), call_http(client, route, other)
            seen = (got.status_code, masked(got.text, item, scope))
            if seen != (want.status_code, masked(want.text, *nowhere)) or got.status_code != 404:
                wrong.append(f"http {route} {args}: {got.text} != {want.text}")

    async def over_mcp(session: ClientSession) -> None:
        for item, scope in cases:
            for (route, args), (_, other) in zip(asks(item, scope), asks(*nowhere), strict=True):
                got = tool_error(await call_mcp(session, route, args))
                want = tool_error(await call_mcp(session, route, other))
                if masked(got, item, scope) != masked(want, *nowhere):
                    wrong.append(f"mcp {route} {args}: {got} != {want}")

    async def scenario() -> None:
        async with connected(items_served.url, items_served.tokens[principal]) as session:
            await over_mcp(session)

    anyio.run(scenario)
    tally = kit.counts("item writes hidden = missing")
    tally.routes.update(("edit", "rm"))
    tally.principals.add(principal)
    tally.compared += len(cases) * 8
    # Every item is as it was.
    with items_served.service.reading(None) as owner:
        for item, scope in cases:
            found = owner.search(item, sources=[scope], mode="keyword", limit=100)
            nodes = owner.fetch_leaves([h.node_id for h in found.hits])
            assert "overwritten by another" not in json.dumps([n.content for n in nodes])
        for w in (w for w in written.values() if w.refused is None):
            (node,) = owner.fetch_leaves([w.kept_node])
            assert words(w.name)[1] in node.content
    assert not wrong, f"as {principal}:\n" + "\n".join(wrong[:10])


# -- what a principal sees none of shapes nothing it reads -------------------------------------


def writes_own(name: str) -> bool:
    """Whether ``name`` may write to its own memory (it reads what it would make)."""
    return kit.sees(spec(name), own_access(name), f"{name}/memory")


# The principals that may read none of the memories written (their own add refused).
BLIND = [
    q for q in PRINCIPALS if not any(writes_own(p) and sees_memory_of(q, p) for p in PRINCIPALS)
]


def test_some_principals_read_none_of_the_memories() -> None:
    assert BLIND == ["dan", "eve", "gil"]


@pytest.mark.parametrize("principal", BLIND)
def test_items_hidden_from_a_principal_shape_nothing_it_reads(
    items_served: Served,
    before: dict[str, list[Any]],
    written: dict[str, Written],
    principal: str,
) -> None:
    assert not [
        w.name for w in written.values() if w.refused is None and sees_memory_of(principal, w.name)
    ]
    after = reads_of(items_served, principal)
    for (route, args), then, now in zip(READS, before[principal], after, strict=True):
        kit.assert_same(now, then, f"{route} {args}")
