"""Name → summarizer registry.

Built-in summarizers:

==============  ==================================================================
``extractive``  the deterministic, model-free default (:mod:`stratamem.tree.extractive`)
``llm``         any OpenAI-compatible chat-completions server (:mod:`stratamem.tree.llm`);
                needs ``base_url`` and ``model``
==============  ==================================================================

Third-party summarizers register through the ``stratamem.summarizers`` entry-point group: the
entry point's name is the summarizer's name and its object is a factory called with the options
given to :func:`get_summarizer`. A plugin is imported only when its name is asked for, and
never replaces a built-in name.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from stratamem.errors import RegistryError
from stratamem.tree.summarizer import Summarizer

ENTRY_POINT_GROUP = "stratamem.summarizers"

SummarizerFactory = Callable[..., Summarizer]


def _extractive(**options: Any) -> Summarizer:
    from stratamem.tree.extractive import ExtractiveSummarizer

    return ExtractiveSummarizer(**options)


def _llm(**options: Any) -> Summarizer:
    from stratamem.tree.llm import LLMSummarizer

    missing = [key for key in ("base_url", "model") if not options.get(key)]
    if missing:
        raise ValueError(f"the 'llm' summarizer needs {' and '.join(missing)}")
    return LLMSummarizer(**options)


_REGISTRY: dict[str, SummarizerFactory] = {
    "extractive": _extractive,
    "llm": _llm,
}
_loaded = False


def register_summarizer(name: str, factory: SummarizerFactory) -> None:
    """Make ``factory(**options)`` available as ``get_summarizer(name, **options)``."""
    _REGISTRY[name] = factory


def _plugin(entry_point: EntryPoint) -> SummarizerFactory:
    def factory(**options: Any) -> Summarizer:
        try:
            loaded = entry_point.load()
        except Exception as exc:  # a broken plugin must not look like a missing name
            raise RegistryError(
                f"summarizer plugin {entry_point.name!r} ({entry_point.value}) failed to load: "
                f"{exc}"
            ) from exc
        summarizer: Summarizer = loaded(**options)
        return summarizer

    return factory


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        _REGISTRY.setdefault(entry_point.name, _plugin(entry_point))


def known_summarizers() -> list[str]:
    """The names :func:`get_summarizer` accepts, sorted."""
    _load()
    return sorted(_REGISTRY)


def get_summarizer(name: str, **options: Any) -> Summarizer:
    """A new summarizer of the given registry name, built with ``options`` (keyword arguments
    of its class, e.g. ``get_summarizer("llm", base_url=..., model=...)``)."""
    _load()
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise RegistryError(
            f"unknown summarizer {name!r}; known: {', '.join(sorted(_REGISTRY))}"
        ) from None
    return factory(**options)
