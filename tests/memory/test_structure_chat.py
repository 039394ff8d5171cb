"""Facts read from a chat channel's structure at ingest: Slack's topic and purpose (the
channel list and the notices of each change) and Discord's topic become facts of the
channel's source, and keep their history across partial and repeated exports."""

from __future__ import annotations

import json
import pickle
import shutil
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import stratamem
from stratamem.ingest.pipeline import ingest_path
from stratamem.memory.facts import fact_text
from stratamem.memory.structure_chat import CLEARED, Setting, channel_change, channel_subject
from stratamem.store.facts import Fact
from stratamem.testing import HashingEmbedder

EXAMPLE = Path(__file__).parents[2] / "examples" / "workspace" / "slack-export"
SHARED = Path(__file__).parents[3] / "shared" / "data" / "chat"
SLACK_SAMPLE = SHARED / "slack-export-viewer" / "testarchive.zip"
DISCORD_SAMPLE = SHARED / "discord-exporter-frontend" / "example_guild"

ENG = "channel:slack:#eng"
ALICE = "U05QK3J8T2W"
# What the example's channels.json says of #eng.
TOPIC_0 = "Phoenix engineering | standup 09:30 UTC"
TOPIC_0_AT = datetime(2024, 2, 1, 10, 6, 40, tzinfo=UTC)
PURPOSE_0 = "Engineering discussion for Phoenix"
PURPOSE_0_AT = datetime(2024, 2, 1, 10, 5, tzinfo=UTC)
CREATED = datetime(2024, 2, 1, 10, 5, tzinfo=UTC)
# Changes a later export records.
T_A = datetime(2024, 3, 12, 10, 0, 0, 100_000, tzinfo=UTC)
T_B = datetime(2024, 3, 14, 15, 30, 0, 200_000, tzinfo=UTC)
T_C = datetime(2024, 3, 14, 16, 0, 0, 300_000, tzinfo=UTC)
TOPIC_A = "Phoenix engineering | standup 10:00 UTC"
TOPIC_B_RAW = "Phoenix 2.0 | <@U05QK4M1B7R> on call | <https://wiki.example.com/phoenix|runbook>"


def ts(when: datetime) -> str:
    return f"{int(when.timestamp())}.{when.microsecond:06d}"


def notice(subtype: str, field: str, value: str, when: datetime) -> dict[str, Any]:
    verb = f"set the channel {field}: {value}" if value else f"cleared the channel {field}"
    return {
        "type": "message",
        "subtype": subtype,
        "user": ALICE,
        "text": f"<@{ALICE}> {verb}",
        field: value,
        "ts": ts(when),
    }


def copy_export(root: Path) -> Path:
    shutil.copytree(EXAMPLE, root)
    return root


def later_export(root: Path) -> Path:
    """A later, partial export of the example: #eng alone, from 12 March, whose history
    records the topic changed twice and the purpose cleared, and whose channel list says so."""
    copy_export(root)
    for folder in ("general", "incidents"):
        shutil.rmtree(root / folder)
    for day in sorted((root / "eng").iterdir()):
        if day.name < "2024-03-12.json":
            day.unlink()
    add_messages(root / "eng" / "2024-03-12.json", notice("channel_topic", "topic", TOPIC_A, T_A))
    add_messages(
        root / "eng" / "2024-03-14.json",
        notice("channel_topic", "topic", TOPIC_B_RAW, T_B),
        notice("channel_purpose", "purpose", "", T_C),
    )
    channels = json.loads((root / "channels.json").read_text(encoding="utf-8"))
    (eng,) = [c for c in channels if c["name"] == "eng"]
    eng["topic"] = {"value": TOPIC_B_RAW, "creator": ALICE, "last_set": int(T_B.timestamp())}
    eng["purpose"] = {"value": "", "creator": ALICE, "last_set": int(T_C.timestamp())}
    (root / "channels.json").write_text(json.dumps(channels, indent=2), encoding="utf-8")
    return root


def add_messages(day: Path, *messages: dict[str, Any]) -> None:
    found = json.loads(day.read_text(encoding="utf-8"))
    day.write_text(json.dumps([*found, *messages], indent=2), encoding="utf-8")


def every_row(memory: stratamem.Memory) -> list[Fact]:
    return sorted(memory.store.facts(believed_only=False, limit=100_000), key=lambda f: f.id)


def believed(memory: stratamem.Memory, subject: str, predicate: str) -> list[tuple[Any, ...]]:
    return [
        (f.object, f.valid_from, f.valid_to)
        for f in memory.facts.history(subject, predicate)
        if f.believed
    ]


