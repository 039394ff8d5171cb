"""The pluggable parts a door configures a memory with, from the API layer: embedders (by
name from the registry), rerankers and summarizers. The doors (CLI, servers) take them from
here rather than from the packages that implement them."""

from stratamem.embed.base import Embedder, Role, Vectors
from stratamem.embed.registry import get_embedder
from stratamem.retrieval.rerank import Reranker
from stratamem.tree.summarizer import Summarizer

__all__ = ["Embedder", "Reranker", "Role", "Summarizer", "Vectors", "get_embedder"]
