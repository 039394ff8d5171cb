from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _old_topics(text: str, limit: int = 3) -> list[str]:
    """Keyphrases as first written: every pattern scanned from each word boundary."""
    import re
    from collections import Counter

    from stratamem.entities.stopwords import STOPWORDS

    proper = r"\b(?:[A-Z][a-z]+|[A-Z]{2,}[a-z]*)(?:[ \t]+(?:[A-Z][a-z]+|[A-Z]{2,}))+\b"
    camel = r"\b[A-Z]?[a-z]+[A-Z][A-Za-z]+\b|\b[A-Z][a-z]*[A-Z][A-Za-z]*\b"
    scores: Counter[str] = Counter()
    for match in re.finditer(proper, text):
        words = match.group(0).split()
        while words and words[0].lower() in STOPWORDS:
            words = words[1:]
        if len(words) >= 2:
            scores[" ".join(words[:3]).lower()] += len(words[:3])
    for match in re.finditer(camel, text):
        if len(match.group(0)) >= 4:
            scores[match.group(0).lower()] += 2
    long_word = r"\b[a-z][a-z0-9'+-]{3,}[a-z0-9+]"
    for word, count in Counter(re.findall(long_word, text.lower())).items():
        if count >= 2 and word not in STOPWORDS:
            scores[word] += count
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    return [phrase for phrase, score in ranked[:limit] if score >= 2]


_TOPIC_TEXTS = [
    "We moved PostgreSQL to pgBouncer; PostgreSQL and iPhone apps use GraphQL via McDonald.",
    "The HIV-1 protease and TNF-alpha in DNA repair; mRNA of IL6R and CD4 cells. " * 3,
    "ÉcoleNormale, naïveBayes, x_CamelCase, CamelCase_x, abcDef9, 9abcDef, ABC, AbC, aBc",
    "New York Times\tand The United Nations met The World Bank; THE END Of Days.",
    "Über Straße Wien — Zürich Airport and Zürich Airport again; MacOS macOS MACOs",
    "Alice Chen: ok\nBob Martins: see JiraTicket and JiraTicket and the jira ticket",
    "xNew York and _Grand Canyon, 9Big Apple, éSan Francisco, but Golden Gate Bridge",
    "",
    "a",
]


@pytest.mark.parametrize("text", _TOPIC_TEXTS)
@pytest.mark.parametrize("limit", [3, 50])
def test_topics_are_those_first_written(text: str, limit: int) -> None:
    assert topics(text, limit) == _old_topics(text, limit)


_topic_alphabet = st.sampled_from(
    [
        *"aAbBzZqQ",
        "Ab",
        "aB",
        "Abc",
        "ABC",
        "ÉÜé",
        "_",
        "9",
        "-",
        "'",
        " ",
        " ",
        "\t",
        "\n",
        ".",
        "#",
        "@",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_topic_alphabet, max_size=120).map("".join))
def test_any_text_has_the_topics_first_written(text: str) -> None:
    assert topics(text, 50) == _old_topics(text, 50)


_WORDISH = st.text(alphabet=st.sampled_from("aAbBzZé9_'+- .\n"), max_size=80)


@settings(max_examples=400, deadline=None)
@given(_WORDISH | st.text(max_size=80))
def test_the_topic_scans_find_what_their_plain_patterns_find(text: str) -> None:
    """The patterns written to skip ahead (to a capital, to a letter) match as the plain
    word-boundary patterns do."""
    import re

    from stratamem.entities import extract as ex

    proper = r"\b[A-Z](?:[a-z]+|[A-Z]+[a-z]*)(?:[ \t]+(?:[A-Z][a-z]+|[A-Z]{2,}))+\b"
    long_word = r"\b[a-z][a-z0-9'+-]{3,}[a-z0-9+]"
    camel = r"\b(?:[A-Z]?[a-z]+[A-Z][A-Za-z]+|[A-Z][a-z]*[A-Z][A-Za-z]*)\b"
    lower = text.lower()
    assert ex._LONG_WORD.findall(lower) == re.findall(long_word, lower)
    assert [m.group(0) for m in ex._PROPER.finditer(text)] == re.findall(proper, text)
    assert ex._camel_words(text) == re.findall(camel, text)
