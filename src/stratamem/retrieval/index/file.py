"""The one file format of every index file beside the database, and how it is bound to it.

Layout (little-endian), written to a temporary file beside the target, fsynced, then renamed
over it, so a reader sees the old file or the new one, never half of one::

    offset   size   content
    0        8      magic, one per kind of index (``b"SMBM25X2"``, ``b"SMVECIX2"``)
    8        4      H, the header length, uint32
    12       H      header, UTF-8 JSON object, keys sorted
    12+H     ...    body: the index's own sections (see ``bm25_file``, ``vectors_file``)
    end-32   32     SHA-256 of every byte before it

Identity. Each header carries ``store_id``, the random id the database was given when it was
created (a copy or a restored backup keeps it, a new database at the same path gets another),
and ``rows_sha256``, :func:`rows_digest` of the (rowid, chunk id) pairs the index was built
from. A chunk id hashes its source, position and content, so the pairs name the exact rows
and text. A reader refuses a file of another store id; the caller compares the rows digest
(or the rows themselves) with the database before serving anything from the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final

import numpy as np
import numpy.typing as npt

from stratamem.errors import Rejected as Rejected

HEADER_MAX: Final = 1 << 20
DIGEST_SIZE: Final = 32
_CHUNK: Final = 1 << 20


def rows_digest(rowids: npt.ArrayLike, ids: Sequence[str]) -> str:
    """SHA-256 (hex) of (rowid, chunk id) pairs in ascending rowid order: the rowids as
    little-endian int64, then the ids joined by ``"\\n"``. Order-sensitive, so callers pass
    the pairs sorted by rowid."""
    array = np.ascontiguousarray(np.asarray(rowids, dtype=np.int64), dtype="<i8")
    if len(array) != len(ids):
        raise ValueError(f"{len(array)} rowids but {len(ids)} ids")
    digest = hashlib.sha256(array.tobytes())
    digest.update("\n".join(ids).encode())
    return digest.hexdigest()


class HashingWriter:
    """Writes to a file and hashes what it wrote."""

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self.digest = hashlib.sha256()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.digest.update(data)
        self._file.write(data)


def write_atomic(
    target: Path,
    magic: bytes,
    header: Mapping[str, Any],
    body: Callable[[HashingWriter], None],
    *,
    still_current: Callable[[], bool] | None = None,
) -> bool:
    """Write magic, header, what ``body`` writes and the checksum to a temporary file beside
    ``target``, fsync it and rename it over ``target``; on any failure nothing changes.

    ``still_current`` is asked just before the rename: where it says no (the store moved on
    while the file was written: another process may have locked or forgotten a source whose
    rows the file holds), the file is dropped and ``target`` left as it was. Returns whether
    the file was written."""
    encoded = json.dumps(dict(header), sort_keys=True).encode()
    handle, temp_name = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=".tmp", dir=target.parent
    )
    temp = Path(temp_name)
    try:
        with os.fdopen(handle, "wb") as file:
            out = HashingWriter(file)
            out.write(magic)
            out.write(len(encoded).to_bytes(4, "little"))
            out.write(encoded)
            body(out)
            file.write(out.digest.digest())
            file.flush()
            os.fsync(file.fileno())
        if still_current is not None and not still_current():
            temp.unlink(missing_ok=True)
            return False
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return True


def read_header(path: Path, magic: bytes) -> dict[str, Any] | None:
    """The header of the file at ``path`` without reading (or checking) its body: None where
    it is not a file of this ``magic`` or its header is not there whole (a file still being
    written, or cut short). ``OSError`` when it cannot be opened."""
    with path.open("rb") as file:
        if file.read(len(magic)) != magic:
            return None
        length = int.from_bytes(file.read(4), "little")
        if length > HEADER_MAX:
            return None
        raw = file.read(length)
    try:
        header = json.loads(raw.decode()) if len(raw) == length else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return header if isinstance(header, dict) else None


@dataclass(frozen=True, slots=True)
class Opened:
    """A file whose magic, header and checksum were checked, positioned at its body."""

    file: BinaryIO
    header: dict[str, Any]
    body_start: int
    body_end: int


@contextmanager
def open_checked(
    path: Path, magic: bytes, expected: Mapping[str, Any], *, what: str
) -> Iterator[Opened]:
    """Open ``path`` and check its magic, that each ``expected`` header key has the value
    given, and its checksum; raises :class:`Rejected` (or ``OSError`` when it cannot be
    read). ``what`` names the kind of index in the messages."""
    size = path.stat().st_size
    with path.open("rb") as file:
        if file.read(len(magic)) != magic:
            raise Rejected(f"not a stratamem {what}")
        length = int.from_bytes(file.read(4), "little")
        if length > min(HEADER_MAX, size):
            raise Rejected("header length out of range")
        try:
            header = json.loads(file.read(length).decode())
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise Rejected(f"header unreadable ({exc})") from exc
        if not isinstance(header, dict):
            raise Rejected("header is not an object")
        for key, want in expected.items():
            if header.get(key) != want:
                if key == "store_id":
                    raise Rejected("it was built from another database")
                raise Rejected(f"{key} is {header.get(key)!r}, expected {want!r}")
        body_start = len(magic) + 4 + length
        body_end = size - DIGEST_SIZE
        if body_end < body_start or _digest_of(file, body_end) != file.read():
            raise Rejected("checksum mismatch (truncated or corrupt)")
        file.seek(body_start)
        yield Opened(file=file, header=header, body_start=body_start, body_end=body_end)


def read_array(file: BinaryIO, shape: tuple[int, ...], dtype: str) -> npt.NDArray[Any]:
    """The next ``prod(shape)`` items of ``dtype``; :class:`Rejected` if the file ends first."""
    array = np.empty(shape, dtype=dtype)
    view = array.data.cast("B")
    if file.readinto(view) != view.nbytes:  # type: ignore[attr-defined]
        raise Rejected("file ends early")
    return array


def _digest_of(file: BinaryIO, end: int) -> bytes:
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
