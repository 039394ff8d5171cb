"""Who an inspector page reads as: server-side login sessions and the CSRF tokens of forms.

A session is 32 random bytes (url-safe) held in memory by the app, never in the cookie's
value itself: the cookie ``stratamem_session`` carries only its id, and the session names
the principal it reads as (None: the owner). A session unused for :data:`IDLE_S` seconds is
gone; past :data:`MAX_SESSIONS` the least recently used go first.

A form's CSRF token is an HMAC of the session id under a secret of the app's own (made at
start, never sent), so it is bound to the session and nothing is stored for it. The login
form has no session yet: its token is the HMAC of a second random cookie,
``stratamem_login``, set with the form (the double-submit pattern, signed).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

SESSION_COOKIE = "stratamem_session"
LOGIN_COOKIE = "stratamem_login"
IDLE_S = 12 * 60 * 60.0
MAX_SESSIONS = 10_000


@dataclass(slots=True)
class Session:
    """A login: the principal it reads as (None: the owner), the stored hash of the token it
    was made with (which must not change while it lasts), and when it was last used;
    ``scopes``, ``sources`` and ``write`` are the principal's as they were at login (shown in
    the page's header, never used to decide what it reads)."""

    id: str
    principal: str | None
    seen: float
    token_hash: str | None = None
    scopes: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    write: bool = False


class Sessions:
    """The app's sessions and form tokens (see the module)."""

    def __init__(
        self, *, idle_s: float = IDLE_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if idle_s <= 0:
            raise ValueError(f"idle_s must be > 0, got {idle_s}")
        self.idle_s = idle_s
        self._clock = clock
        self._secret = secrets.token_bytes(32)
        self._lock = threading.Lock()
        self._held: OrderedDict[str, Session] = OrderedDict()

    def start(
        self,
        principal: str | None,
        *,
        token_hash: str | None = None,
        scopes: tuple[str, ...] = (),
        sources: tuple[str, ...] = (),
        write: bool = False,
    ) -> Session:
        """A new session reading as ``principal``, made with a token of ``token_hash``
        (``scopes``, ``sources``, ``write``: the principal's, for the page to say)."""
        found = Session(
            secrets.token_urlsafe(32),
            principal,
            self._clock(),
            token_hash,
            scopes=scopes,
            sources=sources,
            write=write,
        )
        with self._lock:
            self._held[found.id] = found
            while len(self._held) > MAX_SESSIONS:
                self._held.popitem(last=False)
        return found

    def get(self, ident: str | None) -> Session | None:
        """The live session of id ``ident`` (its idle time starts again); None otherwise."""
        if not ident:
            return None
        now = self._clock()
        with self._lock:
            found = self._held.get(ident)
            if found is None:
                return None
            if now - found.seen >= self.idle_s:
                del self._held[ident]
                return None
            found.seen = now
            self._held.move_to_end(ident)
            return found

    def end(self, ident: str | None) -> None:
        if ident:
            with self._lock:
                self._held.pop(ident, None)

    def csrf(self, ident: str, *, purpose: str = "session") -> str:
        """The form token bound to session (or login cookie) ``ident``."""
        message = f"{purpose}:{ident}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def csrf_ok(self, ident: str | None, token: str | None, *, purpose: str = "session") -> bool:
        """Whether ``token`` is the form token of ``ident`` (compared in constant time)."""
        if not ident or not token:
            return False
        return hmac.compare_digest(self.csrf(ident, purpose=purpose), token)
