"""Pinned chat messages are tier-0: the chat window holding one is tagged ``pinned``, search
boosts it and packing keeps budget for it; a later export that unpins it takes the tag away."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import stratamem
from stratamem.config import SearchConfig
from stratamem.ingest.connectors import discord, slack
from stratamem.ingest.model import ReadContext, Record
from stratamem.types import RetrievalHit

EXAMPLE_SLACK = Path(__file__).resolve().parents[2] / "examples" / "workspace" / "slack-export"
ENG_ID = "C05QK1E9N2G"
DECISION_DAY = "eng/2024-03-12.json"
DECISION_TS = "1710255921.367631"  # "Approved. We drop Redis and ship the SQLite-backed ..."
QUERY = "approved drop Redis ship SQLite-backed job queue"
BOOST = SearchConfig().tier0_boost


@pytest.fixture
def memory(store_location: str) -> Iterator[stratamem.Memory]:
    with stratamem.open(store_location) as mem:
        yield mem


@pytest.fixture
def slack_copy(tmp_path: Path) -> Path:
    return Path(shutil.copytree(EXAMPLE_SLACK, tmp_path / "slack-export"))


def edit_json(path: Path, change: Callable[[Any], None]) -> None:
    data = json.loads(path.read_text("utf-8"))
    change(data)
    path.write_text(json.dumps(data, indent=2), "utf-8")


def set_message(export: Path, day: str, ts: str, **fields: Any) -> None:
    """Set (or, given None, remove) fields of the message ``ts`` in a day file."""

    def change(messages: list[dict[str, Any]]) -> None:
        (message,) = [m for m in messages if m.get("ts") == ts]
        for name, value in fields.items():
            if value is None:
                message.pop(name, None)
            else:
                message[name] = value

    edit_json(export / day, change)


def slack_records(export: Path) -> dict[str, list[Record]]:
    streams = slack.SlackConnector().read(export, ReadContext())
    return {s.title: list(s.records) for s in streams}


def hit_for(memory: stratamem.Memory, query: str, source: str, text: str) -> RetrievalHit:
    """The hit of ``source`` whose content holds ``text``."""
    hits = [h for h in memory.search(query, sources=[source], limit=10).hits if text in h.content]
    assert len(hits) == 1, [h.content[:60] for h in hits]
    return hits[0]


def updated(report: Any, scope: str) -> int:
    (source,) = [s for s in report.sources if s.scope == scope]
    return int(source.updated)


def assert_tier0(hit: RetrievalHit) -> None:
    assert "pinned" in hit.topics
    assert hit.explain["tier0"] is True
    breakdown = hit.explain["breakdown"]
    assert breakdown["boost"] == pytest.approx(BOOST)
    assert "boosted" in hit.explain["reason"]


def assert_plain(hit: RetrievalHit) -> None:
    assert "pinned" not in hit.topics
    assert hit.explain["tier0"] is False
    assert hit.explain["breakdown"]["boost"] == pytest.approx(1.0)


# -- Slack -------------------------------------------------------------------------------------


def test_example_export_pins_nothing() -> None:
    records = slack_records(EXAMPLE_SLACK)
    assert records  # the example export is read
    assert all("pinned" not in r.tags for rs in records.values() for r in rs)


def test_slack_pinned_to_tags_only_that_message(slack_copy: Path) -> None:
    set_message(slack_copy, DECISION_DAY, DECISION_TS, pinned_to=[ENG_ID])
    eng = slack_records(slack_copy)["#eng"]
    pinned = [r.id for r in eng if "pinned" in r.tags]
    assert pinned == [DECISION_TS]


def test_slack_channel_pins_list_tags_the_message(slack_copy: Path) -> None:
    def pin(channels: list[dict[str, Any]]) -> None:
        (eng,) = [c for c in channels if c["id"] == ENG_ID]
        eng["pins"] = [{"id": DECISION_TS, "type": "C", "created": 1710256000, "user": "U1"}]

    edit_json(slack_copy / "channels.json", pin)
    records = slack_records(slack_copy)
    assert [r.id for r in records["#eng"] if "pinned" in r.tags] == [DECISION_TS]
    assert not [r for r in records["#general"] if "pinned" in r.tags]


def test_slack_pinned_in_another_channel_is_not_pinned_here(slack_copy: Path) -> None:
    set_message(slack_copy, DECISION_DAY, DECISION_TS, pinned_to=["C05QJ8W3G1N", 7, None])
    assert not [r for r in slack_records(slack_copy)["#eng"] if "pinned" in r.tags]


def test_slack_edited_message_pinned_keeps_tag(slack_copy: Path) -> None:
    edited = {"user": "U05QK3J8T2W", "ts": "1710256100.000000"}
    changed = {
        "type": "message",
        "subtype": "message_changed",
        "ts": "1710256100.000001",
        "message": {
            "type": "message",
            "user": "U05QK3J8T2W",
            "text": "Approved, edited: we drop Redis.",
            "ts": DECISION_TS,
            "edited": edited,
            "pinned_to": [ENG_ID],
        },
    }
    edit_json(slack_copy / DECISION_DAY, lambda messages: messages.append(changed))
    eng = slack_records(slack_copy)["#eng"]
    assert [r.text for r in eng if "pinned" in r.tags] == ["Approved, edited: we drop Redis."]


def test_slack_pin_and_unpin_follow_later_exports(
    memory: stratamem.Memory, slack_copy: Path
) -> None:
    memory.ingest(slack_copy)
    assert_plain(hit_for(memory, QUERY, "slack:#eng", "Approved."))

    set_message(slack_copy, DECISION_DAY, DECISION_TS, pinned_to=[ENG_ID])
    report = memory.ingest(slack_copy)
    assert updated(report, "slack:#eng") == 1  # a change of pin state changes the record
    assert all(updated(report, s.scope) == 0 for s in report.sources if s.scope != "slack:#eng")
    hit = hit_for(memory, QUERY, "slack:#eng", "Approved.")
    assert_tier0(hit)
    assert memory.get(hit.node_id).topics == hit.topics
    # Every other chunk of the channel stays plain: only the window holding the pin is tagged.
    others = memory.search("Redis", sources=["slack:#eng"], limit=20).hits
    assert [h.node_id for h in others if h.explain["tier0"]] == [hit.node_id]

    cards = memory.search(QUERY, sources=["slack:#eng"], limit=5, budget=200).cards
    assert [c.tier0 for c in cards if c.hit.node_id == hit.node_id] == [True]

    set_message(slack_copy, DECISION_DAY, DECISION_TS, pinned_to=None)
    report = memory.ingest(slack_copy)
    assert updated(report, "slack:#eng") == 1
    assert_plain(hit_for(memory, QUERY, "slack:#eng", "Approved."))
    assert not [
        h for h in memory.search("Redis", sources=["slack:#eng"]).hits if h.explain["tier0"]
    ]


# -- Discord -----------------------------------------------------------------------------------


def discord_export(folder: Path, *, pinned: bool, edited: str | None = None) -> Path:
    """A small DiscordChatExporter export of one channel; message 3 is pinned when asked."""
    folder.mkdir(parents=True, exist_ok=True)

    def message(n: int, minute: int, text: str, **extra: Any) -> dict[str, Any]:
        return {
            "id": f"90000000000000000{n}",
            "type": "Default",
            "timestamp": f"2024-05-02T10:{minute:02d}:00+00:00",
            "timestampEdited": None,
            "isPinned": False,
            "content": text,
            "author": {"id": f"7{n % 2}", "name": ["ana", "ben"][n % 2], "isBot": False},
            "attachments": [],
            "embeds": [],
            "reactions": [],
            "mentions": [],
        } | extra

    messages = [
        message(1, 0, "Morning! Shall we settle the retention window for audit logs today?"),
        message(2, 3, "Legal asked for at least a year; storage says ninety days is cheap."),
        message(
            3,
            5,
            "Decided: audit logs kept 400 days in cold storage, 30 days hot.",
            isPinned=pinned,
            timestampEdited=edited,
        ),
        # After a silence past the chat gap: a window of its own, never pinned.
        message(4, 59, "Unrelated: the lunch order for Friday is tacos, audit team included."),
    ]
    doc = {
        "guild": {"id": "5001", "name": "Acme", "iconUrl": ""},
        "channel": {"id": "6001", "type": "GuildTextChat", "category": "Ops", "name": "ops"},
        "dateRange": {"after": None, "before": None},
        "exportedAt": "2024-05-02T12:00:00+00:00",
        "messages": messages,
        "messageCount": len(messages),
    }
    path = folder / "Acme - Ops - ops [6001].json"
    path.write_text(json.dumps(doc, indent=2), "utf-8")
    return path


def test_discord_is_pinned_tags_the_record(tmp_path: Path) -> None:
    path = discord_export(tmp_path / "d", pinned=True)
    (stream,) = discord.DiscordConnector().read(path, ReadContext())
    records = list(stream.records)
    assert [r.text[:8] for r in records if "pinned" in r.tags] == ["Decided:"]
    assert [r.meta["pinned"] for r in records] == [False, False, True, False]


@pytest.mark.parametrize("edited", [None, "2024-05-02T10:06:00+00:00"])
def test_discord_pin_and_unpin_follow_later_exports(
    memory: stratamem.Memory, tmp_path: Path, edited: str | None
) -> None:
    query = "audit logs retention days cold storage"
    first = discord_export(tmp_path / "one", pinned=False, edited=edited)
    memory.ingest(first)
    assert_plain(hit_for(memory, query, "discord:Acme/#ops", "Decided:"))

    # The same message, pinned later (its edit, if any, unchanged): the record is updated.
    report = memory.ingest(discord_export(tmp_path / "two", pinned=True, edited=edited))
    assert updated(report, "discord:Acme/#ops") == 1
    hit = hit_for(memory, query, "discord:Acme/#ops", "Decided:")
    assert_tier0(hit)
    # The window holding the pinned message is tagged, with the messages around it.
    assert "Legal asked" in hit.content
    lunch = hit_for(memory, "lunch order tacos", "discord:Acme/#ops", "tacos")
    assert_plain(lunch)

    report = memory.ingest(discord_export(tmp_path / "three", pinned=False, edited=edited))
    assert updated(report, "discord:Acme/#ops") == 1
    assert_plain(hit_for(memory, query, "discord:Acme/#ops", "Decided:"))
