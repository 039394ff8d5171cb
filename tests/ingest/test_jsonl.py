from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import stratamem
from stratamem.errors import IngestError
from stratamem.ingest import registry
from stratamem.ingest.connectors import jsonl
from stratamem.ingest.model import ReadContext, Record, SourceStream
from stratamem.types import SourceKind


@pytest.fixture
def export(fixtures_dir: Path) -> Path:
    return fixtures_dir / "jsonl" / "export.jsonl"


def streams_of(path: Path, ctx: ReadContext | None = None) -> list[SourceStream]:
    return list(jsonl.JsonlConnector().read(path, ctx or ReadContext()))


def read(path: Path, ctx: ReadContext | None = None) -> dict[str, list[Record]]:
    return {s.scope: list(s.records) for s in streams_of(path, ctx)}


def write_lines(path: Path, *rows: dict[str, Any] | str) -> Path:
    path.write_text(
        "".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows),
        encoding="utf-8",
    )
    return path


def test_registers_itself() -> None:
    spec = registry.spec("jsonl")
    assert spec.detect is jsonl.detect
    assert isinstance(spec.factory(), jsonl.JsonlConnector)


def test_detect(export: Path, fixtures_dir: Path, tmp_path: Path) -> None:
    assert jsonl.detect(export) == 90
    assert jsonl.detect(fixtures_dir / "jsonl" / "single.ndjson") == 90
    assert jsonl.detect(fixtures_dir / "jsonl") == 50
    assert jsonl.detect(fixtures_dir / "markdown" / "vault") == 0
    (tmp_path / "data.json").write_text("[]", encoding="utf-8")
    assert jsonl.detect(tmp_path / "data.json") == 0
    assert jsonl.detect(tmp_path) == 0
    assert jsonl.detect(tmp_path / "missing.jsonl") == 0


def test_one_stream_per_source_in_first_seen_order(export: Path) -> None:
    streams = streams_of(export)
    assert [(s.scope, s.kind, s.title) for s in streams] == [
        ("jsonl:slack:#eng", SourceKind.CHAT, "slack:#eng"),
        ("jsonl:notes", SourceKind.DOCUMENT, "notes"),
    ]
    assert all(s.platform == "jsonl" and s.location == str(export) for s in streams)
    assert all(isinstance(s.records, Iterator) for s in streams)


def test_scope_override_is_a_prefix_for_several_sources(export: Path, fixtures_dir: Path) -> None:
    ctx = ReadContext(scope="team")
    assert [s.scope for s in streams_of(export, ctx)] == ["team/slack:#eng", "team/notes"]
    single = fixtures_dir / "jsonl" / "single.ndjson"
    assert [s.scope for s in streams_of(single, ReadContext(scope="team"))] == ["team"]


def test_records_and_fields(export: Path) -> None:
    records = read(export)
    eng, notes = records["jsonl:slack:#eng"], records["jsonl:notes"]
    assert [r.ref for r in eng] == ["export.jsonl:1", "export.jsonl:2", "export.jsonl:8"]
    assert [r.ref for r in notes] == ["export.jsonl:4", "export.jsonl:9", "export.jsonl:10"]

    proposal, approval, postmortem = eng
    assert proposal.text == "Proposal: drop Redis and keep the job queue in SQLite."
    assert (proposal.id, proposal.author, proposal.thread) == ("m1", "Bob Martins", "t1")
    assert proposal.time == datetime(2024, 3, 12, 10, 15, tzinfo=UTC)
    assert approval.time == datetime(2024, 3, 12, 10, 30, tzinfo=UTC)  # epoch seconds
    assert approval.reply_to == "m1"
    assert postmortem.text == "Postmortem is up."  # from "body"
    assert postmortem.time == datetime(2024, 3, 20, 9, tzinfo=UTC)  # epoch milliseconds
    assert postmortem.mentions == ("Alice Chen", "Bob Martins")
    assert postmortem.meta == {"fields": {"channel_id": "C01ENG00002"}}

    incident, moved, numeric = notes
    assert incident.text == "Queue stalled after deploy."  # from "content"
    assert incident.title == "Incident 2024-03-18"
    assert incident.tags == ("incident", "queue")
    assert incident.time == datetime(2024, 3, 18, tzinfo=UTC)  # a date is midnight UTC
    assert (moved.time, moved.author_id) == (None, "U01AAAA0001")
    assert numeric.id == "42"
    assert numeric.time == datetime(2024, 3, 21, 7, tzinfo=UTC)  # 09:00+02:00


