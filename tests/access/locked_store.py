"""The lock tests' store: real-format fixtures plus a secret chat source full of canary
words, and dumps of what a store holds. A plain module (its folder is put on the path by
``conftest.py``), so the crash test's child processes can use it too."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, closing
from pathlib import Path
from typing import Any

import stratamem
from stratamem.access import crypto
from stratamem.config import TreeConfig
from stratamem.store.sources import source_id_for
from stratamem.testing import HashingEmbedder

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

SECRET = "jsonl:secret"
SECRET_ID = source_id_for(SECRET)
CANARIES = ("zqxcanaryalpha", "zqxcanarybravo", "zqxcanarycharlie")
SECRET_PERSON = "person:zqxanna vorpal"
PASSPHRASE = "correct horse battery staple"
FAST_KDF = crypto.Scrypt(n=2**10, r=8, p=1)
# Small summaries, three to a parent: the secret source gets two levels of them.
TREES = TreeConfig(input_token_budget=200, summary_fanout=3)

Dump = dict[str, list[tuple[Any, ...]]]


def secret_lines(count: int, *, start: int = 0) -> list[str]:
    """Chat messages of the secret source: hours apart (so they fall into many chunks), each
    naming two canaries, a person and a project only this source mentions; one names a
    hashtag, rare enough for the graph leg to follow."""
    out = []
    for n in range(start, start + count):
        text = (
            f"Review {n} of Project Zqxhelion: {CANARIES[n % 3]} met Bob Martins about the "
            f"{CANARIES[(n + 1) % 3]} budget, Zqxanna Vorpal wrote zqxcanary@vorpal.example"
        )
        if n == 7:
            text += " #zqxlaunch"
        out.append(
            json.dumps(
                {
                    "id": f"s{n}",
                    "source": "secret",
                    "kind": "chat",
                    "timestamp": 1_710_000_000 + n * 5_400,
                    "author": ("Zqxanna Vorpal", "Bob Martins")[n % 2],
                    "text": text,
                }
            )
        )
    return out


def write_secret(folder: Path, count: int = 40) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "secret.jsonl"
    path.write_text("\n".join(secret_lines(count)) + "\n")
    return path


def build_store(
    db: str | Path,
    fixtures: Path,
    *,
    folder: Path | None = None,
    secret: bool = True,
    secret_count: int = 40,
    **options: Any,
) -> None:
    """Slack channels, a mailbox and a markdown vault, and (with ``secret``) the secret chat
    source: ingested, embedded, with sealed summaries and their vectors, and one item added to
    the secret source afterwards so that its tree has a seal job pending. The secret source's
    export is written in ``folder`` (by default the folder of a SQLite file)."""
    options.setdefault("embedder", HashingEmbedder())
    options.setdefault("tree_config", TREES)
    export = (folder or Path(db).parent) / "export"
    with stratamem.open(db, **options) as mem:
        mem.ingest(fixtures / "slack", trees=False)
        mem.ingest(fixtures / "email" / "sample.mbox", trees=False)
        mem.ingest(fixtures / "markdown" / "vault", trees=False)
        if secret:
            mem.ingest(write_secret(export, secret_count), trees=False)
        mem.indexes.embed()
        mem.trees.flush()
        if secret:
            mem.items.add(
                f"Late note: {CANARIES[2]} moved to Project Zqxhelion",
                source=SECRET,
                author="Zqxanna Vorpal",
            )


def is_postgres(location: str | Path) -> bool:
    return str(location).startswith(("postgresql:", "postgres:"))


class Db:
    """A connection of its own to a store's database, to read and tamper with it below the
    store: SQLite's, or PostgreSQL's (which takes SQLite's spelling of a statement, as the
    store does). ``with db:`` makes one transaction."""

    def __init__(self, location: str | Path) -> None:
        self.location = str(location)
        self.postgres = is_postgres(location)
        if self.postgres:
            from stratamem.store.postgres.connection import connect
            from suite import PastTheStore

            self.conn: Any = PastTheStore(connect(self.location, application="stratamem-test"))
        else:
            self.conn = sqlite3.connect(location)

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self.conn.execute(sql, params)

    def __enter__(self) -> Db:
        self._transaction: AbstractContextManager[Any] = self._atomic()
        self._transaction.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._transaction.__exit__(*exc)

    def _atomic(self) -> AbstractContextManager[Any]:
        if self.postgres:
            from stratamem.store.postgres.connection import atomic

            return atomic(self.conn)
        return self.conn  # type: ignore[no-any-return]

    def close(self) -> None:
        self.conn.close()


def _rows(conn: Any, sql: str, params: dict[str, str]) -> list[tuple[Any, ...]]:
    return sorted((tuple(row) for row in conn.execute(sql, params)), key=repr)


SOURCE_QUERIES = {
    "sources": "SELECT * FROM sources WHERE id = :s",
    "records": "SELECT * FROM records WHERE source_id = :s",
    "item_versions": "SELECT * FROM item_versions WHERE source_id = :s",
    "item_nodes": "SELECT * FROM item_nodes WHERE source_id = :s",
    "chunks": "SELECT * FROM chunks WHERE source_id = :s",
    "entity_index": "SELECT * FROM entity_index WHERE source_id = :s",
    "entity_edges": "SELECT * FROM entity_edges WHERE source_id = :s",
    "embeddings": "SELECT * FROM embeddings WHERE source_id = :s",
    "trees": "SELECT * FROM trees WHERE source_id = :s",
    "summaries": "SELECT * FROM summaries WHERE source_id = :s",
    "summary_entities": "SELECT * FROM summary_entities WHERE source_id = :s",
    "summary_vectors": """SELECT * FROM summary_vectors WHERE summary_id IN
                          (SELECT id FROM summaries WHERE source_id = :s)""",
    "jobs": """SELECT kind, dedupe_key, payload, status FROM jobs WHERE status = 'pending'
               AND dedupe_key IN (SELECT 'seal:' || id FROM trees WHERE source_id = :s)""",
}
# SQLite's full-text index: on PostgreSQL the chunks' rows hold their token counts, and the
# keyword_stats table their totals.
FTS_DOCSIZE = """SELECT rowid, sz FROM chunks_fts_docsize
                 WHERE rowid IN (SELECT rowid FROM chunks WHERE source_id = :s)"""


def source_dump(conn: Any, source_id: str = SECRET_ID) -> Dump:
    """Every row stored of one source, with (on SQLite) the full-text index's matches for its
    words. ``conn`` is a :class:`Db` or a store's own connection."""
    if _postgres(conn) and not isinstance(conn, Db):
        from suite import PastTheStore

        if not isinstance(conn, PastTheStore):
            conn = PastTheStore(conn)
    out = {name: _rows(conn, sql, {"s": source_id}) for name, sql in SOURCE_QUERIES.items()}
    if _postgres(conn):
        return out
    out["fts_docsize"] = _rows(conn, FTS_DOCSIZE, {"s": source_id})
    for word in (*CANARIES, "zqxhelion", "budget", "review"):
        out[f"match:{word}"] = [
            tuple(row)
            for row in conn.execute(
                "SELECT rowid, rank FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rowid",
                (word,),
            )
        ]
    return out


