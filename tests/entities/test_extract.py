from __future__ import annotations

from datetime import UTC, datetime

from stratamem.entities.extract import canonical, extract, topics
from stratamem.types import Record, SourceKind


def ids(content: str, *records: Record, kind: SourceKind = SourceKind.CHAT) -> set[str]:
    return {m.entity_id for m in extract(content, records, scope="slack:#eng", kind=kind)}


def test_structured_fields_become_entities() -> None:
    record = Record(
        text="x",
        ref="r",
        author="Alice Chen",
        author_id="Alice@Acme.io",
        recipients=("bob@acme.io",),
        mentions=("Carol Diaz",),
        tags=("Release",),
        links=("Queue Design", "https://Example.com/x/"),
        time=datetime(2024, 3, 12, tzinfo=UTC),
    )
    found = ids("x", record)
    assert {
        "channel:slack:#eng",
        "person:alice chen",
        "email:alice@acme.io",
        "email:bob@acme.io",
        "person:carol diaz",
        "tag:release",
        "note:queue design",
        "url:https://example.com/x",
    } <= found


def test_text_patterns_and_trailing_punctuation() -> None:
    text = "ping @bob. see https://acme.io/runbook, mail ops@acme.io about #incident-42!"
    found = ids(text)
    assert "handle:bob" in found
    assert "url:https://acme.io/runbook" in found
    assert "email:ops@acme.io" in found
    assert "tag:incident-42" in found
    assert not any(e.startswith("handle:acme") for e in found)


def test_resolved_mentions_are_not_double_counted_as_handles() -> None:
    record = Record(text="", ref="r", mentions=("Alice Chen",))
    found = ids("@Alice Chen can you look?", record)
    assert "person:alice chen" in found
    assert "handle:alice" not in found


def test_issue_numbers_and_colours_are_not_tags() -> None:
    assert not any(e.startswith("tag:") for e in ids("fixed in #123, colour #fff0"))


def test_topics_prefer_proper_phrases_and_repeats() -> None:
    text = (
        "Project Phoenix moves the job queue off Redis. The queue will live in SQLite; "
        "the queue worker restarts. Project Phoenix ships in April."
    )
    found = topics(text)
    assert found[0] == "project phoenix"
    assert "queue" in found


def test_canonical_lowercases_and_trims() -> None:
    assert canonical("person", "  Alice   Chen. ") == "person:alice chen"


def test_extraction_is_deterministic() -> None:
    text = "Alice Chen and Bob Martins met about SQLite and Redis; #decision @carol"
    first = extract(text, [], scope="s", kind=SourceKind.EMAIL)
    assert first == extract(text, [], scope="s", kind=SourceKind.EMAIL)
