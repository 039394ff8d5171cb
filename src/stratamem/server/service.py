"""One store served to many callers: who a bearer token names, reads side by side, one writer.

The store is opened once, per thread (:class:`~stratamem.store.sqlite.threads.PerThreadStore`
for a SQLite file, :class:`~stratamem.store.postgres.threads.PerThreadPostgresStore` for a
PostgreSQL database): reads run on a pool of ``readers`` threads, each with its own
connection, so they run at the same time and never wait for a write (WAL on SQLite, a
``REPEATABLE READ`` snapshot on PostgreSQL); the in-memory indexes (keyword,
vector, entity postings) are built once and shared by every thread and every principal,
each read gated for the principal it is made for. Writes (ingest, forget) run one at a time
on a writer thread of their own, as jobs that go on to the end whether or not their caller
waits (:class:`WriteJob`), each known by a random id.

A store served with locked sources unlocked is copied into memory, where they are decrypted
(nothing of them reaches the disk); each principal gets a memory of its own there, and its
calls take turns. Who may read what is not taken from that copy: every call first reads the
principals, each source's access scopes and lock state from the store itself, and where they
differ from what the copy was made with, the copies are made again from the store (with the
same passphrases), so a principal removed, a source's scopes changed, a source locked,
unlocked or forgotten there applies to the next call. A source whose passphrase no longer
opens it fails every call (500) until the server is started again.

Every memory shares one embedder, so the model is loaded once, and it embeds one batch at a
time (:class:`OneAtATime`): the model already spreads one batch over every core, and
concurrent searches running it side by side would only fight over them.

Tokens are checked with a slow hash (see :mod:`stratamem.access.principals`), always against
the store itself, off the reader threads and at a bounded rate (:mod:`stratamem.server.tokens`);
a token that checked out is remembered by its SHA-256 for :data:`TOKEN_TTL_S` seconds, and
the stored hash is compared on every use, so a rotated or removed token stops working at once.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import os
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar, cast

from stratamem.api import DEFAULT_EMBEDDER, Memory
from stratamem.api.parts import Embedder, Reranker, Role, Summarizer, Vectors, get_embedder
from stratamem.errors import AccessDenied, StratamemError
from stratamem.ops.context import require_write
from stratamem.server.echo import without_echo
from stratamem.server.tokens import TokenChecks
from stratamem.types import Principal

TOKEN_TTL_S = 300.0
# Reads at once: more than the cores, since a read also waits on the disk and on the embedder.
DEFAULT_READERS = max(4, 2 * (os.cpu_count() or 1))
# Finished write jobs kept for their callers to ask about.
KEPT_JOBS = 200

T = TypeVar("T")


class _PerThread(Protocol):
    """A store opened ``per_thread``: who reads can be set for one thread and one block."""

    def reading_as(self, principal: str | None) -> AbstractContextManager[None]: ...


class OneAtATime:
    """An embedder whose batches queue for it, one running at a time."""

    def __init__(self, embedder: Embedder) -> None:
        self.inner = embedder
        self.spec = embedder.spec
        self._lock = threading.Lock()

    def embed_batch(self, texts: Sequence[str], *, role: Role = "passage") -> Vectors:
        with self._lock:
            return self.inner.embed_batch(texts, role=role)


@dataclass
class WriteJob:
    """A write run on the service's writer thread: queued, running, done or failed."""

    id: str
    action: str
    principal: str | None
    submitted: datetime
    future: Future[dict[str, Any]] = field(repr=False)
    started: datetime | None = None
    finished: datetime | None = None
    # What its caller sent (text → parameter), which its error leaves out.
    sent: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def state(self) -> Literal["queued", "running", "done", "failed"]:
        if not self.future.done():
            return "running" if self.started is not None else "queued"
        return "failed" if self.future.exception() is not None else "done"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "action": self.action,
            "state": self.state,
            "submitted": self.submitted.isoformat(),
            "started": self.started.isoformat() if self.started else None,
            "finished": self.finished.isoformat() if self.finished else None,
        }
        if self.state == "done":
            out["result"] = self.future.result()
        elif self.state == "failed":
            error = self.future.exception()
            out["error"] = {
                "type": type(error).__name__,
                "message": without_echo(str(error), self.sent),
            }
        return out


