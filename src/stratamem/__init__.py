"""stratamem: a local-first retrieval and memory engine for AI agents."""

from stratamem.api import Memory, default_db_path, open
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
from stratamem.types import (
    Chunk,
    EntityMatch,
    Filters,
    NodeKind,
    QueryResponse,
    RetrievalHit,
    Source,
    SourceKind,
)

__all__ = [
    "Chunk",
    "EntityMatch",
    "Filters",
    "IngestError",
    "IngestReport",
    "Memory",
    "NodeKind",
    "NotFoundError",
    "QueryResponse",
    "RegistryError",
    "RetrievalHit",
    "SchemaError",
    "Source",
    "SourceFormatError",
    "SourceKind",
    "StoreError",
    "StratamemError",
    "UnknownFormatError",
    "default_db_path",
    "open",
]

__version__ = "0.1.0"
