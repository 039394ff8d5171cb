"""The Python API: ``mem = stratamem.open(path)``, then ingest, search and inspect; the same
as coroutines with ``stratamem.open_async(path)``."""

from stratamem.api.aio import AsyncMemory, open_async
from stratamem.api.memory import DEFAULT_EMBEDDER, Memory, open

__all__ = ["DEFAULT_EMBEDDER", "AsyncMemory", "Memory", "open", "open_async"]
