"""The on-disk format of a ``VectorIndex``: writing it atomically, reading and checking it.

The frame (magic, JSON header, body, SHA-256, atomic replace) is ``file``'s; the body,
little-endian throughout::

    offset   size      content
    0        8         magic b"SMVECIX3"
    8        4         H, the header length, uint32
    12       H         header, UTF-8 JSON object (below)
    12+H     8·S       slot → row id map, int64, S = header["slots"]; -1 marks a dead slot
    ...      ...       "hnsw" only: the faiss graph as faiss.write_index writes it with
                       IO_FLAG_SKIP_STORAGE (links and levels, no vectors)
    end-32   32        SHA-256 of every byte before it

The file holds no vectors: they are the store's, and a copy beside it doubled what the vectors
took on disk (161 MB of the 805 MB a 100k-chunk store took). ``read_file`` returns the slots
and the graph; ``VectorIndex.load`` gives it the store's vectors of the file's rows, read in
the same snapshot as the rows the file was checked against, so what it serves are the
vectors the store holds now.

Header keys: ``format_version`` (3), ``kind`` ("exact" | "hnsw"), ``library`` ("numpy" |
"faiss") and ``library_version``, ``dim``, ``metric`` ("inner_product"), ``count`` (live
vectors), ``slots``, ``ids_sha256`` (``id_set_checksum`` of the live ids), ``signature`` (the
caller's model signature), ``generation`` (the caller's integer), ``store_id`` (the database's
id) and ``rows_sha256`` (``file.rows_digest`` of the (rowid, chunk id) pairs the
vectors belong to, as the caller computed them), ``m`` and ``ef_construction``.
``VectorIndex.load`` returns ``None`` rather than raising when the file is missing, truncated,
corrupt, of another format version, or when its dim, signature, store id, rows digest or
generation (each if given) differ from what the caller expects; the caller then rebuilds.

This module knows the bytes, not the index: ``write_file`` takes a :class:`Snapshot` of the
index's arrays and ``read_file`` returns them checked against the header, for ``VectorIndex``
to adopt. The index imports this module, never the other way round: the array types and the
faiss import both sides need are defined here.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt

from stratamem.retrieval.index.file import (
    HashingWriter,
    Rejected,
    open_checked,
    read_array,
    write_atomic,
)

IdArray = npt.NDArray[np.int64]
Matrix = npt.NDArray[np.float32]

FORMAT_VERSION: Final = 3
MAGIC: Final = b"SMVECIX3"

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "IdArray",
    "Matrix",
    "Rejected",
    "Snapshot",
    "StoredIndex",
    "attach_storage",
    "id_set_checksum",
    "import_faiss",
    "read_file",
    "serialize_hnsw",
    "write_file",
]


def id_set_checksum(ids: npt.ArrayLike) -> str:
    """SHA-256 (hex) of the distinct ids, ascending, as little-endian int64 (``ids_sha256``)."""
    canonical = np.unique(np.asarray(ids, dtype=np.int64)).astype("<i8", copy=False)
    return hashlib.sha256(canonical.tobytes()).hexdigest()


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything ``write_file`` writes, copied out of the index so that it can be written
    while the index changes (on another thread)."""

    dim: int
    signature: str
    generation: int
    store_id: str
    rows_sha256: str
    m: int
    ef_construction: int
    slot_ids: IdArray
    live_count: int
    ids_checksum: str
    hnsw: npt.NDArray[np.uint8] | None  # the graph's bytes (serialize_hnsw)


@dataclass(frozen=True, slots=True)
class StoredIndex:
    """What ``read_file`` found, already checked against the header and the caller."""

    kind: Literal["exact", "hnsw"]
    m: int
    ef_construction: int
    slot_ids: IdArray  # slot → row id; -1 marks a dead slot
    sorted_ids: IdArray  # live ids, ascending ...
    sorted_slots: IdArray  # ... and their slots
    hnsw: Any  # faiss.IndexHNSWFlat without its storage for "hnsw", else None


