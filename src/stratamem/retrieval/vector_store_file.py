"""The on-disk format of a ``VectorIndex``: writing it atomically, reading and checking it.

File format (little-endian throughout), written to a temporary file beside the target,
fsynced, then renamed over it::

    offset   size      content
    0        8         magic b"SMVECIX1"
    8        4         H, the header length, uint32
    12       H         header, UTF-8 JSON object (below)
    12+H     8·S       slot → row id map, int64, S = header["slots"]; -1 marks a dead slot
    ...      ...       payload: "exact": the S × dim float32 matrix, row per slot;
                       "hnsw": the faiss index as written by faiss.write_index
    end-32   32        SHA-256 of every byte before it

Header keys: ``format_version`` (1), ``kind`` ("exact" | "hnsw"), ``library`` ("numpy" |
"faiss") and ``library_version``, ``dim``, ``metric`` ("inner_product"), ``count`` (live
vectors), ``slots``, ``ids_sha256`` (``id_set_checksum`` of the live ids), ``signature`` (the
caller's model signature), ``generation`` (the caller's integer), ``m`` and
``ef_construction``. ``VectorIndex.load`` returns ``None`` rather than raising when the file is
missing, truncated, corrupt, of another format version, or when its dim, signature,
generation or (if given) id checksum differ from what the caller expects; the caller then
rebuilds from the store.

This module knows the bytes, not the index: ``write_file`` takes the index's arrays and
``read_file`` returns them checked against the header, for ``VectorIndex`` to adopt.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Final, Literal

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    # Type-only: vector_index imports this module, so a runtime import would be a cycle.
    from stratamem.retrieval.vector_index import IdArray, Matrix

FORMAT_VERSION: Final = 1
MAGIC: Final = b"SMVECIX1"

_HEADER_MAX: Final = 1 << 20
_DIGEST_SIZE: Final = 32
_CHUNK: Final = 1 << 20


def id_set_checksum(ids: npt.ArrayLike) -> str:
    """SHA-256 (hex) of the distinct ids, ascending, as little-endian int64 (``ids_sha256``).

    A caller can compute it from its own store and pass it to ``VectorIndex.load`` to refuse
    an index that has drifted from the store.
    """
    canonical = np.unique(np.asarray(ids, dtype=np.int64)).astype("<i8", copy=False)
    return hashlib.sha256(canonical.tobytes()).hexdigest()


class Rejected(Exception):
    """A saved index that is readable but not the one the caller can use."""


@dataclass(frozen=True, slots=True)
class StoredIndex:
    """What ``read_file`` found, already checked against the header and the caller."""

    kind: Literal["exact", "hnsw"]
    m: int
    ef_construction: int
    slot_ids: IdArray  # slot → row id; -1 marks a dead slot
    sorted_ids: IdArray  # live ids, ascending ...
    sorted_slots: IdArray  # ... and their slots
    matrix: Matrix  # the exact path's rows, (slots × dim); empty for "hnsw"
    hnsw: Any  # faiss.IndexHNSWFlat for "hnsw", else None


def write_file(
    target: Path,
    *,
    dim: int,
    signature: str,
    generation: int,
    m: int,
    ef_construction: int,
    slot_ids: IdArray,
    live_count: int,
    ids_checksum: str,
    matrix: Matrix,
    hnsw: Any,
) -> None:
    """Write an index atomically: ``hnsw`` when it is not None, else ``matrix``."""
    if hnsw is not None:
        library, version = "faiss", str(_faiss().__version__)
    else:
        library, version = "numpy", np.__version__
    header = {
        "format_version": FORMAT_VERSION,
        "kind": "exact" if hnsw is None else "hnsw",
        "library": library,
        "library_version": version,
        "dim": dim,
        "metric": "inner_product",
        "count": live_count,
        "slots": len(slot_ids),
        "ids_sha256": ids_checksum,
        "signature": signature,
        "generation": generation,
        "m": m,
        "ef_construction": ef_construction,
    }
    encoded = json.dumps(header, sort_keys=True).encode()
    handle, temp_name = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=".tmp", dir=target.parent
    )
    temp = Path(temp_name)
    try:
        with os.fdopen(handle, "wb") as file:
            out = _HashingWriter(file)
            out.write(MAGIC)
            out.write(len(encoded).to_bytes(4, "little"))
            out.write(encoded)
            out.write(np.ascontiguousarray(slot_ids, dtype="<i8").data)
            if hnsw is None:
                out.write(np.ascontiguousarray(matrix, dtype="<f4").data)
            else:
                faiss = _faiss()
                faiss.write_index(hnsw, faiss.PyCallbackIOWriter(out.write))
            file.write(out.digest.digest())
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def read_file(
    path: Path,
    dim: int,
    *,
    signature: str,
    generation: int,
    ids_checksum: str | None,
) -> StoredIndex:
    """Read and check the index at ``path``; raises ``Rejected`` when it is not usable as
    expected, and ``OSError``, ``ValueError`` and the like when it cannot be read."""
    size = path.stat().st_size
    with path.open("rb") as file:
        if file.read(len(MAGIC)) != MAGIC:
            raise Rejected("not a stratamem vector index")
        length = int.from_bytes(file.read(4), "little")
        if length > min(_HEADER_MAX, size):
            raise Rejected("header length out of range")
        header = json.loads(file.read(length).decode())
        if not isinstance(header, dict):
            raise Rejected("header is not an object")
        expected = {
            "format_version": FORMAT_VERSION,
            "dim": dim,
            "metric": "inner_product",
            "signature": signature,
            "generation": generation,
        }
        for key, want in expected.items():
            if header.get(key) != want:
                raise Rejected(f"{key} is {header.get(key)!r}, expected {want!r}")
        if ids_checksum is not None and header.get("ids_sha256") != ids_checksum:
            raise Rejected("its ids differ from the store's")
        kind, library = header["kind"], header["library"]
        if (kind, library) not in {("exact", "numpy"), ("hnsw", "faiss")}:
            raise Rejected(f"unknown kind {kind!r} / library {library!r}")
        slots, count = int(header["slots"]), int(header["count"])
        if not 0 <= count <= slots:
            raise Rejected("count and slots disagree")
        body_end = size - _DIGEST_SIZE
        if body_end < 12 + length + 8 * slots or digest_of(file, body_end) != file.read():
            raise Rejected("checksum mismatch (truncated or corrupt)")
        m, ef_construction = int(header["m"]), int(header["ef_construction"])

        file.seek(12 + length)
        slot_ids = _read_array(file, (slots,), "<i8").astype(np.int64)
        if kind == "exact":
            matrix = _read_array(file, (slots, dim), "<f4").astype(np.float32)
            hnsw = None
        else:
            faiss = _faiss()
            # read_index already returns the concrete class; downcasting again breaks it.
            hnsw = faiss.read_index(faiss.PyCallbackIOReader(file.read))
            if (
                not isinstance(hnsw, faiss.IndexHNSWFlat)
                or hnsw.d != dim
                or hnsw.ntotal != slots
                or hnsw.metric_type != faiss.METRIC_INNER_PRODUCT
            ):
                raise Rejected("the faiss index does not match the header")
            matrix = np.empty((0, dim), np.float32)
        if file.tell() != body_end:
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
        matrix=matrix,
        hnsw=hnsw,
    )


class _HashingWriter:
    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self.digest = hashlib.sha256()

    def write(self, data: bytes | memoryview) -> None:
        self.digest.update(data)
        self._file.write(data)


def digest_of(file: BinaryIO, end: int) -> bytes:
    """SHA-256 of the file's first ``end`` bytes; leaves the position at ``end``."""
    file.seek(0)
    digest = hashlib.sha256()
    remaining = end
    while remaining > 0:
        block = file.read(min(_CHUNK, remaining))
        if not block:
            break
        digest.update(block)
        remaining -= len(block)
    return digest.digest()


def _read_array(file: io.BufferedReader, shape: tuple[int, ...], dtype: str) -> npt.NDArray[Any]:
    array = np.empty(shape, dtype=dtype)
    view = array.data.cast("B")
    if file.readinto(view) != view.nbytes:
        raise Rejected("file ends early")
    return array


def _faiss() -> Any:
    # Same lazy import as vector_index's, repeated here because importing that module at
    # import time would be a cycle. Typed as Any: faiss's stubs miss the callback IO classes.
    return importlib.import_module("faiss")
