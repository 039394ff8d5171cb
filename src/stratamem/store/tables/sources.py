"""Sources in the store (the ``SourceStore`` role) and the gate; their chunks and entity
mentions are :mod:`stratamem.store.tables.chunks`.

Ids: a source id is ``src_`` + the first 16 hex digits of sha256(scope); a chunk id is the
first 32 hex digits of sha256(source id, seq, content). Names: see
:mod:`stratamem.store.names` (what a new source may be called; a reference that looks like an
id names a source by id alone).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from stratamem.errors import InvalidArgument, NotFoundError, StoreFull, is_disk_full
from stratamem.store.access import default_access, may_read
from stratamem.store.base import from_ms, to_ms
from stratamem.store.caches import LastFew
from stratamem.store.dialect import Connection, Dialect, Row
from stratamem.store.jobs import SEAL_JOB_PREFIX
from stratamem.store.names import check_name, looks_like_id, name_key
from stratamem.store.sources import source_id_for
from stratamem.store.tables.aliases import decisions_of_source
from stratamem.store.tables.filters import gate_sql
from stratamem.store.tables.owned import delete_derived, visible_mentions
from stratamem.types import Principal, Source, SourceKind

T = TypeVar("T")

if TYPE_CHECKING:
    from stratamem.store.tables.jobs import JobQueue
    from stratamem.store.tables.trees import TreeTables


class SourceTables:
    """The sources half of a store (SQLite\'s or PostgreSQL\'s), and the gate:
    which sources the store's reader (``principal``; None for the owner) may see."""

    conn: Connection
    dialect: Dialect
    principal_name: str | None
    _reads_cache: LastFew[tuple[tuple[int, int], Any]]

    if TYPE_CHECKING:
        trees: TreeTables
        jobs: JobQueue

        def transaction(self) -> AbstractContextManager[Connection]: ...

        def bump_generation(self, *, chunks: bool = True) -> None: ...

        def in_transaction(self) -> bool: ...

        def write_state(self) -> tuple[int, int]: ...

        def add_edges(self, source_id: str, node_ids: Sequence[str], *, sign: int = 1) -> None: ...

        def get_principal(self, name: str) -> Principal | None: ...

        def source_chunk_count(self, source_id: str) -> int: ...

        path: str

        def bytes_on_disk(self) -> int: ...

        def mark_removed(self) -> None: ...

        def finish_scrub(self, *, strict: bool = False) -> None: ...

        def scrub(self) -> None: ...

    # -- the gate ----------------------------------------------------------------------------

    def principal(self) -> Principal | None:
        """Who reads through this store: None for the owner. A principal removed meanwhile
        reads as one with no scopes (it sees nothing)."""
        if self.principal_name is None:
            return None
        found = self.get_principal(self.principal_name)
        return found if found is not None else Principal(name=self.principal_name, scopes=())

    def visible_ids(self) -> list[str] | None:
        """Ids of the sources the reader may see (sorted), or None for the owner, who sees
        every unlocked source. Cached until this or another connection writes."""
        if self.principal_name is None:
            return None

        def read() -> list[str]:
            principal = self.principal()
            return sorted(s.id for s in self._all_sources(counts=False) if may_read(principal, s))

        return self._cached_read("visible ids", read)

    def _all_sources(
        self, *, counts: bool = True, only: Sequence[str] | None = None, ref: str | None = None
    ) -> list[Source]:
        """Every source (``only`` these ids; ``ref``: the source of that id, where it looks
        like one, else of that exact scope), with its chunk count unless ``counts=False``."""
        d = self.dialect
        count = (
            "coalesce((SELECT n.chunks FROM source_counts n WHERE n.source_id = s.id), 0)"
            if counts
            else "0"
        )
        where, params = "", []
        if only is not None:
            where, params = f"WHERE s.id IN (SELECT value FROM {d.json_rows})", [json.dumps(only)]
        elif ref is not None:
            where = f"WHERE s.id = {d.p}" if looks_like_id(ref) else f"WHERE s.scope = {d.p}"
            params = [ref]
        rows = self.conn.execute(
            f"SELECT s.*, {count} AS n FROM sources s {where} ORDER BY s.scope", params
        )
        found = [_source(row) for row in rows.fetchall()]
        if self.principal_name is not None:
            # Who made a source is the owner's to know: a principal learns no other's name.
            found = [replace(s, created_by=None) for s in found]
        return found

    def stats(self) -> dict[str, Any]:
        """Counts over what the reader may see (the owner: every unlocked source; locked
        ones are counted in ``locked``, and the store's ``path`` and ``bytes`` are shown)."""
        gate, params = gate_sql(self.dialect, self.visible_ids())

        def one(sql: str) -> Any:
            return self.conn.execute(sql, params).fetchone()[0]

        chunks = f"chunks c JOIN sources s ON s.id = c.source_id AND {gate}"
        mentions = visible_mentions(gate)
        edges = f"entity_edges x JOIN sources s ON s.id = x.source_id AND {gate}"
        # Where the store lies is the owner's to know, as its size is.
        out: dict[str, Any] = {} if self.principal_name is not None else {"path": self.path}
        out |= {
            "sources": one(f"SELECT count(*) FROM sources s WHERE {gate}"),
            "chunks": one(f"SELECT count(*) FROM {chunks}"),
            "tokens": one(f"SELECT coalesce(sum(c.token_count), 0) FROM {chunks}"),
            "entities": one(f"SELECT count(DISTINCT e.entity_id) FROM {mentions}"),
            "mentions": one(f"SELECT count(*) FROM {mentions}"),
            "edges": one(f"SELECT count(*) FROM {edges}"),
            "by_kind": dict(
                self.conn.execute(
                    f"""SELECT s.kind, count(c.id) FROM sources s
                        LEFT JOIN chunks c ON c.source_id = s.id WHERE {gate}
                        GROUP BY s.kind ORDER BY s.kind""",
                    params,
                ).fetchall()
            ),
        }
        if self.principal_name is None:
            out["locked"] = self.conn.execute(
                "SELECT count(*) FROM sources WHERE locked = 1"
            ).fetchone()[0]
            out["bytes"] = self.bytes_on_disk()
        return out

    # -- sources -----------------------------------------------------------------------------

    def upsert_source(
        self,
        *,
        scope: str,
        kind: SourceKind,
        platform: str,
        location: str,
        title: str = "",
        meta: dict[str, Any] | None = None,
        access: Sequence[str] | None = None,
        created_by: str | None = None,
    ) -> str:
        """Create the source or refresh its descriptive fields; the lock is kept, and so is
        its access unless ``access`` is given (a new source gets its kind's default). A new
        source is recorded as made by ``created_by`` (a principal's name; None: the owner),
        and its name must be one a new source may take (see :meth:`check_new_name`)."""
        d = self.dialect
        sid = source_id_for(scope)
        if self.conn.execute(f"SELECT 1 FROM sources WHERE id = {d.p}", (sid,)).fetchone() is None:
            self.check_new_name(scope, created_by)
        given = None if access is None else json.dumps(sorted(set(access)))
        self.conn.execute(
            f"""INSERT INTO sources
                 (id, scope, kind, platform, location, title, meta, ingested_at, access,
                  created_by)
               VALUES ({d.marks(10)})
               ON CONFLICT(id) DO UPDATE SET kind = excluded.kind, platform = excluded.platform,
                 location = excluded.location, title = excluded.title, meta = excluded.meta,
                 ingested_at = excluded.ingested_at,
                 access = coalesce({d.p}, sources.access)""",
            (
                sid,
                scope,
                kind.value,
                platform,
                location,
                title,
                json.dumps(meta or {}, default=str),
                to_ms(datetime.now(UTC)),
                given or json.dumps(list(default_access(kind))),
                created_by,
                given,
            ),
        )
        return sid

    def check_new_name(self, scope: str, created_by: str | None) -> None:
        """Refuse ``scope`` as a new source's name: one that breaks a rule of
        :func:`~stratamem.store.names.check_name`, or one too close to (reads like) the name
        of a source another writer made (:class:`InvalidArgument` naming it)."""
        d = self.dialect
        check_name(scope)
        key = name_key(scope)
        # Only the other writers' names: the owner's many sources are never read for its own.
        others = self.conn.execute(
            f"SELECT scope FROM sources WHERE coalesce(created_by, '') <> {d.p}",
            (created_by or "",),
        ).fetchall()
        for (other,) in others:
            if name_key(other) == key:
                raise InvalidArgument(
                    f"source name {scope!r} is too close to an existing source {other!r}"
                )

    def is_locked(self, source_id: str) -> bool:
        """Whether the source exists and is locked (whoever reads)."""
        d = self.dialect
        row = self.conn.execute(
            f"SELECT locked FROM sources WHERE id = {d.p}", (source_id,)
        ).fetchone()
        return row is not None and bool(row[0])

    def set_access(self, source_id: str, access: Sequence[str]) -> None:
        """Replace the source's access scopes."""
        d = self.dialect
        with self.transaction():
            self.conn.execute(
                f"UPDATE sources SET access = {d.p} WHERE id = {d.p}",
                (json.dumps(sorted(set(access))), source_id),
            )

    def sources(self, *, counts: bool = True) -> list[Source]:
        """The sources the reader may see; the owner also sees locked ones (marked so). Only
        those are counted: a principal's listing costs nothing for what it may not see.
        ``counts=False`` leaves their chunk counts at 0, for a caller that needs only who
        may read what."""
        if self.principal_name is None:
            return self._all_sources(counts=counts)
        return self._all_sources(counts=counts, only=self.visible_ids() or [])

    def resolve_source(self, ref: str) -> Source:
        """A source the reader may see, by id where ``ref`` looks like one (only by id: never
        a source whose name is that text), else by exact scope; read alone, so a lookup costs
        the same however many sources the store holds."""
        found = self._all_sources(ref=ref)
        if self.principal_name is not None:
            visible = set(self.visible_ids() or [])
            found = [source for source in found if source.id in visible]
        if not found:
            raise NotFoundError(f"no source with id or scope {ref!r}")
        return found[0]

    def delete_source(self, source_id: str) -> int:
        """Remove a source and everything derived from it, then scrub the files (see
        :meth:`scrub`); returns the chunk count removed. A scrub the disk has no room for
        raises :class:`StoreFull` saying that the source is gone and its space not yet
        reclaimed; a scrub that does not run (a process killed after the commit, a full disk)
        is done when the store is next opened."""
        d = self.dialect
        with self.transaction():
            count = self.source_chunk_count(source_id)
            self.conn.execute(
                f"""DELETE FROM jobs WHERE dedupe_key IN (
                       SELECT {d.p} || id FROM trees WHERE source_id = {d.p})""",
                (SEAL_JOB_PREFIX, source_id),
            )
            self.conn.execute(
                f"DELETE FROM entity_merges WHERE {decisions_of_source(d)}", {"source": source_id}
            )
            for statement in delete_derived(d):
                self.conn.execute(statement, {"source": source_id})
            # Trees, summaries, their entities and vectors go with the source (foreign keys).
            self.conn.execute(f"DELETE FROM sources WHERE id = {d.p}", (source_id,))
            self.bump_generation()
            self.mark_removed()
        retried: tuple[type[Exception], ...] = (*self.dialect.operational_errors, StoreFull)
        try:
            self.finish_scrub(strict=True)
        except retried as exc:
            if not is_disk_full(exc):
                raise
            cause = exc.__cause__ if isinstance(exc, StoreFull) else exc
            raise StoreFull(
                f"source {source_id} was forgotten ({count:,} chunks removed), but the disk is "
                f"full: the space it took is not reclaimed yet, and its text may remain in the "
                f"file's free pages until the store is scrubbed, which is done the next time "
                f"it is opened with room to spare ({cause})"
            ) from exc
        return int(count)

    def scopes(self) -> dict[str, str]:
        """Source id → scope of the sources the reader may see, without the per-source
        counts :meth:`sources` makes."""
        return {sid: scope for sid, scope, _ in self._visible_sources()}

    def source_kinds(self) -> dict[str, SourceKind]:
        return {sid: SourceKind(kind) for sid, _, kind in self._visible_sources()}

    def _visible_sources(self) -> list[tuple[str, str, str]]:
        """(id, scope, kind) of every source the reader may see; a search asks for them
        several times."""

        def read() -> list[tuple[str, str, str]]:
            gate, params = gate_sql(self.dialect, self.visible_ids())
            return self.conn.execute(
                f"SELECT s.id, s.scope, s.kind FROM sources s WHERE {gate}", params
            ).fetchall()

        return self._cached_read("visible sources", read)

    def _cached_read(self, what: Hashable, read: Callable[[], T]) -> T:
        """``read()``, kept for this reader until this or another connection writes (not
        inside a transaction, which may yet roll back what was read). Callers must not
        change what it returns."""
        key = self.write_state()
        slot = (self.principal_name, what)
        cached = self._reads_cache.get(slot)
        if cached is not None and cached[0] == key:
            value: T = cached[1]
            return value
        value = read()
        if not self.in_transaction():
            self._reads_cache.put(slot, (key, value))
        return value


def _source(row: Row) -> Source:
    return Source(
        id=row["id"],
        scope=row["scope"],
        kind=SourceKind(row["kind"]),
        platform=row["platform"],
        location=row["location"],
        title=row["title"],
        access=tuple(json.loads(row["access"])),
        locked=bool(row["locked"]),
        ingested_at=from_ms(row["ingested_at"]),
        chunk_count=row["n"],
        created_by=row["created_by"],
    )
