"""``Memory``: its facets, made once and holding it weakly; the old flat names gone; no class of
the package past 400 lines; the README's example running on the example workspace."""

from __future__ import annotations

import ast
import contextlib
import gc
import io
import re
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

import stratamem
from stratamem.api import memory as memory_module
from stratamem.api._core import Facet
from stratamem.api.memory import FACETS
from stratamem.errors import StratamemError
from stratamem.testing import HashingEmbedder

API = Path(stratamem.__file__).parent / "api"
ROOT = Path(__file__).resolve().parents[2]
# Each old method of Memory, and where it went.
MOVED = {
    "add": "items.add",
    "update": "items.edit",
    "delete": "items.rm",
    "item": "items.get",
    "remember": "facts.remember",
    "retract": "facts.retract",
    "recall": "facts.recall",
    "set_extraction": "facts.set_extraction",
    "extraction": "facts.extraction",
    "consolidate_after_ingest": "facts.consolidate_after_ingest",
    "fact_history": "facts.history",
    "query_facts": "facts.query",
    "search_facts": "facts.search",
    "extract_facts": "facts.extract",
    "rollups": "facts.rollups",
    "consolidate": "facts.consolidate",
    "source": "sources.get",
    "forget": "sources.forget",
    "set_access": "sources.set_access",
    "add_principal": "principals.add",
    "remove_principal": "principals.remove",
    "rotate_principal": "principals.rotate",
    "authenticate": "principals.authenticate",
    "lock": "locks.lock",
    "unlock": "locks.unlock",
    "build_trees": "trees.build",
    "flush": "trees.flush",
    "tree": "trees.get",
    "tree_stats": "trees.stats",
    "tree_tops": "trees.tops",
    "unsealed_leaves": "trees.unsealed",
    "tree_builder": "trees.tree_builder",
    "embed": "indexes.embed",
    "reindex": "indexes.reindex",
    "build_indexes": "indexes.build",
    "pending_embeddings": "indexes.pending",
    "set_keyword_tokenizer": "indexes.set_keyword_tokenizer",
    "keyword_tokenizer": "indexes.keyword_tokenizer",
    "save_tuned_weights": "indexes.save_tuned_weights",
}


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[stratamem.Memory]:
    with stratamem.open(tmp_path / "m.db", embedder=None) as opened:
        yield opened


def test_every_facet_is_made_once(memory: stratamem.Memory) -> None:
    assert set(FACETS) == {
        "items",
        "entities",
        "facts",
        "sources",
        "principals",
        "locks",
        "trees",
        "indexes",
    }
    for name, kind in FACETS.items():
        facet = getattr(memory, name)
        assert type(facet) is kind
        assert isinstance(facet, Facet)
        assert getattr(memory, name) is facet


@pytest.mark.parametrize("old", sorted(MOVED))
def test_a_moved_name_is_not_left_on_memory(memory: stratamem.Memory, old: str) -> None:
    facet, _, new = MOVED[old].partition(".")
    assert not hasattr(stratamem.Memory, old)
    assert hasattr(type(getattr(memory, facet)), new)


def test_a_closed_memory_is_freed_without_the_cycle_collector(tmp_path: Path) -> None:
    # A memory held by its own facets would keep its embedder's threads alive after close
    # until the collector ran, and a process forked meanwhile would inherit them.
    gc.collect()
    gc.disable()
    try:
        opened = stratamem.open(tmp_path / "m.db", embedder=HashingEmbedder())
        items = opened.items
        gone = weakref.ref(opened)
        opened.close()
        del opened
        assert gone() is None
        with pytest.raises(StratamemError, match="the memory of this items is gone"):
            items.add("late")
    finally:
        gc.enable()


def test_no_class_of_the_api_is_past_400_lines() -> None:
    sizes = {
        f"{path.name}:{node.name}": (node.end_lineno or node.lineno) - node.lineno + 1
        for path in sorted(API.glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
    }
    assert "memory.py:Memory" in sizes
    assert {name: size for name, size in sizes.items() if size > 400} == {}


def test_the_readme_example_runs_on_the_example_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    readme = (ROOT / "README.md").read_text()
    (code,) = re.findall(
        r"\nFrom Python[^\n]*\n\n(?:<!--.*?-->\n)?```python\n(.*?)```", readme, re.DOTALL
    )
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    # The hashing embedder in place of the bundled model: the same calls, in a second.
    real_open = memory_module.open
    monkeypatch.setattr(
        stratamem, "open", lambda path, **kw: real_open(path, embedder=HashingEmbedder(), **kw)
    )
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "README.md", "exec"), {})
    shown = printed.getvalue()
    assert "Redis" in shown
    assert re.match(r"\d+ chunks, 0 skipped items\n", shown)
    assert "2024-03-" in shown  # the channel's summaries, with their times
