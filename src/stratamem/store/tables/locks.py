"""Sealing a source into ``sealed`` and restoring it: the :class:`~stratamem.store.locks.LockStore`
role of the store.

Sealed format (version 2). The plaintext is a stream of JSON lines, compressed with zlib:

- a header ``{"format": 2, "source_id": …}``;
- the source's own row, as a table ``sources`` of the columns :data:`SOURCE_COLUMNS` (what
  the row holds that came from the source's content: its title, where it was read from, and
  what its connector kept of it, such as a channel's topic, purpose and members);
- for each table in :data:`_TABLES` order, ``{"table": name, "columns": [...]}`` then one
  JSON array per row, in the columns' order (a BLOB is ``{"b": "<base64>"}``; every other
  SQLite value is its JSON self, and Python writes floats back exactly);
- an end line ``{"end": <rows>}``.

Version 1 is version 2 without the ``sources`` table: a source sealed so kept its row's
columns as they were, and is restored as it is.

The compressed stream is cut into parts of :data:`PART_BYTES`; part ``i`` is the row
``sealed(source_id, i, nonce, data)``, ``data`` being what the caller's cipher made of it (see
:mod:`stratamem.access.crypto`). ``locks.parts`` records how many there are.

The locked source's row stays, with those columns blanked (:data:`SOURCE_COLUMNS`); its id,
scope, kind, platform, access scopes and times stay readable to the owner. Rows of the other
tables keep every column, rowids included, so a restore puts back the very rows that were
sealed, and the full-text rows are written again for the source's chunks once they are
back. Two exceptions: a summary whose rowid another summary took meanwhile comes back under a
new one (the source's summaries keep their order), and of the source's seal jobs only a
pending or running one is kept, and comes back pending. Sealing removes the rows in reverse
table order; deleting chunks fires the full-text delete trigger.
"""

from __future__ import annotations

import base64
import json
import logging
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from stratamem.errors import LockError, StoreError, StoreFull
from stratamem.store.base import to_ms
from stratamem.store.dialect import Connection, Cursor, Dialect
from stratamem.store.jobs import SEAL_JOB_PREFIX
from stratamem.store.keyword import REMOVED_AT_KEY
from stratamem.store.locks import Lock, PartCipher, SealCounts
from stratamem.store.tables.aliases import DECISIONS_OF_SOURCE
from stratamem.store.tables.owned import MENTIONS_OF_SOURCE, VECTORS_OF_SOURCE

FORMAT = 2
# The formats a restore reads: see the module's docstring.
READABLE_FORMATS = (1, 2)
# The columns of a source's row that hold what came from its content, sealed with the rest,
# and what each is while the source is locked.
SOURCE_COLUMNS: dict[str, str] = {"title": "", "location": "", "meta": "{}"}
PART_BYTES = 4 << 20
# Set by the transaction that seals a source (and before one that restores it), cleared once
# the files are scrubbed (or the restore commits).
SCRUB_PENDING = "locks.scrub_pending"
_INSERT_BATCH = 1000
_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Table:
    """One table's share of a source: its rows are ``where`` (slots ``{source}`` and
    ``{seal}``, the seal job key prefix, for named parameters: see :meth:`rows`); ``columns``
    are the ones sealed, ``only``
    narrows the rows sealed (the rest of ``where`` is removed, not kept), and ``order`` is
    the order they are sealed and restored in."""

    name: str
    where: str = "source_id = {source}"
    columns: str = "*"
    only: str = ""
    order: str = ""

    def rows(self, d: Dialect) -> str:
        """``where`` with its parameters as ``d`` names them (bound from a dict)."""
        return self.where.format(source=d.named("source"), seal=d.named("seal"))


_PARENT_ID = "(SELECT p.id FROM summaries p WHERE p.rowid = chunks.parent_summary)"
_SEALED_PARENT = "sealed_parent_id"
# Parents before children: restored in this order, removed in the reverse one.
_TABLES: tuple[_Table, ...] = (
    _Table("records"),
    _Table("item_versions"),
    _Table("item_nodes"),
    _Table("trees"),
    _Table("summaries", order="rowid"),
    _Table("summary_entities"),
    _Table(
        "summary_vectors",
        where="summary_id IN (SELECT id FROM summaries WHERE source_id = {source})",
    ),
    # A chunk's summary is sealed by its id as well as its rowid, the summary's rowid being
    # one a restore may hand out anew (see LockTables._summaries_by_id).
    _Table("chunks", columns=f"*, {_PARENT_ID} AS {_SEALED_PARENT}", order="rowid"),
    _Table("entity_index", where=MENTIONS_OF_SOURCE),
    _Table("entity_edges"),
    _Table("entity_aliases"),
    _Table("embeddings", where=VECTORS_OF_SOURCE),
    _Table("facts", order="rowid"),
    _Table("fact_vectors", where="fact_id IN (SELECT id FROM facts WHERE source_id = {source})"),
    # A job's claim and history are not the source's: a pending or running seal comes back
    # pending, a finished one does not come back.
    _Table(
        "jobs",
        where="dedupe_key IN (SELECT {seal} || id FROM trees WHERE source_id = {source})",
        columns="kind, dedupe_key, payload, 'pending' AS status, created_at, updated_at",
        only="status IN ('pending', 'running')",
    ),
    # Last, so removed first, while the rows that say which ids the source names are there.
    _Table("entity_merges", where=DECISIONS_OF_SOURCE),
)
_COUNTED = ("chunks", "summaries", "records")


