"""The keys and the cipher of locked sources: scrypt from a passphrase, AES-256-GCM per part.

Key. ``scrypt(NFC(passphrase), salt, n, r, p)`` → 32 bytes, with 16 random bytes of salt per
lock, so one passphrase gives every lock its own key. The salt and the parameters are kept as
JSON in ``locks.kdf`` (``{"name": "scrypt", "n": 131072, "r": 8, "p": 1, "length": 32,
"salt": "<base64>"}``): a lock made with other parameters still opens after the defaults
change. ``n = 2^17, r = 8, p = 1`` is OWASP's minimum for scrypt (128 MiB, about half a
second), paid once per lock, unlock or open.

Key check value. ``nonce ‖ AES-GCM(key, nonce, CHECK_LABEL, ad)``, made at lock time: the key
of a wrong passphrase fails its tag, which is told apart (:meth:`SourceKey.opens`) before any
sealed part is read.

Parts. Each part is ``AES-GCM(key, nonce, plaintext, ad)`` with a random 96-bit nonce, stored
beside it. With a fresh key per lock and a few thousand parts at most under it, random nonces
stay far from a collision. The associated data binds a part to its place::

    "stratamem/part/1" 0x00 store id 0x00 source id 0x00 part (8 bytes, big-endian) last (1 byte)

and the check value's to ``"stratamem/check/1" 0x00 store id 0x00 source id``. A part moved to
another source or another store, put in another place, or a sequence cut short (its new last
part was sealed as not last) fails to decrypt.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import unicodedata
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from stratamem.errors import LockError

KEY_BYTES = 32
NONCE_BYTES = 12
SALT_BYTES = 16
CHECK_LABEL = b"stratamem key check"
_PART_AD = b"stratamem/part/1"
_CHECK_AD = b"stratamem/check/1"


@dataclass(frozen=True, slots=True)
class Scrypt:
    """scrypt's cost parameters: ``n`` (CPU and memory, a power of two), ``r`` (block size),
    ``p`` (parallelism). Memory used: ``128 · n · r`` bytes."""

    n: int = 2**17
    r: int = 8
    p: int = 1

    def derive(self, passphrase: str, salt: bytes) -> bytes:
        secret = unicodedata.normalize("NFC", passphrase).encode()
        return hashlib.scrypt(
            secret,
            salt=salt,
            n=self.n,
            r=self.r,
            p=self.p,
            maxmem=128 * self.r * (self.n + self.p + 2) + (1 << 20),
            dklen=KEY_BYTES,
        )


DEFAULT_KDF = Scrypt()


class SourceKey:
    """The key of one locked source of one store: seals and opens its parts (the store's
    :class:`~stratamem.store.locks.PartCipher`) and makes and tests its check value."""

    def __init__(self, key: bytes, *, store_id: str, source_id: str) -> None:
        self._aead = AESGCM(key)
        self._place = store_id.encode() + b"\x00" + source_id.encode()
        self.source_id = source_id

    @classmethod
    def create(
        cls, passphrase: str, *, store_id: str, source_id: str, kdf: Scrypt | None = None
    ) -> tuple[SourceKey, str]:
        """A new key for locking the source, with a fresh salt, and its ``locks.kdf`` JSON;
        ``kdf`` defaults to :data:`DEFAULT_KDF`."""
        kdf = kdf or DEFAULT_KDF
        salt = os.urandom(SALT_BYTES)
        params = {
            "name": "scrypt",
            "n": kdf.n,
            "r": kdf.r,
            "p": kdf.p,
            "length": KEY_BYTES,
            "salt": base64.b64encode(salt).decode(),
        }
        key = kdf.derive(passphrase, salt)
        return cls(key, store_id=store_id, source_id=source_id), json.dumps(params)

    @classmethod
    def derive(cls, passphrase: str, kdf: str, *, store_id: str, source_id: str) -> SourceKey:
        """The key a locked source's recorded ``kdf`` JSON gives this passphrase."""
        params = _kdf_params(kdf, source_id)
        scrypt = Scrypt(n=params["n"], r=params["r"], p=params["p"])
        key = scrypt.derive(passphrase, base64.b64decode(params["salt"]))
        return cls(key, store_id=store_id, source_id=source_id)

    def check_value(self) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, CHECK_LABEL, self._check_ad())

    def opens(self, check_value: bytes) -> bool:
        """Whether this is the key the check value was made with."""
        nonce, data = check_value[:NONCE_BYTES], check_value[NONCE_BYTES:]
        try:
            return self._aead.decrypt(nonce, data, self._check_ad()) == CHECK_LABEL
        except InvalidTag:
            return False

    def seal(self, part: int, last: bool, plaintext: bytes) -> tuple[bytes, bytes]:
        """(nonce, ciphertext with its tag) of part number ``part``."""
        nonce = os.urandom(NONCE_BYTES)
        return nonce, self._aead.encrypt(nonce, plaintext, self._part_ad(part, last))

    def open(self, part: int, last: bool, nonce: bytes, data: bytes) -> bytes:
        """The plaintext of a part; :class:`LockError` if it fails its tag (altered, moved
        from elsewhere, or the sequence was cut short)."""
        try:
            return self._aead.decrypt(nonce, data, self._part_ad(part, last))
        except InvalidTag:
            raise LockError(
                f"source {self.source_id}: sealed part {part} does not decrypt "
                "(altered, moved from another source or store, or parts are missing)"
            ) from None

    def _check_ad(self) -> bytes:
        return _CHECK_AD + b"\x00" + self._place

    def _part_ad(self, part: int, last: bool) -> bytes:
        return (
            _PART_AD
            + b"\x00"
            + self._place
            + b"\x00"
            + part.to_bytes(8, "big")
            + (b"\x01" if last else b"\x00")
        )


def _kdf_params(kdf: str, source_id: str) -> dict[str, Any]:
    try:
        params = json.loads(kdf)
        if params["name"] != "scrypt" or params["length"] != KEY_BYTES:
            raise LockError(
                f"source {source_id}: unknown key derivation {params['name']!r} "
                f"of {params['length']} bytes"
            )
        for name in ("n", "r", "p"):
            if not isinstance(params[name], int) or params[name] < 1:
                raise ValueError(name)
        base64.b64decode(params["salt"], validate=True)
    except (ValueError, KeyError, TypeError) as exc:
        raise LockError(f"source {source_id}: unreadable key derivation record ({exc})") from exc
    return dict(params)
