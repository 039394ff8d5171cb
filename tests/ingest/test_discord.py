from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from stratamem.errors import SourceFormatError
from stratamem.ingest import registry
from stratamem.ingest.connectors import discord
from stratamem.ingest.model import ReadContext, Record, SourceStream
from stratamem.types import SourceKind

ENG_FILE = "Phoenix Labs - Engineering - eng [1215000000000000201].json"
GENERAL_FILE = "Phoenix Labs - Text Channels - general [1215000000000000101].json"
PEOPLE = {"1": "Alice", "2": "Bob Martins"}
CHANNELS = {"10": "general"}


@pytest.fixture
def folder(fixtures_dir: Path) -> Path:
    return fixtures_dir / "discord"


@pytest.fixture
def folder_copy(folder: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(folder, tmp_path / "discord"))


def streams(path: Path, ctx: ReadContext | None = None) -> list[SourceStream]:
    return list(discord.DiscordConnector().read(path, ctx if ctx is not None else ReadContext()))


def read(path: Path, ctx: ReadContext | None = None) -> dict[str, list[Record]]:
    return {s.title: list(s.records) for s in streams(path, ctx)}


def by_id(records: list[Record]) -> dict[str | None, Record]:
    return {r.id: r for r in records}


def edit(path: Path, change: Any) -> None:
    doc = json.loads(path.read_text("utf-8"))
    change(doc)
    path.write_text(json.dumps(doc, indent=2), "utf-8")


def test_registers_itself() -> None:
    spec = registry.spec("discord")
    assert spec.detect is discord.detect
    assert isinstance(spec.factory(), discord.DiscordConnector)


def test_one_stream_per_channel_file(folder: Path) -> None:
    found = streams(folder)
    assert [s.title for s in found] == ["#eng", "#general"]
    eng = found[0]
    assert eng.kind is SourceKind.CHAT
    assert eng.platform == "discord"
    assert eng.scope == "discord:Phoenix Labs/#eng"
    assert eng.location == str(folder / ENG_FILE)
    assert eng.meta == {
        "guild": "Phoenix Labs",
        "guild_id": "1215000000000000000",
        "channel": "eng",
        "channel_id": "1215000000000000201",
        "channel_type": "GuildTextChat",
        "category": "Engineering",
        "topic": "Phoenix 2.0 engineering",
    }


def test_single_file(folder: Path) -> None:
    ctx = ReadContext(scope="team")
    [stream] = streams(folder / GENERAL_FILE, ctx)
    assert stream.scope == "team/#general"
    assert len(list(stream.records)) == 2
    assert ctx.problems == []


def test_message_counts_per_channel(folder: Path) -> None:
    ctx = ReadContext()
    records = read(folder, ctx)
    # eng: join, pin notice, thread notice and an empty message left out.
    assert {title: len(rs) for title, rs in records.items()} == {"#eng": 7, "#general": 2}
    assert ctx.problems == []


def test_authors_are_nicknames(folder: Path) -> None:
    eng = read(folder)["#eng"]
    assert [(r.author, r.author_id) for r in eng[:3]] == [
        ("Bob Martins", "1215000000000001002"),
        ("Carol", "1215000000000001003"),
        ("Alice", "1215000000000001001"),
    ]


def test_author_without_nickname_is_the_user_name(folder_copy: Path) -> None:
    def drop_nickname(doc: dict[str, Any]) -> None:
        doc["messages"][0]["author"]["nickname"] = None

    edit(folder_copy / GENERAL_FILE, drop_nickname)
    assert read(folder_copy)["#general"][0].author == "alice.chen"


def test_mentions_resolved(folder: Path) -> None:
    records = read(folder)
    proposal = records["#eng"][0]
    assert proposal.text == (
        "Proposal: drop Redis for a SQLite-backed job queue. Thoughts @Alice @Carol?"
    )
    assert proposal.mentions == ("Alice", "Carol")
    welcome = records["#general"][0]
    assert welcome.text == "Welcome @Dan O.! Glad to have you here"
    assert welcome.mentions == ("Dan O.",)


