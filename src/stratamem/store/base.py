"""The storage contract every backend fulfils (SQLite now, PostgreSQL later): one protocol
per role, each in its own module, and :class:`Store`, all of them together.

================  ==========================================================
role              module
================  ==========================================================
StoreHandle       ``settings``: open/close, transactions, settings, identity
AccessStore       ``access``: principals, access scopes, the reader's gate
LockStore         ``locks``: locked sources' sealed content and key checks
SourceStore       ``sources``: sources by scope
ChunkStore        ``sources``: chunks and their entity mentions
RecordStore       ``records``: the keyed records chunks are derived from
ItemVersionStore  ``items``: every version of each item, in transaction time
KeywordStore      ``keyword``: the full-text index
VectorStore       ``vectors``: embeddings per model and their row keys
GraphStore        ``graph``: entities, co-mention edges, nodes by entity
AliasStore        ``aliases``: entity aliases sources state, recorded merges
FactStore         ``facts``: bitemporal facts, each owned by a source
RollupStore       ``rollups``: fact scores and rollups, derived by consolidation
TreeStore         ``trees``: summary trees, buffers, summaries (``store.trees``)
JobQueue          ``jobs``: the durable seal queue (``store.jobs``)
================  ==========================================================

Ingest, trees and retrieval speak only to these protocols; SQL lives in the backend.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from stratamem.store.access import AccessStore
from stratamem.store.aliases import AliasStore
from stratamem.store.facts import FactStore
from stratamem.store.graph import GraphStore
from stratamem.store.items import ItemVersionStore
from stratamem.store.jobs import JobQueue
from stratamem.store.keyword import KeywordStore
from stratamem.store.locks import LockStore
from stratamem.store.records import RecordStore
from stratamem.store.rollups import RollupStore
from stratamem.store.settings import StoreHandle
from stratamem.store.sources import ChunkStore, SourceStore
from stratamem.store.trees import TreeStore
from stratamem.store.vectors import VectorStore
from stratamem.timeparse import from_ms as from_ms
from stratamem.timeparse import to_ms as to_ms


@runtime_checkable
class Store(
    StoreHandle,
    AccessStore,
    SourceStore,
    ChunkStore,
    RecordStore,
    ItemVersionStore,
    KeywordStore,
    VectorStore,
    GraphStore,
    AliasStore,
    LockStore,
    FactStore,
    RollupStore,
    Protocol,
):
    """A whole store: every role, plus its trees and its job queue."""

    @property
    def trees(self) -> TreeStore: ...

    @property
    def jobs(self) -> JobQueue: ...
