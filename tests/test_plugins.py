"""The one registry mechanism and the list of extension points."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

from stratamem import plugins
from stratamem.errors import RegistryError
from stratamem.plugins import Registry

GROUP = "stratamem.things"

EXTENSION_POINTS = {
    "STORES": ("stratamem.stores", ["sqlite"]),
    "CONNECTORS": (
        "stratamem.connectors",
        ["discord", "eml", "irc", "jsonl", "maildir", "markdown", "mbox", "slack"],
    ),
    "EMBEDDERS": (
        "stratamem.embedders",
        ["hashing", "minilm", "minilm-fast", "openai", "sentence-transformers"],
    ),
    "SUMMARIZERS": ("stratamem.summarizers", ["extractive", "llm"]),
    "RERANKERS": ("stratamem.rerankers", ["cross-encoder", "http"]),
}


def make_thing(*args: Any, **options: Any) -> tuple[Any, ...]:
    return ("thing", args, options)


@pytest.fixture
def group(monkeypatch: pytest.MonkeyPatch) -> list[EntryPoint]:
    """The entry points every registry will see."""
    found: list[EntryPoint] = []

    def entry_points(*, group: str) -> list[EntryPoint]:
        return [entry for entry in found if entry.group == group]

    monkeypatch.setattr(plugins, "entry_points", entry_points)
    return found


def things(**builtins: Callable[..., Any] | str) -> Registry[Callable[..., Any]]:
    return Registry("thing", GROUP, builtins)


def test_a_reference_is_imported_only_when_its_name_is_asked_for(group: list[EntryPoint]) -> None:
    registry = things(ok=f"{__name__}:make_thing", gone="no_such_module_xyz:factory")
    assert registry.known() == ["gone", "ok"]  # listing imports nothing
    assert registry.create("ok", 1, flag=True) == ("thing", (1,), {"flag": True})
    assert registry.load("ok") is make_thing
    with pytest.raises(RegistryError, match=r"thing plugin 'gone' \(no_such_module_xyz:factory\)"):
        registry.load("gone")


def test_an_unknown_name_lists_the_known_ones(group: list[EntryPoint]) -> None:
    registry = things(b=make_thing, a=make_thing)
    with pytest.raises(RegistryError) as caught:
        registry.create("c")
    assert str(caught.value) == "unknown thing 'c'; known: a, b"


def test_entry_points_add_names_but_never_replace_a_built_in(group: list[EntryPoint]) -> None:
    group.append(EntryPoint("extra", f"{__name__}:make_thing", GROUP))
    group.append(EntryPoint("a", "no_such_module_xyz:factory", GROUP))
    group.append(EntryPoint("elsewhere", f"{__name__}:make_thing", "stratamem.other"))
    registry = things(a=dict)
    assert registry.known() == ["a", "extra"]
    assert registry.create("a") == {}
    assert registry.create("extra")[0] == "thing"


def test_register_replaces_and_accepts_references(group: list[EntryPoint]) -> None:
    group.append(EntryPoint("extra", "no_such_module_xyz:factory", GROUP))
    registry = things(a=dict)
    registry.register("a", f"{__name__}:make_thing")
    registry.register("extra", list)
    assert registry.create("a")[0] == "thing"
    assert registry.create("extra") == []


def test_a_copy_keeps_registered_names_and_reads_the_group_again(
    group: list[EntryPoint],
) -> None:
    group.append(EntryPoint("extra", f"{__name__}:make_thing", GROUP))
    registry = things(a=dict)
    registry.register("mine", list)
    assert registry.known() == ["a", "extra", "mine"]
    group.clear()
    fresh = registry.copy()
    assert fresh.known() == ["a", "mine"]
    fresh.register("only-here", set)
    assert "only-here" not in registry.known()


def test_a_module_entry_point_registers_its_parts_when_the_group_is_read(
    group: list[EntryPoint], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = things()
    monkeypatch.setattr(sys.modules[__name__], "REGISTRY", registry, raising=False)
    (tmp_path / "old_style_plugin_xyz.py").write_text(
        f"import {__name__} as host\nhost.REGISTRY.register('old', dict)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    group.append(EntryPoint("ignored", "old_style_plugin_xyz", GROUP))
    assert registry.known() == ["old"]
    assert registry.create("old") == {}


def test_a_broken_module_entry_point_names_itself_every_time(group: list[EntryPoint]) -> None:
    group.append(EntryPoint("old", "no_such_module_xyz", GROUP))
    group.append(EntryPoint("extra", f"{__name__}:make_thing", GROUP))
    registry = things()
    for _ in range(2):
        with pytest.raises(RegistryError, match=r"thing plugin 'old' \(no_such_module_xyz\)"):
            registry.known()


@pytest.mark.parametrize("registry", sorted(EXTENSION_POINTS))
def test_the_extension_points(group: list[EntryPoint], registry: str) -> None:
    entry_group, names = EXTENSION_POINTS[registry]
    found: Registry[Any] = getattr(plugins, registry).copy()
    assert found.group == entry_group
    assert set(names) <= set(found.known())  # other tests may register more
    for name in names:  # every built-in reference names a factory
        assert callable(found.load(name))


def test_importing_stratamem_imports_no_connector_embedder_or_reranker_backend() -> None:
    code = textwrap.dedent(
        """
        import sys
        import stratamem
        heavy = (
            "stratamem.ingest.connectors.",
            "stratamem.embed.onnx_minilm",
            "stratamem.embed.http",
            "stratamem.embed.sentence_transformers",
            "stratamem.tree.llm",
        )
        print(sorted(name for name in sys.modules if name.startswith(heavy)))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
