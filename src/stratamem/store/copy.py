"""Copying a whole store into an empty one: SQLite to PostgreSQL, PostgreSQL to SQLite, or
between two stores of one backend (``stratamem copy``, :func:`copy_store`).

Rows, not meaning. Every table is copied as it is, in the order of :data:`TABLES` (parents
before children, so that each foreign key finds its row), each read in the order of its key
(rowid or primary key) in batches of :data:`BATCH`, by keyset (``WHERE key > last``) so
that neither backend holds a whole table. Row keys are kept: ``chunks.rowid`` (which the
in-process indexes are addressed by), ``summaries.rowid``, ``facts.rowid`` (hidden on SQLite,
a column on PostgreSQL) and ``jobs.id``. Sealed parts of locked sources are bytes and stay
sealed; their key is derived from the store id, so the ``store.id`` setting travels with
them (a copy keeps its id, see ``store_id``) and a locked source opens on the copy with the
same passphrase.

One snapshot, one transaction. The source is read inside one read snapshot, so the copy is
of one commit of it; the destination is written in one write transaction, so a copy that
fails or is interrupted (an error, a verification that does not hold, Ctrl-C, a lost
connection) leaves the destination as it was. :func:`copy_store` given a location creates a
missing SQLite file for the copy and removes it again when the copy fails.

What differs between the backends:

- What a backend derives from a row, it derives again. On SQLite each batch of chunks is
  indexed in FTS5 once written; on PostgreSQL each chunk's token counts (``terms_content``,
  ``terms_title``) are counted with the destination's tokenizer, which the ``keyword_stats``
  triggers sum, and each vector is written out again for pgvector (see
  ``store/postgres/derived.py``; between two PostgreSQL stores the vectors' column is kept).
  The tokenizer travels: the source's ``keyword_tokenizer`` is set on the destination before
  any chunk is written (on SQLite it is the FTS5 table's declaration).
- Writing. SQLite takes the rows one prepared statement each; PostgreSQL a ``COPY`` per batch,
  so that its statement triggers run once a batch. PostgreSQL's text cannot hold NUL (the
  store writes U+0001 in its place); the records' sort keys, the one text written with NUL,
  get theirs back on SQLite.
- Row key counters. A chunk rowid is never handed out twice (SQLite's ``AUTOINCREMENT``, a
  PostgreSQL identity); the source's high-water mark is carried over, so that rowids a locked
  source's sealed chunks hold stay theirs. On PostgreSQL every identity sequence is then
  moved past the highest key copied (``setval``); SQLite's counters follow explicit rowids
  themselves.

Settings are copied but for two: ``keyword.tokenizer`` (carried as above) and
``locks.scrub_pending``, which is about the source's own files. The generation counters
keep the source's values, or move past the destination's own where it had any, so a process
holding the destination open sees that it changed.

Refused: a destination that is not empty (a row in any table, or a setting a new store does
not hold), a source or destination whose schema is not this version's, a source read as a
principal or with sources unlocked in memory (what it reads is not the whole store, or is
decrypted), and a store of any other backend.

Verified, before the destination's transaction commits: each table holds as many rows as
the source's, the settings say the same, and a handful of keyword searches (words drawn
from chunks spread over the store) rank the same chunks with the same BM25 scores on both.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol, cast

from stratamem.errors import StoreError
from stratamem.store.base import Store
from stratamem.store.dialect import Dialect
from stratamem.types import Filters

BATCH: Final = 1000


@dataclass(frozen=True, slots=True)
class _Table:
    """A table copied: ``key`` is the order its rows are read in (its rowid or primary key;
    a key column ``SELECT *`` does not list, SQLite's hidden rowid, is read by name)."""

    name: str
    key: tuple[str, ...]


# Parents before children.
TABLES: Final = (
    _Table("sources", ("id",)),
    _Table("records", ("source_id", "key")),
    _Table("item_versions", ("source_id", "key", "version")),
    _Table("item_nodes", ("node_id", "source_id", "key", "version")),
    _Table("trees", ("id",)),
    _Table("summaries", ("rowid",)),
    _Table("summary_entities", ("entity_id", "source_id", "summary_id")),
    _Table("summary_vectors", ("summary_id", "model")),
    _Table("chunks", ("rowid",)),
    _Table("entity_index", ("entity_id", "source_id", "node_id")),
    _Table("entity_edges", ("a", "b", "source_id")),
    _Table("entity_aliases", ("alias", "entity_id", "source_id")),
    _Table("embeddings", ("node_id", "model")),
    _Table("facts", ("rowid",)),
    _Table("fact_vectors", ("fact_id", "model")),
    _Table("fact_scores", ("fact_id",)),
    _Table("rollups", ("id",)),
    _Table("rollup_sources", ("source_id", "rollup_id")),
    _Table("principals", ("name",)),
    _Table("entity_merges", ("id",)),
    _Table("locks", ("source_id",)),
    _Table("sealed", ("source_id", "part")),
    _Table("jobs", ("id",)),
)

# Row keys handed out by a counter: (table, column).
_IDENTITIES: Final = (
    ("chunks", "rowid"),
    ("summaries", "rowid"),
    ("facts", "rowid"),
    ("jobs", "id"),
)
_GENERATIONS: Final = ("vectors.generation", "chunks.generation")
_TOKENIZER_KEY: Final = "keyword.tokenizer"
_SCRUB_KEY: Final = "locks.scrub_pending"
# Settings not copied (see the module docstring).
_NOT_COPIED: Final = frozenset({_TOKENIZER_KEY, _SCRUB_KEY})
# What a destination may hold and still be empty: a new store's id, and bookkeeping a store
# keeps without content (its counters, its tokenizer, its embedding model); all replaced.
_EMPTY_SETTINGS: Final = frozenset(
    {"store.id", *_GENERATIONS, _TOKENIZER_KEY, _SCRUB_KEY, "embed.model", "embed.dim"}
)
_BACKENDS: Final = ("sqlite", "postgresql")
_PROBES: Final = 5
_PROBE_LIMIT: Final = 20
_WORD = re.compile(r"[^\W\d_]{4,}")


class _Backend(Store, Protocol):
    """A store of one of :data:`_BACKENDS`: its tables are spoken to in SQL (built from its
    dialect), and what differs between the backends is asked of the store."""

    name: str
    conn: Any
    dialect: Dialect

    def schema_versions(self) -> tuple[int, int]: ...

    def derived_columns(self, table: str) -> tuple[str, ...]: ...

    def with_derived(
        self, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]
    ) -> tuple[list[str], list[tuple[Any, ...]]]: ...

    def row_writer(
        self, table: str, columns: Sequence[str]
    ) -> Callable[[list[tuple[Any, ...]]], None]: ...

    def row_key_high_water(self, table: str, column: str) -> int: ...

    def move_row_key(self, table: str, column: str, high: int) -> None: ...


