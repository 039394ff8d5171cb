"""Who a bearer token names, at a bounded cost to the server.

A token is checked with a slow hash (scrypt, tens of milliseconds and 32 MiB each; see
:mod:`stratamem.access.principals`), so a flood of made-up tokens could keep every core busy
and hold up the reads of those with good ones. Here:

- a token that checked out is remembered (:meth:`Service.known_token`), and such a token is
  answered before anything else, on the reader threads, without hashing;
- any other runs its hash on a pool of its own of :data:`HASHERS` threads, never on the
  reader threads, so reads go on while made-up tokens wait their turn; requests that bring
  the same token while it is being checked wait for that one check (a client firing many
  requests at once with a token not yet remembered costs one hash, and counts once);
- an address whose tokens failed :data:`FAILURES` times within :data:`WINDOW_S` seconds
  (counting the checks it has waiting) is answered 429, with ``Retry-After``, before any
  hashing, until the oldest failure leaves the window; and no more than :data:`WAITING`
  checks wait at once, whoever sends them.

Behind a proxy every caller has the proxy's address, so they share one count.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from stratamem.errors import AccessDenied, AccessError
from stratamem.types import Principal

HASHERS = 2
FAILURES = 10
WINDOW_S = 60.0
WAITING = 64
# Addresses remembered at most; past it those with no failure in the window are dropped.
ADDRESSES = 10_000

NEEDED = "a bearer token is required: Authorization: Bearer <token>"

T = TypeVar("T")


class _TooManyTries(AccessError):
    """An address has sent too many bad tokens lately; ``retry_after`` seconds to wait."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"too many bad tokens from this address; try again in {retry_after}s")
        self.retry_after = retry_after


class TokenChecks:
    """Bearer tokens checked as the module says: ``known`` answers a remembered token (None
    when it is not one) and runs on ``read`` (the reader threads); ``check`` hashes."""

    def __init__(
        self,
        known: Callable[[str], Principal | None],
        check: Callable[[str], Principal],
        read: Callable[[Callable[[], Principal | None]], Awaitable[Principal | None]],
        *,
        hashers: int = HASHERS,
        failures: int = FAILURES,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._known = known
        self._check = check
        self._read = read
        self.failures = failures
        self.window_s = window_s
        self._clock = clock
        self._hashers = ThreadPoolExecutor(hashers, thread_name_prefix="stratamem-token")
        self._lock = threading.Lock()
        self._failed: dict[str, deque[float]] = {}
        self._waiting: dict[str, int] = {}
        self._checking: dict[str, Future[Principal]] = {}

    def close(self) -> None:
        self._hashers.shutdown(wait=True, cancel_futures=True)

    async def principal(self, header: str | None, address: str) -> Principal:
        """The principal of an ``Authorization`` header sent from ``address``:
        :class:`AccessDenied` for a missing or bad token (one message for every bad one),
        :class:`_TooManyTries` for an address turned away."""
        scheme, _, token = (header or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise AccessDenied(NEEDED)
        found = await self._read(lambda: self._known(token))
        if found is not None:
            return found
        with self._lock:
            future = self._checking.get(token)
        if future is None:
            future = self._start(token, address)
        # Shielded: a caller that leaves does not take its check (and its count) with it.
        return await asyncio.shield(asyncio.wrap_future(future))

    def _start(self, token: str, address: str) -> Future[Principal]:
        """The check of ``token``: the one running, else a new one counted for ``address``."""
        self._admit(address)
        with self._lock:
            running = self._checking.get(token)
            if running is not None:  # begun meanwhile by another request
                self._waiting_less(address)
                return running
            try:
                future = self._hashers.submit(self._hash, token, address)
            except RuntimeError:  # shut down
                self._waiting_less(address)
                raise AccessDenied("the server is shutting down") from None
            self._checking[token] = future
        future.add_done_callback(lambda _: self._forget_check(token, future))
        return future

    def _forget_check(self, token: str, future: Future[Principal]) -> None:
        with self._lock:
            if self._checking.get(token) is future:
                del self._checking[token]

    def _admit(self, address: str) -> None:
        """Count a check for ``address``, or :class:`_TooManyTries`."""
        now = self._clock()
        with self._lock:
            failed = self._failed.get(address)
            while failed and failed[0] <= now - self.window_s:
                failed.popleft()
            waiting = self._waiting.get(address, 0)
            if len(failed or ()) + waiting >= self.failures:
                oldest = failed[0] if failed else now
                raise _TooManyTries(max(1, math.ceil(oldest + self.window_s - now)))
            if sum(self._waiting.values()) >= WAITING:
                raise _TooManyTries(1)
            self._waiting[address] = waiting + 1

    def _hash(self, token: str, address: str) -> Principal:
        """On a hasher thread: the token checked, a failure counted for ``address``; the
        count goes on whether or not the caller still waits."""
        try:
            # A check of this token that ended between the caller's look at the remembered
            # tokens and this one's start has remembered it: no second hash.
            return self._known(token) or self._check(token)
        except AccessDenied:
            with self._lock:
                self._failed.setdefault(address, deque()).append(self._clock())
                if len(self._failed) > ADDRESSES:
                    self._forget_old()
            raise
        finally:
            self._done(address)

    def _done(self, address: str) -> None:
        with self._lock:
            self._waiting_less(address)

    def _waiting_less(self, address: str) -> None:
        """One check fewer waiting for ``address`` (the lock held)."""
        left = self._waiting.get(address, 1) - 1
        if left > 0:
            self._waiting[address] = left
        else:
            self._waiting.pop(address, None)

    def _forget_old(self) -> None:
        since = self._clock() - self.window_s
        for address in [a for a, d in self._failed.items() if not d or d[-1] <= since]:
            del self._failed[address]