def test_channels_emoji_and_times_made_readable(folder: Path) -> None:
    eng = by_id(read(folder)["#eng"])
    assert eng["1216600000000000003"].text == "+1 from ops :sqlite:"
    update = eng["1216600000000000010"]
    assert update.text == (
        "Moving updates to #general; runbook: https://wiki.example.com/runbooks/queue. "
        "Postmortem by 2024-03-19 16:00 UTC"
    )
    assert update.links == ("https://wiki.example.com/runbooks/queue",)


@pytest.mark.parametrize(
    ("content", "text"),
    [
        ("hi <@1>", "hi @Alice"),
        ("hi <@!2>", "hi @Bob Martins"),
        ("hi <@3>", "hi @3"),
        ("in <#10> and <#11>", "in #general and #11"),
        ("<:party:123> <a:spin:456>", ":party: :spin:"),
        ("<t:1710148502> <t:1710148502:R>", "2024-03-11 09:15 UTC 2024-03-11 09:15 UTC"),
        ("<@&99> stays", "<@&99> stays"),
        ("a < b > c", "a < b > c"),
    ],
)
def test_render(content: str, text: str) -> None:
    assert discord.render(content, PEOPLE, CHANNELS) == text


def test_replies_name_what_they_answer_and_stay_in_the_channel_flow(folder: Path) -> None:
    eng = by_id(read(folder)["#eng"])
    root, reply, reply_to_reply = (
        eng["1216600000000000002"],
        eng["1216600000000000003"],
        eng["1216600000000000004"],
    )
    assert root.reply_to is None
    assert reply.reply_to == "1216600000000000002"
    assert reply_to_reply.reply_to == "1216600000000000003"
    # Replying to a message the export does not hold still names it.
    orphan = eng["1216600000000000011"]
    assert orphan.reply_to == "1216500000000000999"
    # Discord shows replies inline: no message is put in a thread of its own.
    assert {record.thread for record in eng.values()} == {None}


def test_timestamps_are_exact_utc(folder: Path) -> None:
    records = read(folder)
    assert records["#eng"][0].time == datetime(2024, 3, 11, 9, 15, 2, 123000, tzinfo=UTC)
    # The general export was written with a +01:00 offset.
    assert [r.time for r in records["#general"]] == [
        datetime(2024, 3, 11, 9, 0, 0, tzinfo=UTC),
        datetime(2024, 3, 11, 9, 5, 30, 750000, tzinfo=UTC),
    ]
    assert records["#general"][0].time is not None
    assert records["#general"][0].time.tzinfo is UTC


def test_system_messages_are_skipped(folder: Path) -> None:
    kinds = {r.meta["type"] for rs in read(folder).values() for r in rs}
    assert kinds == {"Default", "Reply"}
    texts = [r.text for rs in read(folder).values() for r in rs]
    assert "Pinned a message." not in texts
    assert "Queue stall" not in texts


def test_meta_pinned_edited_bot_attachments(folder: Path) -> None:
    eng = by_id(read(folder)["#eng"])
    approved = eng["1216600000000000004"]
    assert approved.meta["pinned"] is True
    assert approved.meta["edited"] is True
    assert approved.meta["bot"] is False
    deploy = eng["1216600000000000006"]
    assert deploy.meta["bot"] is True
    assert deploy.text == "Deploy succeeded\nphoenix-api v1.9.4 to production"
    upload = eng["1216600000000000007"]
    assert upload.text == "Attached: queue-metrics.png"
    assert upload.meta["attachments"] == ["queue-metrics.png"]
    assert eng["1216600000000000002"].meta["reactions"] == [{"name": "thumbsup", "count": 2}]


def test_ref_is_file_and_message_id(folder: Path) -> None:
    proposal = read(folder)["#eng"][0]
    assert proposal.ref == f"{folder / ENG_FILE}#1216600000000000002"
    assert proposal.id == "1216600000000000002"


def test_broken_json_is_reported_and_the_next_file_read(folder_copy: Path) -> None:
    broken = folder_copy / ENG_FILE
    text = broken.read_text("utf-8")
    broken.write_text(text[: text.index('"content": "+1 from ops')], "utf-8")
    ctx = ReadContext()
    records = read(folder_copy, ctx)
    assert {title: len(rs) for title, rs in records.items()} == {"#eng": 0, "#general": 2}
    [problem] = ctx.problems
    assert problem.path == str(broken)
    assert problem.where.startswith("line ")
    assert " col " in problem.where
    assert "invalid JSON" in problem.reason


