"""stratamem: a local-first retrieval and memory engine for AI agents."""

from stratamem.api import Memory, open
from stratamem.config import SearchConfig, TreeConfig, WeightProfile
from stratamem.embed.base import Embedder, ModelSpec
from stratamem.errors import (
    IngestError,
    NotFoundError,
    RegistryError,
    SchemaError,
    SourceFormatError,
    StoreError,
    StratamemError,
    UnknownFormatError,
)
from stratamem.ingest.pipeline import IngestReport
from stratamem.tree.builder import SealReport
from stratamem.tree.summarizer import Summarizer, SummaryItem
from stratamem.types import (
    Card,
    Chunk,
    EntityMatch,
    Filters,
    NodeKind,
    QueryResponse,
    RetrievalHit,
    ScoreBreakdown,
    SearchResponse,
    Source,
    SourceKind,
    SummaryNode,
    Tree,
    TreeKind,
)

__all__ = [
    "Card",
    "Chunk",
    "Embedder",
    "EntityMatch",
    "Filters",
    "IngestError",
    "IngestReport",
    "Memory",
    "ModelSpec",
    "NodeKind",
    "NotFoundError",
    "QueryResponse",
    "RegistryError",
    "RetrievalHit",
    "SchemaError",
    "ScoreBreakdown",
    "SealReport",
    "SearchConfig",
    "SearchResponse",
    "Source",
    "SourceFormatError",
    "SourceKind",
    "StoreError",
    "StratamemError",
    "Summarizer",
    "SummaryItem",
    "SummaryNode",
    "Tree",
    "TreeConfig",
    "TreeKind",
    "UnknownFormatError",
    "WeightProfile",
    "open",
]

__version__ = "0.1.0"
