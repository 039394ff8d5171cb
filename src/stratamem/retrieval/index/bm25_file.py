"""The on-disk format of a ``BM25Index``: writing it atomically, reading and checking it.

The frame (magic, JSON header, body, SHA-256, atomic replace) is ``file``'s; the body,
little-endian throughout::

    offset   size      content
    0        8         magic b"SMBM25X2"
    8        4         H, the header length, uint32
    12       H         header, UTF-8 JSON object (below)
    ...      8·N       document rowids, int64, ascending
    ...      4·N·C     tokens per (document, column), int32, row-major
    ...      8·(T+1)   indptr, int64: term t's postings are [indptr[t], indptr[t+1])
    ...      4·P       posting documents (positions), int32
    ...      F·P       posting frequencies (column-weighted): F = 1, uint8 counts of 1/S
                       (S = ``freq_scale``), 255 standing for a count listed below; F = 2,
                       uint16 counts of 1/S; or F = 4, float32 (``freq_scale`` 0 or absent)
    ...      8·K       (F = 1) the positions of the counts of 255 or more, int64, ascending
    ...      2·K       (F = 1) those counts, uint16
    ...      I         chunk ids, UTF-8, joined by "\\n"
    ...      V         terms by id, UTF-8, joined by "\\n" (FTS5 tokens hold no newline)
    end-32   32        SHA-256 of every byte before it

Header keys: ``format_version`` (2), ``columns`` and ``weights`` (the column weights the
frequencies were summed with), ``k1`` and ``b``, ``tokenize`` and ``fts_sql_sha256`` (the
full-text index's tokenizer and the hash of its definition: ``KeywordSchema.tokenizer`` and
``.fingerprint``), ``docs`` (N), ``terms`` (T), ``postings`` (P), ``ids_bytes`` (I),
``terms_bytes`` (V), ``freq_scale`` (S), ``freq_width`` (F; 2 where absent, or 4 without a
scale) and ``freq_overflow`` (K; 0 where absent), the database's ``store_id`` and ``rows_sha256``
(``file.rows_digest`` of the (rowid, chunk id) pairs), and the store state the index
reflects: ``generation``, ``max_rowid`` and ``averages`` (the row count, then the token total
of each column, as SQLite varints, hex: the layout of FTS5's averages record). Every term
has at least one posting: a term whose documents are all gone is dropped, so a file never
names a word the database no longer holds.

:func:`read_file` raises :class:`Rejected` when the file is of another format, was built with
other parameters or from another database, and ``OSError``/``ValueError`` when it cannot be
read; the caller then rebuilds from the store. A readable file of an older store state is
returned with that state (its row count and token totals counted from the arrays read), for
the caller to check row by row and bring up to date.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from stratamem.retrieval.index.bm25 import K1, B, BM25Index
from stratamem.retrieval.index.file import (
    HashingWriter,
    Rejected,
    open_checked,
    read_array,
    rows_digest,
    write_atomic,
)
from stratamem.store.keyword import KeywordSchema, KeywordState

FORMAT_VERSION: Final = 2
MAGIC: Final = b"SMBM25X2"
# Candidate S for packing frequencies: the first that makes every column weight a whole
# number of 1/S (1 and 0.6 need S = 5) is used when it reproduces every frequency exactly.
_SCALES: Final = (1, 2, 4, 5, 8, 10, 16, 20, 25, 40, 50, 100)

__all__ = ["FORMAT_VERSION", "MAGIC", "Rejected", "read_file", "snapshot", "write_file"]


def snapshot(index: BM25Index) -> BM25Index:
    """A copy that later changes to ``index`` leave alone, made in O(terms): the arrays and
    the id list are replaced, never changed in place, by ``append`` and ``remove``; only the
    vocabulary dict is updated in place, so it is copied."""
    return BM25Index(
        columns=index.columns,
        weights=index.weights,
        rowids=index.rowids,
        ids=index.ids,
        lengths=index.lengths,
        vocab=dict(index.vocab),
        indptr=index.indptr,
        doc=index.doc,
        freq=index.freq,
        _tail=index._tail,
    )


def write_file(
    target: Path,
    index: BM25Index,
    schema: KeywordSchema,
    state: KeywordState,
    *,
    store_id: str,
    still_current: Callable[[], bool] | None = None,
) -> bool:
    index.merge()  # on the caller's copy: the saver's snapshot, not the live index
    ids = "\n".join(index.ids).encode()
    terms = index.terms
    if any("\n" in t for t in terms) or any("\n" in i for i in index.ids):
        raise ValueError("a term or id holds a newline; the index is not saved")
    vocab = "\n".join(terms).encode()
    scale, freq = _packed_frequencies(index.freq, index.weights)
    width, freq, overflow, big = _narrowed(scale, freq)
    header = {
        "format_version": FORMAT_VERSION,
        "columns": list(index.columns),
        "weights": list(index.weights),
        "k1": K1,
        "b": B,
        "tokenize": schema.tokenizer,
        "fts_sql_sha256": schema.fingerprint,
        "docs": len(index),
        "terms": len(terms),
        "postings": index.nnz,
        "ids_bytes": len(ids),
        "terms_bytes": len(vocab),
        "freq_scale": scale,
        "freq_width": width,
        "freq_overflow": len(overflow),
        "store_id": store_id,
        "rows_sha256": rows_digest(index.rowids, index.ids),
        "generation": state.generation,
        "max_rowid": state.max_rowid,
        "averages": _varints(state.docs, *state.totals).hex(),
    }

    def body(out: HashingWriter) -> None:
        for array, dtype in (
            (index.rowids, "<i8"),
            (index.lengths, "<i4"),
            (index.indptr, "<i8"),
            (index.doc, "<i4"),
            (freq, _FREQ_DTYPES[width]),
            (overflow, "<i8"),
            (big, "<u2"),
        ):
            out.write(np.ascontiguousarray(array, dtype=dtype).data.cast("B"))
        out.write(ids)
        out.write(vocab)

    return write_atomic(target, MAGIC, header, body, still_current=still_current)


def read_file(
    path: Path, schema: KeywordSchema, *, store_id: str
) -> tuple[BM25Index, KeywordState]:
    """The index saved at ``path`` and the store state it reflects."""
    expected: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "store_id": store_id,
        "columns": list(schema.columns),
        "weights": list(schema.weights),
        "k1": K1,
        "b": B,
        "tokenize": schema.tokenizer,
        "fts_sql_sha256": schema.fingerprint,
    }
    with open_checked(path, MAGIC, expected, what="BM25 index") as opened:
        header, file = opened.header, opened.file
        n, t, p = int(header["docs"]), int(header["terms"]), int(header["postings"])
        ids_bytes, terms_bytes = int(header["ids_bytes"]), int(header["terms_bytes"])
        c = len(schema.columns)
        scale = int(header.get("freq_scale") or 0)
        width = int(header.get("freq_width") or (2 if scale else 4))
        k = int(header.get("freq_overflow") or 0)
        if width not in _FREQ_DTYPES or (width == 4) != (scale == 0) or (k and width != 1):
            raise Rejected(f"frequencies of {width} bytes with scale {scale} are not a format")
        body = 8 * n + 4 * n * c + 8 * (t + 1) + (4 + width) * p + 10 * k
        body += ids_bytes + terms_bytes
        if (
            min(n, t, p, k, ids_bytes, terms_bytes) < 0
            or opened.body_end != opened.body_start + body
        ):
            raise Rejected("the file's length does not match its header")
        rowids = read_array(file, (n,), "<i8").astype(np.int64)
        lengths = read_array(file, (n, c), "<i4").astype(np.int32)
        indptr = read_array(file, (t + 1,), "<i8").astype(np.int64)
        doc = read_array(file, (p,), "<i4").astype(np.int32)
        counts = read_array(file, (p,), _FREQ_DTYPES[width]).astype(np.float32)
        at = read_array(file, (k,), "<i8").astype(np.int64)
        if k and (int(at.min()) < 0 or int(at.max()) >= p):
            raise Rejected("a frequency's position is outside the postings")
        counts[at] = read_array(file, (k,), "<u2").astype(np.float32)
        freq = counts / np.float32(scale) if scale else counts
        ids = file.read(ids_bytes).decode().split("\n") if n else []
        terms = file.read(terms_bytes).decode().split("\n") if t else []
    if (
        len(ids) != n
        or len(terms) != t
        or len(set(terms)) != t
        or indptr[0] != 0
        or indptr[-1] != p
        or bool((np.diff(indptr) <= 0).any())
        or bool((np.diff(rowids) <= 0).any())
        or (p and (int(doc.min()) < 0 or int(doc.max()) >= n))
        or bool((lengths < 0).any())
    ):
        raise Rejected("the arrays do not agree with each other")
    if rows_digest(rowids, ids) != header.get("rows_sha256"):
        raise Rejected("its rows do not match its header")
    index = BM25Index(
        columns=schema.columns,
        weights=schema.weights,
        rowids=rowids,
        ids=ids,
        lengths=lengths,
        vocab={term: i for i, term in enumerate(terms)},
        indptr=indptr,
        doc=doc,
        freq=freq,
    )
    state = KeywordState(
        generation=int(header["generation"]),
        max_rowid=int(header["max_rowid"]),
        docs=n,
        totals=index.column_totals(),
    )
    return index, state


def _packed_frequencies(
    freq: npt.NDArray[np.float32], weights: Sequence[float]
) -> tuple[int, npt.NDArray[Any]]:
    """(S, the frequencies as uint16 counts of 1/S) when that holds every one exactly, as
    read back (a count over S in float32); (0, the float32 frequencies) otherwise."""
    for scale in _SCALES:
        if all(abs(w * scale - round(w * scale)) < 1e-9 for w in weights):
            break
    else:
        return 0, freq
    counts = np.rint(freq.astype(np.float64) * scale)
    if len(counts) and (counts.min() < 0 or counts.max() > np.iinfo(np.uint16).max):
        return 0, freq
    packed = counts.astype(np.uint16)
    if not np.array_equal(packed.astype(np.float32) / np.float32(scale), freq):
        return 0, freq
    return scale, packed


_FREQ_DTYPES: Final = {1: "<u1", 2: "<u2", 4: "<f4"}


def _narrowed(
    scale: int, freq: npt.NDArray[Any]
) -> tuple[int, npt.NDArray[Any], npt.NDArray[np.int64], npt.NDArray[Any]]:
    """(F, the frequencies as written, the positions listed apart, their counts): while
    counts of 255 or more are few (at most one in 64), every count is written in a byte,
    255 standing for one listed apart; else they are written as they came."""
    none = np.empty(0, np.int64)
    if not scale:
        return 4, freq, none, none
    at = np.flatnonzero(freq >= 255).astype(np.int64)
    if len(at) > len(freq) // 64:
        return 2, freq, none, none
    return 1, np.minimum(freq, 255), at, freq[at]


def _varints(*values: int) -> bytes:
    """SQLite's varint of each value: big-endian groups of 7 bits, the high bit set on all
    but the last byte, and a ninth byte carrying 8 bits for values beyond 56 bits."""
    out = bytearray()
    for value in values:
        if value < 0:
            raise ValueError("a count cannot be negative")
        if value >> 56:
            head = [0x80 | ((value >> (8 + 7 * i)) & 0x7F) for i in range(7, -1, -1)]
            out += bytes([*head, value & 0xFF])
            continue
        groups = [value & 0x7F]
        value >>= 7
        while value:
            groups.append(0x80 | (value & 0x7F))
            value >>= 7
        out += bytes(reversed(groups))
    return bytes(out)
