"""Fuzzed JSON Lines: the fixture lines, mutated, as one file or a folder of files.

Mutations: wrong types for any field of a line (``timestamp`` at the calendar's edge or a huge
number, ``kind`` a list, ``source`` an object), nesting bombs and numbers too long to read as
lines, lone surrogates, lines cut or flipped, CRLF, a BOM, blank and empty files, many distinct
sources, and a FIFO beside the files in a folder.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

from json_mutations import EDGE_DATES, damage, dumps, mutate_value, odd_value

NAME = "jsonl"
CONNECTOR = "jsonl"

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "jsonl"
_LINES = [
    line
    for file in sorted(FIXTURE.iterdir())
    for line in file.read_text("utf-8").splitlines()
    if line.strip()
]


def _object(line: str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


_OBJECTS = [value for line in _LINES if (value := _object(line)) is not None]


def make(rng: random.Random, root: Path) -> Path:
    files = [_file(rng) for _ in range(rng.choice((1, 1, 1, 2, 3)))]
    if len(files) == 1 and rng.random() < 0.8:
        path = root / rng.choice(["data.jsonl", "data.ndjson", "odd name.JSONL"])
        path.write_bytes(files[0])
        return path
    folder = root / "dump"
    (folder / "sub").mkdir(parents=True)
    for n, data in enumerate(files):
        (folder / ("sub" if n == 2 else "") / f"part{n}.jsonl").write_bytes(data)
    if rng.random() < 0.1 and hasattr(os, "mkfifo"):
        os.mkfifo(folder / "pipe.jsonl")
    if rng.random() < 0.1:
        (folder / ".hidden.jsonl").write_bytes(b"{not json")
    return folder


def _file(rng: random.Random) -> bytes:
    lines: list[bytes] = []
    for _ in range(rng.randint(1, 40)):
        lines.append(_line(rng))
    if rng.random() < 0.1:
        sources = rng.randint(20, 120)
        lines += [
            json.dumps({"source": f"s{i % sources}", "text": f"line {i}"}).encode()
            for i in range(sources * 2)
        ]
        rng.shuffle(lines)
    data = b"\n".join(lines) + rng.choice([b"\n", b"", b"\r\n"])
    if rng.random() < 0.1:
        data = damage(rng, data)
    return data


def _line(rng: random.Random) -> bytes:
    pick = rng.randrange(10)
    base: Any = json.loads(json.dumps(rng.choice(_OBJECTS)))
    if pick <= 3:
        return dumps(mutate_value(rng, base), rng).replace(b"\n", b" ")
    if pick == 4:
        base[rng.choice(["timestamp", "ts", "time", "date"])] = rng.choice(
            [*EDGE_DATES, 10**20, -(10**20), 1e308, "1e999", "nan"]
        )
        return json.dumps(base).encode()
    if pick == 5:
        base[rng.choice(["kind", "source", "tags", "text", "id", "author"])] = odd_value(rng)
        return dumps(base, rng).replace(b"\n", b" ")
    if pick == 6:
        return damage(rng, rng.choice(_LINES).encode()).replace(b"\n", b" ")
    if pick == 7:
        return rng.choice([b"", b"   ", b"\t"])
    return rng.choice(_LINES).encode()
