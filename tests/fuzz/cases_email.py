"""Fuzzed mbox files: the fixture mailboxes, some messages mutated, the whole file damaged.

Mutations (per message, see ``text_mutations``): headers at the calendar's edge, very long or
undecodable headers, charsets mail does not use (UTF-7, punycode, unicode_escape), bad base64,
multiparts nested thousands deep or without a boundary, HTML that never closes its tags, long
pathological lines; and for the file: cut, flipped, CR-only, a BOM, leading garbage, empty.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

from text_mutations import damage, mutate_message

NAME = "mbox"
CONNECTOR = "mbox"

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "email"
_SEPARATOR = re.compile(rb"^(?=From \S+ .*\d{4}$)", re.MULTILINE)


def messages(name: str) -> list[bytes]:
    """The messages of a fixture mbox, each with its ``From `` line."""
    data = (FIXTURES / name).read_bytes()
    return [part for part in _SEPARATOR.split(data) if part.strip()]


def make(rng: random.Random, root: Path) -> Path:
    parts = messages(rng.choice(("sample.mbox", "damaged.mbox")))
    for index in rng.sample(range(len(parts)), rng.randint(1, len(parts))):
        envelope, _, message = parts[index].partition(b"\n")
        parts[index] = envelope + b"\n" + mutate_message(rng, message) + b"\n"
    data = b"".join(parts)
    if rng.random() < 0.2:
        data = damage(rng, data)
    path = root / "fuzz.mbox"
    path.write_bytes(data)
    return path
