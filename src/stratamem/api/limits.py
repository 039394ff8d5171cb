"""The largest ``limit`` each read takes, for a door to check and show before it asks."""

from stratamem.entities.merges import MAX_HISTORY as MAX_ENTITY_HISTORY
from stratamem.entities.search import MAX_LIMIT as MAX_ENTITY_LIMIT
from stratamem.retrieval.hybrid import MAX_LIMIT as MAX_SEARCH_LIMIT
from stratamem.retrieval.primitives import MAX_LIMIT as MAX_PRIMITIVE_LIMIT

__all__ = ["MAX_ENTITY_HISTORY", "MAX_ENTITY_LIMIT", "MAX_PRIMITIVE_LIMIT", "MAX_SEARCH_LIMIT"]