def test_message_that_is_not_an_object_is_reported(folder_copy: Path) -> None:
    def insert(doc: dict[str, Any]) -> None:
        doc["messages"].insert(1, ["not", "a", "message"])

    edit(folder_copy / GENERAL_FILE, insert)
    ctx = ReadContext()
    assert len(read(folder_copy, ctx)["#general"]) == 2
    assert [(p.path, p.where) for p in ctx.problems] == [
        (str(folder_copy / GENERAL_FILE), "message 2")
    ]


def test_bad_timestamp_is_reported(folder_copy: Path) -> None:
    def spoil(doc: dict[str, Any]) -> None:
        doc["messages"][0]["timestamp"] = "yesterday"

    edit(folder_copy / GENERAL_FILE, spoil)
    ctx = ReadContext()
    assert len(read(folder_copy, ctx)["#general"]) == 1
    assert [p.where for p in ctx.problems] == ["message 1"]


def test_file_that_is_not_an_export_raises(tmp_path: Path) -> None:
    other = tmp_path / "package.json"
    other.write_text('{"name": "phoenix", "version": "2.0.0"}', "utf-8")
    with pytest.raises(SourceFormatError, match="not a DiscordChatExporter export") as info:
        streams(other)
    assert info.value.path == str(other)


def test_folder_with_other_json_reports_it_and_reads_the_rest(folder_copy: Path) -> None:
    (folder_copy / "notes.json").write_text('{"todo": []}', "utf-8")
    ctx = ReadContext()
    assert len(streams(folder_copy, ctx)) == 2
    assert [p.path for p in ctx.problems] == [str(folder_copy / "notes.json")]


def test_folder_without_exports_raises(tmp_path: Path) -> None:
    (tmp_path / "notes.json").write_text("{}", "utf-8")
    with pytest.raises(SourceFormatError, match="no DiscordChatExporter JSON exports"):
        streams(tmp_path)


def test_asset_folders_are_not_searched(folder_copy: Path) -> None:
    assets = folder_copy / f"{ENG_FILE}_Files"
    assets.mkdir()
    (assets / "data-1A2B3.json").write_text("{}", "utf-8")
    ctx = ReadContext()
    assert len(streams(folder_copy, ctx)) == 2
    assert ctx.problems == []


def test_records_are_read_lazily(folder_copy: Path) -> None:
    ctx = ReadContext()
    found = streams(folder_copy, ctx)
    (folder_copy / GENERAL_FILE).write_text('{"guild": {}, "channel": {}, "messages": [', "utf-8")
    assert ctx.problems == []
    assert list(found[1].records) == []
    assert [p.where for p in ctx.problems] == ["line 1 col 43"]


def test_header_beyond_the_first_bytes(folder_copy: Path) -> None:
    def long_topic(doc: dict[str, Any]) -> None:
        doc["channel"]["topic"] = "x" * 40_000

    edit(folder_copy / GENERAL_FILE, long_topic)
    ctx = ReadContext()
    [stream] = streams(folder_copy / GENERAL_FILE, ctx)
    assert stream.title == "#general"
    assert len(list(stream.records)) == 2
    assert ctx.problems == []


def test_detect(folder: Path, fixtures_dir: Path, tmp_path: Path) -> None:
    assert discord.detect(folder / ENG_FILE) == 90
    assert discord.detect(folder) == 85
    assert discord.detect(fixtures_dir / "slack") == 0
    assert discord.detect(fixtures_dir / "slack" / "users.json") == 0
    other = tmp_path / "data.json"
    other.write_text('{"messages": []}', "utf-8")
    assert discord.detect(other) == 0
    assert discord.detect(tmp_path) == 0
    assert discord.detect(tmp_path / "missing.json") == 0


