from __future__ import annotations

import dataclasses
import json
import os
import shutil
import zipfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratamem.errors import SourceFormatError
from stratamem.ingest import registry
from stratamem.ingest.connectors import slack
from stratamem.ingest.model import ReadContext, Record, SourceStream
from stratamem.types import SourceKind

ALICE, BOB, CAROL, DAN, ERIN = (
    "U01AAAA0001",
    "U01BBBB0002",
    "U01CCCC0003",
    "U01DDDD0004",
    "U01EEEE0005",
)
USERS = {ALICE: "Alice Chen", BOB: "Bob Martins", CAROL: "Carol Diaz", DAN: "Dan Okafor"}
CHANNELS = {"C01ENG00002": "eng"}


@pytest.fixture
def export(fixtures_dir: Path) -> Path:
    return fixtures_dir / "slack"


@pytest.fixture
def export_copy(export: Path, tmp_path: Path) -> Path:
    """A writable copy of the fixture export, for the broken-input tests."""
    return Path(shutil.copytree(export, tmp_path / "export"))


def read(path: Path, ctx: ReadContext | None = None) -> dict[str, list[Record]]:
    ctx = ctx if ctx is not None else ReadContext()
    return {s.title: list(s.records) for s in slack.SlackConnector().read(path, ctx)}


def streams(path: Path, ctx: ReadContext | None = None) -> list[SourceStream]:
    return list(slack.SlackConnector().read(path, ctx if ctx is not None else ReadContext()))


def by_id(records: list[Record]) -> dict[str | None, Record]:
    return {r.id: r for r in records}


def zip_folder(folder: Path, target: Path, *, root: str = "") -> Path:
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for file in sorted(folder.rglob("*")):
            if file.is_file():
                zf.write(file, root + file.relative_to(folder).as_posix())
    return target


def test_registers_itself() -> None:
    spec = registry.spec("slack")
    assert spec.detect is slack.detect
    assert isinstance(spec.factory(), slack.SlackConnector)


def test_one_stream_per_channel(export: Path) -> None:
    found = streams(export)
    assert [s.title for s in found] == ["#general", "#eng"]
    eng = found[1]
    assert eng.kind is SourceKind.CHAT
    assert eng.platform == "slack"
    assert eng.scope == "slack:#eng"
    assert eng.location == str(export / "eng")
    assert eng.meta["channel_id"] == "C01ENG00002"
    assert eng.meta["topic"] == "Phoenix 2.0"
    assert eng.meta["purpose"] == "Engineering discussion"
    assert eng.meta["members"] == [ALICE, BOB, CAROL, DAN]
    assert eng.meta["member_names"] == ["Alice Chen", "Bob Martins", "Carol Diaz", "Dan Okafor"]


def test_scope_override_becomes_a_prefix(export: Path) -> None:
    found = streams(export, ReadContext(scope="team"))
    assert [s.scope for s in found] == ["team/#general", "team/#eng"]


def test_message_counts_per_channel(export: Path) -> None:
    ctx = ReadContext()
    records = read(export, ctx)
    # general: join, empty message and tombstone left out; eng: topic change and tombstone.
    assert {title: len(rs) for title, rs in records.items()} == {"#general": 6, "#eng": 7}
    assert ctx.problems == []


def test_author_names_and_ids(export: Path) -> None:
    records = read(export)
    authors = [(r.author, r.author_id) for r in records["#eng"]]
    assert authors == [
        ("Bob Martins", BOB),
        ("Carol Diaz", CAROL),  # profile.real_name is empty: top-level real_name
        ("Bob Martins", BOB),
        ("Alice Chen", ALICE),
        ("Dan Okafor", DAN),
        ("erin.k", ERIN),  # a deactivated user with no real name: the user name
        ("Carol Diaz", CAROL),
    ]


def test_mentions_resolved_to_names(export: Path) -> None:
    general = by_id(read(export)["#general"])
    welcome = general["1710147605.000200"]
    assert welcome.text == (
        "Welcome @Dan Okafor! Say hi in #eng too & read "
        "the onboarding doc (https://wiki.example.com/onboarding?a=1&b=2)."
    )
    assert welcome.mentions == ("Dan Okafor",)
    assert welcome.links == ("https://wiki.example.com/onboarding?a=1&b=2",)
    piped = general["1710147900.123456"]
    assert piped.text == "@Alice Chen status page is https://status.example.com <3 & 2 > 1"
    assert piped.mentions == ("Alice Chen",)
    assert general["1710147750.000000"].text == "Thanks! @here happy to be here :wave:"
    proposal = read(export)["#eng"][0]
    assert proposal.mentions == ("Alice Chen", "Carol Diaz")


