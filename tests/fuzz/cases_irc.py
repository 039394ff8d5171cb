"""Fuzzed IRC logs: the fixture channel folder, mutated (or one log of it).

Mutations: full timestamps at the calendar's edge with a zone, impossible zones and hours;
file names dated 0001-01-01 or 9999-12-31 (so clock times run off the calendar); lines damaged
as bytes (not UTF-8, CR-only, NULs, encoded lone surrogates, cut) or made long and pathological;
FIFOs and device links named like logs; names that are not UTF-8.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from text_mutations import add_irregular, damage, long_line, odd_name, to_bytes

NAME = "irc"
CONNECTOR = "irc"

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "irc" / "phoenix-dev"

_STAMPS = (
    "[0001-01-01 00:10:00+05:00]",
    "[0001-01-01T00:00:00+14:00]",
    "[9999-12-31 23:59:59-05:00]",
    "[9999-12-31T23:59:59Z]",
    "[2024-03-11 12:18:02+9999]",
    "[2024-02-30 10:00]",
    "[99:99]",
    "[23:59:59.999999999]",
    "[00:00]",
    "[12:00]",
    "[01:00]",
)
_NAMES = ("0001-01-01.log", "9999-12-31.log", "9999-12-31_23.txt", "0001-01-01_00.log")


def _line(rng: random.Random) -> str:
    stamp = rng.choice(_STAMPS)
    pick = rng.randrange(5)
    if pick == 0:
        nick = rng.choice(("a", "@b", "\ud800", "x" * 300))
        return f"{stamp} <{nick}> hi c: there"
    if pick == 1:
        return f"{stamp} * nick {long_line(rng)}"
    if pick == 2:
        return f"{stamp} <nick> {long_line(rng)}"
    if pick == 3:
        return f"=== {long_line(rng)} has joined"
    return long_line(rng)


def _mutate_log(rng: random.Random, file: Path) -> None:
    lines = file.read_text("utf-8").split("\n")
    for _ in range(rng.randint(1, 6)):
        lines.insert(rng.randrange(len(lines) + 1), _line(rng))
    data = to_bytes(rng, "\n".join(lines))
    file.write_bytes(damage(rng, data) if rng.random() < 0.4 else data)


def make(rng: random.Random, root: Path) -> Path:
    logs = root / "phoenix-dev"
    shutil.copytree(FIXTURE, logs)
    files = sorted(logs.glob("*.log"))
    for file in files:
        if rng.random() < 0.3:
            file = file.rename(logs / rng.choice(_NAMES))
        _mutate_log(rng, file)
    extra = rng.randrange(5)
    if extra == 0:
        add_irregular(rng, logs, rng.choice(("pipe.log", "2024-03-20.log", "zz.txt")))
    elif extra == 1:
        name = odd_name(rng, ".log")
        (logs / name).write_bytes(b"[10:00] <a> odd name\n[10:01] <b> a: yes\n")
    files = sorted(p for p in logs.iterdir() if p.is_file() and p.suffix == ".log")
    if files and rng.random() < 0.2:
        return rng.choice(files)
    return logs
