"""Whether two versions of the code search alike: every hit (id and score), every card (text,
tokens, form, tier-0 mark, reason) and every note of a limit-10 search with a budget.

Run it once per version, each on copies of the same evaluation stores, then compare:

    git archive <commit> src | tar -x -C /tmp/before
    PYTHONPATH=/tmp/before/src python benchmarks/search_identity.py dump before.json
    PYTHONPATH=src python benchmarks/search_identity.py dump after.json
    python benchmarks/search_identity.py compare before.json after.json

Queries: the first ``--queries`` test queries of SciFact (claims over its abstracts) and of
LoCoMo (questions over its conversations' turns), at each of ``--budgets``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "stratamem" / "eval"


def dump(target: Path, queries: int, budgets: list[int]) -> None:
    import stratamem
    from stratamem.eval import load_dataset
    from stratamem.eval.runner import store_path

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("scifact", "locomo"):
            dataset = load_dataset(DATA / name)
            original = store_path(dataset, CACHE)
            path = Path(tmp) / original.name
            shutil.copy(original, path)
            questions = [q.text for q in dataset.queries_in("test")][:queries]
            with stratamem.open(path) as mem:
                for budget in budgets:
                    for question in questions:
                        r = mem.search(question, limit=10, budget=budget)
                        out[f"{name}|{budget}|{question}"] = {
                            "hits": [[h.node_id, h.score] for h in r.hits],
                            "cards": [
                                [c.hit.node_id, c.text, c.tokens, c.form, c.tier0, c.reason]
                                for c in r.cards
                            ],
                            "notes": list(r.notes),
                        }
    target.write_text(json.dumps(out))
    print(f"{len(out)} searches written to {target}")


def compare(first: Path, second: Path) -> int:
    a, b = json.loads(first.read_text()), json.loads(second.read_text())
    differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    cards = sum(len(v["cards"]) for v in a.values())
    print(f"{len(a)} searches, {cards} cards: {len(differ)} differ")
    for key in differ[:10]:
        print("  ", key)
    return 1 if differ else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump")
    d.add_argument("target", type=Path)
    d.add_argument("--queries", type=int, default=300)
    d.add_argument("--budgets", type=int, nargs="+", default=[500, 2000])
    c = sub.add_parser("compare")
    c.add_argument("first", type=Path)
    c.add_argument("second", type=Path)
    args = parser.parse_args()
    if args.command == "dump":
        dump(args.target, args.queries, args.budgets)
    else:
        sys.exit(compare(args.first, args.second))


if __name__ == "__main__":
    main()
