"""Fuzzed ``.eml`` files: the fixture messages mutated as in ``cases_email``, as a folder (with
FIFOs, device links and a folder named like a message beside them) or one file."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from text_mutations import add_irregular, mutate_message, odd_name

NAME = "eml"
CONNECTOR = "eml"

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "email" / "eml"


def make(rng: random.Random, root: Path) -> Path:
    folder = root / "eml"
    shutil.copytree(FIXTURE, folder)
    files = sorted(folder.glob("*.eml"))
    for file in rng.sample(files, rng.randint(1, len(files))):
        file.write_bytes(mutate_message(rng, file.read_bytes()))
    extra = rng.randrange(5)
    if extra == 0:
        add_irregular(rng, folder, "pipe.eml")
    elif extra == 1:
        (folder / odd_name(rng, ".eml")).write_bytes(mutate_message(rng, files[0].read_bytes()))
    elif extra == 2:
        (folder / "folder.eml").mkdir()
    if rng.random() < 0.25:
        return rng.choice(files)
    return folder