@dataclass(frozen=True, slots=True)
class CopyProgress:
    """Where a copy is: ``copied`` of the ``total`` rows of ``table`` so far (``done`` once
    the table is whole), the copy having started at ``started`` (``time.perf_counter``)."""

    table: str
    copied: int
    total: int
    started: float
    done: bool = False


@dataclass(frozen=True, slots=True)
class CopyReport:
    """A finished copy: rows per table (``settings`` included), how long it took, and
    whether it was verified (``queries``: the keyword searches compared)."""

    source: str
    destination: str
    store_id: str
    tables: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    verified: bool = False
    queries: int = 0

    @property
    def rows(self) -> int:
        return sum(self.tables.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "destination": self.destination,
            "store_id": self.store_id,
            "tables": dict(self.tables),
            "rows": self.rows,
            "seconds": round(self.seconds, 3),
            "verified": self.verified,
            "queries": self.queries,
        }


def copy_store(
    src: Store | str | Path,
    dst: Store | str | Path,
    *,
    progress: Callable[[CopyProgress], None] | None = None,
    verify: bool = True,
) -> CopyReport:
    """Copy every row of the store ``src`` into the empty store ``dst`` (see the module
    docstring), all or nothing; verified unless ``verify=False``.

    Either may be an open store or a location (a path or URL, as ``stratamem.open`` takes):
    a location is opened for the copy and closed after it; a source location must hold a
    store, and a SQLite destination file that the copy created is removed if it fails. An open
    destination's in-process indexes are not told of the copy: open it again to use it.
    :class:`~stratamem.errors.StoreError` says why a copy was refused or failed.
    """
    created: list[Path] = []
    try:
        with ExitStack() as stack:
            source = _opened(src, stack)
            dest = _opened(dst, stack, created=created)
            return _copy(_backend(source), _backend(dest), progress, verify)
    except BaseException:
        for path in created:  # closed by now
            for part in (path, *(Path(f"{path}{end}") for end in ("-wal", "-shm"))):
                part.unlink(missing_ok=True)
        raise


