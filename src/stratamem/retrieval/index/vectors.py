"""Nearest-neighbour search over L2-normalised vectors: exact while small, HNSW once large.

Vectors are keyed by non-negative integer row ids (the caller maps them to node ids) and
normalised on the way in, so a score is the cosine similarity (inner product of unit
vectors). Below ``hnsw_threshold`` vectors the index scans one contiguous float32 matrix with
numpy; at or above it, it builds a faiss ``IndexHNSWFlat`` (inner-product metric). The graph
stays until a compaction or ``rebuild`` finds fewer live vectors than the threshold.

Why faiss (``benchmarks/results/vector_index.md``, 100k clustered × 384, two shared cores):
at M 16 and ef 64 it answers in ~0.2 ms at recall@10 0.99, as hnswlib does (usearch: 0.4-0.6
ms). hnswlib built the graph 1.2-2× faster, but PyPI has it only as source to compile, while
faiss-cpu is already a dependency with wheels, writes its graph without the vectors into our
file and lends its stored vectors to numpy without a copy (the exact fallbacks below need
them).

Ranking. Results are ordered by score descending, then row id ascending. BLAS gives
identical rows slightly different float32 scores depending on where they sit in the matrix,
so the candidates near the k-th score are rescored row by row in float64 before the final
sort; equal vectors therefore tie exactly and the tie goes to the lower id, on both paths.
HNSW results are approximate (recall@10 ≥ 0.99 on clustered 384-d vectors at the default
``ef_search``); which of several equal-score rows at the cut the graph returns is its choice.

Filters. ``allow`` restricts the candidates before the top k is taken; it is never applied
to an already truncated list. The exact path masks or gathers the allowed rows. The HNSW path
answers small allowed sets (< 5,000 ids or < 2 % of the index) exactly over just those rows.
Otherwise it fetches the graph's top ``ef`` rows, ``ef`` sized so that about 2k allowed rows
are expected among them, and keeps the allowed ones; that prefix holds the true top k of the
allowed set whenever it holds at least k allowed rows (anything allowed outside it scores
lower). A query whose prefix holds fewer, or whose ``ef`` would exceed 1,024, is answered
exactly over the allowed rows. faiss's own filtered search (``SearchParametersHNSW.sel``) is
used only to hide deleted nodes: when the allowed 10 % were the neighbourhoods farthest from
the query (as access rules by source can make them) it returned recall@10 of 0.14-0.24 on
clustered and 0.04-0.13 on real MiniLM vectors at ef 64-256, with no sign that anything was
missed. Fewer than k results come back only when fewer are allowed.

An allow-list that many searches share (an access gate, the same until the store changes) is
resolved once with :meth:`VectorIndex.allowed`: mapping 90k row ids to slots took longer than
the graph search itself. The :class:`Allowed` it returns holds the allowed slots and their
mask, and, where the exact path gathers the allowed rows, those rows too (up to
``KEEP_ROWS_MAX_BYTES``; gathering 10k rows × 384 took 5 ms, scoring them 0.8 ms). It is used
as it is while the index does not change and resolved again once it has.

Updates. ``add`` replaces the vector of an id already present. The exact path overwrites in
place and fills the holes left by ``remove`` with the last rows. faiss HNSW cannot delete, so
a replaced or removed node is marked dead (hidden from every search by a bitmap selector, its
stored vector zeroed so nothing of a removed row stays in memory or in a saved file) and the
index is rebuilt from its live vectors once dead nodes exceed 20 %. Crossing the
threshold in ``add`` builds the graph there and then. Builds are slow: at ``ef_construction``
200 on two shared cores, ~4-16 s for 10-20k vectors × 384 and 30-80 s for 100k, so callers
should ``save`` after building and ``load`` on open.

Threading. Searches may run concurrently with each other and with nothing else: ``add``,
``remove``, ``rebuild``, ``save`` and ``load`` need the caller's exclusive (writer) lock. No
locking happens here.

Persistence. ``save`` and ``load`` write and read the file format described in
``vectors_file``: the slots and the graph, not the vectors, which ``load`` takes from the
caller (the store holds them). ``load`` returns ``None`` rather than raising when the file is
missing, damaged or not the index the caller expects, and the caller then rebuilds from the
store.
``snapshot`` copies what ``save`` writes, so that another thread can write it while the index
moves on (the copy needs the writer lock; the write does not).
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt

from stratamem.retrieval.index import vectors_file
from stratamem.retrieval.index.vectors_file import FORMAT_VERSION as FORMAT_VERSION
from stratamem.retrieval.index.vectors_file import MAGIC as MAGIC
from stratamem.retrieval.index.vectors_file import IdArray, Matrix, import_faiss
from stratamem.retrieval.index.vectors_file import id_set_checksum as id_set_checksum

ScoreArray = npt.NDArray[np.float32]

DEFAULT_HNSW_THRESHOLD: Final = 20_000
DEFAULT_M: Final = 16
DEFAULT_EF_CONSTRUCTION: Final = 200
DEFAULT_EF_SEARCH: Final = 64

EXACT_ALLOW_MIN: Final = 5_000
"""Allowed sets smaller than this are searched exactly, even on the HNSW path."""
EXACT_ALLOW_FRACTION: Final = 0.02
"""... and so are those smaller than this fraction of the index."""
FILTER_OVERSAMPLE: Final = 2.0
"""Fetch enough graph results that this many times k allowed rows are expected among them."""
MAX_FILTERED_EF: Final = 1_024
"""Beyond this ``ef`` an exact scan of the allowed rows is as fast and is exact."""
MAX_DEAD_FRACTION: Final = 0.2
"""Rebuild the graph from its live vectors once dead nodes exceed this fraction."""
KEEP_ROWS_MAX_BYTES: Final = 256 << 20
"""An :class:`Allowed` keeps the allowed rows the exact path gathered up to this size."""

_TIE_EPS: Final = 1e-4  # far above float32 rounding of a unit-vector dot product
_GATHER_FRACTION: Final = 0.25  # gather allowed rows below this fraction, else mask all

_log = logging.getLogger(__name__)
# Versions are unique across indexes, so an Allowed is never taken for another index's.
_VERSIONS = itertools.count(1)


@dataclass(slots=True, eq=False)
class Allowed:
    """An allow-list resolved against one state (``version``) of a :class:`VectorIndex`: the
    slots of the allowed ids present, ascending, and the same as a mask over the slots in
    use. ``rows`` keeps the allowed vectors once the exact path has gathered them."""

    ids: IdArray
    version: int
    slots: IdArray
    mask: npt.NDArray[np.bool_]
    rows: Matrix | None = None

    def __len__(self) -> int:
        return len(self.slots)


class VectorIndex:
    """Top-k cosine search over vectors keyed by row id; see the module docstring."""

    def __init__(
        self,
        dim: int,
        *,
        hnsw_threshold: int = DEFAULT_HNSW_THRESHOLD,
        path: Path | None = None,
        m: int = DEFAULT_M,
        ef_construction: int = DEFAULT_EF_CONSTRUCTION,
        ef_search: int = DEFAULT_EF_SEARCH,
        signature: str = "",
        generation: int = 0,
        store_id: str = "",
    ) -> None:
        for name, value, low in (
            ("dim", dim, 1),
            ("hnsw_threshold", hnsw_threshold, 1),
            ("m", m, 2),
            ("ef_construction", ef_construction, 1),
            ("ef_search", ef_search, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer ≥ {low}, got {value!r}")
        self.dim: Final = dim
        self.hnsw_threshold = hnsw_threshold
        self.path = path
        self.m = m
        self.ef_construction = ef_construction
        self.ef_search = ef_search
        self.signature = signature
        self.generation = generation
        self.store_id = store_id
        self._version = next(_VERSIONS)
        self._reset(np.empty(0, np.int64), np.empty((0, dim), np.float32))

    # ------------------------------------------------------------------ state

    def _reset(self, ids: IdArray, vectors: Matrix) -> None:
        """Start over from ``ids`` (sorted, distinct) and their normalised vectors."""
        self._version = next(_VERSIONS)
        count = len(ids)
        self._n = count  # slots in use
        self._slot_ids: IdArray = ids.copy()  # slot → row id; -1 marks a dead slot (HNSW only)
        self._sorted_ids: IdArray = ids.copy()  # live ids, ascending ...
        self._sorted_slots: IdArray = np.arange(count, dtype=np.int64)  # ... and their slots
        self._dead = 0
        self._live_bitmap: npt.NDArray[np.uint8] | None = None  # live HNSW nodes, when any dead
        self._hnsw: Any = None  # faiss.IndexHNSWFlat on the HNSW path
        self._matrix: Matrix = np.empty((0, self.dim), np.float32)  # the exact path's rows
        if count >= self.hnsw_threshold:
            self._hnsw = _new_hnsw(self.dim, self.m, self.ef_construction)
            self._hnsw.add(vectors)
        else:
            self._matrix = np.array(vectors, dtype=np.float32, order="C")

    @property
    def kind(self) -> Literal["exact", "hnsw"]:
        """Which path searches run on now."""
        return "exact" if self._hnsw is None else "hnsw"

    def __len__(self) -> int:
        return len(self._sorted_ids)

    def __contains__(self, row_id: object) -> bool:
        if not isinstance(row_id, int | np.integer):
            return False
        pos = int(np.searchsorted(self._sorted_ids, row_id))
        return pos < len(self._sorted_ids) and int(self._sorted_ids[pos]) == row_id

    def __repr__(self) -> str:
        return f"VectorIndex(dim={self.dim}, count={len(self)}, kind={self.kind!r})"

    @property
    def version(self) -> int:
        """Changes with every change of the ids or vectors held; no two indexes share one."""
        return self._version

    def ids(self) -> IdArray:
        """The ids present, ascending (a copy)."""
        return self._sorted_ids.copy()

    @property
    def ids_checksum(self) -> str:
        """``id_set_checksum`` of the ids present."""
        return id_set_checksum(self._sorted_ids)

    # ---------------------------------------------------------------- updates

    def add(self, ids: npt.ArrayLike, vectors: npt.ArrayLike) -> None:
        """Add vectors; an id already present gets the new vector, and within one call the
        last occurrence of an id wins. May build the HNSW graph (see the module docstring)."""
        row_ids = _as_ids(ids, "ids")
        matrix = _as_vectors(vectors, self.dim, len(row_ids))
        if not len(row_ids):
            return
        self._version = next(_VERSIONS)
        row_ids, matrix = _last_wins(row_ids, matrix)
        pos, found = self._find(row_ids)
        if self._hnsw is None:
            self._matrix[self._sorted_slots[pos[found]]] = matrix[found]
            fresh = ~found
            self._append(row_ids[fresh], matrix[fresh])
            if len(self) >= self.hnsw_threshold:
                live = self._slot_ids[: self._n]
                order = np.argsort(live, kind="stable")
                self._reset(live[order], self._matrix[: self._n][order])
            return
        if found.any():
            self._bury(pos[found])
        self._append(row_ids, matrix)
        self._compact_if_needed()

    def remove(self, ids: npt.ArrayLike) -> int:
        """Remove the given ids (absent ones are ignored); returns how many were present."""
        row_ids = np.unique(_as_ids(ids, "ids"))
        pos, found = self._find(row_ids)
        pos = pos[found]
        if not len(pos):
            return 0
        self._version = next(_VERSIONS)
        if self._hnsw is not None:
            self._bury(pos)
            self._compact_if_needed()
            return len(pos)
        holes = np.sort(self._sorted_slots[pos])
        self._sorted_ids = np.delete(self._sorted_ids, pos)
        self._sorted_slots = np.delete(self._sorted_slots, pos)
        # Move the last live rows into the holes so the matrix stays contiguous.
        new_n = self._n - len(holes)
        tail = np.arange(new_n, self._n, dtype=np.int64)
        movers = tail[~np.isin(tail, holes)]
        targets = holes[holes < new_n]
        if len(movers):
            self._matrix[targets] = self._matrix[movers]
            moved_ids = self._slot_ids[movers]
            self._slot_ids[targets] = moved_ids
            self._sorted_slots[np.searchsorted(self._sorted_ids, moved_ids)] = targets
        self._n = new_n
        return len(pos)

    def rebuild(self, ids: npt.ArrayLike, vectors: npt.ArrayLike) -> None:
        """Replace everything with these vectors (the last occurrence of a repeated id wins)."""
        row_ids = _as_ids(ids, "ids")
        matrix = _as_vectors(vectors, self.dim, len(row_ids))
        row_ids, matrix = _last_wins(row_ids, matrix)
        self._reset(row_ids, matrix)

    def _find(self, ids: IdArray) -> tuple[IdArray, npt.NDArray[np.bool_]]:
        """Positions of ``ids`` in the sorted id array, and which of them are present."""
        if not len(self._sorted_ids):
            return np.zeros(len(ids), np.int64), np.zeros(len(ids), np.bool_)
        pos = np.minimum(np.searchsorted(self._sorted_ids, ids), len(self._sorted_ids) - 1)
        return pos.astype(np.int64), self._sorted_ids[pos] == ids

    def _append(self, ids: IdArray, matrix: Matrix) -> None:
        """Give new (sorted, absent) ids the next slots."""
        count = len(ids)
        if not count:
            return
        start, end = self._n, self._n + count
        if end > len(self._slot_ids):
            capacity = max(end, 2 * len(self._slot_ids), 64)
            self._slot_ids = _grow(self._slot_ids, capacity)
            if self._hnsw is None:
                self._matrix = _grow(self._matrix, capacity)
        self._slot_ids[start:end] = ids
        if self._hnsw is None:
            self._matrix[start:end] = matrix
        else:
            self._hnsw.add(matrix)
        slots = np.arange(start, end, dtype=np.int64)
        at = np.searchsorted(self._sorted_ids, ids)
        self._sorted_ids = np.insert(self._sorted_ids, at, ids)
        self._sorted_slots = np.insert(self._sorted_slots, at, slots)
        self._n = end
        self._refresh_bitmap()

    def _bury(self, pos: IdArray) -> None:
        """HNSW path: mark the slots at these sorted positions dead and forget their ids."""
        slots = self._sorted_slots[pos]
        self._slot_ids[slots] = -1
        _faiss_vectors(self._hnsw, self._n, self.dim)[slots] = 0.0
        self._dead += len(pos)
        self._sorted_ids = np.delete(self._sorted_ids, pos)
        self._sorted_slots = np.delete(self._sorted_slots, pos)
        self._refresh_bitmap()

    def _refresh_bitmap(self) -> None:
        """Keep the live-node bitmap current after a write, so searches only read."""
        self._live_bitmap = None
        if self._hnsw is not None and self._dead:
            self._live_bitmap = np.packbits(self._slot_ids[: self._n] >= 0, bitorder="little")

    def _compact_if_needed(self) -> None:
        if self._dead > MAX_DEAD_FRACTION * self._n:
            vectors = self._storage()[self._sorted_slots]
            self._reset(self._sorted_ids, vectors)

    def _storage(self) -> Matrix:
        """The (slots × dim) vectors; on the HNSW path a view into faiss, valid until a write."""
        if self._hnsw is None:
            return self._matrix[: self._n]
        return _faiss_vectors(self._hnsw, self._n, self.dim)

    # ----------------------------------------------------------------- search

    def search(
        self,
        query: npt.ArrayLike,
        k: int,
        *,
        allow: npt.ArrayLike | Allowed | None = None,
    ) -> tuple[IdArray, ScoreArray]:
        """The top ``k`` row ids and cosine scores for a query of shape (dim,) or (q, dim).

        A (dim,) query returns 1-D arrays, a (q, dim) batch returns (q, k') arrays. ``allow``
        restricts the candidates to those row ids (or to what :meth:`allowed` resolved)
        before the top k is taken; ids it names that are absent are ignored. Fewer than ``k``
        come back only when fewer are present (or allowed); ``k`` ≤ 0 gives none.
        """
        queries, single = _as_queries(query, self.dim)
        allowed: Allowed | None = None
        available = len(self)
        if allow is not None:
            allowed = self._current_allowed(allow)
            available = len(allowed)
        k = min(int(k), available)
        if k <= 0 or not len(queries):
            ids = np.empty((len(queries), 0), np.int64)
            scores = np.empty((len(queries), 0), np.float32)
        elif self._hnsw is None:
            ids, scores = self._exact(queries, k, allowed)
        else:
            ids, scores = self._approximate(queries, k, allowed)
        if single:
            return ids[0], scores[0]
        return ids, scores

    def vectors(self, ids: npt.ArrayLike) -> tuple[IdArray, Matrix]:
        """(the ids present, their normalised vectors), in the order asked."""
        wanted = _as_ids(ids, "ids")
        pos, found = self._find(wanted)
        return wanted[found], self._storage()[self._sorted_slots[pos[found]]].copy()

    def allowed(self, ids: npt.ArrayLike) -> Allowed:
        """``ids`` as an allow-list for :meth:`search`, resolved against the index as it is
        now (ids that are absent are ignored)."""
        wanted = _as_ids(ids, "allow")
        pos, found = self._find(wanted)
        mask = np.zeros(self._n, np.bool_)
        mask[self._sorted_slots[pos[found]]] = True
        return Allowed(wanted, self._version, np.flatnonzero(mask).astype(np.int64), mask)

    def _current_allowed(self, allow: npt.ArrayLike | Allowed) -> Allowed:
        if isinstance(allow, Allowed):
            return allow if allow.version == self._version else self.allowed(allow.ids)
        return self.allowed(allow)

    def _live_slots(self) -> IdArray | None:
        """None when every slot is live."""
        if not self._dead:
            return None
        return np.flatnonzero(self._slot_ids[: self._n] >= 0).astype(np.int64)

    def _exact(
        self, queries: Matrix, k: int, allowed: Allowed | None
    ) -> tuple[IdArray, ScoreArray]:
        storage = self._storage()
        slots = self._live_slots() if allowed is None else allowed.slots
        out_ids = np.empty((len(queries), k), np.int64)
        out_scores = np.empty((len(queries), k), np.float32)
        if slots is not None and len(slots) < _GATHER_FRACTION * self._n:
            sub = storage[slots] if allowed is None or allowed.rows is None else allowed.rows
            if allowed is not None and sub.nbytes <= KEEP_ROWS_MAX_BYTES:
                allowed.rows = sub
            scores = _dot(queries, sub)
            for row in range(len(queries)):
                out_ids[row], out_scores[row] = self._select(
                    scores[row], slots, k, queries[row], storage
                )
            return out_ids, out_scores
        scores = _dot(queries, storage)
        if slots is not None:
            if allowed is None:
                hidden = np.ones(self._n, np.bool_)
                hidden[slots] = False
            else:
                hidden = ~allowed.mask
            scores[:, hidden] = -np.inf
        every = np.arange(self._n, dtype=np.int64)
        for row in range(len(queries)):
            out_ids[row], out_scores[row] = self._select(
                scores[row], every, k, queries[row], storage
            )
        return out_ids, out_scores

    def _approximate(
        self, queries: Matrix, k: int, allowed: Allowed | None
    ) -> tuple[IdArray, ScoreArray]:
        live = len(self)
        ef = max(self.ef_search, k)
        fetch = k
        if allowed is not None:
            count = len(allowed)
            if count < max(EXACT_ALLOW_MIN, EXACT_ALLOW_FRACTION * live):
                return self._exact(queries, k, allowed)
            ef = max(ef, math.ceil(FILTER_OVERSAMPLE * k * live / count))
            if ef > MAX_FILTERED_EF:
                return self._exact(queries, k, allowed)
            fetch = ef
        distances, nodes = _faiss_search(self._hnsw, queries, fetch, ef, self._live_bitmap)
        out_ids = np.empty((len(queries), k), np.int64)
        out_scores = np.empty((len(queries), k), np.float32)
        storage = self._storage()
        short: list[int] = []
        for row in range(len(queries)):
            keep = nodes[row] >= 0
            if allowed is not None:
                keep &= allowed.mask[np.maximum(nodes[row], 0)]
            if int(keep.sum()) < k:
                short.append(row)
                continue
            out_ids[row], out_scores[row] = self._select(
                distances[row][keep], nodes[row][keep], k, queries[row], storage
            )
        if short:
            # The graph did not surface k (allowed) rows: answer those queries exactly.
            out_ids[short], out_scores[short] = self._exact(queries[short], k, allowed)
        return out_ids, out_scores

    def _select(
        self, scores: ScoreArray, slots: IdArray, k: int, query: Matrix, storage: Matrix
    ) -> tuple[IdArray, ScoreArray]:
        """The top ``k`` of ``scores`` (aligned with ``slots``), ties by row id ascending.

        Candidates within ``_TIE_EPS`` of the k-th score are rescored row by row in float64,
        which gives equal vectors equal scores wherever they sit, then sorted.
        """
        if len(scores) > k:
            kth = np.partition(scores, len(scores) - k)[len(scores) - k]
            candidates = np.flatnonzero(scores >= kth - _TIE_EPS)
            slots = slots[candidates]
        vectors = storage[slots].astype(np.float64)
        exact = (vectors * query.astype(np.float64)).sum(axis=1)
        row_ids = self._slot_ids[slots]
        order = np.lexsort((row_ids, -exact))[:k]
        return row_ids[order], exact[order].astype(np.float32)

    # ------------------------------------------------------------ persistence

    def snapshot(self, *, rows_sha256: str = "") -> vectors_file.Snapshot:
        """A copy of what :meth:`save` writes; ``rows_sha256`` is the caller's digest of the
        rows the vectors belong to (``file.rows_digest``), recorded in the header."""
        hnsw = None if self._hnsw is None else vectors_file.serialize_hnsw(self._hnsw)
        return vectors_file.Snapshot(
            dim=self.dim,
            signature=self.signature,
            generation=self.generation,
            store_id=self.store_id,
            rows_sha256=rows_sha256,
            m=self.m,
            ef_construction=self.ef_construction,
            slot_ids=self._slot_ids[: self._n].copy(),
            live_count=len(self),
            ids_checksum=self.ids_checksum,
            hnsw=hnsw,
        )

    def save(self, path: Path | None = None, *, rows_sha256: str = "") -> Path:
        """Write the index atomically to ``path`` (default: the ``path`` given at creation)."""
        target = path if path is not None else self.path
        if target is None:
            raise ValueError("save() needs a path: none was given here or to VectorIndex()")
        target = Path(target)
        vectors_file.write_file(target, self.snapshot(rows_sha256=rows_sha256))
        self.path = target
        return target

    @classmethod
    def load(
        cls,
        path: Path,
        dim: int,
        vectors: Callable[[], tuple[npt.ArrayLike, npt.ArrayLike]],
        *,
        signature: str = "",
        generation: int | None = 0,
        ids_checksum: str | None = None,
        store_id: str | None = None,
        rows_sha256: str | None = None,
        hnsw_threshold: int = DEFAULT_HNSW_THRESHOLD,
        ef_search: int = DEFAULT_EF_SEARCH,
    ) -> VectorIndex | None:
        """The index saved at ``path``, or ``None`` if it is missing, damaged or not the one
        expected (dim, signature, and each of generation, id checksum, store id and rows
        digest that is not None): rebuild from the store then.

        ``vectors()`` gives the vectors the file leaves out: (ids ascending, one vector per
        id), which must be exactly the file's live ids; it is called once the file has
        passed every other check.

        ``m`` and ``ef_construction`` come from the file. An exact index at or above
        ``hnsw_threshold`` builds its graph here.
        """
        path = Path(path)
        try:
            stored = vectors_file.read_file(
                path,
                dim,
                signature=signature,
                generation=generation,
                ids_checksum=ids_checksum,
                store_id=store_id,
                rows_sha256=rows_sha256,
            )
            index = cls(
                dim,
                hnsw_threshold=hnsw_threshold,
                path=path,
                m=stored.m,
                ef_construction=stored.ef_construction,
                ef_search=ef_search,
                signature=signature,
                generation=0 if generation is None else generation,
                store_id=store_id or "",
            )
            ids, matrix = vectors()
            index._adopt(stored, _as_ids(ids, "ids"), matrix)
            return index
        except FileNotFoundError:
            _log.info("no vector index at %s", path)
        except vectors_file.Rejected as reason:
            _log.info("vector index %s not used: %s", path, reason)
        except (OSError, ValueError, KeyError, TypeError, RuntimeError, MemoryError) as error:
            _log.warning("vector index %s unreadable: %s", path, error)
        return None

    def _adopt(
        self, stored: vectors_file.StoredIndex, ids: IdArray, vectors: npt.ArrayLike
    ) -> None:
        """Take over the state read from a file and the vectors of its live ids (building
        the graph if it is now due)."""
        if not np.array_equal(ids, stored.sorted_ids):
            raise vectors_file.Rejected("the vectors given are not of the file's rows")
        rows = _as_vectors(vectors, self.dim, len(ids))
        if np.array_equal(stored.sorted_slots, np.arange(len(stored.slot_ids))):
            matrix = rows  # no dead slots, and the slots in id order: a graph built at once
        else:
            matrix = np.zeros((len(stored.slot_ids), self.dim), np.float32)  # dead slots zero
            matrix[stored.sorted_slots] = rows
        self._version = next(_VERSIONS)
        self._n = len(stored.slot_ids)
        self._slot_ids = stored.slot_ids
        self._sorted_ids = stored.sorted_ids
        self._sorted_slots = stored.sorted_slots
        self._dead = self._n - len(stored.sorted_ids)
        self._matrix = np.empty((0, self.dim), np.float32)
        self._hnsw = stored.hnsw
        if self._hnsw is None:
            self._matrix = matrix
        else:
            vectors_file.attach_storage(self._hnsw, matrix)
        self._refresh_bitmap()
        if self._hnsw is None and len(self) >= self.hnsw_threshold:
            self._reset(stored.sorted_ids, rows)


# ------------------------------------------------------------------ inputs


def _as_ids(ids: npt.ArrayLike, name: str) -> IdArray:
    array = np.asarray(ids)
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of integers, got shape {array.shape}")
    if not array.size:
        return np.empty(0, np.int64)
    if array.dtype.kind not in "iu":
        raise ValueError(f"{name} must be integers, got dtype {array.dtype}")
    if array.dtype.kind == "u" and int(array.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"{name} must fit in int64")
    if int(array.min()) < 0:
        raise ValueError(f"{name} must be non-negative, got {int(array.min())}")
    return array.astype(np.int64)


def _as_vectors(vectors: npt.ArrayLike, dim: int, count: int) -> Matrix:
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim != 2:
        raise ValueError(f"vectors must be a 2-D (n, {dim}) array, got shape {matrix.shape}")
    if matrix.shape[1] != dim:
        raise ValueError(f"vectors have dimension {matrix.shape[1]}, the index has {dim}")
    if matrix.shape[0] != count:
        raise ValueError(f"{count} ids but {matrix.shape[0]} vectors")
    return _normalised(matrix, "vectors")


def _as_queries(query: npt.ArrayLike, dim: int) -> tuple[Matrix, bool]:
    matrix = np.asarray(query, dtype=np.float32)
    single = matrix.ndim == 1
    if single:
        matrix = matrix[None, :]
    if matrix.ndim != 2:
        raise ValueError(f"query must have shape ({dim},) or (q, {dim}), got {matrix.shape}")
    if matrix.shape[1] != dim:
        raise ValueError(f"query has dimension {matrix.shape[1]}, the index has {dim}")
    return _normalised(matrix, "query"), single


def _normalised(matrix: Matrix, name: str) -> Matrix:
    if not len(matrix):
        return np.empty((0, matrix.shape[1]), np.float32)
    finite = np.isfinite(matrix).all(axis=1)
    if not finite.all():
        rows = np.flatnonzero(~finite)[:5].tolist()
        raise ValueError(f"{name} contain NaN or infinity (rows {rows})")
    norms = np.linalg.norm(matrix, axis=1)
    if not (norms > 0).all():
        rows = np.flatnonzero(norms <= 0)[:5].tolist()
        raise ValueError(f"{name} contain zero vectors (rows {rows}), which have no direction")
    return np.ascontiguousarray(matrix / norms[:, None], dtype=np.float32)


def _dot(queries: Matrix, rows: Matrix) -> Matrix:
    """(q, n) inner products. One query runs single-threaded: a multi-threaded BLAS gemv was
    2-8× slower than this on a shared two-core machine, whose other threads were busy."""
    if len(queries) == 1:
        scores: Matrix = np.einsum("ij,j->i", rows, queries[0])
        return scores[None, :]
    return queries @ rows.T


def _last_wins(ids: IdArray, matrix: Matrix) -> tuple[IdArray, Matrix]:
    """Distinct ids ascending, each with the vector of its last occurrence."""
    unique, first_from_end = np.unique(ids[::-1], return_index=True)
    return unique, matrix[len(ids) - 1 - first_from_end]


def _grow(array: npt.NDArray[Any], capacity: int) -> npt.NDArray[Any]:
    grown = np.empty((capacity, *array.shape[1:]), dtype=array.dtype)
    grown[: len(array)] = array
    return grown


# ------------------------------------------------------------------- faiss


def _new_hnsw(dim: int, m: int, ef_construction: int) -> Any:
    faiss = import_faiss()
    index = faiss.IndexHNSWFlat(dim, m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = ef_construction
    return index


def _faiss_vectors(index: Any, count: int, dim: int) -> Matrix:
    if not count:
        return np.empty((0, dim), np.float32)
    faiss = import_faiss()
    storage = faiss.downcast_index(index.storage)
    flat: Matrix = faiss.rev_swig_ptr(storage.get_xb(), count * dim)
    return flat.reshape(count, dim)


def _faiss_search(
    index: Any,
    queries: Matrix,
    k: int,
    ef: int,
    live_bitmap: npt.NDArray[np.uint8] | None,
) -> tuple[ScoreArray, IdArray]:
    faiss = import_faiss()
    params = faiss.SearchParametersHNSW()
    params.efSearch = ef
    selector = None
    if live_bitmap is not None:
        selector = faiss.IDSelectorBitmap(len(live_bitmap), faiss.swig_ptr(live_bitmap))
        params.sel = selector
    distances, nodes = index.search(queries, k, params=params)
    del selector  # it borrows live_bitmap; both had to outlive the search
    return distances, nodes
