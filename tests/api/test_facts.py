"""``mem.facts``: remember, retract, recall, history, query, search, extract, set_extraction,
extraction, rollups, consolidate, consolidate_after_ingest (the behaviour in depth:
tests/memory/)."""

from __future__ import annotations

import json
import re

import pytest

import stratamem
from stratamem.errors import AccessDenied
from stratamem.testing import FakeModelServer

CAROL = "person:carol diaz"
ENG = "slack:#eng"
_LABEL = re.compile(r"^\[([0-9a-f]{32})", re.MULTILINE)


def test_a_fact_is_remembered_recalled_replaced_and_retracted(small: stratamem.Memory) -> None:
    first = small.facts.remember(CAROL, "leads", "on-call", valid_from="2024-03-01")
    (on_call,) = first.recorded
    second = small.facts.remember(CAROL, "leads", "release", valid_from="2024-03-10")
    assert on_call.id in second.expired  # closed at 2024-03-10, kept in the history
    assert [f.object for f in small.facts.recall(CAROL)] == ["release"]
    assert [f.object for f in small.facts.recall(CAROL, as_of="2024-03-05")] == ["on-call"]
    assert {f.object for f in small.facts.history(CAROL, "leads")} == {"on-call", "release"}

    assert [h.fact.object for h in small.facts.search("release", subject=CAROL)] == ["release"]
    found = small.facts.query("carol leads", as_of="2024-03-05")
    assert found.hits[0].explain["object"] == "on-call"  # the best match, true then
    assert {h.node_kind for h in found.hits} == {"fact"}

    (release,) = [f for f in second.recorded if f.object == "release"]
    small.facts.retract(release.id)
    assert small.facts.recall(CAROL) == []
    assert release.id in {f.id for f in small.facts.history(CAROL, "leads")}


def test_extraction_is_set_and_run(
    small: stratamem.Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("STRATAMEM_EXTRACT_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    assert small.facts.extraction() is None
    with pytest.raises(ValueError, match="no extraction endpoint"):
        small.facts.extract([ENG])

    def one_fact(prompt: str) -> str:
        cited = _LABEL.findall(prompt)[:1]
        said = {"subject": "person:bob", "predicate": "wrote", "object": "in #eng"}
        given = {"valid_from": None, "confidence": 0.8, "many": True, "evidence": cited}
        return json.dumps({"facts": [{**said, **given}]})

    with FakeModelServer(reply=one_fact) as server:
        small.facts.set_extraction(server.base_url, "m")
        assert small.facts.extraction() == (server.base_url, "m")
        report = small.facts.extract([ENG])
    assert not report.failed
    assert report.facts >= 1
    assert [f.object for f in small.facts.recall("person:bob")] == ["in #eng"]
    small.facts.set_extraction(None)
    assert small.facts.extraction() is None


def test_facts_are_consolidated_into_rollups(small: stratamem.Memory) -> None:
    for thing in ("tea", "chess", "rust"):
        small.facts.remember(CAROL, "likes", thing, many=True)
    report = small.facts.consolidate(min_facts=2)
    assert report.rollups_written >= 1
    (rollup,) = small.facts.rollups(CAROL)
    assert rollup.subject == CAROL
    assert rollup in small.facts.rollups()
    assert small.facts.consolidate_after_ingest() is False
    assert small.facts.consolidate_after_ingest(True) is True
    assert small.facts.consolidate_after_ingest() is True


def test_a_principal_reads_facts_and_writes_none(small: stratamem.Memory) -> None:
    small.facts.remember(CAROL, "leads", "on-call", source=ENG)
    small.principals.add("reader", "team")
    with small.as_principal("reader") as reader:
        assert [f.object for f in reader.facts.recall(CAROL)] == ["on-call"]
        with pytest.raises(AccessDenied, match="may not remember facts"):
            reader.facts.remember(CAROL, "leads", "x")
        with pytest.raises(AccessDenied, match="may not consolidate"):
            reader.facts.consolidate()


def test_every_fact_about_an_entity_every_id_of_it(small: stratamem.Memory) -> None:
    small.facts.remember(CAROL, "leads", "on-call", valid_from="2024-03-01", source=ENG)
    small.facts.remember(CAROL, "leads", "release", valid_from="2024-03-10", source=ENG)
    wrong = small.facts.remember(CAROL, "status", "away", source=ENG)
    small.facts.retract(wrong.recorded[0].id)
    small.facts.remember("person:c. diaz", "likes", "tea", source=ENG)
    assert "likes" not in {f.predicate for f in small.facts.about(CAROL)}
    small.entities.merge("person:c. diaz", CAROL)

    rows = small.facts.about("person:c. diaz")
    said = [(f.predicate, f.object, f.valid_to is None, f.believed) for f in rows]
    assert said == [
        ("leads", "on-call", True, False),  # replaced: no longer believed
        ("leads", "on-call", False, True),  # closed where release starts
        ("leads", "release", True, True),
        ("likes", "tea", True, True),
        ("status", "away", True, False),  # retracted
    ]
    assert small.facts.about(CAROL) == rows
    assert len(small.facts.about(CAROL, limit=2)) == 2
