"""The vector leg: the query's embedding against the store's vectors of the active model.

The index lives in memory, built from the store's vectors (exact search below the HNSW
threshold, HNSW above it) and, once it is large, persisted beside the database. The store's
vector generation tells when it is stale; a missing, corrupt or stale file is rebuilt from
the store. The access filter becomes an allow-list of chunk rowids applied inside the index
search, before the top-k is taken.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np
import numpy.typing as npt

from stratamem.embed.base import Embedder
from stratamem.embed.indexing import vector_status
from stratamem.retrieval.vector_index import VectorIndex
from stratamem.store.base import Store
from stratamem.types import Filters

Vector = npt.NDArray[np.float32]
_QUERY_CACHE = 256


class VectorLeg:
    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        *,
        hnsw_threshold: int = 20_000,
        persist: bool = True,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.hnsw_threshold = hnsw_threshold
        self.persist = persist and store.path != ":memory:"
        self._index: VectorIndex | None = None
        self._generation = -1
        self._queries: OrderedDict[str, Vector] = OrderedDict()
        self._queries_lock = threading.Lock()

    @property
    def signature(self) -> str:
        return self.embedder.spec.signature

    def status(self) -> str | None:
        """Why the leg cannot run, or None."""
        return vector_status(self.store, self.embedder)

    def index_path(self) -> Path | None:
        if not self.persist:
            return None
        tag = hashlib.sha256(self.signature.encode()).hexdigest()[:12]
        return Path(f"{self.store.path}.vectors-{tag}.idx")

    def index(self) -> VectorIndex:
        """The in-memory index, (re)built when the store's vectors changed."""
        generation = self.store.generation()
        if self._index is not None and generation == self._generation:
            return self._index
        dim = self.embedder.spec.dim
        if self._index is not None:
            # Bring the live index up to date in place: a rebuild of a large HNSW graph takes
            # a minute, a sync of what changed takes milliseconds.
            self._sync(self._index, dim)
            self._index.generation = self._generation = generation
            if self._index.path is not None and len(self._index) >= self.hnsw_threshold:
                self._index.save()
            return self._index
        path = self.index_path()
        index = None
        if path is not None and path.exists():
            index = VectorIndex.load(
                path,
                dim,
                signature=self.signature,
                generation=generation,
                hnsw_threshold=self.hnsw_threshold,
            )
        if index is None:
            index = VectorIndex(
                dim,
                hnsw_threshold=self.hnsw_threshold,
                path=path,
                signature=self.signature,
                generation=generation,
            )
            ids: list[int] = []
            parts: list[Vector] = []
            for rowids, blob in self.store.iter_vectors(self.signature):
                ids.extend(rowids)
                parts.append(np.frombuffer(blob, dtype="<f4").reshape(-1, dim))
            if ids:
                index.rebuild(np.asarray(ids, dtype=np.int64), np.concatenate(parts))
            if path is not None and len(index) >= self.hnsw_threshold:
                index.save()
        self._index, self._generation = index, generation
        return index

    def _sync(self, index: VectorIndex, dim: int) -> None:
        stored = np.asarray(self.store.vector_rowids(self.signature), dtype=np.int64)
        indexed = index.ids()
        gone = np.setdiff1d(indexed, stored, assume_unique=True)
        new = np.setdiff1d(stored, indexed, assume_unique=True)
        if len(gone):
            index.remove(gone)
        if len(new):
            found = self.store.vectors_by_rowid(self.signature, [int(r) for r in new])
            rowids = np.asarray(list(found), dtype=np.int64)
            vectors = np.stack([np.frombuffer(b, dtype="<f4") for b in found.values()])
            index.add(rowids, vectors.reshape(-1, dim))

    def embed_query(self, text: str) -> Vector:
        """The query's vector; the last few hundred are kept (a search may run on any
        thread)."""
        with self._queries_lock:
            cached = self._queries.get(text)
            if cached is not None:
                self._queries.move_to_end(text)
                return cached
        vector: Vector = self.embedder.embed_batch([text], role="query")[0]
        with self._queries_lock:
            self._queries[text] = vector
            if len(self._queries) > _QUERY_CACHE:
                self._queries.popitem(last=False)
        return vector

    def search(self, query: str | Vector, filters: Filters, k: int) -> dict[str, float]:
        """node id → cosine similarity of the ``k`` nearest admitted chunks."""
        vector = self.embed_query(query) if isinstance(query, str) else query
        allowed = self.store.allowed_rowids(filters)
        allow = None if allowed is None else np.asarray(allowed, dtype=np.int64)
        if allow is not None and len(allow) == 0:
            return {}
        index = self.index()
        if len(index) == 0:
            return {}
        rowids, scores = index.search(vector, k, allow=allow)
        names = self.store.rowids_to_ids([int(r) for r in rowids])
        return {
            names[int(r)]: float(s) for r, s in zip(rowids, scores, strict=True) if int(r) in names
        }

    def vectors(self, node_ids: list[str]) -> dict[str, Vector]:
        """The stored vectors of these chunks (those that have one), read from the index when
        it is current and from the store otherwise."""
        dim = self.embedder.spec.dim
        if self._index is not None and self._generation == self.store.generation():
            rowids = self.store.ids_to_rowids(node_ids)
            names = {rowid: node for node, rowid in rowids.items()}
            found, matrix = self._index.vectors(list(rowids.values()))
            return {names[int(r)]: row for r, row in zip(found.tolist(), matrix, strict=True)}
        return {
            node: np.frombuffer(blob, dtype="<f4").reshape(dim)
            for node, blob in self.store.vectors_of(self.signature, node_ids).items()
        }
