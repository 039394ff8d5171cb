"""Name → embedder registry, plus the table of known models' dimensions and prefixes.

Built-in embedders:

=========================  ===============================================================
``minilm``                 all-MiniLM-L6-v2 on onnxruntime (the default; ships with the core)
``minilm-fast``            the same with per-channel int8 matrix products and int8 attention
                           projections: ~2× ``minilm``'s passages/s, cosine ≈ 0.995 to it;
                           its own model name, never mixed (see ``docs/embedders.md``)
``openai``                 any OpenAI-compatible ``/v1/embeddings`` server
``sentence-transformers``  any sentence-transformers model (the ``sentence-transformers`` extra)
``hashing``                feature hashing, model-free, for tests
=========================  ===============================================================

The names are entries of :data:`stratamem.plugins.EMBEDDERS`; third-party embedders register
through its ``stratamem.embedders`` entry-point group (see ``docs/plugins.md``): the entry
point's name is the embedder's name and its object a factory called with the options given to
:func:`get_embedder`. A plugin is imported only when its name is asked for, and never replaces
a built-in name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from stratamem import plugins
from stratamem.embed.base import Embedder, ModelSpec
from stratamem.plugins import Registry

EmbedderFactory = Callable[..., Embedder]

EMBEDDERS: Registry[EmbedderFactory] = plugins.EMBEDDERS
ENTRY_POINT_GROUP = EMBEDDERS.group


def register(name: str, factory: EmbedderFactory) -> None:
    """Make ``factory(**options)`` available as ``get_embedder(name, **options)``."""
    EMBEDDERS.register(name, factory)


def known() -> list[str]:
    """The names :func:`get_embedder` accepts, sorted."""
    return EMBEDDERS.known()


def get_embedder(name: str, **options: Any) -> Embedder:
    """A new embedder of the given registry name, built with ``options`` (keyword arguments of
    its class, e.g. ``get_embedder("openai", base_url=..., model=...)``)."""
    return EMBEDDERS.create(name, **options)


# Models whose dimension and prefixes are known, keyed by the name without organisation and
# tag, lower-cased (see :func:`model_key`). Prefixes are those of the models' cards.
_E5 = {"query_prefix": "query: ", "passage_prefix": "passage: "}
_BGE_EN = {"query_prefix": "Represent this sentence for searching relevant passages: "}
_NOMIC = {"query_prefix": "search_query: ", "passage_prefix": "search_document: "}

KNOWN_MODELS: dict[str, ModelSpec] = {
    "all-minilm-l6-v2": ModelSpec("all-MiniLM-L6-v2", 384, max_tokens=256),
    "all-minilm-l12-v2": ModelSpec("all-MiniLM-L12-v2", 384, max_tokens=256),
    "all-minilm": ModelSpec("all-minilm", 384, max_tokens=256),  # Ollama's name for L6
    "all-mpnet-base-v2": ModelSpec("all-mpnet-base-v2", 768, max_tokens=384),
    "e5-small-v2": ModelSpec("intfloat/e5-small-v2", 384, max_tokens=512, **_E5),
    "e5-base-v2": ModelSpec("intfloat/e5-base-v2", 768, max_tokens=512, **_E5),
    "e5-large-v2": ModelSpec("intfloat/e5-large-v2", 1024, max_tokens=512, **_E5),
    "multilingual-e5-small": ModelSpec(
        "intfloat/multilingual-e5-small", 384, max_tokens=512, **_E5
    ),
    "multilingual-e5-base": ModelSpec("intfloat/multilingual-e5-base", 768, max_tokens=512, **_E5),
    "multilingual-e5-large": ModelSpec(
        "intfloat/multilingual-e5-large", 1024, max_tokens=512, **_E5
    ),
    "bge-small-en-v1.5": ModelSpec("BAAI/bge-small-en-v1.5", 384, max_tokens=512, **_BGE_EN),
    "bge-base-en-v1.5": ModelSpec("BAAI/bge-base-en-v1.5", 768, max_tokens=512, **_BGE_EN),
    "bge-large-en-v1.5": ModelSpec("BAAI/bge-large-en-v1.5", 1024, max_tokens=512, **_BGE_EN),
    "bge-m3": ModelSpec("BAAI/bge-m3", 1024, max_tokens=8192),
    "nomic-embed-text-v1.5": ModelSpec(
        "nomic-ai/nomic-embed-text-v1.5", 768, max_tokens=8192, **_NOMIC
    ),
    "nomic-embed-text": ModelSpec("nomic-embed-text", 768, max_tokens=8192, **_NOMIC),
    "mxbai-embed-large": ModelSpec("mxbai-embed-large", 1024, max_tokens=512, **_BGE_EN),
    "text-embedding-3-small": ModelSpec("text-embedding-3-small", 1536, max_tokens=8191),
    "text-embedding-3-large": ModelSpec("text-embedding-3-large", 3072, max_tokens=8191),
    "text-embedding-ada-002": ModelSpec("text-embedding-ada-002", 1536, max_tokens=8191),
}


def model_key(model: str) -> str:
    """``BAAI/bge-small-en-v1.5`` → ``bge-small-en-v1.5``; ``nomic-embed-text:latest`` →
    ``nomic-embed-text``: the model's name without organisation or tag, lower-cased."""
    base = model.rstrip("/").rsplit("/", 1)[-1]
    return base.split(":", 1)[0].lower()


def known_model(model: str) -> ModelSpec | None:
    """The table's spec for ``model`` (a hub id, a local path ending in it, or an Ollama tag)."""
    return KNOWN_MODELS.get(model_key(model))


def model_spec(
    model: str,
    *,
    dim: int,
    query_prefix: str | None = None,
    passage_prefix: str | None = None,
    max_tokens: int | None = None,
) -> ModelSpec:
    """The spec of ``model``: what the caller gives, the table's defaults for the rest.

    The spec's name is ``model`` as given, so that the vectors of one deployment are never
    mixed with another's. The table's prefixes apply only when the caller gives neither.
    """
    known = known_model(model)
    if query_prefix is None and passage_prefix is None and known is not None:
        query_prefix, passage_prefix = known.query_prefix, known.passage_prefix
    if max_tokens is None and known is not None:
        max_tokens = known.max_tokens
    spec = ModelSpec(
        name=model, dim=dim, query_prefix=query_prefix or "", passage_prefix=passage_prefix or ""
    )
    return spec if max_tokens is None else replace(spec, max_tokens=max_tokens)
