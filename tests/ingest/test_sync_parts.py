"""``--sync`` takes what one ingest read of a source, in all its files, as the whole truth:
a channel exported in parts, a folder of files of one source, a channel exported twice."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import stratamem
from conftest import SHARED_DATA
from stratamem.cli import main
from stratamem.ingest.model import ReadContext, Record, SourceStream
from stratamem.ingest.pipeline import IngestReport
from stratamem.store.sources import source_id_for
from stratamem.timeparse import to_ms
from stratamem.types import SourceKind

GUILD = SHARED_DATA / "chat" / "discord-exporter-frontend"
GENERAL = "Example guild - Text Channels - general [1012224565567721552]"

needs_guild = pytest.mark.skipif(
    not (GUILD / "example_guild").is_dir(),
    reason="../shared/data/chat/discord-exporter-frontend is absent",
)


# The general channel's 35 messages hold 31 records: the rest are member joins.
HELD = 31


def partition(target: Path, size: int, *, overlap: int = 0) -> int:
    """The example guild as DiscordChatExporter's ``--partition`` writes it: the general
    channel in files of ``size`` messages, ``… [id].json``, ``… [id] [part 2].json``, ….
    Returns how many messages the channel holds."""
    shutil.copytree(GUILD / "example_guild", target)
    whole = target / f"{GENERAL}.json"
    export = json.loads(whole.read_text(encoding="utf-8"))
    messages = export["messages"]
    whole.unlink()
    for part, start in enumerate(range(0, len(messages), size), start=1):
        piece = dict(export, messages=messages[max(0, start - overlap) : start + size])
        name = f"{GENERAL}.json" if part == 1 else f"{GENERAL} [part {part}].json"
        (target / name).write_text(json.dumps(piece), encoding="utf-8")
    return len(messages)


def general(memory: stratamem.Memory) -> int:
    """How many messages the store holds of the general channel."""
    scope = next(s.scope for s in memory.store.sources() if s.scope.endswith("/#general"))
    return memory.store.record_count(source_id_for(scope))


def scoped(report: IngestReport, suffix: str) -> list[str]:
    return [s.scope for s in report.sources if s.scope.endswith(suffix)]


@needs_guild
@pytest.mark.parametrize("sync", [False, True])
def test_a_channel_in_parts_is_read_whole(sync: bool, tmp_path: Path) -> None:
    partition(tmp_path / "parts", 12)
    fresh = stratamem.open(tmp_path / "whole.db", embedder=None)
    fresh.ingest(GUILD / "example_guild")
    memory = stratamem.open(tmp_path / "a.db", embedder=None)
    report = memory.ingest(tmp_path / "parts", sync=sync)
    assert general(memory) == general(fresh) == HELD
    # One source in the report, its records counted once.
    assert len(scoped(report, "/#general")) == 1
    row = next(s for s in report.sources if s.scope.endswith("/#general"))
    assert (row.records, row.new, row.duplicates) == (HELD, HELD, 0)
    assert _chunks(memory) == _chunks(fresh)


@needs_guild
def test_sync_over_parts_keeps_what_the_store_already_held(tmp_path: Path) -> None:
    memory = stratamem.open(tmp_path / "a.db", embedder=None)
    memory.ingest(GUILD / "example_guild")
    before = _chunks(memory)
    partition(tmp_path / "parts", 10, overlap=2)

    report = memory.ingest(tmp_path / "parts", sync=True)

    assert general(memory) == HELD
    row = next(s for s in report.sources if s.scope.endswith("/#general"))
    assert (row.new, row.updated, row.records_removed, row.added, row.removed) == (0, 0, 0, 0, 0)
    assert row.duplicates == 6  # three parts after the first repeat two messages each
    assert _chunks(memory) == before


@needs_guild
def test_sync_still_removes_what_no_part_holds(tmp_path: Path) -> None:
    memory = stratamem.open(tmp_path / "a.db", embedder=None)
    memory.ingest(GUILD / "example_guild")
    partition(tmp_path / "parts", 10)
    last = tmp_path / "parts" / f"{GENERAL} [part 4].json"
    export = json.loads(last.read_text(encoding="utf-8"))
    said = [i for i, m in enumerate(export["messages"]) if m["type"] == "Default"]
    for i in said[-2:][::-1]:  # two messages deleted since
        del export["messages"][i]
    last.write_text(json.dumps(export), encoding="utf-8")

    report = memory.ingest(tmp_path / "parts", sync=True)

    assert general(memory) == HELD - 2
    row = next(s for s in report.sources if s.scope.endswith("/#general"))
    assert row.records_removed == 2


@needs_guild
def test_a_channel_exported_twice_keeps_what_either_export_holds(tmp_path: Path) -> None:
    """The example guild holds "chill talk" twice, once without a deleted message: read
    together with --sync, the message one of them still holds is kept."""
    memory = stratamem.open(tmp_path / "a.db", embedder=None)
    report = memory.ingest(GUILD / "example_guild", sync=True)
    row = next(s for s in report.sources if s.scope.endswith("/#chill talk"))
    assert len(scoped(report, "/#chill talk")) == 1
    assert (row.records, row.new, row.duplicates) == (11, 6, 5)
    assert memory.store.record_count(source_id_for(row.scope)) == 6


def _jsonl(path: Path, lines: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def test_sync_over_a_folder_of_files_of_one_source(tmp_path: Path) -> None:
    lines = [
        {
            "id": f"m{i}",
            "source": "ops",
            "kind": "chat",
            "author": "ana",
            "text": f"step {i}",
            "timestamp": f"2024-03-01T10:{i:02d}:00Z",
        }
        for i in range(40)
    ]
    folder = tmp_path / "logs"
    folder.mkdir()
    _jsonl(folder / "a.jsonl", lines[:25])
    _jsonl(folder / "b.jsonl", lines[20:])
    memory = stratamem.open(tmp_path / "a.db", embedder=None)
    memory.ingest(folder)
    report = memory.ingest(folder, sync=True)
    assert [s.scope for s in report.sources] == ["jsonl:ops"]
    row = report.sources[0]
    assert (row.records, row.duplicates, row.records_removed) == (45, 5, 0)
    assert memory.store.record_count(source_id_for("jsonl:ops")) == 40


@needs_guild
def test_the_cli_lists_a_channel_in_parts_once(tmp_path: Path) -> None:
    from click.testing import CliRunner

    partition(tmp_path / "parts", 12, overlap=1)
    runner = CliRunner()
    db = str(tmp_path / "a.db")
    result = runner.invoke(
        main, ["--db", db, "ingest", "--json", "--sync", str(tmp_path / "parts")]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    rows = [s for s in report["sources"] if s["scope"].endswith("/#general")]
    assert len(rows) == 1
    assert rows[0]["record_changes"]["duplicates"] == 2


def _chunks(memory: stratamem.Memory) -> list[tuple[str, str, int | None]]:
    """What the store's chunks hold (their ids also cover the file each was read from)."""
    return sorted(
        (c.source_id, c.content, to_ms(c.time_start))
        for source in memory.store.sources()
        for c in memory.store.iter_chunks(source.id)
    )