def _opened(
    location: Store | str | Path, stack: ExitStack, *, created: list[Path] | None = None
) -> Store:
    if not isinstance(location, str | Path):
        return location
    from stratamem.store.urls import open_postgres, open_sqlite, sqlite_path, url_scheme

    target = str(location)
    scheme = None if isinstance(location, Path) else url_scheme(target)
    if scheme in ("postgresql", "postgres"):
        store = open_postgres(target)
        stack.callback(store.close)
        return store
    if scheme not in (None, "sqlite"):
        raise StoreError(f"{target}: copy knows the sqlite and postgresql stores, not {scheme}")
    file = sqlite_path(target)
    missing = file == ":memory:" or not Path(file).expanduser().exists()
    if missing and created is None:
        raise StoreError(f"{target}: no store there to copy")
    if missing and file != ":memory:":
        assert created is not None
        created.append(Path(file).expanduser())
    store = open_sqlite(target)
    stack.callback(store.close)
    return store


def _backend(store: Store) -> _Backend:
    name = getattr(store, "name", None)
    if name not in _BACKENDS or not hasattr(store, "conn"):
        raise StoreError(f"{store.path}: copy knows the sqlite and postgresql stores, not {name}")
    if getattr(store, "principal_name", None) is not None:
        raise StoreError(f"{store.path}: opened as a principal; copy a store as its owner")
    if hasattr(store, "freeze"):
        raise StoreError(
            f"{store.path}: opened with sources unlocked in memory; copy the store itself "
            "(its locked sources travel sealed)"
        )
    return cast(_Backend, store)


