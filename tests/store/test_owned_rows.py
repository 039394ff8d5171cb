"""A source's mentions, edges and vectors, found through its chunks (store/tables/owned.py):
forgetting, locking and re-ingesting one source take exactly its rows, on both backends."""

from __future__ import annotations

import json
from pathlib import Path

import stratamem
from stratamem.testing import HashingEmbedder

DERIVED = {
    "entity_index": "source_id",
    "entity_edges": "source_id",
    "embeddings": "source_id",
}


def write_notes(path: Path, scope: str, names: list[str]) -> Path:
    """Notes that each name two people and a tag, so every chunk has mentions and edges, and
    two sources naming one person share that person's edge to the tag."""
    lines = [
        {
            "id": f"{scope}-{i}",
            "text": f"{names[i % len(names)]} met {names[(i + 1) % len(names)]} about #launch",
            "author": names[i % len(names)],
            "ts": f"2024-05-0{1 + i % 9}T10:00:00Z",
        }
        for i in range(12)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def rows_by_source(mem: stratamem.Memory) -> dict[str, dict[str, int]]:
    found: dict[str, dict[str, int]] = {}
    for table, column in DERIVED.items():
        for source, n in mem.store.conn.execute(
            f"SELECT {column}, count(*) FROM {table} GROUP BY {column}"
        ):
            found.setdefault(table, {})[source] = n
    return found


def ingest_two(mem: stratamem.Memory, data: Path) -> tuple[str, str]:
    mem.ingest(write_notes(data / "alpha.jsonl", "alpha", ["Ann Lee", "Bo Chen"]), trees=False)
    mem.ingest(write_notes(data / "beta.jsonl", "beta", ["Ann Lee", "Cy Diaz"]), trees=False)
    mem.indexes.embed()
    ids = {s.scope: s.id for s in mem.store.sources(counts=False)}
    return ids["jsonl:alpha"], ids["jsonl:beta"]


def test_forget_takes_exactly_the_sources_mentions_edges_and_vectors(
    store_location: str, tmp_path: Path
) -> None:
    with stratamem.open(store_location, embedder=HashingEmbedder()) as mem:
        alpha, beta = ingest_two(mem, tmp_path)
        before = rows_by_source(mem)
        for table in DERIVED:
            assert before[table].keys() == {alpha, beta}, table
        mem.sources.forget("jsonl:alpha")
        after = rows_by_source(mem)
        assert after == {table: {beta: before[table][beta]} for table in DERIVED}


def test_lock_and_unlock_take_and_give_back_exactly_the_sources_rows(
    store_location: str, tmp_path: Path
) -> None:
    with stratamem.open(store_location, embedder=HashingEmbedder()) as mem:
        _, beta = ingest_two(mem, tmp_path)
        before = rows_by_source(mem)
        mem.locks.lock("jsonl:alpha", passphrase="correct horse")
        locked = rows_by_source(mem)
        assert locked == {table: {beta: before[table][beta]} for table in DERIVED}
        mem.locks.unlock("jsonl:alpha", passphrase="correct horse")
        assert rows_by_source(mem) == before


def test_an_edit_drops_the_edges_no_chunk_holds_any_more(
    store_location: str, tmp_path: Path
) -> None:
    """A re-ingest that keeps one chunk of a source leaves that source exactly the edges of
    that chunk, weighed once; the other source's edges, the same pairs among them, stay."""
    with stratamem.open(store_location, embedder=HashingEmbedder()) as mem:
        alpha, beta = ingest_two(mem, tmp_path)
        p = mem.store.dialect.p
        edges = "SELECT a, b, weight FROM entity_edges WHERE source_id = " + p
        beta_before = sorted(tuple(r) for r in mem.store.conn.execute(edges, (beta,)))
        shared = {tuple(r[:2]) for r in mem.store.conn.execute(edges, (alpha,))} & {
            r[:2] for r in beta_before
        }
        assert shared
        path = tmp_path / "alpha.jsonl"
        kept = path.read_text().splitlines()[0]
        path.write_text(kept + "\n")
        mem.ingest(path, trees=False, sync=True)
        (chunk,) = [c.id for c in mem.store.iter_chunks(alpha)]
        named = sorted(mem.store.mentions_of([chunk])[chunk])
        pairs = [(a, 1.0) for a in named]
        expected = sorted((a, b, 1.0) for i, (a, _) in enumerate(pairs) for b, _ in pairs[i + 1 :])
        assert sorted(tuple(r) for r in mem.store.conn.execute(edges, (alpha,))) == expected
        assert sorted(tuple(r) for r in mem.store.conn.execute(edges, (beta,))) == beta_before