def test_bad_lines_are_reported_once_with_their_line(export: Path) -> None:
    ctx = ReadContext()
    read(export, ctx)  # two sources: problems come once, from the first pass
    assert [(p.path, p.where, p.reason) for p in ctx.problems] == [
        (str(export), "line 5", "invalid JSON at column 41: Unterminated string starting at"),
        (str(export), "line 6", "not a JSON object but an array"),
        (str(export), "line 7", "no text (text, content or body)"),
        (str(export), "line 9", "unknown kind 'memo'; read as record"),
        (str(export), "line 9", "unrecognised timestamp 'last tuesday'; kept without a time"),
    ]


def test_problems_come_from_the_first_pass_before_any_record(export: Path) -> None:
    ctx = ReadContext()
    streams = jsonl.JsonlConnector().read(export, ctx)
    first = next(streams)
    assert len(ctx.problems) == 5
    assert next(iter(first.records)).ref == "export.jsonl:1"


def test_each_stream_reads_its_own_lines_lazily(tmp_path: Path) -> None:
    file = write_lines(
        tmp_path / "log.jsonl",
        {"source": "a", "text": "a1"},
        {"source": "b", "text": "b1"},
        "",
        {"source": "a", "text": "a2"},
        {"source": "a", "text": "a3"},
    )
    stream_a, stream_b = streams_of(file)
    assert [(r.ref, r.text) for r in stream_b.records] == [("log.jsonl:2", "b1")]
    assert [(r.ref, r.text) for r in stream_a.records] == [
        ("log.jsonl:1", "a1"),
        ("log.jsonl:4", "a2"),
        ("log.jsonl:5", "a3"),
    ]


def test_a_file_changed_between_the_passes_fails_its_streams(tmp_path: Path) -> None:
    file = write_lines(tmp_path / "log.jsonl", {"source": "a", "text": "a1"})
    [stream] = streams_of(file)
    with file.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"source": "a", "text": "a2"}) + "\n")
    with pytest.raises(IngestError, match="changed while it was being read"):
        list(stream.records)


def test_single_source_defaults_to_the_stem(fixtures_dir: Path) -> None:
    [stream] = streams_of(fixtures_dir / "jsonl" / "single.ndjson")
    assert (stream.scope, stream.kind, stream.title) == (
        "jsonl:single",
        SourceKind.RECORD,
        "single",
    )
    first, second = stream.records
    assert (first.id, first.author, first.ref) == ("conv-1|D1:1", "Priya", "single.ndjson:1")
    assert first.time == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)  # naive ISO is UTC
    assert second.time == datetime(2023, 5, 8, 13, 56, 30, tzinfo=UTC)


def test_folder_reads_every_file_with_its_own_scope(fixtures_dir: Path, tmp_path: Path) -> None:
    folder = Path(shutil.copytree(fixtures_dir / "jsonl", tmp_path / "dump"))
    (folder / ".hidden.jsonl").write_text('{"text": "no"}\n', encoding="utf-8")
    streams = streams_of(folder)
    assert [s.scope for s in streams] == ["jsonl:slack:#eng", "jsonl:notes", "jsonl:single"]
    assert next(iter(streams[0].records)).ref == "dump/export.jsonl:1"
    overridden = streams_of(folder, ReadContext(scope="team"))
    assert [s.scope for s in overridden] == ["team/slack:#eng", "team/notes", "team/single"]