def write_file(
    target: Path, snap: Snapshot, *, still_current: Callable[[], bool] | None = None
) -> bool:
    """Write a snapshot atomically: its slots, and its graph when it has one."""
    if snap.hnsw is not None:
        library, version = "faiss", str(import_faiss().__version__)
    else:
        library, version = "numpy", np.__version__
    header = {
        "format_version": FORMAT_VERSION,
        "kind": "exact" if snap.hnsw is None else "hnsw",
        "library": library,
        "library_version": version,
        "dim": snap.dim,
        "metric": "inner_product",
        "count": snap.live_count,
        "slots": len(snap.slot_ids),
        "ids_sha256": snap.ids_checksum,
        "signature": snap.signature,
        "generation": snap.generation,
        "store_id": snap.store_id,
        "rows_sha256": snap.rows_sha256,
        "m": snap.m,
        "ef_construction": snap.ef_construction,
    }

    def body(out: HashingWriter) -> None:
        out.write(np.ascontiguousarray(snap.slot_ids, dtype="<i8").data)
        if snap.hnsw is not None:
            out.write(np.ascontiguousarray(snap.hnsw).data)

    return write_atomic(target, MAGIC, header, body, still_current=still_current)


def read_file(
    path: Path,
    dim: int,
    *,
    signature: str,
    generation: int | None,
    ids_checksum: str | None,
    store_id: str | None = None,
    rows_sha256: str | None = None,
) -> StoredIndex:
    """Read and check the index at ``path``; raises ``Rejected`` when it is not usable as
    expected, and ``OSError``, ``ValueError`` and the like when it cannot be read. A check
    whose expected value is None is skipped."""
    expected: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "store_id": store_id,
        "dim": dim,
        "metric": "inner_product",
        "signature": signature,
        "generation": generation,
        "rows_sha256": rows_sha256,
        "ids_sha256": ids_checksum,
    }
    checked = {key: value for key, value in expected.items() if value is not None}
    with open_checked(path, MAGIC, checked, what="vector index") as opened:
        header, file = opened.header, opened.file
        kind, library = header["kind"], header["library"]
        if (kind, library) not in {("exact", "numpy"), ("hnsw", "faiss")}:
            raise Rejected(f"unknown kind {kind!r} / library {library!r}")
        slots, count = int(header["slots"]), int(header["count"])
        if not 0 <= count <= slots or opened.body_end < opened.body_start + 8 * slots:
            raise Rejected("count and slots disagree")
        m, ef_construction = int(header["m"]), int(header["ef_construction"])

        slot_ids = read_array(file, (slots,), "<i8").astype(np.int64)
        hnsw = None
        if kind == "hnsw":
            faiss = import_faiss()
            # read_index already returns the concrete class; downcasting again breaks it.
            hnsw = faiss.read_index(faiss.PyCallbackIOReader(file.read))
            if (
                not isinstance(hnsw, faiss.IndexHNSWFlat)
                or hnsw.d != dim
                or hnsw.ntotal != slots
                or hnsw.metric_type != faiss.METRIC_INNER_PRODUCT
                or hnsw.storage is not None
            ):
                raise Rejected("the faiss index does not match the header")
        if file.tell() != opened.body_end:
            raise Rejected("payload length does not match the header")

    live = slot_ids[slot_ids >= 0]
    order = np.argsort(live, kind="stable")
    sorted_ids = live[order]
    if (
        len(live) != count
        or bool((slot_ids < -1).any())
        or bool((np.diff(sorted_ids) == 0).any())
        or (kind == "exact" and count != slots)
        or id_set_checksum(sorted_ids) != header["ids_sha256"]
    ):
        raise Rejected("the id map does not match the header")
    return StoredIndex(
        kind=kind,
        m=m,
        ef_construction=ef_construction,
        slot_ids=slot_ids,
        sorted_ids=sorted_ids,
        sorted_slots=np.flatnonzero(slot_ids >= 0).astype(np.int64)[order],
        hnsw=hnsw,
    )


def serialize_hnsw(index: Any) -> npt.NDArray[np.uint8]:
    """faiss's own bytes of an HNSW index's graph, without the vectors it stores."""
    faiss = import_faiss()
    writer = faiss.VectorIOWriter()
    faiss.write_index(index, writer, faiss.IO_FLAG_SKIP_STORAGE)
    data: npt.NDArray[np.uint8] = faiss.vector_to_array(writer.data)
    return data


def attach_storage(index: Any, matrix: Matrix) -> None:
    """Give a graph read by ``read_file`` its vectors: ``matrix``, a row per slot."""
    faiss = import_faiss()
    storage = faiss.IndexFlatIP(index.d)
    storage.add(matrix)
    index.storage = storage
    index.own_fields = True
    storage.this.disown()  # the HNSW index owns and frees it now


def import_faiss() -> Any:
    """faiss, imported on first use: it costs ~0.2 s and small stores never need it. Typed
    as Any because faiss's bundled stubs miss SearchParametersHNSW and the callback IO
    classes."""
    return importlib.import_module("faiss")
