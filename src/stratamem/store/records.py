"""The records role: the messages, mails and items a source holds, each under its own key.

Chat, mail and record sources keep what their connectors read as records, one per key (a
Slack ``ts``, a Discord message id, a ``Message-ID``, an IRC ``file:line``, a JSONL ``id``, an
item written by :meth:`~stratamem.api.Memory.add`); their chunks are derived from the records
(:mod:`stratamem.ingest.merge`). A record without an id is keyed by a digest of its content,
so an identical copy of it is the same record.

The canonical order of a source's records is (time, place, key): records without a time come
last, and records of the same instant are ordered by their ``ref`` (the file and line or
message they were read from) and then their key, with runs of digits compared as numbers. It
depends only on the records, never on the order they arrived in.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import operator
import re
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, Protocol

from stratamem.timeparse import from_ms, to_ms
from stratamem.types import Record

_CONTENT_FIELDS = tuple(f.name for f in fields(Record) if f.name not in ("ref", "id"))
_content_values = operator.attrgetter(*_CONTENT_FIELDS)
_TUPLES = frozenset(f.name for f in fields(Record) if f.default == ())
_DIGITS = re.compile(r"\d+")
_HAS_DIGIT = re.compile(r"\d")
_COMPRESS_ABOVE = 512
# Record.meta keys that connectors use for where a record was read (a message's index, line
# and byte offset in an mbox, its file and folder in a mailbox tree): like ``ref``, not content.
PLACE_META = frozenset({"index", "line", "offset", "file", "folder"})
# The Record.meta key of when a message was last edited (see revision).
EDITED_META = "edited_at"


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A record with its key, its place in the canonical order and its content digest."""

    key: str
    record: Record
    digest: str
    sort_key: str
    body: bytes = b""  # the record encoded (encode_record), when already made

    @property
    def time(self) -> datetime | None:
        return self.record.time

    def row(self) -> RecordRow:
        body = self.body or encode_record(self.record)
        return RecordRow(
            self.key,
            to_ms(self.record.time),
            self.sort_key,
            self.digest,
            body,
            revision(self.record),
        )


class RecordRow(NamedTuple):
    """A record as written: its key, time (ms), sort key, digest, encoding
    (:func:`encode_record`) and when it was last edited (ms, :func:`revision`). Cheap to send
    between processes."""

    key: str
    time_ms: int | None
    sort_key: str
    digest: str
    body: bytes
    revised_ms: int | None = None


class RecordState(NamedTuple):
    """What the store holds of a record: its content digest, its time and when it was last
    edited (ms, or None)."""

    digest: str
    time_ms: int | None
    revised_ms: int | None = None


def revision(record: Record) -> int | None:
    """When the record was last edited (ms), from ``meta["edited_at"]`` (an ISO 8601 time
    or a datetime) where its connector knows it; None when it was never edited or nobody
    says when."""
    value = record.meta.get(EDITED_META)
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return None
    if not isinstance(value, datetime):
        return None
    return to_ms(value if value.tzinfo else value.replace(tzinfo=UTC))


def keyed(record: Record) -> StoredRecord:
    """``record`` with its key, content digest, sort key and encoding. The key is its id; a
    record without one is given ``sha256:`` and a digest of its content as its id and key."""
    if record.time is not None and (extra := record.time.microsecond % 1000):
        # Kept to the millisecond the store keeps: chunked as read or as stored, a record
        # falls in the same window (a silence of 1800.000291 s is 1800 s either way).
        record = dataclasses.replace(record, time=record.time - timedelta(microseconds=extra))
    content = _content(record)
    digest = hashlib.sha256(content.encode()).hexdigest()
    if not record.id:
        record = dataclasses.replace(record, id=f"sha256:{digest[:32]}")
    key = record.id or ""
    placed = not PLACE_META.isdisjoint(record.meta)
    body = _encode(record, _content(record, place=True) if placed else content)
    return StoredRecord(key, record, digest, sort_key_for(record.ref, key), body)


def record_digest(record: Record) -> str:
    """sha256 over every field of the record but its ``ref`` and ``id``: where it was read
    from is not what it says (the same message in two exports has one digest), and the id is
    its key."""
    return hashlib.sha256(_content(record).encode()).hexdigest()


def sort_key_for(ref: str, key: str) -> str:
    """The place of a record among those of the same instant: its ``ref`` then its key, with
    every run of digits zero-padded so that ``line 9`` sorts before ``line 10``."""
    tail = key if key.startswith("sha256:") else _natural_place(key)
    return f"{_natural_place(ref)}\x00{tail}"


def _natural_place(text: str) -> str:
    # Refs and keys are often a file and a place in it (``log.txt:117``, ``day.json#ts``):
    # the file part repeats from record to record.
    cut = max(text.rfind(":"), text.rfind("#")) + 1
    return _natural_cached(text[:cut]) + _natural(text[cut:])


