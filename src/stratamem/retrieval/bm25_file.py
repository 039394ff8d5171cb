"""The on-disk format of a ``BM25Index``: writing it atomically, reading and checking it.

File format (little-endian throughout), written to a temporary file beside the target,
fsynced, then renamed over it::

    offset   size      content
    0        8         magic b"SMBM25X1"
    8        4         H, the header length, uint32
    12       H         header, UTF-8 JSON object (below)
    ...      8·N       document rowids, int64, ascending
    ...      4·N·C     tokens per (document, column), int32, row-major
    ...      8·(T+1)   indptr, int64: term t's postings are [indptr[t], indptr[t+1])
    ...      4·P       posting documents (positions), int32
    ...      4·P       posting frequencies (column-weighted), float32
    ...      I         chunk ids, UTF-8, joined by "\\n"
    ...      V         terms by id, UTF-8, joined by "\\n" (FTS5 tokens hold no newline)
    end-32   32        SHA-256 of every byte before it

Header keys: ``format_version`` (1), ``columns`` and ``weights`` (the column weights the
frequencies were summed with), ``k1`` and ``b``, ``tokenize`` and ``fts_sql_sha256`` (the
full-text table's tokenizer and the hash of its schema), ``docs`` (N), ``terms`` (T),
``postings`` (P), ``ids_bytes`` (I), ``terms_bytes`` (V), and the store state the index
reflects: ``generation``, ``max_rowid`` and ``averages`` (FTS5's averages record, hex).
:func:`read_file` raises :class:`Rejected` when the file is of another format or was built
with other parameters, and ``OSError``/``ValueError`` when it cannot be read; the caller then
rebuilds from the store. A readable file of an older store state is returned with that state,
for the caller to bring up to date.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO, Final

import numpy as np
import numpy.typing as npt

from stratamem.retrieval.bm25_fts import FtsSchema, FtsState
from stratamem.retrieval.bm25_index import K1, B, BM25Index
from stratamem.retrieval.vector_store_file import digest_of

FORMAT_VERSION: Final = 1
MAGIC: Final = b"SMBM25X1"

_HEADER_MAX: Final = 1 << 20
_DIGEST_SIZE: Final = 32


class Rejected(Exception):
    """A saved index that is readable but not one the caller can use."""


def write_file(target: Path, index: BM25Index, schema: FtsSchema, state: FtsState) -> None:
    ids = "\n".join(index.ids).encode()
    terms = index.terms
    if any("\n" in t for t in terms) or any("\n" in i for i in index.ids):
        raise ValueError("a term or id holds a newline; the index is not saved")
    vocab = "\n".join(terms).encode()
    header = {
        "format_version": FORMAT_VERSION,
        "columns": list(index.columns),
        "weights": list(index.weights),
        "k1": K1,
        "b": B,
        "tokenize": schema.tokenize,
        "fts_sql_sha256": schema.sql_sha256,
        "docs": len(index),
        "terms": len(terms),
        "postings": index.nnz,
        "ids_bytes": len(ids),
        "terms_bytes": len(vocab),
        "generation": state.generation,
        "max_rowid": state.max_rowid,
        "averages": state.averages.hex(),
    }
    encoded = json.dumps(header, sort_keys=True).encode()
    handle, temp_name = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=".tmp", dir=target.parent
    )
    temp = Path(temp_name)
    try:
        with os.fdopen(handle, "wb") as file:
            digest = hashlib.sha256()

            def out(data: bytes | memoryview) -> None:
                digest.update(data)
                file.write(data)

            out(MAGIC)
            out(len(encoded).to_bytes(4, "little"))
            out(encoded)
            for array, dtype in (
                (index.rowids, "<i8"),
                (index.lengths, "<i4"),
                (index.indptr, "<i8"),
                (index.doc, "<i4"),
                (index.freq, "<f4"),
            ):
                out(np.ascontiguousarray(array, dtype=dtype).data.cast("B"))
            out(ids)
            out(vocab)
            file.write(digest.digest())
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def read_file(
    path: Path, schema: FtsSchema, weights: Sequence[float]
) -> tuple[BM25Index, FtsState]:
    """The index saved at ``path`` and the store state it reflects."""
    size = path.stat().st_size
    with path.open("rb") as file:
        if file.read(len(MAGIC)) != MAGIC:
            raise Rejected("not a stratamem BM25 index")
        length = int.from_bytes(file.read(4), "little")
        if length > min(_HEADER_MAX, size):
            raise Rejected("header length out of range")
        header = json.loads(file.read(length).decode())
        if not isinstance(header, dict):
            raise Rejected("header is not an object")
        expected: dict[str, Any] = {
            "format_version": FORMAT_VERSION,
            "columns": list(schema.columns),
            "weights": list(weights),
            "k1": K1,
            "b": B,
            "tokenize": schema.tokenize,
            "fts_sql_sha256": schema.sql_sha256,
        }
        for key, want in expected.items():
            if header.get(key) != want:
                raise Rejected(f"{key} is {header.get(key)!r}, expected {want!r}")
        n, t, p = int(header["docs"]), int(header["terms"]), int(header["postings"])
        ids_bytes, terms_bytes = int(header["ids_bytes"]), int(header["terms_bytes"])
        c = len(schema.columns)
        body = 8 * n + 4 * n * c + 8 * (t + 1) + 8 * p + ids_bytes + terms_bytes
        body_end = size - _DIGEST_SIZE
        if min(n, t, p, ids_bytes, terms_bytes) < 0 or body_end != 12 + length + body:
            raise Rejected("the file's length does not match its header")
        if digest_of(file, body_end) != file.read():
            raise Rejected("checksum mismatch (truncated or corrupt)")
        file.seek(12 + length)
        rowids = _read_array(file, (n,), "<i8").astype(np.int64)
        lengths = _read_array(file, (n, c), "<i4").astype(np.int32)
        indptr = _read_array(file, (t + 1,), "<i8").astype(np.int64)
        doc = _read_array(file, (p,), "<i4").astype(np.int32)
        freq = _read_array(file, (p,), "<f4").astype(np.float32)
        ids = file.read(ids_bytes).decode().split("\n") if n else []
        terms = file.read(terms_bytes).decode().split("\n") if t else []
    if (
        len(ids) != n
        or len(terms) != t
        or len(set(terms)) != t
        or indptr[0] != 0
        or indptr[-1] != p
        or bool((np.diff(indptr) < 0).any())
        or bool((np.diff(rowids) <= 0).any())
        or (p and (int(doc.min()) < 0 or int(doc.max()) >= n))
        or bool((lengths < 0).any())
    ):
        raise Rejected("the arrays do not agree with each other")
    index = BM25Index(
        columns=schema.columns,
        weights=tuple(weights),
        rowids=rowids,
        ids=ids,
        lengths=lengths,
        vocab={term: i for i, term in enumerate(terms)},
        indptr=indptr,
        doc=doc,
        freq=freq,
    )
    state = FtsState(
        generation=int(header["generation"]),
        max_rowid=int(header["max_rowid"]),
        averages=bytes.fromhex(str(header["averages"])),
    )
    return index, state


def _read_array(file: BinaryIO, shape: tuple[int, ...], dtype: str) -> npt.NDArray[Any]:
    array = np.empty(shape, dtype=dtype)
    view = array.data.cast("B")
    if file.readinto(view) != view.nbytes:  # type: ignore[attr-defined]
        raise Rejected("file ends early")
    return array
