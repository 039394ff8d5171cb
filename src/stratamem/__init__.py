"""stratamem: a local-first retrieval and memory engine for AI agents."""

from stratamem.api import AsyncMemory, Memory, open, open_async
from stratamem.config import SearchConfig, TreeConfig, WeightProfile
from stratamem.embed.base import Embedder, ModelSpec
from stratamem.errors import (
    AccessDenied,
    AccessError,
    ConfigError,
    IngestError,
    LockError,
    MissingExtraError,
    NotFoundError,
    RegistryError,
    SchemaError,
    SourceFormatError,
    StoreError,
    StratamemError,
    UnknownFormatError,
    WrongPassphrase,
)
from stratamem.ingest.pipeline import IngestReport
from stratamem.store.copy import CopyReport, copy_store
from stratamem.tree.builder import SealReport
from stratamem.tree.summarizer import Summarizer, SummaryItem
from stratamem.types import (
    Card,
    Chunk,
    EntityDecision,
    EntityMatch,
    Filters,
    NodeKind,
    Principal,
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
    "AccessDenied",
    "AccessError",
    "AsyncMemory",
    "Card",
    "Chunk",
    "ConfigError",
    "CopyReport",
    "Embedder",
    "EntityDecision",
    "EntityMatch",
    "Filters",
    "IngestError",
    "IngestReport",
    "LockError",
    "Memory",
    "MissingExtraError",
    "ModelSpec",
    "NodeKind",
    "NotFoundError",
    "Principal",
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
    "WrongPassphrase",
    "copy_store",
    "open",
    "open_async",
]

__version__ = "0.1.0"