def test_blank_lines_bom_and_bad_bytes(tmp_path: Path) -> None:
    file = tmp_path / "odd.jsonl"
    file.write_bytes(b'\xef\xbb\xbf{"text": "first"}\n\n   \n{"text": "caf\xe9"}\n')
    ctx = ReadContext()
    [stream] = streams_of(file, ctx)
    assert [(r.ref, r.text) for r in stream.records] == [
        ("odd.jsonl:1", "first"),
        ("odd.jsonl:4", "caf\ufffd"),
    ]
    assert [(p.where, p.reason) for p in ctx.problems] == [
        ("line 4", "bytes that are not UTF-8 were replaced")
    ]


def test_empty_file_gives_no_stream(tmp_path: Path) -> None:
    file = write_lines(tmp_path / "empty.jsonl", "", "not json")
    ctx = ReadContext()
    assert streams_of(file, ctx) == []
    assert [p.where for p in ctx.problems] == ["line 2"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2024-03-12T10:15:00Z", datetime(2024, 3, 12, 10, 15, tzinfo=UTC)),
        ("2024-03-12T12:15:00+02:00", datetime(2024, 3, 12, 10, 15, tzinfo=UTC)),
        ("2024-03-12 10:15", datetime(2024, 3, 12, 10, 15, tzinfo=UTC)),
        ("2024-03-12", datetime(2024, 3, 12, tzinfo=UTC)),
        (1710238500, datetime(2024, 3, 12, 10, 15, tzinfo=UTC)),
        (1710238500.5, datetime(2024, 3, 12, 10, 15, 0, 500000, tzinfo=UTC)),
        (1710238500000, datetime(2024, 3, 12, 10, 15, tzinfo=UTC)),
        ("1710238500", datetime(2024, 3, 12, 10, 15, tzinfo=UTC)),
        ("last tuesday", None),
        (True, None),
        ([2024], None),
        (float("nan"), None),
    ],
)
def test_timestamps(value: object, expected: datetime | None) -> None:
    assert jsonl._as_time(value) == expected


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        ({"text": 5}, "no text (text, content or body)"),
        ({"content": ""}, "no text (text, content or body)"),
        ("42", "not a JSON object but a number"),
        ('"text"', "not a JSON object but a string"),
        ("null", "not a JSON object but null"),
    ],
)
def test_unreadable_lines(tmp_path: Path, row: dict[str, Any] | str, problem: str) -> None:
    file = write_lines(tmp_path / "x.jsonl", {"text": "ok"}, row)
    ctx = ReadContext()
    assert sum(len(rs) for rs in read(file, ctx).values()) == 1
    assert [(p.where, p.reason) for p in ctx.problems] == [("line 2", problem)]


def test_tags_string_and_kind_case(tmp_path: Path) -> None:
    file = write_lines(tmp_path / "x.jsonl", {"text": "t", "tags": "a, b,a", "kind": "EMAIL"})
    [stream] = streams_of(file)
    assert stream.kind is SourceKind.EMAIL
    assert next(iter(stream.records)).tags == ("a", "b")


def test_a_bom_at_the_start_of_a_joined_file_is_not_an_error(tmp_path: Path) -> None:
    file = tmp_path / "joined.jsonl"
    file.write_bytes(b'\xef\xbb\xbf{"text": "one"}\n\xef\xbb\xbf{"text": "two"}\n')
    ctx = ReadContext()
    [stream] = streams_of(file, ctx)
    assert [r.text for r in stream.records] == ["one", "two"]
    assert ctx.problems == []


def test_problem_messages_quote_odd_values_briefly(tmp_path: Path) -> None:
    file = write_lines(
        tmp_path / "x.jsonl",
        {"text": "t", "timestamp": "y" * 10_000},
        {"text": "t", "kind": {"nested": ["deep"]}},
    )
    ctx = ReadContext()
    read(file, ctx)
    assert [(p.where, len(p.reason) < 150) for p in ctx.problems] == [
        ("line 1", True),
        ("line 2", True),
    ]
    assert ctx.problems[1].reason == "unknown kind <an object>; read as record"