def store_dump(conn: Any) -> Dump:
    """Every row of every table but the settings (counters a lock bumps), the jobs (ids and
    history) and the lock tables; pending jobs by key."""
    skip = ("settings", "jobs", "locks", "sealed", "sqlite_sequence", "stratamem_schema")
    if _postgres(conn):
        names = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
    else:
        names = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    tables = [
        row[0]
        for row in conn.execute(names)
        if row[0] not in skip and not row[0].startswith("chunks_fts")
    ]
    out = {table: _rows(conn, f"SELECT * FROM {table}", {}) for table in tables}
    out["jobs"] = _rows(
        conn, "SELECT kind, dedupe_key, payload FROM jobs WHERE status = 'pending'", {}
    )
    if not _postgres(conn):
        out["fts_docsize"] = _rows(conn, "SELECT * FROM chunks_fts_docsize", {})
    return out


def _postgres(conn: Any) -> bool:
    if isinstance(conn, Db):
        return conn.postgres
    return not isinstance(conn, sqlite3.Connection)


def needles() -> set[bytes]:
    """The canaries as bytes, and the tails FTS5 stores a term as after a shared prefix."""
    return {w.encode() for c in CANARIES for w in (c, c[-8:])}


def residue(location: str | Path) -> dict[str, list[bytes]]:
    """The canaries found in what holds the store at ``location`` (see :func:`holdings`)."""
    return holdings(location, needles())


def holdings(location: str | Path, wanted: Iterable[bytes]) -> dict[str, list[bytes]]:
    """What of ``wanted`` (lowercase) is found in what holds the store at ``location``: on
    SQLite, the bytes of each file of its folder (the database, its WAL, the index files
    beside it); on PostgreSQL, the live rows of each table and the index files this process
    keeps for the store. (PostgreSQL's files keep a deleted row's bytes until a vacuum
    reuses the space, and its WAL keeps what it kept: those are not read here.)"""
    hits: dict[str, list[bytes]] = {}
    for name, data in _held(location):
        found = sorted(w for w in wanted if w in data.lower())
        if found:
            hits[name] = found
    return hits


def _held(location: str | Path) -> Iterator[tuple[str, bytes]]:
    if not is_postgres(location):
        for path in sorted(Path(location).parent.iterdir()):
            if path.is_file():
                yield path.name, path.read_bytes()
        return
    from stratamem.store.postgres.files import index_base

    with closing(Db(location)) as db:
        names = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        for table in sorted(r[0] for r in db.execute(names)):
            rows = db.execute(f"SELECT * FROM {table}").fetchall()
            yield table, b"\n".join(_as_bytes(v) for row in rows for v in row)
        (store_id,) = db.execute("SELECT value FROM settings WHERE key = 'store.id'").fetchone()
    for path in sorted(index_base(store_id).parent.iterdir()):
        if path.is_file():
            yield path.name, path.read_bytes()


def files_of(location: str | Path) -> dict[str, int]:
    """The files kept for the store at ``location``, with their sizes: on SQLite those of its
    folder, on PostgreSQL the index files this process keeps for it."""
    if is_postgres(location):
        from stratamem.store.postgres.files import index_base

        with closing(Db(location)) as db:
            (store_id,) = db.execute("SELECT value FROM settings WHERE key = 'store.id'").fetchone()
        folder = index_base(store_id).parent
    else:
        folder = Path(location).parent
    return {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return str(value).encode()


def copy_db(source: str | Path, target: Path, server: Any | None) -> str:
    """A copy of the store at ``source``, which nobody has open: ``target`` (a SQLite file),
    or a new database on ``server``."""
    if server is None:
        target.parent.mkdir(parents=True, exist_ok=True)
        with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(target)) as dst:
            src.backup(dst)
        return str(target)
    return str(server.copy_database(str(source)))