@pytest.mark.parametrize(
    ("markup", "text", "mentions", "links"),
    [
        ("hi <@U01AAAA0001>", "hi @Alice Chen", ("Alice Chen",), ()),
        ("hi <@U01AAAA0001|alice>", "hi @Alice Chen", ("Alice Chen",), ()),
        ("hi <@U09UNKNOWN|zed>", "hi @zed", ("zed",), ()),
        ("hi <@U09UNKNOWN>", "hi @U09UNKNOWN", ("U09UNKNOWN",), ()),
        (
            "<@U01BBBB0002> and <@U01BBBB0002>",
            "@Bob Martins and @Bob Martins",
            ("Bob Martins",),
            (),
        ),
        ("see <#C01ENG00002|eng>", "see #eng", (), ()),
        ("see <#C01ENG00002>", "see #eng", (), ()),
        ("see <#C09OTHER>", "see #C09OTHER", (), ()),
        (
            "<https://x.io/a?b=1&amp;c=2|the doc>",
            "the doc (https://x.io/a?b=1&c=2)",
            (),
            ("https://x.io/a?b=1&c=2",),
        ),
        ("<https://x.io>", "https://x.io", (), ("https://x.io",)),
        ("<https://x.io|https://x.io>", "https://x.io", (), ("https://x.io",)),
        ("<mailto:bob@x.io|bob@x.io>", "bob@x.io", (), ("mailto:bob@x.io",)),
        ("<!here> <!channel> <!everyone>", "@here @channel @everyone", (), ()),
        ("<!here|@here> now", "@here now", (), ()),
        ("<!subteam^S0123|@oncall> ping", "@oncall ping", (), ()),
        ("<!date^1710148502^{date_short}|Mar 11> ok", "Mar 11 ok", (), ()),
        ("a &lt;b&gt; &amp;amp; c", "a <b> &amp; c", (), ()),
        ("no markup at all", "no markup at all", (), ()),
    ],
)
def test_render(markup: str, text: str, mentions: tuple[str, ...], links: tuple[str, ...]) -> None:
    assert slack.render(markup, USERS, CHANNELS) == (text, mentions, links)


@given(st.text(alphabet=st.characters(exclude_characters="<>&")))
def test_render_leaves_plain_text_alone(text: str) -> None:
    assert slack.render(text, USERS, CHANNELS) == (text, (), ())


def test_threads_group_parent_and_replies(export: Path) -> None:
    eng = by_id(read(export)["#eng"])
    parent = eng["1710151200.000000"]
    assert parent.thread == "1710151200.000000"
    assert parent.reply_to is None
    carol, alice = eng["1710152400.000000"], eng["1710235800.000000"]
    # A reply written the next day lands in the next day's file but in the same thread.
    assert carol.thread == alice.thread == parent.thread
    assert carol.reply_to == alice.reply_to == "1710151200.000000"
    # The parent was deleted (tombstone): the reply is kept and still names its thread.
    orphan = eng["1710236700.000000"]
    assert orphan.thread == orphan.reply_to == "1710236400.000000"
    assert "1710236400.000000" not in eng
    assert eng["1710237600.000000"].thread is None


def test_timestamps_are_exact_utc(export: Path) -> None:
    general = read(export)["#general"]
    assert [r.time for r in general[:3]] == [
        datetime(2024, 3, 11, 9, 0, 5, 200, tzinfo=UTC),
        datetime(2024, 3, 11, 9, 2, 30, tzinfo=UTC),
        datetime(2024, 3, 11, 9, 5, 0, 123456, tzinfo=UTC),
    ]
    assert all(r.time is not None and r.time.utcoffset() is not None for r in general)


def test_messages_in_ts_order_and_days_in_date_order(export: Path) -> None:
    for records in read(export).values():
        stamps = [r.time for r in records]
        assert stamps == sorted(stamps)  # type: ignore[type-var]
    # 2024-03-12.json of #eng is written out of order on purpose.
    assert [r.id for r in read(export)["#eng"]][2:4] == ["1710234600.000000", "1710235800.000000"]


def test_ref_points_at_day_file_and_ts(export: Path) -> None:
    proposal = read(export)["#eng"][0]
    assert proposal.ref == f"{export / 'eng' / '2024-03-11.json'}#1710151200.000000"
    assert proposal.id == "1710151200.000000"


def test_system_subtypes_are_skipped(export: Path) -> None:
    texts = [r.text for rs in read(export).values() for r in rs]
    assert not any("has joined the channel" in t for t in texts)
    assert not any("set the channel topic" in t for t in texts)


