"""The key and cipher of locked sources: the key check tells a wrong passphrase, and a part
decrypts only in the place it was sealed for."""

from __future__ import annotations

import base64
import json

import pytest

from stratamem.access.crypto import DEFAULT_KDF, NONCE_BYTES, Scrypt, SourceKey
from stratamem.errors import LockError

CHEAP = Scrypt(n=2**8, r=8, p=1)
PLACE = {"store_id": "store-a", "source_id": "src_a"}


def make(passphrase: str = "pass", **place: str) -> tuple[SourceKey, str]:
    return SourceKey.create(passphrase, **(PLACE | place), kdf=CHEAP)


def test_the_kdf_record_holds_the_salt_and_parameters_and_derives_the_same_key() -> None:
    key, kdf = make()
    params = json.loads(kdf)
    assert {k: params[k] for k in ("name", "n", "r", "p", "length")} == {
        "name": "scrypt",
        "n": 2**8,
        "r": 8,
        "p": 1,
        "length": 32,
    }
    assert len(base64.b64decode(params["salt"])) == 16
    again = SourceKey.derive("pass", kdf, **PLACE)
    nonce, data = key.seal(0, True, b"hello")
    assert again.open(0, True, nonce, data) == b"hello"
    assert json.loads(make()[1])["salt"] != params["salt"]  # a fresh salt per lock


def test_the_default_cost_is_owasp_minimum() -> None:
    assert (DEFAULT_KDF.n, DEFAULT_KDF.r, DEFAULT_KDF.p) == (2**17, 8, 1)


def test_the_check_value_tells_a_wrong_passphrase() -> None:
    key, kdf = make("right")
    check = key.check_value()
    assert SourceKey.derive("right", kdf, **PLACE).opens(check)
    assert not SourceKey.derive("wrong", kdf, **PLACE).opens(check)
    assert not SourceKey.derive("right", kdf, **(PLACE | {"source_id": "src_b"})).opens(check)
    assert not key.opens(check[:NONCE_BYTES] + bytes(len(check) - NONCE_BYTES))


def test_a_passphrase_is_the_same_however_its_accents_are_composed() -> None:
    key, kdf = make("caf\u00e9")
    assert SourceKey.derive("cafe\u0301", kdf, **PLACE).opens(key.check_value())


@pytest.mark.parametrize(
    ("part", "last", "place"),
    [
        (1, False, {}),  # another place in the sequence
        (0, True, {}),  # sealed as not last: the sequence was cut after it
        (0, False, {"source_id": "src_b"}),  # another source
        (0, False, {"store_id": "store-b"}),  # another store
    ],
)
def test_a_part_opens_only_where_it_was_sealed(
    part: int, last: bool, place: dict[str, str]
) -> None:
    key, kdf = make()
    nonce, data = key.seal(0, False, b"rows")
    assert key.open(0, False, nonce, data) == b"rows"
    elsewhere = SourceKey.derive("pass", kdf, **(PLACE | place)) if place else key
    with pytest.raises(LockError, match="does not decrypt"):
        elsewhere.open(part, last, nonce, data)


def test_each_part_gets_its_own_nonce() -> None:
    key, _ = make()
    nonces = {key.seal(0, False, b"same")[0] for _ in range(50)}
    assert len(nonces) == 50
    assert all(len(n) == NONCE_BYTES for n in nonces)


@pytest.mark.parametrize(
    "kdf",
    [
        "not json",
        json.dumps({"name": "argon2", "n": 1, "r": 1, "p": 1, "length": 32, "salt": ""}),
        json.dumps({"name": "scrypt", "n": 0, "r": 8, "p": 1, "length": 32, "salt": ""}),
        json.dumps({"name": "scrypt", "r": 8, "p": 1, "length": 32, "salt": ""}),
        json.dumps({"name": "scrypt", "n": 256, "r": 8, "p": 1, "length": 32, "salt": "!"}),
    ],
)
def test_an_unreadable_kdf_record_is_a_lock_error(kdf: str) -> None:
    with pytest.raises(LockError) as refused:
        SourceKey.derive("pass", kdf, **PLACE)
    assert "src_a" in str(refused.value)
    assert "\n" not in str(refused.value)
