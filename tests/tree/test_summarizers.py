"""The name → summarizer registry."""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import EntryPoint
from typing import Any

import pytest

from stratamem import plugins
from stratamem.errors import RegistryError
from stratamem.tree import summarizers
from stratamem.tree.extractive import ExtractiveSummarizer
from stratamem.tree.llm import LLMSummarizer
from stratamem.tree.summarizer import Summarizer, SummaryItem
from stratamem.tree.summarizers import get_summarizer, known_summarizers, register_summarizer

BUILT_IN = ["extractive", "llm"]


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> list[EntryPoint]:
    """Entry points the registry will see, with a fresh registry."""
    found: list[EntryPoint] = []

    def entry_points(*, group: str) -> list[EntryPoint]:
        assert group == "stratamem.summarizers"
        return found

    monkeypatch.setattr(plugins, "entry_points", entry_points)
    monkeypatch.setattr(summarizers, "SUMMARIZERS", summarizers.SUMMARIZERS.copy())
    return found


class Echo:
    """A plugin summarizer: the first item's text."""

    def __init__(self, *, prefix: str = "") -> None:
        self.name = "echo"
        self.prefix = prefix

    def summarize(self, items: Sequence[SummaryItem], *, budget: int) -> str:
        return self.prefix + items[0].text


def make_echo(**options: Any) -> Summarizer:
    return Echo(**options)


def test_known_lists_the_built_ins_sorted(registry: list[EntryPoint]) -> None:
    assert known_summarizers() == BUILT_IN


def test_extractive_with_options() -> None:
    summarizer = get_summarizer("extractive", redundancy=0.5)
    assert isinstance(summarizer, ExtractiveSummarizer)
    assert summarizer.redundancy == 0.5


def test_llm_with_options() -> None:
    summarizer = get_summarizer("llm", base_url="http://localhost:11434", model="qwen3:4b")
    assert isinstance(summarizer, LLMSummarizer)
    assert summarizer.name == "llm:qwen3:4b"
    assert summarizer.url == "http://localhost:11434/v1/chat/completions"


@pytest.mark.parametrize(
    ("options", "missing"),
    [({}, "base_url and model"), ({"model": "m"}, "base_url"), ({"base_url": "http://h"}, "model")],
)
def test_llm_needs_base_url_and_model(options: dict[str, str], missing: str) -> None:
    with pytest.raises(ValueError, match=f"needs {missing}$"):
        get_summarizer("llm", **options)


def test_unknown_name_lists_the_known_ones(registry: list[EntryPoint]) -> None:
    with pytest.raises(RegistryError) as caught:
        get_summarizer("abstractive")
    assert str(caught.value) == "unknown summarizer 'abstractive'; known: extractive, llm"


def test_register(registry: list[EntryPoint]) -> None:
    register_summarizer("echo", make_echo)
    assert "echo" in known_summarizers()
    summarizer = get_summarizer("echo", prefix="> ")
    assert summarizer.summarize([SummaryItem("a", "hello")], budget=5) == "> hello"


def test_entry_point_plugin(registry: list[EntryPoint]) -> None:
    registry.append(EntryPoint("echo", f"{__name__}:make_echo", "stratamem.summarizers"))
    registry.append(EntryPoint("extractive", f"{__name__}:make_echo", "stratamem.summarizers"))
    assert known_summarizers() == ["echo", "extractive", "llm"]
    assert isinstance(get_summarizer("echo"), Echo)
    # A plugin never replaces a built-in name.
    assert isinstance(get_summarizer("extractive"), ExtractiveSummarizer)


def test_broken_plugin_is_a_registry_error(registry: list[EntryPoint]) -> None:
    registry.append(EntryPoint("broken", "no_such_module_xyz:factory", "stratamem.summarizers"))
    assert "broken" in known_summarizers()
    with pytest.raises(RegistryError, match=r"'broken' .* failed to load"):
        get_summarizer("broken")
