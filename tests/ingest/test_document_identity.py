"""A note's chunks are identified by the note and what they hold: editing a note of a vault
re-writes and re-embeds that note's chunks alone, and the store ends as a fresh ingest of the
edited vault would leave it."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

import stratamem
from conftest import SHARED_DATA

TIL = SHARED_DATA / "notes" / "til"

WORDS = [
    "atlas",
    "deploy",
    "rollback",
    "queue",
    "index",
    "latency",
    "cache",
    "shard",
    "replica",
    "schema",
    "migration",
    "vector",
    "token",
    "budget",
    "window",
    "summary",
    "ledger",
    "audit",
    "cluster",
    "backup",
    "restore",
]


def write_vault(root: Path, notes: int = 60, *, seed: int = 7) -> list[Path]:
    """An Obsidian-style vault: front matter, headings, links between notes, some notes long
    enough to be cut into several chunks."""
    rng = random.Random(seed)
    files = []
    for n in range(notes):
        folder = root / f"area-{n % 6}"
        folder.mkdir(parents=True, exist_ok=True)
        paragraphs = []
        for p in range(1 + (n % 4) * 3):
            sentence = " ".join(rng.choice(WORDS) for _ in range(40 + p))
            paragraphs.append(f"## Part {p}\n\n{sentence}. See [[note-{(n + 1) % notes}]].")
        text = f"---\ntags: [t{n % 5}]\ncreated: 2024-01-{1 + n % 28:02d}\n---\n# Note {n}\n\n"
        file = folder / f"note-{n}.md"
        file.write_text(text + "\n\n".join(paragraphs) + "\n", encoding="utf-8")
        files.append(file)
    return files


def chunk_rows(memory: stratamem.Memory) -> list[tuple[str, int, str]]:
    return sorted(
        (c.id, c.seq, c.content)
        for source in memory.store.sources()
        for c in memory.store.iter_chunks(source.id)
    )


def note_chunks(memory: stratamem.Memory, doc: str) -> set[str]:
    return {
        c.id
        for source in memory.store.sources()
        for c in memory.store.iter_chunks(source.id)
        if c.doc_id == doc
    }


def edit_and_delete(files: list[Path], root: Path) -> tuple[str, str, str]:
    """Edit two notes (one at its top, shifting every line below; one at its end) and delete
    a third; returns their paths within the vault."""
    top, end, gone = files[13], files[30], files[42]
    top.write_text(
        top.read_text().replace("# Note 13\n", "# Note 13\n\nA new first paragraph.\n"),
        encoding="utf-8",
    )
    end.write_text(end.read_text() + "\nOne more line at the end.\n", encoding="utf-8")
    gone.unlink()
    return tuple(f.relative_to(root).as_posix() for f in (top, end, gone))  # type: ignore[return-value]


def test_an_edit_rewrites_and_reembeds_only_the_notes_it_changed(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    files = write_vault(root)
    memory = stratamem.open(tmp_path / "a.db", embedder="hashing")
    first = memory.ingest(root)
    assert first.added == first.chunks > 60
    memory.indexes.embed()
    top, end, gone = edit_and_delete(files, root)
    before = {doc: note_chunks(memory, doc) for doc in (top, end, gone)}
    untouched = {i for i, _, _ in chunk_rows(memory)} - set().union(*before.values())

    again = memory.ingest(root)
    embedded = memory.indexes.embed()

    after = {doc: note_chunks(memory, doc) for doc in (top, end, gone)}
    assert after[gone] == set()
    added = (after[top] - before[top]) | (after[end] - before[end])
    removed = set().union(*(before[d] - after[d] for d in before))
    # Written: the new chunks, and those of the edited notes whose line moved (same id).
    assert 0 < len(added) <= again.added <= len(after[top] | after[end])
    assert [s.removed for s in again.sources] == [len(removed)]
    # Every chunk of every other note kept its id; the top edit's later chunks moved down
    # in place, not out.
    assert untouched <= {i for i, _, _ in chunk_rows(memory)}
    # Only text that did not exist before is embedded: the new paragraph and the new last
    # line (a chunk rewritten because its line moved keeps its vector).
    assert embedded.embedded + embedded.cached == 2 < again.added
    fresh = stratamem.open(tmp_path / "fresh.db", embedder="hashing")
    fresh.ingest(root)
    assert chunk_rows(memory) == chunk_rows(fresh)
    memory.close()
    fresh.close()


def test_a_vault_shrinking_and_growing_places_chunks_like_a_fresh_ingest(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    files = write_vault(root, notes=55, seed=3)
    memory = stratamem.open(tmp_path / "a.db", embedder="hashing")
    memory.ingest(root)
    for file in files[::7]:
        file.unlink()
    (root / "area-0" / "aaa-first.md").write_text("# First\n\nA note that sorts first.\n")
    memory.ingest(root)
    fresh = stratamem.open(tmp_path / "fresh.db", embedder="hashing")
    fresh.ingest(root)
    assert chunk_rows(memory) == chunk_rows(fresh)
    memory.close()
    fresh.close()


@pytest.mark.skipif(not TIL.is_dir(), reason="../shared/data/notes/til is absent")
def test_real_notes_edited_reembed_only_their_new_text(tmp_path: Path) -> None:
    root = tmp_path / "til"
    notes = sorted(TIL.rglob("*.md"))[:120]
    for note in notes:
        target = root / note.relative_to(TIL)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(note, target)
    files = sorted(root.rglob("*.md"))
    memory = stratamem.open(tmp_path / "a.db", embedder="hashing")
    first = memory.ingest(root)
    memory.indexes.embed()
    edited = files[len(files) // 2]
    edited.write_text("Said first.\n\n" + edited.read_text(encoding="utf-8"), encoding="utf-8")
    files[-1].unlink()

    again = memory.ingest(root)
    embedded = memory.indexes.embed()

    assert again.added < first.added / 10
    assert embedded.embedded <= again.added
    assert embedded.embedded <= 2  # the paragraph a new line joins, at most one more
    memory.close()


def test_a_document_repeated_in_its_file_is_stored_once_and_stays(tmp_path: Path) -> None:
    """Two lines of one id and text identify one chunk: the first copy stands, and ingesting
    the file again (with the copy's facets changed) changes nothing else."""
    line = {"id": "d1", "kind": "document", "source": "docs", "text": "The atlas runbook."}
    other = {"id": "d2", "kind": "document", "source": "docs", "text": "The ledger audit."}
    file = tmp_path / "docs.jsonl"
    file.write_text("\n".join(json.dumps(x) for x in (line, other, line)) + "\n")
    memory = stratamem.open(tmp_path / "a.db", embedder=None)
    [first] = memory.ingest(file).sources
    assert (first.records, first.chunks, first.added) == (3, 2, 2)
    retimed = dict(line, timestamp="2024-05-01T00:00:00Z")
    file.write_text("\n".join(json.dumps(x) for x in (line, other, retimed)) + "\n")
    [again] = memory.ingest(file).sources
    assert (again.chunks, again.added, again.removed) == (2, 0, 0)
    memory.close()