def test_bot_messages_are_kept(export: Path) -> None:
    general = by_id(read(export)["#general"])
    deploy = general["1710252131.000001"]
    assert deploy.text == "Deployed phoenix-api v1.9.4 to production"
    assert deploy.author == "deploybot"
    assert deploy.author_id == "B01DEPLOY01"
    assert deploy.meta["bot"] is True
    assert deploy.meta["subtype"] == "bot_message"
    # No text of its own: what its attachment says.
    health = general["1710252180.000005"]
    assert health.text == "phoenix-api\nHealth check passed for phoenix-api v1.9.4"
    assert general["1710147605.000200"].meta["bot"] is False


def test_edited_messages_keep_the_current_text(export: Path) -> None:
    eng = by_id(read(export)["#eng"])
    assert eng["1710235800.000000"].meta["edited"] is True
    assert eng["1710151200.000000"].meta["edited"] is False
    # A message_changed wrapper: the inner, current message.
    changed = eng["1710234600.000000"]
    assert changed.text == "Migration plan v2 is up"
    assert changed.author == "Bob Martins"
    assert changed.meta["edited"] is True


def test_deleted_and_empty_messages_are_skipped(export: Path) -> None:
    texts = [r.text for rs in read(export).values() for r in rs]
    assert "This message was deleted." not in texts
    assert all(t.strip() for t in texts)


def test_file_only_message_reads_as_its_files(export: Path) -> None:
    upload = by_id(read(export)["#general"])["1710255600.000000"]
    assert upload.text == "Shared file: Queue stall postmortem (postmortem.pdf)"
    assert upload.meta["files"] == ["postmortem.pdf"]


def test_reactions_in_meta(export: Path) -> None:
    proposal = read(export)["#eng"][0]
    assert proposal.meta["reactions"] == [
        {"name": "+1", "count": 1, "users": [CAROL]},
        {"name": "eyes", "count": 1, "users": [ALICE]},
    ]
    assert proposal.meta["channel"] == "eng"


def test_broken_day_file_is_reported_and_the_rest_read(export_copy: Path) -> None:
    broken = export_copy / "general" / "2024-03-12.json"
    broken.write_text('[\n    {\n        "type": "message",\n        "text": "cut off\n', "utf-8")
    ctx = ReadContext()
    records = read(export_copy, ctx)
    assert {title: len(rs) for title, rs in records.items()} == {"#general": 3, "#eng": 7}
    [problem] = ctx.problems
    assert problem.path == str(broken)
    assert problem.where == "line 4 col 25"
    assert "invalid JSON" in problem.reason


def test_message_that_is_not_an_object_is_reported(export_copy: Path) -> None:
    day = export_copy / "general" / "2024-03-11.json"
    messages = json.loads(day.read_text("utf-8"))
    day.write_text(json.dumps([messages[0], "oops", *messages[1:]]), "utf-8")
    ctx = ReadContext()
    assert len(read(export_copy, ctx)["#general"]) == 6
    assert [(p.path, p.where) for p in ctx.problems] == [(str(day), "message 2")]


def test_day_file_that_is_not_an_array_is_reported(export_copy: Path) -> None:
    day = export_copy / "eng" / "2024-03-11.json"
    day.write_text('{"ok": true}', "utf-8")
    ctx = ReadContext()
    assert len(read(export_copy, ctx)["#eng"]) == 5
    assert [(p.path, p.where) for p in ctx.problems] == [(str(day), "file")]


def test_missing_users_json_keeps_raw_ids(export_copy: Path) -> None:
    (export_copy / "users.json").unlink()
    ctx = ReadContext()
    records = read(export_copy, ctx)
    assert [(p.path, p.where, p.reason) for p in ctx.problems] == [
        (str(export_copy), "users.json", "missing; user ids are not resolved to names")
    ]
    proposal = records["#eng"][0]
    assert proposal.text == (
        "Proposal: drop Redis for a SQLite-backed job queue. Thoughts @U01AAAA0001 @U01CCCC0003?"
    )
    assert proposal.mentions == (ALICE, CAROL)
    # The message's own user_profile still names its author.
    assert proposal.author == "Bob Martins"
    assert {title: len(rs) for title, rs in records.items()} == {"#general": 6, "#eng": 7}


def test_missing_channels_json_infers_channels_from_folders(export_copy: Path) -> None:
    (export_copy / "channels.json").unlink()
    ctx = ReadContext()
    found = streams(export_copy, ctx)
    assert [s.title for s in found] == ["#eng", "#general"]
    assert found[0].scope == "slack:#eng"
    assert found[0].meta["channel_id"] is None
    assert len(list(found[0].records)) == 7
    assert ctx.problems == []


def test_records_are_read_lazily(export_copy: Path) -> None:
    ctx = ReadContext()
    found = streams(export_copy, ctx)
    # Broken after the streams were listed, before their records were asked for.
    (export_copy / "eng" / "2024-03-12.json").write_text("[", "utf-8")
    assert ctx.problems == []
    assert len(list(found[1].records)) == 2
    assert [p.where for p in ctx.problems] == ["line 1 col 2"]


