"""What a long operation tells a door while it runs and when it ends: the progress and the
report of ingest, embedding, sealing, extraction, consolidation and locking, and the chunking
settings an ingest report shows. The doors take them from here rather than from the packages
that produce them."""

from stratamem.access.locks import LockReport
from stratamem.embed.indexing import EmbedProgress
from stratamem.ingest.chunking import ChunkingConfig
from stratamem.ingest.pipeline import IngestReport
from stratamem.ingest.pipeline import Progress as IngestProgress
from stratamem.memory.consolidate import ConsolidationProgress, ConsolidationReport
from stratamem.memory.extract import ExtractProgress, ExtractReport
from stratamem.tree.builder import SealProgress, SealReport

__all__ = [
    "ChunkingConfig",
    "ConsolidationProgress",
    "ConsolidationReport",
    "EmbedProgress",
    "ExtractProgress",
    "ExtractReport",
    "IngestProgress",
    "IngestReport",
    "LockReport",
    "SealProgress",
    "SealReport",
]
