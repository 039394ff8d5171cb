"""Bad input in the Slack, Discord and JSONL connectors costs only the item it is in.

Each test reproduces one way an export used to abort the whole ingest (or run out of bounds)
and checks that the item is skipped with its file and place, and that the rest of the source
and the other sources are read.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import stratamem
from stratamem.cli import main
from stratamem.errors import SourceFormatError
from stratamem.ingest.connectors import discord, jsonl, slack
from stratamem.ingest.model import Problem, ReadContext
from stratamem.ingest.pipeline import IngestReport

DEEP = "[" * 100_000 + "]" * 100_000
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")


def ingest(memory: stratamem.Memory, path: Path, kind: str, **options: Any) -> IngestReport:
    report = memory.ingest(path, format=kind, trees=False, parallel=False, **options)
    assert all(p.where for p in report.problems), report.problems
    return report


def places(report: IngestReport) -> list[tuple[str, str]]:
    return [(p.path, p.where) for p in report.problems]


def write_jsonl(path: Path, *rows: Any) -> Path:
    lines = [row if isinstance(row, str) else json.dumps(row) for row in rows]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def slack_export(fixtures_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(fixtures_dir / "slack", tmp_path / "slack"))


@pytest.fixture
def discord_folder(fixtures_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(fixtures_dir / "discord", tmp_path / "discord"))


def zip_export(folder: Path, target: Path, extra: dict[str, bytes] | None = None) -> Path:
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for file in sorted(folder.rglob("*")):
            if file.is_file():
                zf.write(file, "export/" + file.relative_to(folder).as_posix())
        for name, data in (extra or {}).items():
            zf.writestr(name, data)
    return target


# -- nesting bombs ---------------------------------------------------------------------------


def test_jsonl_line_nested_100k_deep_is_one_skipped_line(
    tmp_memory: stratamem.Memory, tmp_path: Path
) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", {"text": "before"}, DEEP, {"text": "after"})
    write_jsonl(folder / "b.jsonl", {"text": "the next file"})
    report = ingest(tmp_memory, folder, "jsonl")
    assert places(report) == [(str(folder / "a.jsonl"), "line 2")]
    assert report.problems[0].reason == "nested too deeply to read"
    assert [(s.scope, s.records, s.error) for s in report.sources] == [
        ("jsonl:a", 2, None),
        ("jsonl:b", 1, None),
    ]


def test_slack_day_file_nested_100k_deep_is_one_skipped_file(
    tmp_memory: stratamem.Memory, slack_export: Path
) -> None:
    bomb = slack_export / "eng" / "2024-03-11.json"
    bomb.write_text(DEEP, encoding="utf-8")
    report = ingest(tmp_memory, slack_export, "slack")
    assert [(p.path, p.where, p.reason) for p in report.problems] == [
        (str(bomb), "file", "nested too deeply to read")
    ]
    assert {s.scope: s.records for s in report.sources} == {"slack:#general": 6, "slack:#eng": 5}


def test_slack_message_nested_deeply_skips_only_that_message(
    tmp_memory: stratamem.Memory, slack_export: Path
) -> None:
    day = slack_export / "general" / "2024-03-11.json"
    messages = json.loads(day.read_text("utf-8"))
    # Nested as deep as the parser allows: reading the message must not take the day with it.
    nested: Any = "deep"
    for _ in range(900):
        nested = {"k": nested}
    day.write_text(json.dumps([{**messages[0], "blocks": nested}, *messages[1:]]), "utf-8")
    report = ingest(tmp_memory, slack_export, "slack")
    assert {s.scope: s.records for s in report.sources}["slack:#general"] >= 5


# -- dates off the calendar ------------------------------------------------------------------


@pytest.mark.parametrize(
    "stamp", ["0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00", "0001-01-01T00:30+01:00"]
)
def test_jsonl_dates_at_the_calendar_edge_keep_the_line_without_a_time(
    tmp_memory: stratamem.Memory, tmp_path: Path, stamp: str
) -> None:
    file = write_jsonl(
        tmp_path / "edge.jsonl", {"text": "edge", "timestamp": stamp}, {"text": "next"}
    )
    report = ingest(tmp_memory, file, "jsonl")
    assert places(report) == [(str(file), "line 1")]
    assert "unrecognised timestamp" in report.problems[0].reason
    assert report.records == 2


def test_discord_dates_at_the_calendar_edge_skip_the_message(
    tmp_memory: stratamem.Memory, discord_folder: Path
) -> None:
    file = next(discord_folder.glob("*general*.json"))
    doc = json.loads(file.read_text("utf-8"))
    doc["messages"][0]["timestamp"] = "0001-01-01T00:00:00+05:00"
    file.write_text(json.dumps(doc), "utf-8")
    report = ingest(tmp_memory, discord_folder, "discord")
    assert places(report) == [(str(file), "message 1")]
    assert len(report.sources) == 2
    assert not report.failed


# -- wrong types -----------------------------------------------------------------------------


@pytest.mark.parametrize("mentions", [7, "U1", {"id": "1"}, [1, None, "x"]])
def test_discord_mentions_of_the_wrong_type(
    tmp_memory: stratamem.Memory, discord_folder: Path, mentions: object
) -> None:
    file = next(discord_folder.glob("*general*.json"))
    doc = json.loads(file.read_text("utf-8"))
    expected = ingest(tmp_memory, discord_folder, "discord").records
    for message in doc["messages"]:
        message["mentions"] = mentions
    file.write_text(json.dumps(doc), "utf-8")
    report = ingest(tmp_memory, discord_folder, "discord")
    assert report.problems == []
    assert report.records == expected


@pytest.mark.parametrize("field", ["type", "author", "content", "reference", "reactions", "id"])
@pytest.mark.parametrize("value", [7, [1, 2], {"a": {}}, None, True, 1e308])
def test_discord_every_field_of_the_wrong_type_costs_at_most_its_message(
    discord_folder: Path, field: str, value: object
) -> None:
    file = next(discord_folder.glob("*general*.json"))
    doc = json.loads(file.read_text("utf-8"))
    count = len(doc["messages"])
    doc["messages"][0][field] = value
    file.write_text(json.dumps(doc), "utf-8")
    ctx = ReadContext()
    streams = list(discord.DiscordConnector().read(discord_folder, ctx))
    read = {s.title: len(list(s.records)) for s in streams}
    assert len(read) == 2
    assert read["#general"] >= count - 6  # six notices in the fixture are never records
    assert all(p.where == "message 1" for p in ctx.problems)


@pytest.mark.parametrize("subtype", [["bot_message"], {"a": 1}, 7, None])
def test_slack_subtype_of_the_wrong_type_reads_the_message(
    tmp_memory: stratamem.Memory, slack_export: Path, subtype: object
) -> None:
    day = slack_export / "general" / "2024-03-11.json"
    messages = json.loads(day.read_text("utf-8"))
    messages[1]["subtype"] = subtype
    day.write_text(json.dumps(messages), "utf-8")
    report = ingest(tmp_memory, slack_export, "slack")
    assert report.problems == []
    assert {s.scope: s.records for s in report.sources}["slack:#general"] == 6


@pytest.mark.parametrize(
    "field", ["ts", "text", "user", "thread_ts", "files", "reactions", "attachments", "edited"]
)
@pytest.mark.parametrize("value", [7, [1, [2]], {"a": {}}, None, False, -1e308])
def test_slack_every_field_of_the_wrong_type_costs_at_most_its_message(
    slack_export: Path, field: str, value: object
) -> None:
    day = slack_export / "eng" / "2024-03-11.json"
    messages = json.loads(day.read_text("utf-8"))
    for message in messages:
        message[field] = value
    day.write_text(json.dumps(messages), "utf-8")
    ctx = ReadContext()
    read = {s.title: len(list(s.records)) for s in slack.SlackConnector().read(slack_export, ctx)}
    assert read["#general"] == 6
    assert all(p.where.startswith("message ") for p in ctx.problems)


@pytest.mark.parametrize(
    "row",
    [
        {"text": "t", "kind": ["chat"]},
        {"text": "t", "tags": {"a": 1}},
        {"text": "t", "timestamp": 10**300},
        {"text": "t", "timestamp": -(10**300)},
        {"text": "t", "timestamp": [2024]},
        {"text": "t", "source": {"a": 1}},
        {"text": "t", "id": [1]},
        {"text": "t", "author": 1e308},
    ],
)
def test_jsonl_fields_of_the_wrong_type_keep_the_line(
    tmp_memory: stratamem.Memory, tmp_path: Path, row: dict[str, Any]
) -> None:
    file = write_jsonl(tmp_path / "odd.jsonl", row, {"text": "next"})
    report = ingest(tmp_memory, file, "jsonl")
    assert report.records == 2
    assert all(p.where == "line 1" for p in report.problems)


def test_jsonl_number_too_long_to_read_is_one_skipped_line(
    tmp_memory: stratamem.Memory, tmp_path: Path
) -> None:
    file = write_jsonl(tmp_path / "n.jsonl", '{"text": "t", "n": ' + "9" * 5000 + "}", "{}")
    file.write_text(file.read_text() + '{"text": "next"}\n', encoding="utf-8")
    report = ingest(tmp_memory, file, "jsonl")
    assert [p.where for p in report.problems] == ["line 1", "line 2"]
    assert "ValueError" in report.problems[0].reason
    assert report.records == 1


# -- corrupt zip members, unsafe paths, size bombs ---------------------------------------------


def corrupt_member(archive: Path, name: str) -> None:
    """Overwrite the middle of ``name``'s compressed bytes in place."""
    with zipfile.ZipFile(archive) as zf:
        info = zf.getinfo(name)
    with archive.open("r+b") as handle:
        handle.seek(info.header_offset + 26)
        name_len = int.from_bytes(handle.read(2), "little")
        extra_len = int.from_bytes(handle.read(2), "little")
        start = info.header_offset + 30 + name_len + extra_len
        handle.seek(start + info.compress_size // 3)
        handle.write(b"\xff" * max(8, info.compress_size // 3))


def test_slack_zip_with_a_corrupt_member_skips_that_day(
    tmp_memory: stratamem.Memory, slack_export: Path, tmp_path: Path
) -> None:
    archive = zip_export(slack_export, tmp_path / "export.zip")
    corrupt_member(archive, "export/eng/2024-03-11.json")
    report = ingest(tmp_memory, archive, "slack")
    assert places(report) == [(f"{archive}/export/eng/2024-03-11.json", "file")]
    assert "cannot be read" in report.problems[0].reason
    assert {s.scope: s.records for s in report.sources} == {"slack:#general": 6, "slack:#eng": 5}


@pytest.mark.parametrize(
    "member",
    [
        "export/../2024-01-01.json",
        "export/eng/../../x/2024-01-01.json",
        "/export/eng/2024-01-02.json",
        "export\\eng\\2024-01-03.json",
        "C:/export/eng/2024-01-04.json",
    ],
)
def test_slack_zip_paths_that_climb_out_are_skipped(
    tmp_memory: stratamem.Memory, slack_export: Path, tmp_path: Path, member: str
) -> None:
    message = [{"type": "message", "ts": "1704067200.000100", "user": "U1", "text": "escaped"}]
    archive = zip_export(
        slack_export, tmp_path / "export.zip", {member: json.dumps(message).encode()}
    )
    report = ingest(tmp_memory, archive, "slack")
    assert [(p.path, p.where) for p in report.problems] == [(str(archive), f"member {member!r}")]
    assert "outside the export" in report.problems[0].reason
    assert sorted(s.scope for s in report.sources) == ["slack:#eng", "slack:#general"]
    assert tmp_memory.search("escaped", mode="keyword").total == 0


def test_slack_zip_bomb_member_is_skipped_before_it_is_inflated(
    tmp_memory: stratamem.Memory, slack_export: Path, tmp_path: Path
) -> None:
    archive = zip_export(slack_export, tmp_path / "export.zip")
    with (
        zipfile.ZipFile(archive, "a", zipfile.ZIP_DEFLATED) as zf,
        zf.open("export/eng/2024-03-13.json", "w", force_zip64=True) as member,
    ):
        member.write(b"[")
        block = b" " * (1 << 20)
        for _ in range(4):
            member.write(block)
        member.write(b"]")
    assert archive.stat().st_size < 200_000
    report = ingest(tmp_memory, archive, "slack", max_item_bytes=1 << 20)
    assert [(p.path, p.where) for p in report.problems] == [
        (f"{archive}/export/eng/2024-03-13.json", "file")
    ]
    assert "4,194,306 bytes is over the 1,048,576-byte limit" in report.problems[0].reason
    assert "--max-item-size" in report.problems[0].reason
    assert {s.scope: s.records for s in report.sources} == {"slack:#general": 6, "slack:#eng": 7}


def test_slack_day_file_over_the_limit_in_a_folder(
    tmp_memory: stratamem.Memory, slack_export: Path
) -> None:
    big = slack_export / "eng" / "2024-03-13.json"
    big.write_text("[" + " " * 50_000 + "]", encoding="utf-8")
    report = ingest(tmp_memory, slack_export, "slack", max_item_bytes=40_000)
    assert places(report) == [(str(big), "file")]
    assert "50,002 bytes is over the 40,000-byte limit" in report.problems[0].reason


def test_discord_file_over_the_limit_is_skipped_and_the_next_read(
    tmp_memory: stratamem.Memory, discord_folder: Path
) -> None:
    sizes = sorted((f.stat().st_size, f) for f in discord_folder.glob("*.json"))
    (small, _), (large, large_file) = sizes
    report = ingest(tmp_memory, discord_folder, "discord", max_item_bytes=(small + large) // 2)
    assert places(report) == [(str(large_file), "file")]
    assert len(report.sources) == 1


def test_jsonl_line_over_the_limit_is_skipped_without_being_held(
    tmp_memory: stratamem.Memory, tmp_path: Path
) -> None:
    file = write_jsonl(
        tmp_path / "big.jsonl",
        {"text": "small"},
        {"text": "x" * 10_000},
        {"text": "small again"},
    )
    report = ingest(tmp_memory, file, "jsonl", max_item_bytes=1000)
    assert places(report) == [(str(file), "line 2")]
    assert "over the 1,000-byte limit" in report.problems[0].reason
    assert report.records == 2


# -- lone surrogates -------------------------------------------------------------------------


def test_lone_surrogates_are_stored_as_replacement_characters(
    tmp_memory: stratamem.Memory, tmp_path: Path
) -> None:
    file = tmp_path / "s.jsonl"
    file.write_text(
        '{"text": "half \\ud800 a pair", "author": "\\udfff", "source": "src\\ud801"}\n'
        '{"text": "a whole pair \\ud83d\\ude00", "tags": ["\\udc00"]}\n',
        encoding="utf-8",
    )
    report = ingest(tmp_memory, file, "jsonl")
    assert report.records == 2
    assert not report.failed
    assert {s.scope for s in tmp_memory.sources.list()} == {"jsonl:src\ufffd", "jsonl:s"}
    hits = tmp_memory.search("half", mode="keyword").hits
    assert "half \ufffd a pair" in hits[0].content


def test_lone_surrogates_in_slack_and_discord(
    tmp_memory: stratamem.Memory, slack_export: Path, discord_folder: Path
) -> None:
    day = slack_export / "general" / "2024-03-11.json"
    messages = json.loads(day.read_text("utf-8"))
    messages[0]["text"] = "broken \udbff text"
    day.write_text(json.dumps(messages), "utf-8")  # json.dumps escapes it as \udbff
    channels = slack_export / "channels.json"
    listed = json.loads(channels.read_text("utf-8"))
    listed[0]["name"] += "\ud800"
    channels.write_text(json.dumps(listed), "utf-8")
    report = ingest(tmp_memory, slack_export, "slack")
    assert not report.failed
    assert report.records == 13

    file = next(discord_folder.glob("*general*.json"))
    doc = json.loads(file.read_text("utf-8"))
    doc["messages"][1]["content"] = "\ud800 lonely"
    doc["channel"]["name"] = "gen\udc00eral"
    file.write_text(json.dumps(doc), "utf-8")
    report = ingest(tmp_memory, discord_folder, "discord")
    assert not report.failed
    assert len(report.sources) == 2


# -- regular files only ----------------------------------------------------------------------


@needs_fifo
def test_a_fifo_beside_slack_day_files_is_reported_not_opened(
    tmp_memory: stratamem.Memory, slack_export: Path
) -> None:
    fifo = slack_export / "eng" / "2024-03-13.json"
    os.mkfifo(fifo)
    report = ingest(tmp_memory, slack_export, "slack")
    assert places(report) == [(str(fifo), "file")]
    assert "a FIFO" in report.problems[0].reason
    assert {s.scope: s.records for s in report.sources} == {"slack:#general": 6, "slack:#eng": 7}


@needs_fifo
def test_fifos_in_jsonl_and_discord_folders_are_never_opened(
    tmp_memory: stratamem.Memory, tmp_path: Path, discord_folder: Path
) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", {"text": "read"})
    os.mkfifo(folder / "b.jsonl")
    report = ingest(tmp_memory, folder, "jsonl")
    assert places(report) == [(str(folder / "b.jsonl"), "file")]
    assert report.records == 1

    os.mkfifo(discord_folder / "fifo.json")
    report = ingest(tmp_memory, discord_folder, "discord")
    assert len(report.sources) == 2
    assert not report.failed


@needs_fifo
@pytest.mark.parametrize("kind", ["jsonl", "discord", "slack"])
def test_a_fifo_given_as_the_path_is_refused(
    tmp_memory: stratamem.Memory, tmp_path: Path, kind: str
) -> None:
    fifo = tmp_path / "export.zip" if kind == "slack" else tmp_path / f"x.{kind}"
    os.mkfifo(fifo)
    report = ingest(tmp_memory, fifo, kind)
    [failed] = report.sources
    assert failed.error is not None
    assert "not a regular file (a FIFO)" in failed.error


# -- linear time for many sources ------------------------------------------------------------


def test_jsonl_with_2000_sources_parses_each_line_at_most_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = 4000
    rows = [{"source": f"s{i % 2000}", "text": f"line {i}"} for i in range(lines)]
    file = write_jsonl(tmp_path / "many.jsonl", *rows)
    parsed: list[int] = []
    opened: list[Path] = []
    read_line, open_regular = jsonl._read_line, jsonl.open_regular

    def counting_read_line(raw: bytes, number: int, name: str, stem: str) -> Any:
        parsed.append(number)
        return read_line(raw, number, name, stem)

    def counting_open(path: Path) -> Any:
        opened.append(path)
        return open_regular(path)

    monkeypatch.setattr(jsonl, "_read_line", counting_read_line)
    monkeypatch.setattr(jsonl, "open_regular", counting_open)
    ctx = ReadContext()
    read = {s.scope: [r.text for r in s.records] for s in jsonl.JsonlConnector().read(file, ctx)}
    assert len(read) == 2000
    assert read["jsonl:s7"] == ["line 7", "line 2007"]
    assert len(parsed) == 2 * lines  # once to index, once for its own stream
    assert len(opened) <= 2000 + 2  # one pass, then each stream opens the file once


def test_jsonl_index_keeps_runs_not_records(tmp_path: Path) -> None:
    rows = [{"source": "a", "text": str(i)} for i in range(500)]
    rows += [{"source": "b", "text": str(i)} for i in range(500)]
    file = write_jsonl(tmp_path / "runs.jsonl", *rows)
    with file.open("rb") as handle:
        index = jsonl._index(handle, file, "runs.jsonl", "runs", ReadContext())
    assert {name: list(entry.runs) for name, entry in index.items()} == {
        "a": [0, 1, 500],
        "b": [sum(len(json.dumps(r)) + 1 for r in rows[:500]), 501, 1000],
    }


# -- the reader goes on, and the command line never shows a traceback ---------------------


def test_problems_always_name_a_place(slack_export: Path) -> None:
    (slack_export / "users.json").write_text("{}", "utf-8")
    (slack_export / "channels.json").write_text("[1, {}]", "utf-8")
    (slack_export / "eng" / "2024-03-11.json").write_bytes(b'[{"text": "\xff"}]')
    ctx = ReadContext()
    for stream in slack.SlackConnector().read(slack_export, ctx):
        list(stream.records)
    assert len(ctx.problems) >= 4
    assert all(isinstance(p, Problem) and p.where for p in ctx.problems)


def test_a_broken_zip_is_refused_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "export.zip"
    bad.write_bytes(b"PK\x05\x06" + b"\xff" * 18)
    with pytest.raises(SourceFormatError, match="not a valid zip file"):
        list(slack.SlackConnector().read(bad, ReadContext()))


def test_cli_reports_bad_input_without_a_traceback(store_location: str, tmp_path: Path) -> None:
    file = write_jsonl(
        tmp_path / "x.jsonl",
        DEEP,
        {"text": "fine", "timestamp": "0001-01-01T00:00+05:00"},
        '{"text": "\\ud800"}',
    )
    args = ["--db", store_location, "ingest", str(file), "--quiet", "--json"]
    result = CliRunner().invoke(main, [*args, "--max-item-size", "1M"])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    data = json.loads(result.output)
    assert data["records"] == 2
    assert [p.split(": ", 1)[0] for p in data["problems"]] == [f"{file}:line 1", f"{file}:line 2"]


@pytest.mark.parametrize(
    ("size", "expected"), [("64M", 64 << 20), ("1G", 1 << 30), ("500k", 500 << 10), ("4096", 4096)]
)
def test_max_item_size_option(
    tmp_path: Path, size: str, expected: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int | None] = []
    original = stratamem.Memory.ingest

    def spy(self: stratamem.Memory, *args: Any, **kwargs: Any) -> IngestReport:
        seen.append(kwargs.get("max_item_bytes"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(stratamem.Memory, "ingest", spy)
    file = write_jsonl(tmp_path / "x.jsonl", {"text": "t"})
    args = ["--db", str(tmp_path / "m.db"), "ingest", str(file), "--quiet", "--json"]
    result = CliRunner().invoke(main, [*args, "--max-item-size", size])
    assert result.exit_code == 0, result.output
    assert seen == [expected]


@pytest.mark.parametrize("size", ["lots", "0", "-5M", "1.5X"])
def test_max_item_size_option_refuses_nonsense(tmp_path: Path, size: str) -> None:
    file = write_jsonl(tmp_path / "x.jsonl", {"text": "t"})
    args = ["--db", str(tmp_path / "m.db"), "ingest", str(file), "--max-item-size", size]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert "Traceback" not in result.output