def scopes_of(path: Path, ctx: ReadContext | None = None) -> dict[str, list[str]]:
    """Each stream's scope and the texts of its lines."""
    return {scope: [r.text for r in records] for scope, records in read(path, ctx).items()}


def test_a_line_names_its_source_whatever_the_other_lines_name(tmp_path: Path) -> None:
    alone = write_lines(tmp_path / "log.jsonl", {"source": "a", "text": "a1"})
    assert scopes_of(alone) == {"jsonl:a": ["a1"]}
    both = write_lines(
        tmp_path / "log.jsonl", {"source": "a", "text": "a1"}, {"source": "b", "text": "b1"}
    )
    assert scopes_of(both) == {"jsonl:a": ["a1"], "jsonl:b": ["b1"]}


def test_a_line_without_a_source_is_the_files_whatever_the_other_lines_name(
    tmp_path: Path,
) -> None:
    unnamed = write_lines(tmp_path / "log.jsonl", {"text": "x1"})
    assert scopes_of(unnamed) == {"jsonl:log": ["x1"]}
    mixed = write_lines(
        tmp_path / "log.jsonl",
        {"text": "x1"},
        {"source": "a", "text": "a1"},
        {"source": "  ", "text": "x2"},  # a blank name is no name
        {"source": ["a"], "text": "x3"},  # nor is one that is not text
    )
    assert scopes_of(mixed) == {"jsonl:log": ["x1", "x2", "x3"], "jsonl:a": ["a1"]}
    streams = streams_of(mixed)
    assert [(s.title, s.meta) for s in streams] == [
        ("log", {"source": "log"}),
        ("a", {"source": "a"}),
    ]


def test_a_source_named_as_the_file_is_the_files_own(tmp_path: Path) -> None:
    file = write_lines(
        tmp_path / "log.jsonl", {"text": "x1"}, {"source": "log", "text": "x2"}, {"text": "x3"}
    )
    assert scopes_of(file) == {"jsonl:log": ["x1", "x2", "x3"]}
    assert scopes_of(file, ReadContext(scope="team")) == {"team": ["x1", "x2", "x3"]}


def test_a_given_scope_prefixes_named_sources_and_is_the_files_own(tmp_path: Path) -> None:
    folder = tmp_path / "dump"
    folder.mkdir()
    file = write_lines(folder / "log.jsonl", {"source": "a", "text": "a1"}, {"text": "x1"})
    team = ReadContext(scope="team")
    assert scopes_of(file, team) == {"team/a": ["a1"], "team": ["x1"]}
    assert scopes_of(folder, ReadContext(scope="team")) == {"team/a": ["a1"], "team/log": ["x1"]}
    assert scopes_of(folder) == {"jsonl:a": ["a1"], "jsonl:log": ["x1"]}


def test_a_line_of_another_source_added_leaves_the_records_where_they_were(
    tmp_path: Path,
) -> None:
    file = write_lines(
        tmp_path / "log.jsonl",
        {"id": "1", "source": "eng", "text": "deploy at noon"},
        {"id": "2", "source": "eng", "text": "deploy done"},
    )
    with stratamem.open(tmp_path / "store.db") as memory:
        first = memory.ingest(file, parallel=False)
        assert [(s.scope, s.new) for s in first.sources] == [("jsonl:eng", 2)]
        with file.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({"id": "3", "source": "ops", "text": "pager quiet"}) + "\n")
        second = memory.ingest(file, parallel=False)
        assert [(s.scope, s.new, s.updated) for s in second.sources] == [
            ("jsonl:eng", 0, 0),
            ("jsonl:ops", 1, 0),
        ]
        assert sorted(s.scope for s in memory.store.sources()) == ["jsonl:eng", "jsonl:ops"]
