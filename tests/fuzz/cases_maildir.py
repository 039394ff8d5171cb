"""Fuzzed Maildirs: the fixture Maildir, messages mutated as in ``cases_email``, plus FIFOs and
device links in ``new/`` and ``cur/``, names that are not UTF-8, empty messages and a
sub-folder."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from cases_email import messages
from text_mutations import add_irregular, mutate_message, odd_name

NAME = "maildir"
CONNECTOR = "maildir"

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "email" / "Maildir"


def make(rng: random.Random, root: Path) -> Path:
    box = root / "Maildir"
    shutil.copytree(FIXTURE, box, symlinks=True)
    files = sorted(p for p in box.rglob("*") if p.is_file() and p.parent.name in ("cur", "new"))
    for file in rng.sample(files, rng.randint(1, len(files))):
        file.write_bytes(mutate_message(rng, file.read_bytes()))
    extra = rng.randrange(5)
    if extra == 0:
        add_irregular(rng, box / rng.choice(("new", "cur")), "1709999999.M9P1.fifo")
    elif extra == 1:
        message = rng.choice(messages("sample.mbox")).partition(b"\n")[2]
        (box / "new" / odd_name(rng, "")).write_bytes(mutate_message(rng, message))
    elif extra == 2:
        (box / "new" / "1709999999.empty").write_bytes(b"")
        sub = box / ".Sent"
        for name in ("cur", "new", "tmp"):
            (sub / name).mkdir(parents=True, exist_ok=True)
        add_irregular(rng, sub / "cur", "pipe")
    return box
