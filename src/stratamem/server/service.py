"""One store served to many callers: who a bearer token names, and a memory per principal.

Each principal (and the owner) gets one :class:`~stratamem.api.Memory`, opened on first use
and kept: its in-memory indexes are built once and then only brought up to date. A memory's
store connection serves one call at a time, so calls for the same principal take turns on
its lock, while calls for different principals run side by side (SQLite's WAL lets readers
proceed while a writer commits). Every memory shares one embedder, so the model is loaded
once, and it embeds one batch at a time (:class:`OneAtATime`): the model already spreads one
batch over every core, and concurrent searches running it side by side would only fight
over them.

Tokens are checked with a slow hash (see :mod:`stratamem.access.principals`); a token that
checked out is remembered by its SHA-256 for :data:`TOKEN_TTL_S` seconds, and the stored hash
is compared on every use, so a rotated or removed token stops working at once.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from stratamem.api import DEFAULT_EMBEDDER, Memory
from stratamem.embed.base import Embedder, Role, Vectors
from stratamem.embed.registry import get_embedder
from stratamem.errors import AccessDenied, StratamemError
from stratamem.retrieval.rerank import Reranker
from stratamem.tree.summarizer import Summarizer
from stratamem.types import Principal

TOKEN_TTL_S = 300.0


class OneAtATime:
    """An embedder whose batches queue for it, one running at a time."""

    def __init__(self, embedder: Embedder) -> None:
        self.inner = embedder
        self.spec = embedder.spec
        self._lock = threading.Lock()

    def embed_batch(self, texts: Sequence[str], *, role: Role = "passage") -> Vectors:
        with self._lock:
            return self.inner.embed_batch(texts, role=role)


class Service:
    """A store opened for serving. Use as a context manager or call :meth:`close`."""

    def __init__(
        self,
        path: str | Path,
        *,
        embedder: str | Embedder | None = DEFAULT_EMBEDDER,
        reranker: Reranker | None = None,
        summarizer: Summarizer | None = None,
        unlock: Mapping[str, str] | Sequence[str] | None = None,
    ) -> None:
        if str(path) == ":memory:":
            raise ValueError("a store in memory cannot be served: give a file")
        self.path = str(path)
        self._embedder: Embedder | None
        self._embedder_error = ""
        if isinstance(embedder, str):
            try:
                self._embedder = get_embedder(embedder)
            except StratamemError as exc:
                self._embedder, self._embedder_error = None, str(exc)
        else:
            self._embedder = embedder
        if self._embedder is not None:
            self._embedder = OneAtATime(self._embedder)
        self._reranker = reranker
        self._summarizer = summarizer
        self._unlock = unlock
        self._lock = threading.Lock()
        self._memories: dict[str | None, tuple[Memory, threading.Lock]] = {}
        self._tokens: dict[str, tuple[str, str, float]] = {}  # sha256 → (name, hash, checked)
        self.owner_memory()  # open (and migrate) the store now: a bad path fails at start

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            memories, self._memories = list(self._memories.values()), {}
        for memory, lock in memories:
            with lock:
                memory.close()

    # -- who is asking -------------------------------------------------------------------------

    def authenticate(self, token: str) -> Principal:
        """The principal ``token`` belongs to; :class:`AccessDenied` (one message for every
        kind of bad token) otherwise."""
        key = hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()
        with self.reading(None) as owner:
            cached = self._tokens.get(key)
            if cached is not None and time.monotonic() - cached[2] < TOKEN_TTL_S:
                name, hashed, _ = cached
                row = owner.store.principal_row(name=name)
                if row is not None and row.token_hash == hashed:
                    return row.principal
                self._tokens.pop(key, None)
                raise AccessDenied("the token matches no principal")
            principal = owner.authenticate(token)
            row = owner.store.principal_row(name=principal.name)
            if row is not None:
                self._tokens[key] = (principal.name, row.token_hash, time.monotonic())
            return principal

    # -- memories ------------------------------------------------------------------------------

    def owner_memory(self) -> Memory:
        return self._entry(None)[0]

    @contextmanager
    def reading(self, principal: str | None) -> Iterator[Memory]:
        """The memory of ``principal`` (None: the owner), held for this call alone."""
        memory, lock = self._entry(principal)
        with lock:
            yield memory

    def _entry(self, principal: str | None) -> tuple[Memory, threading.Lock]:
        with self._lock:
            found = self._memories.get(principal)
            if found is None:
                memory = Memory(
                    self.path,
                    embedder=self._embedder,
                    reranker=self._reranker,
                    summarizer=self._summarizer,
                    principal=principal,
                    unlock=self._unlock,
                )
                found = self._memories[principal] = (memory, threading.Lock())
            return found

    @property
    def embedder_note(self) -> str:
        """Why there is no embedder (empty when there is one)."""
        return self._embedder_error
