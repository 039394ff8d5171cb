"""The vector leg: the query's embedding against the store's vectors of the active model.

The index lives in memory, built from the store's vectors (exact search below the HNSW
threshold, HNSW above it) and, once it is large, persisted beside the database
(``<db>.vectors-<model tag>.idx``). The store's generation (bumped by every vector written and
every chunk deleted, by this process or another) tells when the in-memory index is stale; it
is then brought up to date in place. The generation, the rows it is brought to and the rows a
search maps its hits back to are read in one read snapshot, so the index is always exactly
one committed version of the store's vectors, and a search serves that version.

A saved file is used only when it is this database's (its store id) and holds exactly the
rows the database has vectors for (the digest of their (rowid, chunk id) pairs, computed from
the database when the file is opened); otherwise it is rebuilt from the store, never served.
Saving runs on a worker thread (``index.saver``), so a search never waits for the write;
:meth:`VectorLeg.persist_now` writes at once (after a forget).

The access filter becomes an allow-list of chunk rowids applied inside the index search,
before the top-k is taken. The store hands back the same list of rowids while nothing
changes; the leg keeps it resolved against the index (``VectorIndex.allowed``) for as long as
both stay the same, so a principal's search does not map its 90k rowids to the index's slots
every time.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np
import numpy.typing as npt

from stratamem.embed.base import Embedder
from stratamem.embed.indexing import ACTIVE_MODEL, NO_VECTORS, vector_status
from stratamem.retrieval.index import vectors_file
from stratamem.retrieval.index.file import rows_digest
from stratamem.retrieval.index.saver import BackgroundSaver
from stratamem.retrieval.index.vectors import Allowed, VectorIndex
from stratamem.store.base import Store
from stratamem.store.caches import LastFew
from stratamem.store.vectors import VectorMark, unpack_vectors
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
        # A store that searches its vectors itself (pgvector on PostgreSQL) is asked directly;
        # no index is held here.
        self.native = callable(getattr(store, "vector_search", None))
        self.persist = persist and store.index_base() is not None and not self.native
        self._index: VectorIndex | None = None
        self._generation = -1
        self._rows: dict[int, str] = {}  # rowid → chunk id of every indexed vector
        # Where the index's view of the store ends (chunk generation, last vector row): the
        # next sync reads only the rows written after it when nothing was taken away.
        self._mark: tuple[int, VectorMark] | None = None
        self._lock = threading.RLock()  # the index's writer lock (see VectorIndex)
        # Searches run side by side, outside the lock; a sync in place waits for them to end.
        self._searching = 0
        self._idle = threading.Condition(self._lock)
        self.saver = BackgroundSaver(f"stratamem-vector-save:{store.path}")
        self._queries: OrderedDict[str, Vector] = OrderedDict()
        self._queries_lock = threading.Lock()
        # Allow-lists by reader: the store's list of rowids, the index it was resolved against.
        self._allowed: LastFew[tuple[list[int], VectorIndex, Allowed]] = LastFew()

    @property
    def signature(self) -> str:
        return self.embedder.spec.signature

    def status(self) -> str | None:
        """Why the leg cannot run for the store's reader, or None. It is told over what the
        reader may see: where no chunk of it has a vector of the store's model, there are
        no vectors yet, whatever the sources hidden from it hold (so that the leg's status
        says nothing of them)."""
        active = self.store.get_setting(ACTIVE_MODEL)
        if active is not None and not self.store.has_vectors(active):
            return NO_VECTORS
        return vector_status(self.store, self.embedder)

    def build(self) -> None:
        """Bring the search index up to date and save it: the store's own where it searches
        its vectors itself (pgvector's HNSW index, built by the server once), else the
        in-memory one and its file."""
        if self.native:
            self.store.build_vector_index(self.signature)  # type: ignore[attr-defined]
            return
        self.index()
        self.persist_now()

    def index_path(self) -> Path | None:
        if not self.persist:
            return None
        tag = hashlib.sha256(self.signature.encode()).hexdigest()[:12]
        return Path(f"{self.store.index_base()}.vectors-{tag}.idx")

    def index(self) -> VectorIndex:
        """The in-memory index, (re)built when the store's vectors changed."""
        with self._lock, self.store.read_snapshot():
            return self._current()

    def _current(self) -> VectorIndex:
        """The index at the store's current version; called inside a read snapshot."""
        generation = self.store.generation()
        if self._index is not None and 0 <= generation <= self._generation:
            # The same version, or an older one read by another thread's snapshot: the index
            # only moves forward, and a vector it holds that such a reader cannot see is left
            # out by that reader's allow-list and rowid lookup.
            return self._index
        dim = self.embedder.spec.dim
        if self._index is not None:
            # Bring the live index up to date in place: a rebuild of a large HNSW graph takes
            # a minute, a sync of what changed takes milliseconds.
            # Holding the lock keeps new searches out; those already running finish first.
            self._idle.wait_for(lambda: self._searching == 0)
            self._sync(self._index, dim)
            self._index.generation = generation
            self._generation = self._settled(generation)
            self._save_later(self._index)
            return self._index
        path = self.index_path()
        store_id = self.store.store_id()
        index = None
        if path is not None and path.exists():
            keys = self.store.vector_keys(self.signature)
            index = VectorIndex.load(
                path,
                dim,
                lambda: self._stored_vectors(dim),
                signature=self.signature,
                generation=None,
                store_id=store_id,
                rows_sha256=rows_digest([k[0] for k in keys], [k[1] for k in keys]),
                hnsw_threshold=self.hnsw_threshold,
            )
            if index is not None:
                index.generation = generation
                self._rows = dict(keys)
        if index is None:
            index = VectorIndex(
                dim,
                hnsw_threshold=self.hnsw_threshold,
                path=path,
                signature=self.signature,
                generation=generation,
                store_id=store_id,
            )
            ids, vectors = self._stored_vectors(dim)
            if len(ids):
                index.rebuild(ids, vectors)
            self._rows = self.store.rowids_to_ids(ids.tolist())
            self._save_later(index)
        self._index, self._generation = index, self._settled(generation)
        self._mark = self._read_mark()
        return index

    def _stored_vectors(self, dim: int) -> tuple[npt.NDArray[np.int64], Vector]:
        """Every vector of the model in the store: (chunk rowids ascending, their vectors)."""
        ids: list[int] = []
        parts: list[Vector] = []
        for part, blobs in self.store.iter_vectors(self.signature):
            ids.extend(part)
            parts.append(unpack_vectors(blobs, dim))
        rowids = np.asarray(ids, dtype=np.int64)
        matrix = np.concatenate(parts) if parts else np.empty((0, dim), np.float32)
        if len(rowids) > 1 and not bool((np.diff(rowids) > 0).all()):
            order = np.argsort(rowids, kind="stable")
            rowids, matrix = rowids[order], matrix[order]
        return rowids, matrix

    def _settled(self, generation: int) -> int:
        """The generation to remember the index at: none inside a write transaction, where
        what was read may yet be rolled back and the generation go back with it (to be
        bumped again by another change, which the index would then not see)."""
        return -1 if self.store.in_transaction() else generation

    def _read_mark(self) -> tuple[int, VectorMark] | None:
        """Where the index's view ends, read in the snapshot it was brought up to; None
        inside a write transaction, whose rows may yet be rolled back."""
        if self.store.in_transaction():
            return None
        mark = self.store.vector_mark()
        return None if mark is None else (self.store.chunk_generation(), mark)

    def _sync(self, index: VectorIndex, dim: int) -> None:
        """Bring ``index`` to the store's vectors: only the rows written since the last sync
        when nothing was taken away in between, else all of them compared."""
        if not self._sync_added(index, dim):
            self._sync_all(index, dim)
        self._mark = self._read_mark()

    def _sync_added(self, index: VectorIndex, dim: int) -> bool:
        """Add the vectors written since the last sync and say True, when nothing left: no
        chunk was deleted (the chunk generation stands), the last row seen is still there,
        and the store holds as many vectors as the index and the additions make. Otherwise
        change nothing and say False. (At a million vectors this reads the few new rows in
        place of every (rowid, chunk id) pair, seconds.)"""
        if self._mark is None:
            return False
        chunk_generation, mark = self._mark
        if self.store.chunk_generation() != chunk_generation:
            return False
        if mark.node is not None and self.store.vector_row_node(mark.row) != mark.node:
            return False
        latest: dict[int, tuple[str, bytes]] = {}
        for rowid, node, blob in self.store.vectors_after(self.signature, mark):
            latest[rowid] = (node, blob)  # a vector written again: the later row wins
        if any(self._rows.get(rowid, node) != node for rowid, (node, _) in latest.items()):
            return False
        fresh = sum(1 for rowid in latest if rowid not in self._rows)
        if self.store.count_vectors(self.signature) != len(index) + fresh:
            return False
        if latest:
            rowids = np.fromiter(latest, dtype=np.int64, count=len(latest))
            index.add(rowids, unpack_vectors([blob for _, blob in latest.values()], dim))
            self._rows.update((rowid, node) for rowid, (node, _) in latest.items())
        return True

    def _sync_all(self, index: VectorIndex, dim: int) -> None:
        """Compare every (rowid, chunk id) of the store's vectors with the index: drop what
        left, add what came.

        Rows are matched on (rowid, chunk id), not rowid alone: SQLite hands a deleted row's
        rowid to the next insert, so another process that forgot a source and ingested new
        chunks can reuse rowids this index still holds vectors for.
        """
        keys = self.store.vector_keys(self.signature)
        stored = np.fromiter((rowid for rowid, _ in keys), dtype=np.int64, count=len(keys))
        indexed = index.ids()
        reused = [rowid for rowid, node in keys if self._rows.get(rowid, node) != node]
        gone = np.setdiff1d(indexed, stored, assume_unique=True)
        if reused:
            gone = np.union1d(gone, np.asarray(reused, dtype=np.int64))
        new = np.setdiff1d(stored, np.setdiff1d(indexed, gone, assume_unique=True))
        if len(gone):
            index.remove(gone)
            for rowid in gone.tolist():
                self._rows.pop(rowid, None)
        if len(new):
            found = self.store.vectors_by_rowid(self.signature, [int(r) for r in new])
            rowids = np.asarray(list(found), dtype=np.int64)
            index.add(rowids, unpack_vectors(list(found.values()), dim))
            self._rows.update(self.store.rowids_to_ids(list(found)))

    # -- saving ------------------------------------------------------------------------------

    def _save_later(self, index: VectorIndex) -> None:
        if index.path is not None and len(index) >= self.hnsw_threshold:
            self.saver.submit(self._save_snapshot)

    def _snapshot(self) -> tuple[Path, vectors_file.Snapshot] | None:
        """The current index copied for writing, under the writer lock; None if there is
        nothing to save."""
        with self._lock:
            index = self._index
            if index is None or index.path is None or len(index) < self.hnsw_threshold:
                return None
            ids = index.ids()
            names = [self._rows.get(int(r), "") for r in ids.tolist()]
            # A row whose chunk id is unknown gets a digest no database matches: the file
            # is then rebuilt rather than trusted.
            digest = rows_digest(ids, names) if all(names) else ""
            return index.path, index.snapshot(rows_sha256=digest)

    def _save_snapshot(self) -> None:
        """The worker's job: copy under the lock, write without it; dropped where a chunk
        was removed meanwhile (another process may have locked or forgotten a source)."""
        generation = self._generation
        found = self._snapshot()
        if found is not None:
            vectors_file.write_file(*found, still_current=lambda: self._unchanged(generation))

    def _unchanged(self, generation: int) -> bool:
        try:
            return self.store.committed_generations()[0] == generation
        except Exception:  # a store closed meanwhile, or busy: do not write
            return False

    def persist_now(self) -> None:
        """Bring the index up to date and write its file now, or remove the file where the
        index is now too small for one (after a forget: no removed row may stay in it)."""
        path = self.index_path()
        if path is None:
            return
        self.saver.flush()
        with self._lock:
            if self._index is None and not path.exists():
                return
            with self.store.read_snapshot():
                self._current()
            found = self._snapshot()
            if found is None:
                path.unlink(missing_ok=True)
            else:
                vectors_file.write_file(*found)
        self.saver.flush()

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
        if self.native:
            nearest: dict[str, float] = self.store.vector_search(  # type: ignore[attr-defined]
                self.signature, vector, filters, k
            )
            return nearest
        # The index is brought to the version the filter and the rowids are read from: a
        # rowid another process reused for a new chunk never names the old chunk's vector.
        with self.store.read_snapshot():
            allowed = self.store.allowed_rowids(filters)
            if allowed is not None and len(allowed) == 0:
                return {}
            # The index is made current and the search counted under the writer lock, and the
            # search runs outside it: another thread's sync waits for it to end.
            with self._lock:
                index = self._current()
                if len(index) == 0:
                    return {}
                allow = None if allowed is None else self._allow(index, allowed)
                # At this snapshot's own version the index's rows name its chunks; a snapshot
                # older than the index looks its rowids up in the store instead.
                same_version = index.generation == self.store.generation()
                self._searching += 1
            names: dict[int, str] = {}
            try:
                rowids, scores = index.search(vector, k, allow=allow)
                found: list[int] = rowids.tolist()
                if same_version:  # no sync changes the rows while this search is counted
                    rows = self._rows
                    names = {r: rows[r] for r in found if r in rows}
            finally:
                with self._lock:
                    self._searching -= 1
                    if self._searching == 0:
                        self._idle.notify_all()
            if not same_version:
                names = self.store.rowids_to_ids(found)
        return {names[r]: s for r, s in zip(found, scores.tolist(), strict=True) if r in names}

    def _allow(self, index: VectorIndex, allowed: list[int]) -> Allowed:
        """``allowed`` resolved against ``index``, kept while the store returns the same
        (cached) list and the index does not change."""
        cached = self._allowed.get(id(allowed))
        if (
            cached is not None
            and cached[0] is allowed
            and cached[1] is index
            and cached[2].version == index.version
        ):
            return cached[2]
        found = index.allowed(np.asarray(allowed, dtype=np.int64))
        self._allowed.put(id(allowed), (allowed, index, found))
        return found

    def vectors(self, node_ids: list[str]) -> dict[str, Vector]:
        """The stored vectors of these chunks (those that have one), read from the index when
        it is current and from the store otherwise."""
        dim = self.embedder.spec.dim
        with self.store.read_snapshot():
            with self._lock:
                if self._index is not None and self._generation == self.store.generation():
                    rowids = self.store.ids_to_rowids(node_ids)
                    names = {rowid: node for node, rowid in rowids.items()}
                    found, matrix = self._index.vectors(list(rowids.values()))
                    return {
                        names[int(r)]: row for r, row in zip(found.tolist(), matrix, strict=True)
                    }
            stored = self.store.vectors_of(self.signature, node_ids)
            return dict(zip(stored, unpack_vectors(list(stored.values()), dim), strict=True))


def drop_other_vector_files(store: Store, keep: Path | None) -> list[Path]:
    """Remove the vector index files beside the database other than ``keep`` (other models',
    or every one when ``keep`` is None), and temporary files a killed save left; returns what
    was removed. After a forget they hold vectors of removed rows and cannot be brought up to
    date without their model; they are rebuilt when that model is used again."""
    base = store.index_base()
    if base is None:
        return []
    db = Path(base)
    removed = []
    candidates = [*db.parent.glob(f"{db.name}.vectors-*.idx"), *db.parent.glob(f".{db.name}.*.tmp")]
    for path in candidates:
        if keep is not None and path == keep:
            continue
        path.unlink(missing_ok=True)
        removed.append(path)
    return removed