def ms(when: datetime) -> datetime:
    return when.replace(microsecond=when.microsecond // 1000 * 1000)


@pytest.fixture
def memory(store_location: str) -> Iterator[stratamem.Memory]:
    with stratamem.open(store_location, embedder=None) as opened:
        yield opened


def ingest(memory: stratamem.Memory, path: Path, **options: Any) -> stratamem.IngestReport:
    options.setdefault("parallel", False)
    return memory.ingest(path, format="slack", trees=False, **options)


# -- the timeline of one property --------------------------------------------------------------

NOW1 = datetime(2024, 6, 1, tzinfo=UTC)
NOW2 = datetime(2024, 6, 2, tzinfo=UTC)
D1, D2, D3 = (datetime(2024, 3, d, tzinfo=UTC) for d in (1, 2, 3))


def spans_of(rows: list[Fact]) -> list[tuple[str, Any, Any]]:
    return sorted(
        ((r.object, r.valid_from, r.valid_to) for r in rows if r.believed),
        key=lambda s: (s[1] is not None, s[1]),
    )


def test_changes_make_a_timeline_and_a_cleared_value_ends_the_one_before() -> None:
    said = [Setting("topic", "a", D1), Setting("topic", CLEARED, D2), Setting("topic", "b", D3)]
    change = channel_change([], ENG, "topic", said, NOW1, source="s")
    assert change.expire == []
    assert spans_of(change.record) == [("a", D1, D2), ("b", D3, None)]
    assert {(r.origin, r.single, r.evidence, r.recorded_at) for r in change.record} == {
        ("structure", True, (), NOW1)
    }
    # The same changes again, in any order, change nothing; so does any part of them.
    for again in (said, said[::-1], said[1:], said[:1], []):
        assert channel_change(change.record, ENG, "topic", again, NOW2, source="s").empty


def test_a_later_change_closes_the_open_value_and_an_earlier_one_fills_the_past() -> None:
    first = channel_change([], ENG, "topic", [Setting("topic", "b", D2)], NOW1, source="s")
    later = channel_change(
        first.record, ENG, "topic", [Setting("topic", "c", D3)], NOW2, source="s"
    )
    assert later.expire == [first.record[0].id]
    assert spans_of(later.record) == [("b", D2, D3), ("c", D3, None)]
    earlier = channel_change(
        first.record, ENG, "topic", [Setting("topic", "a", D1)], NOW2, source="s"
    )
    assert earlier.expire == []
    assert spans_of(earlier.record) == [("a", D1, D2)]


def test_what_the_channel_says_now_counts_from_when_it_was_set() -> None:
    # A notice within the second of the channel list's time is the same change.
    said = [
        Setting("topic", "a", D1 + timedelta(milliseconds=300)),
        Setting("topic", "a", D1, True),
    ]
    change = channel_change([], ENG, "topic", said, NOW1, source="s")
    assert spans_of(change.record) == [("a", D1 + timedelta(milliseconds=300), None)]
    # Without a time, a value counts only for a timeline that holds nothing else.
    untimed = Setting("topic", "z", None, current=True)
    alone = channel_change([], ENG, "topic", [untimed], NOW1, source="s")
    assert spans_of(alone.record) == [("z", None, None)]
    assert channel_change(change.record, ENG, "topic", [untimed], NOW2, source="s").empty
    # An empty value without a time says nothing; with one, it clears.
    assert channel_change(
        [], ENG, "topic", [Setting("topic", "", None, True)], NOW1, source="s"
    ).empty
    cleared = channel_change(
        change.record, ENG, "topic", [Setting("topic", "", D3, True)], NOW2, source="s"
    )
    assert spans_of(cleared.record) == [("a", D1 + timedelta(milliseconds=300), D3)]


def test_a_change_cannot_be_recorded_before_the_last() -> None:
    first = channel_change([], ENG, "topic", [Setting("topic", "a", D1)], NOW2, source="s")
    with pytest.raises(ValueError, match="only moves forward"):
        channel_change(first.record, ENG, "topic", [Setting("topic", "b", D2)], NOW1, source="s")
    # What changes nothing is no change, whatever the time.
    assert channel_change(
        first.record, ENG, "topic", [Setting("topic", "a", D1)], NOW1, source="s"
    ).empty


def test_settings_travel_between_processes() -> None:
    one = Setting("topic", "a", D1, current=True)
    assert pickle.loads(pickle.dumps(one)) == one


def test_the_subject_is_the_channel_as_the_entity_index_names_it() -> None:
    assert channel_subject("slack:#Eng") == ENG
    assert (
        channel_subject("discord:Example  Guild/#general")
        == "channel:discord:example guild/#general"
    )


# -- at ingest ---------------------------------------------------------------------------------


def test_the_channel_list_makes_the_channels_facts(
    memory: stratamem.Memory, tmp_path: Path
) -> None:
    export = copy_export(tmp_path / "v1")
    assert ingest(memory, export).failed == []
    eng = memory.sources.get("slack:#eng")
    facts = memory.facts.recall(ENG)
    assert {(f.predicate, f.object, f.valid_from) for f in facts} == {
        ("topic", TOPIC_0, TOPIC_0_AT),
        ("purpose", PURPOSE_0, PURPOSE_0_AT),
        ("created_by", "person:alice chen", CREATED),
    }
    for fact in facts:
        # The channel list is no message: the facts rest on no node, and belong to the channel.
        assert (fact.origin, fact.source_id, fact.evidence, fact.valid_to) == (
            "structure",
            eng.id,
            (),
            None,
        )
    (creator,) = [f for f in facts if f.predicate == "created_by"]
    assert creator.object_is_entity
    # The subject is the channel the entity index names in the channel's messages.
    assert memory.store.entity_frequencies([ENG])[ENG] > 0
    # Every channel of the export says its own.
    assert {f.subject for f in memory.facts.recall()} == {
        ENG,
        "channel:slack:#general",
        "channel:slack:#incidents",
    }


def test_a_later_partial_export_adds_its_changes_and_keeps_the_history(
    memory: stratamem.Memory, tmp_path: Path
) -> None:
    ingest(memory, copy_export(tmp_path / "v1"))
    others = [f for f in memory.facts.recall() if f.subject != ENG]
    report = ingest(memory, later_export(tmp_path / "v2"))
    assert report.failed == []

    topic_b = "Phoenix 2.0 | @Bob Martins on call | runbook (https://wiki.example.com/phoenix)"
    assert believed(memory, ENG, "topic") == [
        (TOPIC_0, TOPIC_0_AT, ms(T_A)),
        (TOPIC_A, ms(T_A), ms(T_B)),
        (topic_b, ms(T_B), None),
    ]
    # The purpose was cleared: its value ends there, and nothing follows it.
    assert believed(memory, ENG, "purpose") == [(PURPOSE_0, PURPOSE_0_AT, ms(T_C))]
    assert [f.object for f in memory.facts.recall(ENG, predicate="purpose")] == []
    assert [
        f.object for f in memory.facts.recall(ENG, predicate="topic", as_of=T_A + timedelta(1))
    ] == [TOPIC_A]
    # The first value is kept as it was first believed, open and no longer believed.
    replaced = [f for f in memory.facts.history(ENG, "topic") if not f.believed]
    assert [(f.object, f.valid_to) for f in replaced] == [(TOPIC_0, None)]
    # What the partial export does not hold is left as it was.
    assert [f for f in memory.facts.recall() if f.subject != ENG] == others


def test_reading_the_same_exports_again_changes_nothing(
    memory: stratamem.Memory, tmp_path: Path
) -> None:
    first_export, second_export = copy_export(tmp_path / "v1"), later_export(tmp_path / "v2")
    ingest(memory, first_export)
    first = every_row(memory)
    ingest(memory, first_export, parallel=True)
    assert every_row(memory) == first
    ingest(memory, second_export)
    second = every_row(memory)
    assert second != first
    for export in (second_export, first_export, second_export):  # the older one after too
        ingest(memory, export, parallel=export is first_export)
        assert every_row(memory) == second


def test_an_older_export_read_after_a_newer_one_fills_in_the_past(
    memory: stratamem.Memory, tmp_path: Path
) -> None:
    newer = later_export(tmp_path / "v2")
    ingest(memory, newer)
    assert believed(memory, ENG, "topic")[0][0] == TOPIC_A
    assert believed(memory, ENG, "purpose") == []
    ingest(memory, copy_export(tmp_path / "v1"))
    assert [span[0] for span in believed(memory, ENG, "topic")] == [
        TOPIC_0,
        TOPIC_A,
        "Phoenix 2.0 | @Bob Martins on call | runbook (https://wiki.example.com/phoenix)",
    ]
    # A clear known before any value left no row to keep it: the older value stays open
    # until the export that clears it is read again.
    assert believed(memory, ENG, "purpose") == [(PURPOSE_0, PURPOSE_0_AT, None)]
    ingest(memory, newer)
    assert believed(memory, ENG, "purpose") == [(PURPOSE_0, PURPOSE_0_AT, ms(T_C))]


def test_a_locked_channel_takes_no_facts(memory: stratamem.Memory, tmp_path: Path) -> None:
    ingest(memory, copy_export(tmp_path / "v1"))
    first = every_row(memory)
    memory.locks.lock("slack:#eng", passphrase="pw")
    report = ingest(memory, later_export(tmp_path / "v2"))
    assert [s.scope for s in report.failed] == ["slack:#eng"]
    memory.locks.unlock("slack:#eng", passphrase="pw")
    assert every_row(memory) == first


def test_forgetting_the_channel_removes_its_facts(memory: stratamem.Memory, tmp_path: Path) -> None:
    ingest(memory, copy_export(tmp_path / "v1"))
    eng = memory.sources.get("slack:#eng")
    memory.sources.forget("slack:#eng")
    assert memory.facts.recall(ENG) == []
    assert [f for f in every_row(memory) if f.source_id == eng.id] == []
    assert {f.subject for f in memory.facts.recall()} == {
        "channel:slack:#general",
        "channel:slack:#incidents",
    }


def test_a_principal_sees_the_facts_of_the_channels_it_may_read(
    memory: stratamem.Memory, tmp_path: Path
) -> None:
    ingest(memory, copy_export(tmp_path / "v1"), access="eng")
    memory.principals.add("bot", "team")
    memory.principals.add("dev", "eng")
    with memory.as_principal("bot") as bot:
        assert bot.facts.recall() == []
        assert bot.facts.recall(ENG) == []
        assert bot.facts.history(ENG, "topic") == []
        assert bot.facts.search("standup") == []
    with memory.as_principal("dev") as dev:
        assert [f.object for f in dev.facts.recall(ENG, predicate="topic")] == [TOPIC_0]


def test_a_configured_embedder_embeds_the_facts_as_they_are_written(
    memory: stratamem.Memory, tmp_path: Path
) -> None:
    embedder = HashingEmbedder()
    ingest_path(memory.store, copy_export(tmp_path / "v1"), parallel=False, embedder=embedder)
    facts = every_row(memory)
    assert len(facts) == 9
    stored = memory.store.fact_vectors(embedder.spec.signature, [f.id for f in facts])
    assert set(stored) == {f.id for f in facts}
    (topic,) = memory.facts.recall(ENG, predicate="topic")
    again = embedder.embed_batch([fact_text(topic)], role="passage")[0]
    assert stored[topic.id] == again.astype("<f4").tobytes()


# -- the real samples --------------------------------------------------------------------------


@pytest.mark.skipif(not SLACK_SAMPLE.is_file(), reason="the shared Slack sample is absent")
def test_the_real_slack_export_gives_its_channels_creators(memory: stratamem.Memory) -> None:
    with zipfile.ZipFile(SLACK_SAMPLE) as zf:
        channels = json.loads(zf.read("channels.json"))
        users = {u["id"]: u for u in json.loads(zf.read("users.json"))}
    assert ingest(memory, SLACK_SAMPLE).failed == []
    expected = set()
    for channel in channels:
        # Its topics and purposes were never set (empty, last set at 0): no fact of them.
        assert (channel["topic"]["value"], int(channel["topic"]["last_set"])) == ("", 0)
        creator = users[channel["creator"]]
        name = creator.get("profile", {}).get("real_name") or creator.get("real_name")
        expected.add(
            (
                f"channel:slack:#{channel['name']}",
                "created_by",
                f"person:{' '.join(name.lower().split())}",
                datetime.fromtimestamp(int(channel["created"]), UTC),
            )
        )
    assert {
        (f.subject, f.predicate, f.object, f.valid_from) for f in memory.facts.recall()
    } == expected
    first = every_row(memory)
    ingest(memory, SLACK_SAMPLE, parallel=True)
    assert every_row(memory) == first


@pytest.mark.skipif(not DISCORD_SAMPLE.is_dir(), reason="the shared Discord sample is absent")
def test_the_real_discord_export_gives_the_topic_as_of_its_latest_message(
    memory: stratamem.Memory,
) -> None:
    expected = set()
    for path in sorted(DISCORD_SAMPLE.rglob("*.json")):
        if any(part.endswith("_Files") for part in path.parts):
            continue
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc["channel"]["topic"]:
            latest = max(datetime.fromisoformat(m["timestamp"]) for m in doc["messages"])
            name = f"{doc['guild']['name']}/#{doc['channel']['name']}"
            expected.add((f"channel:discord:{name.lower()}", doc["channel"]["topic"], ms(latest)))
    assert expected  # the sample's general channel has a topic; the others none
    report = memory.ingest(DISCORD_SAMPLE, format="discord", trees=False, parallel=False)
    assert report.failed == []
    facts = memory.facts.recall()
    assert {(f.subject, f.object, f.valid_from) for f in facts} == expected
    assert {(f.predicate, f.origin, f.evidence) for f in facts} == {("topic", "structure", ())}
    first = every_row(memory)
    memory.ingest(DISCORD_SAMPLE, format="discord", trees=False, parallel=True)
    assert every_row(memory) == first