class LockTables:
    """The locks half of a store (SQLite\'s or PostgreSQL\'s)."""

    conn: Connection
    dialect: Dialect

    if TYPE_CHECKING:

        def transaction(self) -> AbstractContextManager[Connection]: ...

        def bump_generation(self, *, chunks: bool = True) -> None: ...

        def scrub(self) -> None: ...

        def get_setting(self, key: str) -> str | None: ...

        def set_setting(self, key: str, value: str) -> None: ...

        def chunk_generation(self) -> int: ...

    def lock_of(self, source_id: str) -> Lock | None:
        d = self.dialect
        row = self.conn.execute(
            f"SELECT kdf, check_value, parts, locked_at FROM locks WHERE source_id = {d.p}",
            (source_id,),
        ).fetchone()
        if row is None:
            return None
        return Lock(
            source_id=source_id,
            kdf=row[0],
            check_value=bytes(row[1]),
            parts=int(row[2]),
            locked_at=datetime.fromtimestamp(int(row[3]) / 1000, tz=UTC),
        )

    def seal_source(
        self, source_id: str, *, kdf: str, check_value: bytes, cipher: PartCipher
    ) -> SealCounts:
        d = self.dialect
        with self.transaction():
            if self._locked(source_id):
                raise LockError(f"source {source_id} is already locked")

            def seal(number: int, last: bool, plaintext: bytes) -> None:
                d = self.dialect
                nonce, data = cipher.seal(number, last, plaintext)
                if cipher.open(number, last, nonce, data) != plaintext:
                    raise StoreError(f"source {source_id}: sealed part {number} does not verify")
                self.conn.execute(
                    f"INSERT INTO sealed (source_id, part, nonce, data) VALUES ({d.marks(4)})",
                    (source_id, number, nonce, data),
                )

            writer = _Writer(source_id, seal)
            writer.table(
                "sources",
                self.conn.execute(
                    f"SELECT {', '.join(SOURCE_COLUMNS)} FROM sources WHERE id = {d.p}",
                    (source_id,),
                ),
            )
            for table in _TABLES:
                writer.table(table.name, self._rows(source_id, table, sealing=True))
            parts = writer.finish()
            self.conn.execute(
                f"""INSERT INTO locks (source_id, kdf, check_value, format, parts, locked_at)
                   VALUES ({d.marks(6)})""",
                (source_id, kdf, check_value, FORMAT, parts, to_ms(datetime.now(UTC))),
            )
            self._remove(source_id)
            # What consolidation derived from the source goes with its plaintext: its facts'
            # scores went with the facts; its rollups go with their rows here.
            self.conn.execute(f"DELETE FROM rollup_sources WHERE source_id = {d.p}", (source_id,))
            blanks = ", ".join(f"{column} = {d.p}" for column in SOURCE_COLUMNS)
            self.conn.execute(
                f"UPDATE sources SET {blanks}, locked = 1 WHERE id = {d.p}",
                (*SOURCE_COLUMNS.values(), source_id),
            )
            self.bump_generation()
            self.mark_removed()
        self.finish_scrub()
        return writer.counts()

    def mark_removed(self) -> None:
        """Inside the transaction that removes a source's text (a forget, a lock), after its
        generation bump: the files are to be scrubbed (see :meth:`finish_scrub`), and index
        files beside the store made before this commit may hold the text (``REMOVED_AT_KEY``).
        Both marks commit with the removal, so a process killed just after it leaves them for
        the next open to act on."""
        self._mark_scrub()
        self.set_setting(REMOVED_AT_KEY, str(self.chunk_generation()))

    def finish_scrub(self, *, strict: bool = False) -> None:
        """Scrub the files where a forget or a lock committed but was not scrubbed yet (its
        process died in between, and the removed text may still lie in free pages, old
        full-text segments and the WAL), or a restore did not commit (what it decrypted may
        lie in the WAL's uncommitted frames). Run on every open; a scrub that cannot run now
        (the file is read-only, another process holds it, the disk is full) is left for the
        next, or raised with ``strict``."""
        d = self.dialect
        if self.conn.in_transaction or self.get_setting(SCRUB_PENDING) is None:
            return
        retried: tuple[type[Exception], ...] = (*self.dialect.operational_errors, StoreFull)
        try:
            self.scrub()
            with self.transaction():
                self.conn.execute(f"DELETE FROM settings WHERE key = {d.p}", (SCRUB_PENDING,))
        except retried as exc:
            if strict:
                raise
            _log.warning("the store could not be scrubbed, will retry at the next open: %s", exc)

    def restore_source(self, source_id: str, cipher: PartCipher) -> SealCounts:
        d = self.dialect
        lock = self._lock_to_restore(source_id)
        # A restore that does not commit may leave some of what it decrypted in the WAL's
        # uncommitted frames. Until it commits, the store is marked as needing a scrub (see
        # finish_scrub), and one that fails is scrubbed at once.
        marked = self.get_setting(SCRUB_PENDING) is None
        if marked:
            with self.transaction():
                self._mark_scrub()
        try:
            with self.transaction():
                lock = self._lock_to_restore(source_id)
                # Whatever was written for the source while it was locked (an empty tree or
                # a seal job queued for every source) gives way to what was sealed.
                self._remove(source_id)
                reader = _Reader(source_id, self._parts(lock, cipher))
                for table, columns, rows in reader.tables():
                    if table == "sources":
                        self._restore_source_row(source_id, columns, rows)
                        continue
                    if "rowid" in columns:
                        columns, rows = self._free_rowids(table, columns, list(rows))
                    if table == "chunks":
                        columns, rows = self._summaries_by_id(source_id, columns, rows)
                    self.insert_restored(table, columns, rows)
                self.conn.execute(f"DELETE FROM sealed WHERE source_id = {d.p}", (source_id,))
                self.conn.execute(f"DELETE FROM locks WHERE source_id = {d.p}", (source_id,))
                self.conn.execute(f"UPDATE sources SET locked = 0 WHERE id = {d.p}", (source_id,))
                if marked:
                    self.conn.execute(f"DELETE FROM settings WHERE key = {d.p}", (SCRUB_PENDING,))
                self.bump_generation()
        except BaseException:
            self.finish_scrub()
            raise
        return reader.counts()

    def insert_restored(self, table: str, columns: list[str], rows: Iterator[list[Any]]) -> None:
        """Put sealed rows of ``table`` back. A source sealed by a store of the other backend,
        and the store then copied here (``store/copy.py``), may bring columns this table does
        not have (PostgreSQL's derived ones): they are left out."""
        have = {*table_columns(self.conn, table), "rowid"}
        keep = [i for i, c in enumerate(columns) if c in have]
        names = ", ".join(f'"{columns[i]}"' for i in keep)
        sql = f"INSERT INTO {table} ({names}) VALUES ({self.dialect.marks(len(keep))})"
        for batch in _batched(rows):
            self.conn.executemany(sql, [[row[i] for i in keep] for row in batch])

    def _restore_source_row(
        self, source_id: str, columns: list[str], rows: Iterator[list[Any]]
    ) -> None:
        """Put back the columns of the source's own row that were sealed."""
        d = self.dialect
        if not set(columns) <= set(SOURCE_COLUMNS):
            raise LockError(f"source {source_id}: sealed content is malformed: {columns!r}")
        found = list(rows)
        if len(found) != 1:
            raise LockError(
                f"source {source_id}: sealed content is malformed: {len(found)} source rows"
            )
        if columns:
            sets = ", ".join(f"{column} = {d.p}" for column in columns)
            self.conn.execute(f"UPDATE sources SET {sets} WHERE id = {d.p}", (*found[0], source_id))

    def _lock_to_restore(self, source_id: str) -> Lock:
        d = self.dialect
        lock = self.lock_of(source_id)
        if lock is None or not self._locked(source_id):
            raise LockError(f"source {source_id} is not locked")
        (found,) = self.conn.execute(
            f"SELECT format FROM locks WHERE source_id = {d.p}", (source_id,)
        ).fetchone()
        if found not in READABLE_FORMATS:
            raise LockError(f"source {source_id}: sealed in unknown format {found}")
        return lock

    def _mark_scrub(self) -> None:
        d = self.dialect
        self.conn.execute(
            f"""INSERT INTO settings (key, value) VALUES ({d.p}, '1')
                ON CONFLICT (key) DO UPDATE SET value = excluded.value""",
            (SCRUB_PENDING,),
        )

    def _locked(self, source_id: str) -> bool:
        d = self.dialect
        row = self.conn.execute(
            f"SELECT locked FROM sources WHERE id = {d.p}", (source_id,)
        ).fetchone()
        if row is None:
            raise LockError(f"no source with id {source_id!r}")
        return bool(row[0])

    def _rows(self, source_id: str, table: _Table, *, sealing: bool) -> Cursor:
        d = self.dialect
        where = f"({table.rows(d)}) AND {table.only}" if sealing and table.only else table.rows(d)
        order = f" ORDER BY {table.order}" if table.order else ""
        return self.conn.execute(
            f"SELECT {table.columns} FROM {table.name} WHERE {where}{order}",
            {"source": source_id, "seal": SEAL_JOB_PREFIX},
        )

    def _remove(self, source_id: str) -> None:
        d = self.dialect
        params = {"source": source_id, "seal": SEAL_JOB_PREFIX}
        for table in reversed(_TABLES):
            self.conn.execute(f"DELETE FROM {table.name} WHERE {table.rows(d)}", params)

    def _summaries_by_id(
        self, source_id: str, columns: list[str], rows: Iterable[list[Any]]
    ) -> tuple[list[str], Iterator[list[Any]]]:
        """Chunk rows whose ``parent_summary`` is the rowid their summary has now: it is
        found by the summary's id, sealed beside it (``sealed_parent_id``; a source sealed
        while chunks named their summary by its id has ``parent_summary_id`` alone)."""
        if _SEALED_PARENT in columns:
            by = _SEALED_PARENT
        elif "parent_summary_id" in columns and "parent_summary" not in columns:
            by = "parent_summary_id"
        else:
            return columns, iter(rows)
        d = self.dialect
        rowid_of = dict(
            self.conn.execute(
                f"SELECT id, rowid FROM summaries WHERE source_id = {d.p}", (source_id,)
            ).fetchall()
        )
        named = columns.index(by)
        kept = [
            c for c in columns if c not in (_SEALED_PARENT, "parent_summary_id", "parent_summary")
        ]
        at = [columns.index(c) for c in kept]

        def rebuilt() -> Iterator[list[Any]]:
            for row in rows:
                yield [*(row[i] for i in at), rowid_of.get(row[named])]

        return [*kept, "parent_summary"], rebuilt()

    def _free_rowids(
        self, table: str, columns: list[str], rows: list[list[Any]]
    ) -> tuple[list[str], Iterator[list[Any]]]:
        """The rows with their own rowids, or without (given new ones, in the same order)
        where another row took one of them while the source was locked: summaries' rowids
        are handed out again (chunks' never are), and only their order matters."""
        d = self.dialect
        at = columns.index("rowid")
        rowids = [row[at] for row in rows]
        for part, marks in d.batches(rowids):
            if self.conn.execute(
                f"SELECT 1 FROM {table} WHERE rowid IN ({marks}) LIMIT 1", part
            ).fetchone():
                kept = columns[:at] + columns[at + 1 :]
                return kept, (row[:at] + row[at + 1 :] for row in rows)
        return columns, iter(rows)

    def _parts(self, lock: Lock, cipher: PartCipher) -> Iterator[bytes]:
        """The decrypted parts in order; every part is there and in its place, or
        :class:`LockError`."""
        d = self.dialect
        rows = self.conn.execute(
            f"SELECT part, nonce, data FROM sealed WHERE source_id = {d.p} ORDER BY part",
            (lock.source_id,),
        )
        seen = 0
        for number, nonce, data in rows:
            if number != seen:
                break
            yield cipher.open(number, number == lock.parts - 1, bytes(nonce), bytes(data))
            seen += 1
        if seen != lock.parts:
            raise LockError(
                f"source {lock.source_id}: {lock.parts} sealed parts were recorded, "
                f"{seen} are in order"
            )


