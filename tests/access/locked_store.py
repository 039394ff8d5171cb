"""The lock tests' store: real-format fixtures plus a secret chat source full of canary
words, and dumps of what a store holds. A plain module (its folder is put on the path by
``conftest.py``), so the crash test's child processes can use it too."""

from __future__ import annotations

import json
import sqlite3
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
    db: Path,
    fixtures: Path,
    *,
    secret: bool = True,
    secret_count: int = 40,
    **options: Any,
) -> None:
    """Slack channels, a mailbox and a markdown vault, and (with ``secret``) the secret chat
    source: ingested, embedded, with sealed summaries and their vectors, and one item added to
    the secret source afterwards so that its tree has a seal job pending."""
    options.setdefault("embedder", HashingEmbedder())
    options.setdefault("tree_config", TREES)
    with stratamem.open(db, **options) as mem:
        mem.ingest(fixtures / "slack", trees=False)
        mem.ingest(fixtures / "email" / "sample.mbox", trees=False)
        mem.ingest(fixtures / "markdown" / "vault", trees=False)
        if secret:
            mem.ingest(write_secret(db.parent / "export", secret_count), trees=False)
        mem.embed()
        mem.flush()
        if secret:
            mem.add(
                f"Late note: {CANARIES[2]} moved to Project Zqxhelion",
                source=SECRET,
                author="Zqxanna Vorpal",
            )


def _rows(conn: sqlite3.Connection, sql: str, params: dict[str, str]) -> list[tuple[Any, ...]]:
    return sorted((tuple(row) for row in conn.execute(sql, params)), key=repr)


SOURCE_QUERIES = {
    "sources": "SELECT * FROM sources WHERE id = :s",
    "records": "SELECT * FROM records WHERE source_id = :s",
    "chunks": "SELECT * FROM chunks WHERE source_id = :s",
    "fts_docsize": """SELECT rowid, sz FROM chunks_fts_docsize
                      WHERE rowid IN (SELECT rowid FROM chunks WHERE source_id = :s)""",
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


def source_dump(conn: sqlite3.Connection, source_id: str = SECRET_ID) -> Dump:
    """Every row stored of one source, with the full-text index's matches for its words."""
    out = {name: _rows(conn, sql, {"s": source_id}) for name, sql in SOURCE_QUERIES.items()}
    for word in (*CANARIES, "zqxhelion", "budget", "review"):
        out[f"match:{word}"] = [
            tuple(row)
            for row in conn.execute(
                "SELECT rowid, rank FROM chunks_fts WHERE chunks_fts MATCH ? ORDER BY rowid",
                (word,),
            )
        ]
    return out


def store_dump(conn: sqlite3.Connection) -> Dump:
    """Every row of every table but the settings (counters a lock bumps), the jobs (ids and
    history) and the lock tables; pending jobs by key."""
    skip = ("settings", "jobs", "locks", "sealed", "sqlite_sequence")
    tables = [
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
        if row[0] not in skip and not row[0].startswith("chunks_fts")
    ]
    out = {table: _rows(conn, f"SELECT * FROM {table}", {}) for table in tables}
    out["jobs"] = _rows(
        conn, "SELECT kind, dedupe_key, payload FROM jobs WHERE status = 'pending'", {}
    )
    out["fts_docsize"] = _rows(conn, "SELECT * FROM chunks_fts_docsize", {})
    return out


def needles() -> set[bytes]:
    """The canaries as bytes, and the tails FTS5 stores a term as after a shared prefix."""
    return {w.encode() for c in CANARIES for w in (c, c[-8:])}


def residue(folder: Path) -> dict[str, list[bytes]]:
    """The canaries found in the bytes of each file of ``folder``."""
    hits: dict[str, list[bytes]] = {}
    for path in sorted(folder.iterdir()):
        if path.is_file():
            data = path.read_bytes().lower()
            found = sorted(w for w in needles() if w in data)
            if found:
                hits[path.name] = found
    return hits
