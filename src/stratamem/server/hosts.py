"""The ``Host`` and ``Origin`` a server answers, and the checks every request passes before
anything reads it (:func:`refusal`), shared by the HTTP API's edge and the MCP app.

A page on another site can make a browser send requests to a name it controls and then point
that name at 127.0.0.1 (DNS rebinding): the requests reach a server on loopback with that
name as ``Host``. So a server answers only the names it is reached by. A page's own requests
carry ``Origin``, which must be one of those names too.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import Scope

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
ANY_HOST = "*"
_WILDCARDS = ("", "0.0.0.0", "::", "[::]")


def split_host(value: str) -> tuple[str, str | None] | None:
    """``name``, ``name:port``, ``[v6]:port`` or a bare IPv6 address as (host, port), the
    host lowercased and an IPv6 address in brackets; None for what is none of these."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        host, rest = value[: end + 1], value[end + 1 :]
        if not rest:
            return host, None
        if not rest.startswith(":"):
            return None
        port: str | None = rest[1:]
    elif value.count(":") > 1:
        return f"[{value}]", None
    else:
        host, colon, port = value.partition(":")
        if not colon:
            port = None
    if port is not None and not (port.isdigit() and len(port) <= 5):
        return None
    if not host or not all(c.isalnum() or c in "-._[]:" for c in host) or not host.isascii():
        return None
    return host, port


def bound_hosts(bound: str) -> list[str]:
    """The ``Host`` a server bound to ``bound`` is reached by: that address, unless it is a
    wildcard (``0.0.0.0``, ``::``), which names no one host."""
    return [] if bound.strip().lower() in _WILDCARDS else [bound]


class Hosts:
    """The ``Host`` values a server answers: the loopback names (``localhost``, ``127.0.0.1``,
    ``[::1]``) on any port, and each of ``allowed`` (``name`` on any port, ``name:port`` on
    that one; ``*`` turns the check off)."""

    def __init__(self, allowed: Iterable[str] = ()) -> None:
        self.any = False
        self.names: set[str] = set(LOOPBACK_NAMES)
        self.pairs: set[tuple[str, str]] = set()
        for value in allowed:
            if value.strip() == ANY_HOST:
                self.any = True
                continue
            found = split_host(value)
            if found is None:
                raise ValueError(
                    f"allowed host {value!r}: give a name or address, with a port or not "
                    "(mem.example, mem.example:443, [::1])"
                )
            host, port = found
            if port is None:
                self.names.add(host)
            else:
                self.pairs.add((host, port))

    def allows(self, host: str) -> bool:
        """Whether a ``Host`` header of ``host`` names this server."""
        if self.any:
            return True
        found = split_host(host)
        if found is None:
            return False
        name, port = found
        return name in self.names or (port is not None and (name, port) in self.pairs)

    def allows_origin(self, origin: str) -> bool:
        """Whether a page at ``origin`` (an ``Origin`` header) may call this server."""
        if self.any:
            return True
        try:
            parts = urlsplit(origin.strip())
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not parts.netloc or "@" in parts.netloc:
            return False
        if parts.path or parts.query or parts.fragment:
            return False
        netloc = parts.netloc
        if ":" not in netloc.rsplit("]", 1)[-1]:
            netloc += ":443" if parts.scheme == "https" else ":80"
        return self.allows(netloc)

    def listed(self) -> list[str]:
        """The allowed values, as they read in a message or a document."""
        if self.any:
            return [ANY_HOST]
        return sorted(self.names) + sorted(f"{h}:{p}" for h, p in self.pairs)


def refusal(scope: Scope, hosts: Hosts) -> tuple[int, str] | None:
    """Why an HTTP request is refused before anything reads it, as (status, message): not
    one ``Host`` this server answers (421), an ``Origin`` it does not answer (403), two
    ``Authorization`` headers (400, so that no door reads one and another the other); None
    when it may go on."""
    names: list[bytes] = []
    origins: list[bytes] = []
    authorizations = 0
    for key, value in scope["headers"]:
        if key == b"host":
            names.append(value)
        elif key == b"origin":
            origins.append(value)
        elif key == b"authorization":
            authorizations += 1
    if len(names) != 1 or not hosts.allows(names[0].decode("latin-1")):
        return 421, "this server does not answer to that Host (see --allowed-host)"
    if origins and (len(origins) > 1 or not hosts.allows_origin(origins[0].decode("latin-1"))):
        return 403, "requests from a page of that Origin are refused"
    if authorizations > 1:
        return 400, "send one Authorization header, not several"
    return None