class _Writer:
    """Rows → JSON lines → zlib → parts of :data:`PART_BYTES`, each handed to ``emit``
    (number, last or not, bytes) as soon as the next one starts, so that at most two are
    held."""

    def __init__(self, source_id: str, emit: Callable[[int, bool, bytes], None]) -> None:
        self._zip = zlib.compressobj(6)
        self._out = bytearray()
        self._emit = emit
        self._held: bytes | None = None
        self._parts = 0
        self._size = 0
        self._rows = 0
        self._counts = dict.fromkeys(_COUNTED, 0)
        self._line({"format": FORMAT, "source_id": source_id})

    def table(self, name: str, cursor: Cursor) -> None:
        columns = [d[0] for d in cursor.description]
        self._line({"table": name, "columns": columns})
        for row in cursor:
            self._line([_encode(v) for v in row])
            self._rows += 1
            if name in self._counts:
                self._counts[name] += 1

    def finish(self) -> int:
        """Emit the rest, the last part marked so; returns how many parts there are."""
        self._line({"end": self._rows})
        self._out += self._zip.flush()
        self._cut(0)
        if self._held is not None:
            self._emit(self._parts, True, self._held)
            self._parts += 1
        return self._parts

    def counts(self) -> SealCounts:
        return SealCounts(rows=self._rows, size=self._size, **self._counts)

    def _line(self, value: object) -> None:
        data = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
        self._size += len(data)
        self._out += self._zip.compress(data)
        self._cut(PART_BYTES)

    def _cut(self, keep: int) -> None:
        """Move whole parts out of the buffer until at most ``keep`` bytes are left (all of
        them, in parts, when ``keep`` is 0)."""
        while len(self._out) > keep and self._out:
            if self._held is not None:
                self._emit(self._parts, False, self._held)
                self._parts += 1
            self._held = bytes(self._out[:PART_BYTES])
            del self._out[:PART_BYTES]