def _copy(
    src: _Backend,
    dst: _Backend,
    progress: Callable[[CopyProgress], None] | None,
    verify: bool,
) -> CopyReport:
    started = time.perf_counter()
    if src.name == dst.name and _same_place(src.path, dst.path, src.name):
        raise StoreError(f"{dst.path}: the destination is the source")
    step = "reading the source"
    try:
        with src.read_snapshot():
            _check_schema(src)
            _check_schema(dst)
            totals = {t.name: _count(src, t.name) for t in TABLES}
            settings = _settings(src)
            tokenizer = src.keyword_tokenizer()
            high = {t: src.row_key_high_water(t, column) for t, column in _IDENTITIES}
            copied: dict[str, int] = {}
            queries = 0
            step = "writing the destination"
            with dst.transaction():
                _refuse_nonempty(dst)
                step = "copying settings"
                copied["settings"] = _copy_settings(dst, settings)
                if progress is not None:
                    n = copied["settings"]
                    progress(CopyProgress("settings", n, n, started, done=True))
                if dst.keyword_tokenizer() != tokenizer:
                    dst.set_keyword_tokenizer(tokenizer)
                for table in TABLES:
                    step = f"copying {table.name}"
                    copied[table.name] = _copy_table(
                        src, dst, table, totals[table.name], started, progress
                    )
                step = "moving the row key counters"
                _move_identities(dst, high)
                if verify:
                    step = "verifying the copy"
                    queries = _verify(src, dst, totals, settings)
            store_id = dst.store_id()
    except _driver_errors(src, dst) as exc:
        text = str(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        raise StoreError(f"copy to {dst.path} failed {step}: {first}") from exc
    return CopyReport(
        source=src.path,
        destination=dst.path,
        store_id=store_id,
        tables=copied,
        seconds=time.perf_counter() - started,
        verified=verify,
        queries=queries,
    )


def _same_place(a: str, b: str, backend: str) -> bool:
    if backend != "sqlite":
        return a == b
    if ":memory:" in (a, b):
        return False
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def _driver_errors(*stores: _Backend) -> tuple[type[BaseException], ...]:
    return tuple(error for store in stores for error in store.dialect.errors)


# -- checks ---------------------------------------------------------------------------------


def _check_schema(store: _Backend) -> None:
    """The store's schema is this version's (opening one migrates it, so this holds but for
    a store another process opened with an older stratamem meanwhile)."""
    found, latest = store.schema_versions()
    if found != latest:
        raise StoreError(
            f"{store.path}: schema version {found}, not this stratamem's {latest}; "
            "open it with this version first"
        )


def _refuse_nonempty(dst: _Backend) -> None:
    for table in TABLES:
        if dst.conn.execute(f"SELECT 1 FROM {table.name} LIMIT 1").fetchone() is not None:
            raise StoreError(
                f"{dst.path}: the destination is not empty ({table.name} has rows); "
                "copy into a new store"
            )
    extra = sorted(set(_settings(dst)) - _EMPTY_SETTINGS)
    if extra:
        raise StoreError(
            f"{dst.path}: the destination is not empty (it has the setting {extra[0]}); "
            "copy into a new store"
        )


def _count(store: _Backend, table: str) -> int:
    return int(store.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def _settings(store: _Backend) -> dict[str, str]:
    rows = store.conn.execute("SELECT key, value FROM settings ORDER BY key").fetchall()
    return {str(r[0]): str(r[1]) for r in rows}


def _verify(src: _Backend, dst: _Backend, totals: dict[str, int], settings: dict[str, str]) -> int:
    """Counts, settings and keyword rankings the same on both; how many searches were
    compared."""
    for table in TABLES:
        found = _count(dst, table.name)
        if found != totals[table.name]:
            raise StoreError(
                f"{dst.path}: the copy has {found:,} rows of {table.name}, "
                f"the source {totals[table.name]:,}"
            )
    copied = _settings(dst)
    for key, value in settings.items():
        if key not in _NOT_COPIED and key not in _GENERATIONS and copied.get(key) != value:
            raise StoreError(f"{dst.path}: the copy's setting {key} is not the source's")
    queries = _probe_queries(src, totals["chunks"])
    for words in queries:
        expression = " OR ".join(f'"{w}"' for w in words)
        before, after = _ranked(src, expression), _ranked(dst, expression)
        if not _same_ranking(before, after):
            raise StoreError(
                f"{dst.path}: a keyword search for {' '.join(words)!r} ranks differently on "
                "the copy than on the source"
            )
    return len(queries)


def _probe_queries(src: _Backend, chunks: int) -> list[tuple[str, ...]]:
    """Words of chunks spread evenly over the store: the longest word of each, one search
    each, and one search for all of them at once."""
    words: list[str] = []
    for i in range(min(_PROBES, chunks)):
        row = src.conn.execute(
            f"SELECT content FROM chunks ORDER BY rowid LIMIT 1 OFFSET {src.dialect.p}",
            (chunks * i // _PROBES,),
        ).fetchone()
        found = _WORD.findall(str(row[0])) if row else []
        if found:
            word = max(found, key=len)
            if word not in words:
                words.append(word)
    queries: list[tuple[str, ...]] = [(w,) for w in words]
    if len(words) > 1:
        queries.append(tuple(words))
    return queries


def _ranked(store: _Backend, expression: str) -> list[tuple[str, float]]:
    hits, _ = store.fts_search(expression, Filters(), _PROBE_LIMIT, snippets=False, count=False)
    return [(h.node_id, h.score) for h in hits]


def _same_ranking(a: Sequence[tuple[str, float]], b: Sequence[tuple[str, float]]) -> bool:
    """The same chunks with the same scores, up to the last bits of a float (the engines
    add the same terms in other orders), in the same order (ties by id)."""
    if len(a) != len(b):
        return False

    def order(hits: Sequence[tuple[str, float]]) -> list[tuple[float, str]]:
        return sorted((-round(score, 9), node) for node, score in hits)

    if [n for _, n in order(a)] != [n for _, n in order(b)]:
        return False
    scores = dict(b)
    return all(math.isclose(s, scores[n], rel_tol=1e-9, abs_tol=1e-12) for n, s in a)


# -- copying --------------------------------------------------------------------------------


def _copy_settings(dst: _Backend, settings: dict[str, str]) -> int:
    before = _settings(dst)
    dst.conn.execute("DELETE FROM settings")
    rows = [(k, v) for k, v in settings.items() if k not in _NOT_COPIED]
    for i, (key, value) in enumerate(rows):
        if key in _GENERATIONS and key in before:
            rows[i] = (key, str(max(int(value), int(before[key]) + 1)))
    if rows:
        dst.conn.executemany(
            f"INSERT INTO settings (key, value) VALUES ({dst.dialect.marks(2)})", rows
        )
    return len(rows)


def _columns(store: _Backend, table: _Table) -> list[str]:
    cursor = store.conn.execute(f"SELECT * FROM {table.name} LIMIT 0")
    names = [str(d[0]) for d in cursor.description]
    cursor.fetchall()
    return [k for k in table.key if k not in names] + names


def _copy_table(
    src: _Backend,
    dst: _Backend,
    table: _Table,
    total: int,
    started: float,
    progress: Callable[[CopyProgress], None] | None,
) -> int:
    have, want = _columns(src, table), _columns(dst, table)
    computed = {*src.derived_columns(table.name), *dst.derived_columns(table.name)}
    # Between two PostgreSQL stores derived columns come along, and are kept where portable.
    along = src.name == dst.name == "postgresql"
    columns = [c for c in have if c in want and (along or c not in computed)]
    lost = [c for c in have if c not in want and c not in computed]
    if lost:
        raise StoreError(f"{dst.path}: {table.name} has no column {lost[0]} to copy into")
    unknown = [c for c in want if c not in have and c not in computed]
    if unknown:
        raise StoreError(f"{dst.path}: the source's {table.name} has no column {unknown[0]}")
    derive = any(c in want for c in computed)
    names = list(columns)
    if derive:
        names = dst.with_derived(table.name, columns, [])[0]
    write = dst.row_writer(table.name, names)
    # PostgreSQL's text cannot hold NUL, and keeps U+0001 in its place; the records' sort
    # keys, the one text written with NUL (its lowest separator), get theirs back on SQLite.
    nul = None
    if src.name == "postgresql" and dst.name == "sqlite" and table.name == "records":
        nul = columns.index("sort_key")
    copied = 0
    if progress is not None:
        progress(CopyProgress(table.name, 0, total, started, done=not total))
    for rows in _read_batches(src, table, columns):
        if nul is not None:
            rows = [(*r[:nul], str(r[nul]).replace("\x01", "\x00"), *r[nul + 1 :]) for r in rows]
        if derive:
            _, rows = dst.with_derived(table.name, columns, rows)
        write(rows)
        copied += len(rows)
        if progress is not None:
            progress(CopyProgress(table.name, copied, total, started, done=copied >= total))
    if copied != total:
        raise StoreError(
            f"{dst.path}: {copied:,} rows of {table.name} were copied, the source has {total:,}"
        )
    return copied


def _read_batches(
    store: _Backend, table: _Table, columns: list[str]
) -> Iterator[list[tuple[Any, ...]]]:
    """The rows of ``table`` (these ``columns``) in key order, :data:`BATCH` at a time."""
    d = store.dialect
    select = ", ".join(columns)
    order = ", ".join(table.key)
    at = [columns.index(k) for k in table.key]
    if len(table.key) == 1:
        after = f"{table.key[0]} > {d.p}"
    else:
        after = f"({order}) > ({d.marks(len(table.key))})"
    first = f"SELECT {select} FROM {table.name} ORDER BY {order} LIMIT {d.p}"
    rest = f"SELECT {select} FROM {table.name} WHERE {after} ORDER BY {order} LIMIT {d.p}"
    last: tuple[Any, ...] | None = None
    while True:
        if last is None:
            cursor = store.conn.execute(first, (BATCH,))
        else:
            cursor = store.conn.execute(rest, (*last, BATCH))
        rows = [tuple(r) for r in cursor.fetchall()]
        if rows:
            yield rows
        if len(rows) < BATCH:
            return
        last = tuple(rows[-1][i] for i in at)


# -- row key counters -----------------------------------------------------------------------


def _move_identities(dst: _Backend, high: dict[str, int]) -> None:
    for table, column in _IDENTITIES:
        dst.move_row_key(table, column, high[table])
