"""``AsyncMemory``: the same facets and methods as coroutines, every call on the memory's one
worker thread, answering as the sync memory does."""

from __future__ import annotations

import asyncio
import inspect
import threading
from pathlib import Path
from typing import Any

import pytest

import stratamem
from stratamem.api.aio import AsyncMemory
from stratamem.api.memory import FACETS
from stratamem.errors import AccessDenied, NotFoundError, StratamemError
from stratamem.testing import HashingEmbedder

ENG = "slack:#eng"
CAROL = "person:carol diaz"


def ids(found: Any) -> Any:
    if hasattr(found, "hits"):
        return [h.node_id for h in found.hits], found.total
    return [getattr(x, "id", getattr(x, "node_id", x)) for x in found]


def test_concurrent_calls_answer_as_the_sync_memory(
    shared: stratamem.Memory, module_location: str
) -> None:
    tree = shared.trees.get(ENG)
    expected = [
        ids(shared.search("deploy", limit=5)),
        ids(shared.query_source(ENG, limit=3)),
        ids(shared.cover_window(since="2024-03-01", until="2024-04-01")),
        ids(shared.sources.list()),
        ids(shared.trees.tops(tree.id)),
        ids(shared.facts.recall()),
        shared.stats()["chunks"],
    ]

    async def scenario() -> list[Any]:
        async with stratamem.open_async(module_location, embedder=HashingEmbedder()) as mem:
            found = await asyncio.gather(
                mem.search("deploy", limit=5),
                mem.query_source(ENG, limit=3),
                mem.cover_window(since="2024-03-01", until="2024-04-01"),
                mem.sources.list(),
                mem.trees.tops(tree.id),
                mem.facts.recall(),
                mem.stats(),
            )
        return [*map(ids, found[:-1]), found[-1]["chunks"]]

    assert asyncio.run(scenario()) == expected


def test_every_call_runs_on_one_worker_thread(tmp_path: Path) -> None:
    seen: list[int] = []

    async def scenario() -> None:
        mem = await stratamem.open_async(tmp_path / "m.db", embedder=None)
        try:
            # A callback runs where the call runs: on the worker, never on the loop's thread.
            await asyncio.gather(
                *(
                    mem.ingest(
                        Path(__file__).resolve().parents[1] / "fixtures" / "slack",
                        parallel=False,
                        progress=lambda _: seen.append(threading.get_ident()),
                    )
                    for _ in range(3)
                )
            )
            written = await asyncio.gather(*(mem.items.add(f"note {i}") for i in range(5)))
            assert len({w.id for w in written}) == 5
            assert len(await mem.sources.list()) == 3  # two channels and the items' source
        finally:
            await mem.aclose()
        assert threading.get_ident() not in seen

    asyncio.run(scenario())
    assert len(set(seen)) == 1


def test_it_has_the_facets_and_methods_of_memory(
    shared: stratamem.Memory, module_location: str
) -> None:
    async def scenario() -> None:
        async with stratamem.open_async(module_location, embedder=None) as mem:
            for name, kind in FACETS.items():
                facet = getattr(mem, name)
                for method, function in vars(kind).items():
                    if inspect.isfunction(function) and not method.startswith("_"):
                        assert inspect.iscoroutinefunction(getattr(facet, method))
                        assert getattr(facet, method).__doc__ == function.__doc__
            assert inspect.iscoroutinefunction(mem.search)
            assert inspect.iscoroutinefunction(mem.query_global)
            assert await mem.principal is None
            assert (await mem.path) == shared.path
            assert "items" in dir(mem)
            with pytest.raises(AttributeError):
                mem.store  # noqa: B018  # of no use off the worker thread
            with pytest.raises(AttributeError):
                mem.no_such_method  # noqa: B018
            with pytest.raises(NotFoundError, match="did you mean 'slack:#eng'"):
                await mem.search("deploy", sources=["slack:#egn"])

    asyncio.run(scenario())


def test_as_principal_is_another_async_memory(small: stratamem.Memory, store_location: str) -> None:
    small.principals.add("reader", "team")

    async def scenario() -> None:
        async with stratamem.open_async(store_location, embedder=None) as mem:
            reader = await mem.as_principal("reader")
            assert isinstance(reader, AsyncMemory)
            try:
                assert (await reader.principal).name == "reader"
                with pytest.raises(AccessDenied):
                    await reader.items.add("x")
            finally:
                await reader.aclose()
            with pytest.raises(StratamemError, match="this memory is closed"):
                await reader.stats()

    asyncio.run(scenario())


def test_an_error_opening_is_raised_where_it_is_awaited(tmp_path: Path) -> None:
    async def scenario() -> None:
        with pytest.raises(AccessDenied, match="no principal named 'nobody'"):
            await stratamem.open_async(tmp_path / "m.db", embedder=None, principal="nobody")
        unopened = stratamem.open_async(tmp_path / "m.db", embedder=None, principal="nobody")
        with pytest.raises(AccessDenied):
            await unopened.stats()
        await unopened.aclose()

    asyncio.run(scenario())