class _Reader:
    """Parts → zlib → JSON lines → (table, columns, rows), checked against the header and
    the end line."""

    def __init__(self, source_id: str, parts: Iterator[bytes]) -> None:
        self.source_id = source_id
        self._lines = _lines(parts, source_id)
        self._rows = 0
        self._size = 0
        self._counts = dict.fromkeys(_COUNTED, 0)

    def tables(self) -> Iterator[tuple[str, list[str], Iterator[list[Any]]]]:
        header = self._next()
        if header not in [{"format": f, "source_id": self.source_id} for f in READABLE_FORMATS]:
            raise self._bad(f"header {header!r}")
        line = self._next()
        known = {"sources", *(t.name for t in _TABLES)}
        while isinstance(line, dict) and "table" in line:
            name, columns = line["table"], line["columns"]
            if name not in known or not all(
                isinstance(c, str) and c.isidentifier() for c in columns
            ):
                raise self._bad(f"table {name!r}")
            after: list[Any] = []
            yield name, columns, self._table_rows(name, after)
            if not after:
                raise self._bad(f"the rows of {name} were not all read")
            line = after[0]
        if line != {"end": self._rows}:
            raise self._bad(f"end {line!r} after {self._rows} rows")
        for _ in self._lines:
            raise self._bad("data after the end")

    def counts(self) -> SealCounts:
        return SealCounts(rows=self._rows, size=self._size, **self._counts)

    def _table_rows(self, name: str, after: list[Any]) -> Iterator[list[Any]]:
        """The table's rows up to the next non-row line, which is left in ``after``."""
        while True:
            line = self._next()
            if not isinstance(line, list):
                after.append(line)
                return
            self._rows += 1
            if name in self._counts:
                self._counts[name] += 1
            yield [_decode(v) for v in line]

    def _next(self) -> Any:
        try:
            data = next(self._lines)
        except StopIteration:
            raise self._bad("it ends early") from None
        self._size += len(data) + 1
        return json.loads(data)

    def _bad(self, what: str) -> LockError:
        return LockError(f"source {self.source_id}: sealed content is malformed: {what}")


def _lines(parts: Iterator[bytes], source_id: str) -> Iterator[bytes]:
    unzip = zlib.decompressobj()
    rest = b""
    for part in parts:
        try:
            rest += unzip.decompress(part)
        except zlib.error as exc:
            raise LockError(f"source {source_id}: sealed content is malformed: {exc}") from exc
        *done, rest = rest.split(b"\n")
        yield from done
    if not unzip.eof or rest:
        raise LockError(f"source {source_id}: sealed content is malformed: it ends early")


def table_columns(conn: Any, table: str) -> list[str]:
    """The columns ``SELECT *`` gives of ``table`` (on either backend's connection)."""
    cursor = conn.execute(f"SELECT * FROM {table} LIMIT 0")
    names = [str(d[0]) for d in cursor.description]
    cursor.fetchall()
    return names


def _encode(value: object) -> object:
    if isinstance(value, bytes):
        return {"b": base64.b64encode(value).decode()}
    return value


def _decode(value: object) -> object:
    if isinstance(value, dict):
        return base64.b64decode(value["b"])
    return value


def _batched(rows: Iterator[list[Any]]) -> Iterator[list[list[Any]]]:
    batch: list[list[Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= _INSERT_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch
