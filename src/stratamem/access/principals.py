"""Principals and their bearer tokens.

A token is ``stm_<id>_<secret>``: the id (12 hex digits) is stored as it is, to find the
principal's row; the secret (43 URL-safe characters, 256 random bits) is stored only as a
scrypt hash (N 2^15, r 8, p 1: about 50-100 ms and 32 MiB per check), so a copy of the
database does not yield tokens. A token is shown once, when the principal is added or its
token rotated. Checking a token whose id matches no row still runs one scrypt, so a caller
cannot tell an unknown id from a wrong secret by the time it takes.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime

from stratamem.errors import AccessDenied, NotFoundError
from stratamem.store.access import PrincipalRow, parse_scopes
from stratamem.store.base import Store
from stratamem.types import Principal

TOKEN_PREFIX = "stm_"
SCRYPT_N = 2**15
SCRYPT_R = 8
SCRYPT_P = 1
_MAXMEM = 64 * 1024 * 1024
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
_TOKEN = re.compile(r"stm_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")
# What an unknown token id is checked against, so that it costs what a wrong secret does.
_DUMMY_HASH = f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${'00' * 16}${'00' * 32}"


# The name the server's log gives the owner; no principal may take it, nor one that reads as
# it: the same letters in any case, with ``0`` for ``o`` or with ``_ . @ -`` among them.
OWNER_NAME = "owner"
_READS_AS = str.maketrans("0", "o", "_.@-")


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"bad principal name {name!r}: use letters, digits and _ . @ - (up to 64), "
            "starting with a letter or digit"
        )
    if name.lower().translate(_READS_AS) == OWNER_NAME:
        raise ValueError(
            f"bad principal name {name!r}: {OWNER_NAME!r} is reserved for the store's owner "
            "(and so is any name that reads as it)"
        )
    return name


def hash_secret(secret: str, *, salt: bytes | None = None) -> str:
    salt = secrets.token_bytes(16) if salt is None else salt
    digest = hashlib.scrypt(
        secret.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, maxmem=_MAXMEM, dklen=32
    )
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${salt.hex()}${digest.hex()}"


def secret_matches(secret: str, stored: str) -> bool:
    try:
        name, n, r, p, salt, digest = stored.split("$")
        if name != "scrypt":
            return False
        found = hashlib.scrypt(
            secret.encode(),
            salt=bytes.fromhex(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            maxmem=_MAXMEM,
            dklen=len(digest) // 2,
        )
    except ValueError:
        return False
    return hmac.compare_digest(found.hex(), digest)


def _new_token() -> tuple[str, str, str]:
    """(token, its id, the hash of its secret)."""
    token_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    return f"{TOKEN_PREFIX}{token_id}_{secret}", token_id, hash_secret(secret)


def add_principal(
    store: Store,
    name: str,
    scopes: str | Sequence[str],
    *,
    sources: Sequence[str] = (),
    write: bool = False,
) -> str:
    """Create a principal; returns its token (shown this once, never stored)."""
    check_name(name)
    labels = parse_scopes(scopes, allow_any=True)
    if not labels:
        raise ValueError(f"principal {name!r} needs at least one scope")
    if store.get_principal(name) is not None:
        raise ValueError(f"a principal named {name!r} exists; remove it or rotate its token")
    alike = [p.name for p in store.principals() if p.name.casefold() == name.casefold()]
    if alike:
        # Two names a log or a person reads as one (bob, Bob) would pass for each other.
        raise ValueError(
            f"a principal named {alike[0]!r} exists, which reads as {name!r}: choose another name"
        )
    token, token_id, hashed = _new_token()
    now = datetime.now(UTC)
    principal = Principal(
        name=name,
        scopes=labels,
        sources=tuple(g for g in (s.strip() for s in sources) if g),
        write=write,
        created_at=now,
        rotated_at=now,
    )
    store.put_principal(PrincipalRow(principal, token_id, hashed))
    return token


def rotate_token(store: Store, name: str) -> str:
    """Give the principal a new token (the old one stops working); returns it."""
    found = store.principal_row(name=name)
    if found is None:
        raise NotFoundError(f"no principal named {name!r}")
    token, token_id, hashed = _new_token()
    principal = replace(found.principal, rotated_at=datetime.now(UTC))
    store.put_principal(PrincipalRow(principal, token_id, hashed))
    return token


def authenticate(store: Store, token: str) -> Principal:
    """The principal ``token`` belongs to; :class:`AccessDenied` for any token that matches
    none (malformed, unknown, revoked or rotated), with the same message for all."""
    match = _TOKEN.fullmatch(token.strip())
    row = None if match is None else store.principal_row(token_id=match.group(1))
    secret = match.group(2) if match else "x" * 43
    if not secret_matches(secret, row.token_hash if row is not None else _DUMMY_HASH):
        raise AccessDenied("the token matches no principal")
    if row is None:
        raise AccessDenied("the token matches no principal")
    return row.principal