class _Parts:
    """Document streams in the order given: a source's parts may lie between another's."""

    name = "parts"

    def __init__(self, parts: list[tuple[str, list[str]]]) -> None:
        self.parts = parts

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]:
        for n, (scope, texts) in enumerate(self.parts):
            yield SourceStream(
                scope=scope,
                kind=SourceKind.DOCUMENT,
                platform="test",
                location=f"{path}/part-{n}",
                records=iter(
                    [Record(text=t, ref=f"{scope}/{t}.md", id=f"{scope}/{t}") for t in texts]
                ),
                title=scope,
            )


def test_a_document_source_in_parts_between_another_keeps_every_part(tmp_path: Path) -> None:
    parts = [("a", ["one", "two"]), ("b", ["three"]), ("a", ["four"])]
    memory = stratamem.open(tmp_path / "a.db", embedder=None)
    report = memory.ingest("x", connector=_Parts(parts), parallel=False, trees=False)
    assert [(s.scope, s.records, s.chunks, s.added) for s in report.sources] == [
        ("a", 3, 3, 3),
        ("b", 1, 1, 1),
    ]
    held = {s.scope: s.chunk_count for s in memory.sources.list()}
    assert held == {"a": 3, "b": 1}
    ids = {c.id for s in memory.store.sources() for c in memory.store.iter_chunks(s.id)}
    again = memory.ingest("x", connector=_Parts(parts), parallel=False, trees=False)
    # Read again, the store ends as it was (the first part, not knowing a later one comes,
    # removes its chunk and the later part writes it again under the same id).
    assert [(s.scope, s.chunks) for s in again.sources] == [("a", 3), ("b", 1)]
    assert {c.id for s in memory.store.sources() for c in memory.store.iter_chunks(s.id)} == ids
