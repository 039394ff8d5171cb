"""The pluggable parts a door configures a memory with, from the API layer: embedders (by
name from the registry), rerankers (by name from ``RERANKERS``), summarizers and the ingest
connectors. The doors (CLI, servers) take them from here rather than from the packages that
implement them."""

from stratamem.embed.base import Embedder, Role, Vectors
from stratamem.embed.registry import get_embedder
from stratamem.ingest.registry import known as known_connectors
from stratamem.plugins import RERANKERS
from stratamem.retrieval.rerank import Reranker
from stratamem.tree.summarizer import Summarizer
from stratamem.tree.summarizers import get_summarizer

__all__ = [
    "RERANKERS",
    "Embedder",
    "Reranker",
    "Role",
    "Summarizer",
    "Vectors",
    "get_embedder",
    "get_summarizer",
    "known_connectors",
]
