"""The records a door writes and shows: facts, items and their versions, rollups, and the
sources each is filed under when none is named."""

from stratamem.ingest.items import DEFAULT_SOURCE as DEFAULT_ITEM_SOURCE
from stratamem.ingest.items import UNSET, ItemVersion, ItemWrite
from stratamem.memory.remember import DEFAULT_SOURCE as DEFAULT_FACT_SOURCE
from stratamem.store.facts import Fact, FactWrite
from stratamem.store.rollups import Rollup

__all__ = [
    "DEFAULT_FACT_SOURCE",
    "DEFAULT_ITEM_SOURCE",
    "UNSET",
    "Fact",
    "FactWrite",
    "ItemVersion",
    "ItemWrite",
    "Rollup",
]
