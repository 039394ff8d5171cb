"""Fuzzed notes folders: the fixture vault or TIL collection, mutated (or one note of it).

Mutations: front matter replaced by YAML alias bombs, recursive aliases, deep nesting, values of
the wrong type, dates at the calendar's edge with a zone, impossible dates, unsafe tags, huge
integers and escaped lone surrogates; bodies damaged as bytes (cut, flipped, not UTF-8, CR-only,
BOMs, NULs) or given a long pathological line; the dates file garbled; FIFOs and device links
named like notes; names that are not UTF-8; empty notes and a folder named like a note.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from text_mutations import EDGE_DATES, add_irregular, damage, long_line, odd_name, to_bytes

NAME = "markdown"
CONNECTOR = "markdown"

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "markdown"

_BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n"
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
)
_FRONT_MATTER = (
    _BOMB,
    "a: &a [1, *a]\ntags: *a\n",
    "x: &x {k: *x}\n",
    "tags: " + "[" * 900 + "]" * 900 + "\n",
    "tags: " + "- " * 200 + "x\n",
    "tags: {a: [1, 2]}\ndate: [1, 2]\ntitle: {x: 1}\naliases: 12\nauthor: {a: b}\n",
    "title: 0x" + "f" * 5000 + "\n",
    "title: " + ":".join(["59"] * 3000) + "\n",
    'title: "\\ud800 half"\ntags: ["\\udbff"]\n',
    "title: !!binary aGVsbG8=\ndate: !!timestamp 2024-02-30\n",
    "title: !!python/object:os.system {}\n",
    "base: &b {tags: [x]}\n<<: *b\nother:\n  <<: [*b, *b]\n",
    "? [a, b]\n: c\n",
    "title: .nan\nupdated: .inf\ncreated: !!set {a, b}\n",
    "- just\n- a list\n",
    "title: '" + "x" * 100_000 + "'\n",
    "tags: [" + ", ".join(f"t{i}" for i in range(20_000)) + "]\n",
    "\t bad: [indent\n",
)


def _front_matter(rng: random.Random) -> str:
    pick = rng.randrange(3)
    if pick == 0:
        return rng.choice(_FRONT_MATTER)
    key = rng.choice(("date", "created", "updated", "modified", "lastmod"))
    value = rng.choice(EDGE_DATES)
    return f"{key}: {value}\n" if pick == 1 else f"{key}: '{value}'\ntitle: edge\n"


def _mutate_note(rng: random.Random, file: Path) -> None:
    text = file.read_text("utf-8") if file.stat().st_size else ""
    pick = rng.randrange(4)
    if pick == 0:
        body = text.split("\n---\n", 1)[-1] if text.startswith("---\n") else text
        text = f"---\n{_front_matter(rng)}---\n{body}"
    elif pick == 1:
        at = rng.randrange(len(text) + 1)
        text = text[:at] + "\n" + long_line(rng) + "\n" + text[at:]
    elif pick == 2:
        text = f"---\n{_front_matter(rng)}---\n# {' ' * 50_000}x\n" + text
    file.write_bytes(damage(rng, to_bytes(rng, text)) if pick == 3 else to_bytes(rng, text))


def make(rng: random.Random, root: Path) -> Path:
    source = FIXTURES / rng.choice(("vault", "til-like"))
    notes = root / "notes"
    shutil.copytree(source, notes)
    files = sorted(p for p in notes.rglob("*") if p.is_file() and p.suffix in (".md", ".txt"))
    for file in rng.sample(files, rng.randint(1, len(files))):
        _mutate_note(rng, file)
    extra = rng.randrange(6)
    if extra == 0:
        add_irregular(rng, notes, rng.choice(("fifo.md", "README.md", "daily/pipe.md")))
    elif extra == 1:
        (notes / odd_name(rng, ".md")).write_bytes(b"---\ntitle: odd name\n---\nbody [[x]]\n")
    elif extra == 2:
        dates = notes / "_file_added_dates.tsv"
        lines = "".join(f"{rng.choice(EDGE_DATES)[:10]}\t{f.relative_to(notes)}\n" for f in files)
        dates.write_bytes(damage(rng, lines.encode()) if rng.random() < 0.5 else lines.encode())
        if rng.random() < 0.2:
            add_irregular(rng, notes, "_file_added_dates.tsv")
    elif extra == 3:
        (notes / "folder.md").mkdir()
        (notes / "empty.md").write_bytes(b"")
    if rng.random() < 0.15:
        return rng.choice(files) if all(f.is_file() for f in files) else notes
    return notes
