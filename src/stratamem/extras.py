"""The optional packages: each belongs to an extra (``pip install 'stratamem[server]'``), and is
imported only inside the function that needs it, through :func:`require`, so the core imports
and runs without any of them.

=========================  ==========================================================
extra                      brings, for
=========================  ==========================================================
``server``                 fastapi, uvicorn: ``stratamem serve``
``mcp``                    the MCP SDK: ``stratamem mcp``, ``/mcp`` beside the HTTP API
``postgres``               psycopg 3 and its pool: ``postgresql://`` stores
``eval``                   pytrec_eval: the metrics of ``stratamem eval`` and ``tune``
``llm``                    httpx: OpenAI-compatible embeddings, LLM summaries, extraction
``rerank``                 httpx: the HTTP reranker
``sentence-transformers``  sentence-transformers (and torch): its embedders, cross-encoders
``fast``                   onnx: building the ``minilm-fast`` model
``keyring``                keyring: lock passphrases from the OS keyring
=========================  ==========================================================
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from stratamem.errors import MissingExtraError


def require(
    module: str, extra: str, what: str, *, error: type[MissingExtraError] = MissingExtraError
) -> ModuleType:
    """``module`` imported; when it cannot be, ``error`` (a :class:`MissingExtraError`) saying
    ``<what> needs the '<extra>' extra: pip install 'stratamem[<extra>]'``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise error(what, extra=extra) from exc


def check(
    module: str, extra: str, what: str, *, error: type[MissingExtraError] = MissingExtraError
) -> None:
    """:func:`require` without the import, for a package slow to import (torch) that is
    imported when first used: fails now, not then, when it is not installed."""
    if not installed(module):
        raise error(what, extra=extra)


def installed(module: str) -> bool:
    """Whether ``module`` is there to import (found, not imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module set to None
        return False
