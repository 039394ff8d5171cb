"""``AsyncMemory``: the Python API as coroutines, for an agent that runs on asyncio.

    async with stratamem.open_async("agent.db") as mem:
        hits = await mem.search("why did we drop Redis?", budget=2000)
        await mem.items.add("Carol prefers tea")

It has every method and facet of :class:`~stratamem.api.memory.Memory`, made from them as
they are asked for: ``await mem.search(…)``, ``await mem.facts.recall(…)``, with the same
parameters and results. Every call runs on the memory's one worker thread (a SQLite connection
belongs to the thread that opened it, so not on asyncio's shared pool), one call after
another in the order they were made; concurrent calls wait their turn there, and the event
loop never waits on the store. What is not a method (``path``, ``principal``, ``config``,
``mem.trees.tree_builder``…) is read on that thread too, and awaited: ``await mem.principal``.
Callbacks such as ``progress`` are called on the worker thread.

Typing: the methods are found by name at run time, so a type checker sees each as ``Any``
(its result included); the sync :class:`Memory` documents their signatures.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from stratamem.api.memory import DEFAULT_EMBEDDER, FACETS, Memory
from stratamem.config import SearchConfig, TreeConfig
from stratamem.embed.base import Embedder
from stratamem.errors import StratamemError
from stratamem.retrieval.rerank import Reranker
from stratamem.tree.summarizer import Summarizer

__all__ = ["AsyncMemory", "open_async"]

T = TypeVar("T")
_MISSING = object()
# What a memory holds as plain attributes, read as its properties are. Not ``store``: a SQLite
# connection is of no use outside the worker thread.
_SETTINGS = frozenset({"config", "reranker", "summarizer", "tree_config"})


class _Worker:
    """One thread that runs every call on one memory, in the order they were made."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stratamem-async")

    def submit(self, call: Callable[[], T]) -> Future[T]:
        try:
            return self._pool.submit(call)
        except RuntimeError:  # shut down
            raise StratamemError("this memory is closed") from None

    async def run(self, call: Callable[[], T]) -> T:
        return await asyncio.wrap_future(self.submit(call))

    def stop(self) -> None:
        self._pool.shutdown(wait=False)


class _Proxy:
    """The coroutine face of one object on the worker thread (the memory, or one of its
    facets): its methods as coroutines, its facets as proxies, anything else as an awaitable
    read. ``target`` is called on the worker thread to reach the object."""

    def __init__(self, worker: _Worker, kind: type, target: Callable[[], Any]) -> None:
        self._worker = worker
        self._kind = kind
        self._target = target

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        found = inspect.getattr_static(self._kind, name, _MISSING)
        if self._kind is Memory and name in FACETS and found is _MISSING:
            owner = self._target
            return _Proxy(self._worker, FACETS[name], lambda: getattr(owner(), name))
        if inspect.isfunction(found):
            return self._method(name, found)
        if isinstance(found, property) or (self._kind is Memory and name in _SETTINGS):
            return self._worker.run(lambda: getattr(self._target(), name))
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def _method(self, name: str, function: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
        target, worker = self._target, self._worker

        @functools.wraps(function)
        async def call(*args: Any, **kwargs: Any) -> Any:
            return await worker.run(lambda: getattr(target(), name)(*args, **kwargs))

        return call

    def __dir__(self) -> list[str]:
        names = {n for n in dir(self._kind) if not n.startswith("_")}
        if self._kind is Memory:
            names |= set(FACETS)
        return sorted(names | set(super().__dir__()))

    def __repr__(self) -> str:
        return f"<async {self._kind.__name__}>"


class AsyncMemory(_Proxy):
    """A store opened for ingest and retrieval, every call a coroutine run on the memory's
    one worker thread (see :mod:`stratamem.api.aio`). Opened by ``await`` or ``async with``
    (:func:`open_async`); closed by :meth:`aclose` or the end of the ``async with``. The
    arguments are those of :func:`stratamem.open`."""

    def __init__(
        self,
        path: str | Path,
        *,
        embedder: str | Embedder | None = DEFAULT_EMBEDDER,
        reranker: Reranker | None = None,
        config: SearchConfig | None = None,
        summarizer: Summarizer | None = None,
        tree_config: TreeConfig | None = None,
        principal: str | None = None,
        unlock: Mapping[str, str] | Sequence[str] | None = None,
    ) -> None:
        opener = functools.partial(
            Memory,
            path,
            embedder=embedder,
            reranker=reranker,
            config=config,
            summarizer=summarizer,
            tree_config=tree_config,
            principal=principal,
            unlock=unlock,
        )
        self._start(opener)

    def _start(self, opener: Callable[[], Memory]) -> None:
        worker = _Worker()
        # Opened on the worker, first: every call made meanwhile waits behind it there.
        self._opening = worker.submit(opener)
        self._closed = False
        super().__init__(worker, Memory, self._opening.result)

    @classmethod
    def _opened_by(cls, opener: Callable[[], Memory]) -> AsyncMemory:
        made = cls.__new__(cls)
        made._start(opener)
        return made

    async def _open(self) -> AsyncMemory:
        try:
            await asyncio.wrap_future(self._opening)
        except BaseException:
            self._worker.stop()
            raise
        return self

    def __await__(self) -> Generator[Any, None, AsyncMemory]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncMemory:
        return await self._open()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Finish the calls already made, close the store, and stop the worker thread."""
        if self._closed:
            return
        self._closed = True
        try:
            if not self._opening.cancelled() and await self._opened_well():
                await self._worker.run(lambda: self._opening.result().close())
        finally:
            self._worker.stop()

    async def _opened_well(self) -> bool:
        try:
            await asyncio.wrap_future(self._opening)
        except Exception:
            return False
        return True

    async def close(self) -> None:
        """:meth:`aclose`."""
        await self.aclose()

    async def as_principal(self, name: str) -> AsyncMemory:
        """This store opened again for principal ``name``, with a worker thread of its own
        (see :meth:`Memory.as_principal`)."""
        memory = await asyncio.wrap_future(self._opening)
        return await AsyncMemory._opened_by(functools.partial(memory.as_principal, name))


def open_async(
    path: str | Path,
    *,
    embedder: str | Embedder | None = DEFAULT_EMBEDDER,
    reranker: Reranker | None = None,
    config: SearchConfig | None = None,
    summarizer: Summarizer | None = None,
    tree_config: TreeConfig | None = None,
    principal: str | None = None,
    unlock: Mapping[str, str] | Sequence[str] | None = None,
) -> AsyncMemory:
    """:func:`stratamem.open` for asyncio: ``mem = await open_async(path)`` or
    ``async with open_async(path) as mem``. The store is opened on the memory's worker
    thread; an error opening it is raised where it is awaited."""
    return AsyncMemory(
        path,
        embedder=embedder,
        reranker=reranker,
        config=config,
        summarizer=summarizer,
        tree_config=tree_config,
        principal=principal,
        unlock=unlock,
    )