def test_a_nesting_bomb_in_the_header_skips_only_that_file(folder_copy: Path) -> None:
    bomb = folder_copy / "bomb.json"
    bomb.write_text('{"guild": ' + "[" * 5000 + "]" * 5000 + ', "channel": {}}', "utf-8")
    ctx = ReadContext()
    records = read(folder_copy, ctx)
    assert set(records) == {"#general", "#eng"}
    assert [(p.path, p.where) for p in ctx.problems] == [(str(bomb), "file")]
    assert "nested too deeply" in ctx.problems[0].reason


def test_a_file_over_the_size_limit_is_skipped(folder_copy: Path) -> None:
    ctx = ReadContext(max_item_bytes=8_000)
    records = read(folder_copy, ctx)
    assert {title: len(rs) for title, rs in records.items()} == {"#eng": 0, "#general": 2}
    [problem] = ctx.problems
    assert problem.where == "file"
    assert "over the 8,000-byte limit" in problem.reason


STICKER_MESSAGE: dict[str, Any] = {
    # As DiscordChatExporter writes a message that is one sticker and nothing else.
    "id": "1216600000000000104",
    "type": "Default",
    "timestamp": "2024-03-11T10:07:12.204+01:00",
    "timestampEdited": None,
    "callEndedTimestamp": None,
    "isPinned": False,
    "content": "",
    "author": {
        "id": "1215000000000001002",
        "name": "bobm",
        "discriminator": "0000",
        "nickname": "Bob Martins",
        "color": "#3498DB",
        "isBot": False,
        "avatarUrl": "https://cdn.discordapp.com/avatars/1215000000000001002/00001002aa55.png",
    },
    "attachments": [],
    "embeds": [],
    "stickers": [
        {
            "id": "749054660769218631",
            "name": "Wave",
            "format": "Lottie",
            "sourceUrl": "https://cdn.discordapp.com/stickers/749054660769218631.json",
        }
    ],
    "reactions": [],
    "mentions": [],
    "inlineEmojis": [],
}


def test_a_message_of_only_a_sticker_is_kept_with_its_name(folder_copy: Path) -> None:
    def add(doc: dict[str, Any]) -> None:
        doc["messages"].append(STICKER_MESSAGE)
        two = json.loads(json.dumps(STICKER_MESSAGE))
        two["id"] = "1216600000000000105"
        two["stickers"].append({"id": "816087792291282944", "name": "", "format": "Png"})
        doc["messages"].append(two)
        text = json.loads(json.dumps(STICKER_MESSAGE))
        text["id"] = "1216600000000000106"
        text["content"] = "morning"
        doc["messages"].append(text)

    edit(folder_copy / GENERAL_FILE, add)
    ctx = ReadContext()
    general = by_id(read(folder_copy, ctx)["#general"])
    assert ctx.problems == []
    wave = general["1216600000000000104"]
    assert (wave.text, wave.author) == ("[sticker: Wave]", "Bob Martins")
    assert wave.time == datetime(2024, 3, 11, 9, 7, 12, 204000, tzinfo=UTC)
    # A sticker without a name is shown by its id; words, where there are any, are the text.
    assert general["1216600000000000105"].text == "[sticker: Wave] [sticker: 816087792291282944]"
    assert general["1216600000000000106"].text == "morning"


def test_a_sticker_beside_an_attachment_is_shown_after_it(folder_copy: Path) -> None:
    def add(doc: dict[str, Any]) -> None:
        message = json.loads(json.dumps(STICKER_MESSAGE))
        message["attachments"] = [{"id": "1", "url": "x.png", "fileName": "x.png"}]
        doc["messages"].append(message)

    edit(folder_copy / GENERAL_FILE, add)
    sent = by_id(read(folder_copy)["#general"])["1216600000000000104"]
    assert sent.text == "Attached: x.png [sticker: Wave]"
    assert sent.meta["attachments"] == ["x.png"]


def test_real_export_keeps_the_sticker_message(shared_data: Path) -> None:
    guild = shared_data / "chat" / "discord-exporter-frontend" / "example_guild"
    general = guild / "Example guild - Text Channels - general [1012224565567721552].json"
    [stream] = streams(general)
    sticker = by_id(list(stream.records))["1045179638760091709"]
    assert (sticker.text, sticker.author) == ("[sticker: pepecute]", "Adam")