def _pad(match: re.Match[str]) -> str:
    return match.group().lstrip("0").rjust(20, "0")


def _natural(text: str) -> str:
    return _DIGITS.sub(_pad, text) if _HAS_DIGIT.search(text) else text


_natural_cached = functools.lru_cache(maxsize=64)(_natural)


def encode_record(record: Record) -> bytes:
    """The record as compressed text, for :func:`decode_record`."""
    return _encode(record, _content(record, place=True))


def _encode(record: Record, content: str) -> bytes:
    # Its ref and id as JSON strings (which hold no newline), then the JSON of the rest; a
    # long one compressed (zlib's first byte is never the '"' a JSON string starts with).
    head = f"{json.dumps(record.ref, ensure_ascii=False)}\n{json.dumps(record.id)}\n"
    data = (head + content).encode()
    return zlib.compress(data, 1) if len(data) > _COMPRESS_ABOVE else data


def decode_record(data: bytes) -> Record:
    text = (data if data[:1] == b'"' else zlib.decompress(data)).decode()
    ref, id_, content = text.split("\n", 2)
    values: dict[str, Any] = json.loads(content)
    values.setdefault("text", "")
    if "time" in values:
        values["time"] = from_ms(values["time"])
    for name in _TUPLES.intersection(values):
        values[name] = tuple(values[name])
    return Record(ref=json.loads(ref), id=json.loads(id_), **values)


def _content(record: Record, *, place: bool = False) -> str:
    """JSON of the record's fields but ``ref`` and ``id`` that differ from their defaults
    (the time in milliseconds), keys sorted: what its digest covers. The ``meta`` keys that
    say where in its file it was read (:data:`PLACE_META`) are left out like ``ref`` (unless
    ``place``, for the record's encoding), so that the same mail after another one was added
    before it is not a change."""
    values = {
        name: value
        for name, value in zip(_CONTENT_FIELDS, _content_values(record), strict=True)
        if value
    }
    if record.time is not None:
        values["time"] = to_ms(record.time)
    if "meta" in values:
        meta = {k: v for k, v in record.meta.items() if place or k not in PLACE_META}
        if meta:
            values["meta"] = meta
        else:
            del values["meta"]
    return json.dumps(values, sort_keys=True, ensure_ascii=False, default=str)


class RecordStore(Protocol):
    """The records of chat, mail and record sources, by (source, key). Writes run inside
    :meth:`~stratamem.store.settings.StoreHandle.transaction`."""

    def record_states(self, source_id: str, keys: Sequence[str]) -> dict[str, RecordState]:
        """The digest and time of each of ``keys`` the source holds."""
        ...

    def put_records(self, source_id: str, records: Iterable[RecordRow]) -> None:
        """Store each record, replacing the one stored under its key."""
        ...

    def delete_records(self, source_id: str, keys: Sequence[str]) -> int:
        """Remove the records under ``keys``; returns how many there were."""
        ...

    def record_keys(self, source_id: str) -> Iterator[str]:
        """Every key the source holds."""
        ...

    def record_count(self, source_id: str) -> int: ...

    def record_timeline(self, source_id: str) -> tuple[list[int], int]:
        """The times (ms) of the source's records that have one, ascending, and how many have
        none."""
        ...

    def records_between(
        self, source_id: str, start_ms: int | None, end_ms: int | None
    ) -> Iterator[StoredRecord]:
        """The records whose time lies in [start, end], in canonical order; ``None`` for both
        gives those without a time."""
        ...

    def records_by_key(self, source_id: str, keys: Sequence[str]) -> list[StoredRecord]:
        """The records stored under ``keys``, in canonical order; unknown keys are left out."""
        ...

    def find_records(self, key: str) -> list[tuple[str, StoredRecord]]:
        """(source id, record) of every unlocked source holding ``key``."""
        ...

    def derived_chunks_between(
        self, source_id: str, start_ms: int | None, end_ms: int | None
    ) -> list[str]:
        """The ids of the chunks derived from records whose first record's time lies in
        [start, end] (``None`` for both: those without a time)."""
        ...

    def derived_chunks_of(self, source_id: str, keys: Sequence[str]) -> list[str]:
        """The ids of the chunks whose first record is under one of ``keys``."""
        ...

    def delete_chunks(self, source_id: str, ids: Sequence[str]) -> int:
        """Remove these chunks of the source with everything derived from them; returns how
        many there were."""
        ...

    def renumber_chunks(self, source_id: str) -> int:
        """Give the source's chunks derived from records their seq in canonical order (time,
        first record's place, part); returns how many moved."""
        ...

    def retire_replaced_chunks(self, source_id: str) -> int:
        """Remove the source's chunks not derived from records (stored before the source kept
        records) whose content a derived chunk now holds; returns how many."""
        ...
