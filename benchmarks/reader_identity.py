"""Whether two checkouts' ingest readers give the same output, byte for byte.

Each corpus is ingested (no embeddings, no trees) into a new SQLite file by the code of each
checkout, in a process of its own; then every row of what the reader decides is compared:
chunks (id, text, offsets, metadata, token counts), records (key, digest, encoding), entity
mentions (topics among them), entities' co-mention edges, sources and facts read from
structure, less the columns that hold the time of the run. The reader's events themselves
(``read_events``) are compared too, as text.

    python benchmarks/reader_identity.py --compare /tmp/wt-base [--documents 5650]

Corpora: ingest_scale.py's SciFact JSONL, ingest.py's til notes, LKML Maildir and Ubuntu IRC
logs, and the sample chat exports (Slack, Discord). Exits non-zero at the first difference.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
CORPORA: dict[str, tuple[Path, str | None]] = {
    "til": (DATA / "notes" / "til", None),
    "lkml": (DATA / "email" / "lkml-maildir", None),
    "irc": (DATA / "chat" / "ubuntu-irc" / "dev", "irc"),
}
# Each table with the columns compared (those that do not hold the time of the run), in a
# fixed order.
TABLES = {
    "chunks": "id, source_id, seq, content, title, token_count, author, ts_start, ts_end, tags, "
    "source_ref, thread, doc_id, version, content_sha256, meta, record_key",
    "records": "source_id, key, ts, sort_key, digest, body, revised",
    "entity_index": "entity_id, node_id, node_kind, kind, surface, source_id, ts",
    "entity_edges": "a, b, source_id, weight",
    "sources": "id, scope, kind, platform, location, title, access, locked, meta",
    "entity_aliases": "alias, entity_id, source_id, origin",
    "facts": "source_id, subject, predicate, object, object_is_entity, valid_from, valid_to, "
    "evidence, confidence, origin",
}


def child(path: Path, kind: str, db: Path, events_out: Path) -> None:
    """Run in a process of its own: the reader's events as text, then the ingest."""
    import stratamem
    from stratamem.ingest import registry
    from stratamem.ingest.reader import read_events

    connector = registry.get(kind) if kind else registry.detect(path)
    digest = hashlib.sha256()
    count = 0
    for event in read_events(connector, path, None, None):
        digest.update(repr(event).encode("utf-8", "surrogatepass") + b"\n")
        count += 1
    events_out.write_text(f"{count} {digest.hexdigest()}\n")
    with stratamem.open(db, embedder=None) as mem:
        mem.ingest(path, format=kind or None, trees=False)


def table_digests(db: Path) -> dict[str, tuple[int, str]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    out = {}
    for table, columns in TABLES.items():
        rows = conn.execute(f"SELECT {columns} FROM {table} ORDER BY {columns}").fetchall()
        digest = hashlib.sha256(repr(rows).encode("utf-8", "surrogatepass")).hexdigest()
        out[table] = (len(rows), digest)
    conn.close()
    return out


def run(
    src: Path, path: Path, kind: str | None, work: Path
) -> tuple[str, dict[str, tuple[int, str]]]:
    work.mkdir()
    # A fixed hash seed: the events hold sets, whose order is the seed's.
    env = {
        **os.environ,
        "PYTHONPATH": f"{src}{os.pathsep}{ROOT / 'benchmarks'}",
        "PYTHONHASHSEED": "0",
    }
    args = [sys.executable, __file__, "--child", str(path), kind or "", str(work / "s.db")]
    subprocess.run([*args, str(work / "events.txt")], env=env, check=True)
    return (work / "events.txt").read_text().strip(), table_digests(work / "s.db")


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4]), Path(sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--compare", type=Path, required=True, help="the old checkout")
    parser.add_argument("--documents", type=int, default=5650)
    parser.add_argument("--only", help="comma-separated corpus names")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="reader-identity-") as tmp:
        corpora = dict(CORPORA)
        corpora["slack"] = (DATA / "chat" / "slack-export-viewer" / "testarchive.zip", None)
        corpora["discord"] = (DATA / "chat" / "discord-exporter-frontend" / "example_guild", None)
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from ingest_scale import scifact_texts, write_corpus

        scifact = Path(tmp) / "scifact.jsonl"
        write_corpus(scifact, args.documents, scifact_texts())
        corpora = {"scifact": (scifact, None), **corpora}
        if args.only:
            corpora = {k: v for k, v in corpora.items() if k in args.only.split(",")}
        failed = False
        for name, (path, kind) in corpora.items():
            new = run(ROOT / "src", path, kind, Path(tmp) / f"{name}-new")
            old = run(args.compare / "src", path, kind, Path(tmp) / f"{name}-old")
            same = new == old
            failed |= not same
            events = new[0].split()[0]
            rows = ", ".join(f"{t} {n:,}" for t, (n, _) in new[1].items())
            print(f"{name}: {'identical' if same else 'DIFFERENT'} ({events} events; {rows})")
            if not same:
                for table in TABLES:
                    if new[1][table] != old[1][table]:
                        print(f"  {table}: new {new[1][table]} old {old[1][table]}")
                if new[0] != old[0]:
                    print(f"  events: new {new[0]} old {old[0]}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
