"""Reading an evaluation dataset whatever its layout: BEIR or LoCoMo, told apart by the
files present."""

from __future__ import annotations

import os
from pathlib import Path

from stratamem.eval.beir import TEST_QRELS, is_beir, load_beir
from stratamem.eval.datasets import Dataset, Level
from stratamem.eval.locomo import is_locomo, load_locomo


def load_dataset(path: str | os.PathLike[str], *, level: Level = "turn") -> Dataset:
    """Read a BEIR folder or a LoCoMo folder, telling them apart by the files present.

    ``level="session"`` asks LoCoMo for one doc per session (``locomo-sessions``) instead
    of one per dialog turn; BEIR data has no sessions and rejects it.
    """
    root = Path(path)
    if not root.exists():
        raise ValueError(f"{root}: no such file or folder")
    if is_locomo(root):
        return load_locomo(root, level=level)
    if is_beir(root):
        if level != "turn":
            raise ValueError(f"{root}: a BEIR dataset has no {level!r} level")
        return load_beir(root)
    raise ValueError(
        f"{root}: not a dataset folder stratamem knows. Expected BEIR (corpus.jsonl, "
        f"queries.jsonl and one of {', '.join(TEST_QRELS)}) or LoCoMo "
        "(locomo10.json, or corpus_turns.jsonl with queries.jsonl and qrels_turns.tsv)"
    )
