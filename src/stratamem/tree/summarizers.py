"""Name → summarizer registry.

Built-in summarizers:

==============  ==================================================================
``extractive``  the deterministic, model-free default (:mod:`stratamem.tree.extractive`)
``llm``         any OpenAI-compatible chat-completions server (:mod:`stratamem.tree.llm`);
                needs ``base_url`` and ``model``
==============  ==================================================================

The names are entries of :data:`stratamem.plugins.SUMMARIZERS`; third-party summarizers
register through its ``stratamem.summarizers`` entry-point group (see ``docs/plugins.md``): the
entry point's name is the summarizer's name and its object a factory called with the options
given to :func:`get_summarizer`. A plugin is imported only when its name is asked for, and
never replaces a built-in name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from stratamem import plugins
from stratamem.plugins import Registry
from stratamem.tree.summarizer import Summarizer

SummarizerFactory = Callable[..., Summarizer]

SUMMARIZERS: Registry[SummarizerFactory] = plugins.SUMMARIZERS
ENTRY_POINT_GROUP = SUMMARIZERS.group


def llm_summarizer(**options: Any) -> Summarizer:
    """The ``llm`` built-in: an :class:`~stratamem.tree.llm.LLMSummarizer`, which needs
    ``base_url`` and ``model``."""
    from stratamem.tree.llm import LLMSummarizer

    missing = [key for key in ("base_url", "model") if not options.get(key)]
    if missing:
        raise ValueError(f"the 'llm' summarizer needs {' and '.join(missing)}")
    return LLMSummarizer(**options)


def register_summarizer(name: str, factory: SummarizerFactory) -> None:
    """Make ``factory(**options)`` available as ``get_summarizer(name, **options)``."""
    SUMMARIZERS.register(name, factory)


def known_summarizers() -> list[str]:
    """The names :func:`get_summarizer` accepts, sorted."""
    return SUMMARIZERS.known()


def get_summarizer(name: str, **options: Any) -> Summarizer:
    """A new summarizer of the given registry name, built with ``options`` (keyword arguments
    of its class, e.g. ``get_summarizer("llm", base_url=..., model=...)``)."""
    return SUMMARIZERS.create(name, **options)