class Service:
    """A store opened for serving. Use as a context manager or call :meth:`close`.

    ``allow_writes`` lets the owner and principals holding the write permission ingest and
    forget; principals read files only under ``ingest_roots`` (see
    :mod:`stratamem.access.writes`). ``readers``: reads served at once.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        embedder: str | Embedder | None = DEFAULT_EMBEDDER,
        reranker: Reranker | None = None,
        summarizer: Summarizer | None = None,
        unlock: Mapping[str, str] | Sequence[str] | None = None,
        readers: int = DEFAULT_READERS,
        allow_writes: bool = False,
        ingest_roots: Sequence[str | Path] = (),
    ) -> None:
        if str(path) == ":memory:":
            raise ValueError("a store in memory cannot be served: give a file")
        if readers < 1:
            raise ValueError(f"readers must be >= 1, got {readers}")
        self.path = str(path)
        self.allow_writes = allow_writes
        self.ingest_roots = tuple(Path(r).expanduser().resolve() for r in ingest_roots)
        for root in self.ingest_roots:
            if not root.is_dir():
                raise ValueError(f"{root}: an ingest root must be a folder")
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
        # With sources unlocked: a memory per principal over the copy in memory, and who may
        # read what in the store when the copies were made.
        self._memories: dict[str | None, tuple[Memory, threading.Lock]] = {}
        self._access: Access | None = None
        self._shared: Memory | None = None
        self._tokens: dict[str, tuple[str, str, float]] = {}  # sha256 → (name, hash, checked)
        self._jobs: OrderedDict[str, WriteJob] = OrderedDict()
        self._reads = ThreadPoolExecutor(readers, thread_name_prefix="stratamem-read")
        self._writes = ThreadPoolExecutor(1, thread_name_prefix="stratamem-write")
        self.readers = readers
        self.tokens = TokenChecks(self.known_token, self.check_token, self.read)
        try:
            # Open (and migrate) the store now: a bad path fails at start. With sources
            # unlocked it is still what tokens, principals and access are read from.
            self._shared = self._open(None, per_thread=True, unlock=None)
            if unlock:
                self.owner_memory()
        except BaseException:
            self.tokens.close()
            self._reads.shutdown(wait=False)
            self._writes.shutdown(wait=False)
            raise

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Wait for the write running (if any), drop queued ones, and close the store."""
        with self._lock:
            for job in self._jobs.values():
                job.future.cancel()  # only those not started: a running one goes on
        self._writes.shutdown(wait=True, cancel_futures=True)
        self._reads.shutdown(wait=True, cancel_futures=True)
        self.tokens.close()
        with self._lock:
            memories, self._memories = list(self._memories.values()), {}
            shared, self._shared = self._shared, None
        for memory, lock in memories:
            with lock:
                memory.close()
        if shared is not None:
            shared.close()

    def warm(self) -> float:
        """Load the in-memory indexes and the embedder now, so that the first calls do not
        wait for them (at 100k chunks that takes longer than a request may); the seconds
        it took."""
        started = time.perf_counter()
        with self.reading(None) as memory:
            memory.search("stratamem", limit=1)
            postings = getattr(memory.store, "postings", None)
            if postings is not None:
                postings.frequencies([])
        return time.perf_counter() - started

    # -- running calls -------------------------------------------------------------------------

    async def read(self, job: Callable[[], T]) -> T:
        """Run ``job`` on a reader thread (with this context's variables); a caller that stops
        waiting takes a job that has not started with it."""
        context = contextvars.copy_context()
        return await asyncio.wrap_future(self._reads.submit(context.run, job))

    def submit(
        self,
        action: str,
        principal: str | None,
        job: Callable[[], dict[str, Any]],
        *,
        sent: Mapping[str, str] | None = None,
    ) -> WriteJob:
        """Queue ``job`` for the writer thread; it runs to the end whoever waits for it.
        ``sent``: what its caller sent (see :mod:`stratamem.server.echo`), which the job's
        error, when asked about, leaves out."""
        future: Future[dict[str, Any]] = Future()
        with self._lock:
            # Random only: an id tells nothing of how many jobs anyone else started.
            ident = f"job-{secrets.token_hex(16)}"
            found = WriteJob(
                ident, action, principal, datetime.now(UTC), future, sent=dict(sent or {})
            )

            def run() -> None:
                if not future.set_running_or_notify_cancel():
                    return  # dropped at close before it started
                found.started = datetime.now(UTC)
                try:
                    result = job()
                except BaseException as exc:
                    found.finished = datetime.now(UTC)
                    future.set_exception(exc)
                else:
                    found.finished = datetime.now(UTC)
                    future.set_result(result)

            self._jobs[ident] = found
            while len(self._jobs) > KEPT_JOBS:
                oldest = next(iter(self._jobs.values()))
                if not oldest.future.done():
                    break
                self._jobs.popitem(last=False)
            try:
                self._writes.submit(run)
            except RuntimeError:  # shut down
                self._jobs.pop(ident, None)
                raise StratamemError("the server is shutting down") from None
        return found

    def job(self, ident: str, principal: str | None) -> WriteJob | None:
        """The job ``ident`` if ``principal`` submitted it (the owner sees every one)."""
        with self._lock:
            found = self._jobs.get(ident)
        if found is None or (principal is not None and found.principal != principal):
            return None
        return found

    # -- who is asking -------------------------------------------------------------------------

    def authenticate(self, token: str) -> Principal:
        """The principal ``token`` belongs to; :class:`AccessDenied` (one message for every
        kind of bad token) otherwise. A blocking call: the doors go through :attr:`tokens`."""
        found = self.known_token(token)
        return found if found is not None else self.check_token(token)

    def known_token(self, token: str) -> Principal | None:
        """The principal of a token that checked out lately, as the store has it now (no
        slow hash); None for a token not remembered; :class:`AccessDenied` for one whose
        principal was since removed or given another token."""
        key = _token_key(token)
        cached = self._tokens.get(key)
        if cached is None or time.monotonic() - cached[2] >= TOKEN_TTL_S:
            return None
        name, hashed, _ = cached
        with self._on_disk() as owner:
            row = owner.store.principal_row(name=name)
        if row is not None and row.token_hash == hashed:
            return row.principal
        self._tokens.pop(key, None)
        raise AccessDenied("the token matches no principal")

    def check_token(self, token: str) -> Principal:
        """The principal ``token`` belongs to, checked with the slow hash against the store
        (and remembered); :class:`AccessDenied` otherwise."""
        with self._on_disk() as owner:
            principal = owner.principals.authenticate(token)
            row = owner.store.principal_row(name=principal.name)
        if row is not None:
            self._tokens[_token_key(token)] = (principal.name, row.token_hash, time.monotonic())
        return principal

    def token_hash(self, name: str) -> str | None:
        """The stored hash of principal ``name``'s token as the store has it now (None: no
        such principal): what a login made with its token must still find, so that a token
        rotated or a principal removed ends the logins made with it. A blocking call."""
        with self._on_disk() as owner:
            row = owner.store.principal_row(name=name)
        return None if row is None else row.token_hash

    @contextmanager
    def _on_disk(self) -> Iterator[Memory]:
        """The store itself (not a copy in memory), read as the owner on this thread."""
        shared = self._shared
        if shared is None:
            raise StratamemError("the server is closed")
        with cast(_PerThread, shared.store).reading_as(None):
            yield shared

    # -- memories ------------------------------------------------------------------------------

    def owner_memory(self) -> Memory:
        if not self._unlock:
            if self._shared is None:
                raise StratamemError("the server is closed")
            return self._shared
        return self._entry(None)[0]

    @contextmanager
    def reading(self, principal: str | None) -> Iterator[Memory]:
        """The memory, reading as ``principal`` (None: the owner) on this thread for the
        block; :class:`AccessDenied` if there is no such principal."""
        shared = self._shared
        if shared is None:
            raise StratamemError("the server is closed")
        if not self._unlock:
            with cast(_PerThread, shared.store).reading_as(principal):
                yield shared
            return
        memory, lock = self._entry(principal)
        with lock:
            yield memory

    def _entry(self, principal: str | None) -> tuple[Memory, threading.Lock]:
        """``principal``'s memory over the copy with sources unlocked, made again (every
        principal's) where the store's principals or access differ from the copy's."""
        now = self._access_now()
        stale: list[tuple[Memory, threading.Lock]] = []
        with self._lock:
            if now != self._access:
                stale, self._memories = list(self._memories.values()), {}
                self._access = now
            found = self._memories.get(principal)
            if found is None:
                found = self._memories[principal] = (self._open(principal), threading.Lock())
        for memory, lock in stale:
            with lock:
                memory.close()
        return found

    def _access_now(self) -> Access:
        """Who may read what, as the store itself has it now."""
        with self._on_disk() as owner:
            store = owner.store
            principals = tuple((p.name, p.scopes, p.sources, p.write) for p in store.principals())
            sources = tuple(
                (s.id, s.scope, s.access, s.locked) for s in store.sources(counts=False)
            )
        return principals, sources

    def _open(
        self,
        principal: str | None,
        *,
        per_thread: bool = False,
        unlock: Mapping[str, str] | Sequence[str] | Literal[False] | None = False,
    ) -> Memory:
        return Memory(
            self.path,
            embedder=self._embedder,
            reranker=self._reranker,
            summarizer=self._summarizer,
            principal=principal,
            unlock=self._unlock if unlock is False else unlock,
            per_thread=per_thread,
        )

    @property
    def embedder_note(self) -> str:
        """Why there is no embedder (empty when there is one)."""
        return self._embedder_error

    # -- writes (run them with submit) ---------------------------------------------------------

    @contextmanager
    def writing(self, principal: str | None) -> Iterator[tuple[Memory, Principal | None]]:
        """The memory, writing as the owner on behalf of ``principal``, and that principal:
        :class:`AccessDenied` where writes are off or it holds no write permission."""
        if not self.allow_writes:
            raise AccessDenied("writes are off: start the server with --allow-writes")
        with self.reading(principal) as memory:
            who = memory.principal
        require_write(who)
        with self.reading(None) as memory:
            yield memory, who


def _token_key(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


# Who may read what: each principal (name, scopes, source globs, write) and each source (id,
# scope, access scopes, locked).
Access = tuple[
    tuple[tuple[str, tuple[str, ...], tuple[str, ...], bool], ...],
    tuple[tuple[str, str, tuple[str, ...], bool], ...],
]


class ServiceContext:
    """One call's :class:`~stratamem.ops.Context` on a service: it reads as ``who`` (None: the
    owner) and writes as the owner on ``who``'s behalf, where writes are on and ``who`` may."""

    def __init__(self, service: Service, who: str | None) -> None:
        self.service = service
        self.who = who
        self.ingest_roots = service.ingest_roots
        self._principal: tuple[Principal | None] | None = None

    @property
    def principal(self) -> Principal | None:
        if self._principal is None:
            with self.service.reading(self.who) as memory:
                self._principal = (memory.principal,)
        return self._principal[0]

    def reading(self) -> AbstractContextManager[Memory]:
        return self.service.reading(self.who)

    @contextmanager
    def writing(self) -> Iterator[Memory]:
        with self.service.writing(self.who) as (memory, _):
            yield memory