def relative(records: dict[str, list[Record]], base: Path) -> dict[str, list[Record]]:
    return {
        title: [dataclasses.replace(r, ref=r.ref.removeprefix(str(base))) for r in rs]
        for title, rs in records.items()
    }


@pytest.mark.parametrize("root", ["", "Phoenix Labs Slack export Mar 1 2024 - Mar 31 2024/"])
def test_zip_and_folder_give_identical_records(export: Path, tmp_path: Path, root: str) -> None:
    archive = zip_folder(export, tmp_path / "export.zip", root=root)
    ctx = ReadContext()
    from_zip = read(archive, ctx)
    assert ctx.problems == []
    assert relative(from_zip, archive / root) == relative(read(export), export)
    proposal = from_zip["#eng"][0]
    assert proposal.ref == f"{archive}/{root}eng/2024-03-11.json#1710151200.000000"


def test_broken_day_file_in_a_zip_names_the_member(export_copy: Path, tmp_path: Path) -> None:
    (export_copy / "eng" / "2024-03-11.json").write_text("[{]", "utf-8")
    archive = zip_folder(export_copy, tmp_path / "export.zip")
    ctx = ReadContext()
    assert len(read(archive, ctx)["#eng"]) == 5
    assert [(p.path, p.where) for p in ctx.problems] == [
        (f"{archive}/eng/2024-03-11.json", "line 1 col 3")
    ]


def test_bad_zip_raises(tmp_path: Path) -> None:
    bad = tmp_path / "export.zip"
    bad.write_bytes(b"PK\x03\x04 this is not really a zip")
    with pytest.raises(SourceFormatError, match="not a valid zip file") as info:
        streams(bad)
    assert info.value.path == str(bad)


def test_detect(export: Path, tmp_path: Path) -> None:
    assert slack.detect(export) == 95
    assert slack.detect(zip_folder(export, tmp_path / "a.zip")) == 95
    assert slack.detect(zip_folder(export, tmp_path / "b.zip", root="export/")) == 95
    assert slack.detect(export / "users.json") == 0
    assert slack.detect(export / "eng") == 0
    notes = tmp_path / "notes"
    (notes / "2024").mkdir(parents=True)
    (notes / "2024" / "2024-03-11.json").write_text("[]", "utf-8")
    assert slack.detect(notes) == 0  # day files alone are not an export
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"not a zip")
    assert slack.detect(bad) == 0
    assert slack.detect(tmp_path / "missing") == 0


def test_demo_workspace_export_reads_cleanly() -> None:
    export = Path(__file__).resolve().parents[2] / "examples" / "workspace" / "slack-export"
    ctx = ReadContext()
    records = read(export, ctx)
    assert ctx.problems == []
    assert slack.detect(export) == 95
    assert {"#eng", "#general"} <= set(records)
    assert 40 <= sum(len(rs) for rs in records.values()) <= 70


def test_zip_members_are_normalised_and_unsafe_ones_reported(export: Path, tmp_path: Path) -> None:
    archive = zip_folder(export, tmp_path / "export.zip", root="export/")
    day = b'[{"type": "message", "ts": "1710400000.000100", "text": "extra day"}]'
    with zipfile.ZipFile(archive, "a") as zf:
        zf.writestr("export/eng/./2024-03-13.json", day)
        zf.writestr("export/../2024-01-01.json", day)
        zf.writestr("export\\eng\\2024-01-02.json", day)
    ctx = ReadContext()
    records = read(archive, ctx)
    assert records["#eng"][-1].text == "extra day"
    assert records["#eng"][-1].ref.startswith(f"{archive}/export/eng/2024-03-13.json#")
    assert [(p.path, p.where) for p in ctx.problems] == [
        (str(archive), "member 'export/../2024-01-01.json'"),
        (str(archive), "member 'export\\\\eng\\\\2024-01-02.json'"),
    ]
    assert set(records) == {"#general", "#eng"}


def test_a_conversation_listed_twice_is_read_once(export_copy: Path) -> None:
    channels = export_copy / "channels.json"
    listed = json.loads(channels.read_text("utf-8"))
    channels.write_text(json.dumps([*listed, listed[0]]), "utf-8")
    ctx = ReadContext()
    assert [s.title for s in streams(export_copy, ctx)] == ["#general", "#eng"]
    assert [(p.where, p.reason) for p in ctx.problems] == [
        (f"entry {len(listed) + 1}", "'general' is listed already")
    ]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_detect_never_opens_a_fifo(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "export.zip")
    assert slack.detect(tmp_path / "export.zip") == 0
