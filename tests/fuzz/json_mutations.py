"""Mutations shared by the JSON case modules (Slack, Discord, JSONL).

Values are mutated as parsed JSON, then written as text in which placeholders become what
``json.dumps`` cannot write: nesting bombs and numbers too long to read. Lone surrogates need no
placeholder, ``json.dumps`` escapes them as ``\\ud800``. The text can then be damaged as bytes.
"""

from __future__ import annotations

import json
import random
import zipfile
from typing import Any

_BOMB = "\x00bomb:"
_NUMBER = "\x00number:"

EDGE_DATES = (
    "0001-01-01T00:00:00+05:00",
    "9999-12-31T23:59:59-05:00",
    "0001-01-01",
    "9999-12-31T23:59:59.999999+14:00",
    "2024-02-30T10:00:00Z",
    "2024-03-12T25:61:00",
    "-0001-01-01T00:00:00Z",
    "",
)
ODD_STRINGS = (
    "\ud800",
    "half \udbff pair",
    "\udc00\ud800",
    "..",
    "../../etc/passwd",
    "a/b\\c",
    "\u202etxt.exe",
    "\x00nul",
    "<@U0>" * 50,
    "<#C0|" + "x" * 100 + ">",
    "&amp;&lt;&gt;" * 20,
    "<t:99999999999999999999:f>",
    "<@!123><#456><:e:789><t:-99999999999:R>",
    "x" * 3000,
    " ",
    "1710148502.123459",
    "99999999999999999999.999999",
    "-1.5",
)
ODD_NUMBERS = (0, -1, 1e308, -1e308, 2**63, -(2**63) - 1, 10**30, 0.5, 1710148502, -62135596801)


def odd_value(rng: random.Random) -> Any:
    """A value of any JSON type, chosen to break a reader that trusts the field's type."""
    pick = rng.randrange(12)
    if pick == 0:
        return rng.choice(ODD_NUMBERS)
    if pick == 1:
        return rng.choice(EDGE_DATES)
    if pick == 2:
        return rng.choice(ODD_STRINGS)
    if pick == 3:
        return rng.choice([None, True, False])
    if pick == 4:
        return [rng.choice(ODD_NUMBERS), rng.choice(ODD_STRINGS), None, {}]
    if pick == 5:
        return {"id": rng.choice(ODD_NUMBERS), "name": [1], "value": {"x": []}}
    if pick == 6:
        return f"{_BOMB}{rng.choice((1_500, 5_000, 20_000))}"
    if pick == 7:
        return f"{_NUMBER}{rng.choice(('9' * 5000, '1e99999', '-1e400', '1' * 400))}"
    if pick == 8:
        return []
    if pick == 9:
        return {}
    if pick == 10:
        return rng.choice([float("nan"), float("inf"), -0.0])
    return rng.randrange(-(10**12), 10**12)


def mutate_value(rng: random.Random, value: Any, depth: int = 0) -> Any:
    """``value`` with one field, item or the value itself replaced, removed or duplicated."""
    if isinstance(value, dict) and value and depth < 6 and rng.random() < 0.8:
        key = rng.choice(list(value))
        out = dict(value)
        action = rng.randrange(6)
        if action == 0:
            del out[key]
        elif action == 1:
            out[rng.choice(ODD_STRINGS)] = odd_value(rng)
        else:
            out[key] = mutate_value(rng, value[key], depth + 1)
        return out
    if isinstance(value, list) and value and depth < 6 and rng.random() < 0.8:
        out = list(value)
        at = rng.randrange(len(out))
        action = rng.randrange(6)
        if action == 0:
            del out[at]
        elif action == 1:
            out.insert(at, out[at])
        elif action == 2:
            out.insert(at, odd_value(rng))
        else:
            out[at] = mutate_value(rng, out[at], depth + 1)
        return out
    return odd_value(rng)


def dumps(value: Any, rng: random.Random) -> bytes:
    """``value`` as JSON text, its placeholders expanded."""
    text = json.dumps(value, indent=rng.choice([None, 2]))
    while (at := text.find('"\\u0000bomb:')) >= 0:
        end = text.index('"', at + 1)
        depth = int(text[at + len('"\\u0000bomb:') : end])
        text = text[:at] + "[" * depth + "]" * depth + text[end + 1 :]
    while (at := text.find('"\\u0000number:')) >= 0:
        end = text.index('"', at + 1)
        text = text[:at] + text[at + len('"\\u0000number:') : end] + text[end + 1 :]
    return text.encode()


def damage(rng: random.Random, data: bytes) -> bytes:
    """``data`` damaged as bytes: cut, flipped, prefixed, emptied or replaced."""
    action = rng.randrange(9)
    if action == 0 and data:
        return data[: rng.randrange(len(data))]
    if action == 1 and data:
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            out[rng.randrange(len(out))] = rng.randrange(256)
        return bytes(out)
    if action == 2:
        return b"\xef\xbb\xbf" + data
    if action == 3:
        return b""
    if action == 4:
        depth = rng.choice((2_000, 20_000))
        return b"[" * depth + b"]" * depth
    if action == 5 and data:
        at = rng.randrange(len(data))
        return data[:at] + rng.choice([b"\xff\xfe", b"\xed\xa0\x80", b"\xc3", b"\x00"]) + data[at:]
    if action == 6:
        return rng.choice([b"null", b"42", b'"text"', b"{}", b"[]", b"[1, 2, 3]", b"\n\n"])
    if action == 7:
        return data.replace(b"\n", b"\r\n")
    return data + data[: rng.randrange(len(data) + 1)]


def corrupt_member(archive: bytearray, info: zipfile.ZipInfo, rng: random.Random) -> None:
    """Overwrite some of one member's compressed bytes in place."""
    at = info.header_offset + 26
    name_len = int.from_bytes(archive[at : at + 2], "little")
    extra_len = int.from_bytes(archive[at + 2 : at + 4], "little")
    start = info.header_offset + 30 + name_len + extra_len
    size = max(1, info.compress_size)
    for _ in range(rng.randint(1, 6)):
        at = start + rng.randrange(size)
        if at < len(archive):
            archive[at] = rng.randrange(256)
