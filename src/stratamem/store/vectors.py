"""The vectors role: chunk embeddings per model signature, and the integer row keys the
in-process vector index is addressed by.

A chunk's row key (``rowid``) is a stable integer the backend assigns on insert; it may be
reused only after the chunk is deleted, which bumps the store's generation.

A chunk's vector is stored as ``dim`` float16 values, little-endian (``2·dim`` bytes), made
from the embedder's L2-normalised float32 output by :func:`pack_vector`. Half precision halves
the largest table of a store and changes a cosine by about 1e-4 (each value keeps 11
significant bits); scoring is done in float32 after :func:`unpack_vectors`. Vectors written as
float32 (``4·dim`` bytes, what stores kept before, and what summary and fact vectors still are)
read back as they are: the length of a blob tells its width.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from stratamem.errors import StoreError
from stratamem.types import Filters

Matrix = npt.NDArray[np.float32]


def pack_vector(vector: bytes | npt.ArrayLike, dim: int) -> bytes:
    """A chunk vector as the store keeps it: ``dim`` little-endian float16 values. Takes the
    values or a stored blob of either width; a float16 blob (a vector reused from the
    embedding cache) is kept byte for byte, not unpacked and packed again."""
    if isinstance(vector, bytes) and len(vector) == 2 * dim:
        return vector
    values = unpack_vectors([vector], dim)[0] if isinstance(vector, bytes) else vector
    packed = np.asarray(values, dtype=np.float32).astype("<f2")
    if packed.shape != (dim,):
        raise StoreError(f"a vector of shape {packed.shape} given where {dim} values belong")
    return packed.tobytes()


def packed_rows(rows: Iterable[Sequence[object]]) -> Iterator[ChunkVector]:
    """``rows`` (chunk vectors or tuples of their fields) with each vector packed."""
    for row in rows:
        found = ChunkVector(*row)  # type: ignore[arg-type]
        yield found._replace(vector=pack_vector(found.vector, found.dim))


def unpack_vectors(blobs: Sequence[bytes], dim: int) -> Matrix:
    """Stored vectors (float16 or float32 blobs, mixed or not) as one float32 matrix, a row
    per blob. A float16 row is scaled back to unit length (rounding moved it by about 1e-4),
    so that it reads the same here as from an index that normalises what it is given."""
    if not blobs:
        return np.empty((0, dim), np.float32)
    half, full = 2 * dim, 4 * dim
    if all(len(blob) == full for blob in blobs):
        return np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), dim).copy()
    if all(len(blob) == half for blob in blobs):
        out = np.frombuffer(b"".join(blobs), dtype="<f2").astype(np.float32).reshape(-1, dim)
        return _unit(out, np.ones(len(blobs), dtype=bool))
    out = np.empty((len(blobs), dim), np.float32)
    for row, blob in enumerate(blobs):
        if len(blob) not in (half, full):
            raise StoreError(
                f"a stored vector has {len(blob)} bytes; {dim} values take {half} (float16) "
                f"or {full} (float32)"
            )
        out[row] = np.frombuffer(blob, dtype="<f2" if len(blob) == half else "<f4")
    return _unit(out, np.fromiter((len(b) == half for b in blobs), bool, len(blobs)))


def _unit(matrix: Matrix, rows: npt.NDArray[np.bool_]) -> Matrix:
    """``matrix`` with ``rows`` (a mask) scaled to unit length, zero rows left as they are."""
    norms = np.linalg.norm(matrix, axis=1)
    scale = rows & (norms > 0)
    matrix[scale] /= norms[scale, None]
    return matrix


@dataclass(frozen=True, slots=True)
class PendingChunk:
    """A chunk that has no vector of a model yet: what embedding it needs."""

    rowid: int
    id: str
    source_id: str
    title: str
    content: str
    content_sha256: str


class ChunkVector(NamedTuple):
    """One chunk's vector of one model, as stored."""

    node_id: str
    model: str
    source_id: str
    dim: int
    vector: bytes  # see pack_vector; the store packs whatever width it is given
    content_sha256: str


class VectorMark(NamedTuple):
    """A place in the order vectors are written: the highest vector row key at the time, and
    the chunk that row named (None for an empty table)."""

    row: int
    node: str | None


class VectorStore(Protocol):
    def pending_embeddings(
        self, model: str, limit: int, *, after: int = 0, source: str | None = None
    ) -> list[PendingChunk]:
        """Up to ``limit`` chunks of unlocked sources (of ``source`` only, by id, where
        given) with no vector of ``model``, oldest first, from the row key after ``after`` on
        (the last one a previous call returned)."""
        ...

    def count_pending_embeddings(self, model: str, *, source: str | None = None) -> int:
        """How many chunks the reader may see (of ``source`` only, where given) have no
        vector of ``model``."""
        ...

    def has_vectors(self, model: str) -> bool:
        """Whether any chunk the reader may see has a vector of ``model``."""
        ...

    def cached_vectors(self, model: str, hashes: Sequence[str]) -> dict[str, bytes]:
        """Vectors ``model`` already made for these content hashes (of any chunk)."""
        ...

    def insert_vectors(self, rows: Iterable[ChunkVector]) -> None:
        """Store vectors, replacing a chunk's earlier one of the same model."""
        ...

    def delete_vectors(self, *, keep_model: str | None = None) -> int: ...

    def vector_models(self) -> dict[str, int]: ...

    def iter_vectors(
        self, model: str, batch: int = 10_000
    ) -> Iterator[tuple[list[int], list[bytes]]]: ...

    def vector_keys(self, model: str) -> list[tuple[int, str]]: ...

    def vector_mark(self) -> VectorMark | None:
        """Where vector rows written from now on begin; None where the store cannot tell
        (its vectors are then compared whole)."""
        ...

    def vector_row_node(self, row: int) -> str | None: ...

    def vectors_after(self, model: str, mark: VectorMark) -> list[tuple[int, str, bytes]]: ...

    def count_vectors(self, model: str) -> int: ...

    def vectors_by_rowid(self, model: str, rowids: Sequence[int]) -> dict[int, bytes]: ...

    def vectors_of(self, model: str, node_ids: Sequence[str]) -> dict[str, bytes]: ...

    def rowids_to_ids(self, rowids: Sequence[int]) -> dict[int, str]: ...

    def ids_to_rowids(self, node_ids: Sequence[str]) -> dict[str, int]: ...

    def allowed_rowids(self, filters: Filters) -> list[int] | None:
        """The row keys the filters admit, or None when they admit every chunk."""
        ...
