"""Facts read from structure at ingest: a note's front-matter properties become facts of its
source, and follow the note as it is edited, removed and read again."""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import stratamem
from stratamem.ingest.connectors import markdown
from stratamem.ingest.model import ReadContext, SourceStream
from stratamem.memory import structure
from stratamem.memory.facts import Statement
from stratamem.memory.structure import SKIPPED_KEYS, Note, note_of, property_values, settle
from stratamem.store.facts import Fact
from stratamem.types import Record

SCOPE = "notes:vault"
PHOENIX = "topic:phoenix"
T1 = datetime(2024, 3, 1, 9, tzinfo=UTC)
T2 = datetime(2024, 3, 15, 12, tzinfo=UTC)
BODY = "# Phoenix\n\n" + "\n\n".join(
    f"Paragraph {n} of the billing rewrite plan. " + "The pipeline moves to services. " * 12
    for n in range(1, 5)
)
FRONT_V1 = """\
title: Phoenix
aliases: [Billing rewrite]
tags: [project]
created: 2024-01-10
updated: 2024-03-01T09:00:00Z
author: Alice Chen
status: draft
owner: Carol Diaz
priority: 2
reviewed: false
members: [Alice Chen, Bob Martins]
budget: {q1: 10, q2: 20}
"""
# Status changed, owner dropped, due added, Bob out and Dan in; priority and reviewed kept.
FRONT_V2 = """\
title: Phoenix
aliases: [Billing rewrite]
tags: [project]
created: 2024-01-10
updated: 2024-03-15T12:00:00Z
author: Alice Chen
status: accepted
priority: 2
reviewed: false
members: [Alice Chen, Dan Okafor]
due: 2024-04-05
"""
V1 = {
    ("status", "draft", True),
    ("owner", "Carol Diaz", True),
    ("priority", "2", True),
    ("reviewed", "false", True),
    ("members", "Alice Chen", False),
    ("members", "Bob Martins", False),
}


def note_text(front: str | None, body: str = BODY) -> str:
    return body if front is None else f"---\n{front}---\n{body}"


def write_vault(root: Path, phoenix: str | None = FRONT_V1, body: str = BODY) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    if phoenix is not None:
        (root / "Phoenix.md").write_text(note_text(phoenix, body), encoding="utf-8")
    (root / "Standup.md").write_text("# Standup\n\nNotes without properties.\n", encoding="utf-8")
    (root / "Broken.md").write_text(
        "---\nstatus: [unclosed\n---\n# Broken\n\nA note whose front matter fails.\n",
        encoding="utf-8",
    )
    return root


def said(fact: Fact) -> tuple[str, str, bool]:
    return (fact.predicate, fact.object, fact.single)


def every_row(memory: stratamem.Memory) -> list[Fact]:
    return sorted(memory.store.facts(believed_only=False, limit=100_000), key=lambda f: f.id)


def spans(memory: stratamem.Memory, predicate: str) -> list[tuple[str, Any, Any, bool]]:
    """The timeline of Phoenix's ``predicate``: (object, from, to, believed), oldest first."""
    return [
        (f.object, f.valid_from, f.valid_to, f.believed)
        for f in memory.facts.history(PHOENIX, predicate)
    ]


@pytest.fixture
def memory(store_location: str) -> Iterator[stratamem.Memory]:
    with stratamem.open(store_location, embedder=None) as opened:
        yield opened


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    return write_vault(tmp_path / "vault")


def ingest(memory: stratamem.Memory, path: Path, **options: Any) -> stratamem.IngestReport:
    options.setdefault("parallel", False)
    return memory.ingest(path, format="markdown", trees=False, **options)


# -- what a note says --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("accepted", (["accepted"], False)),
        ("  padded  ", (["padded"], False)),
        (2, (["2"], False)),
        (1.5, (["1.5"], False)),
        (True, (["true"], False)),
        (False, (["false"], False)),
        ("2024-04-05", (["2024-04-05"], False)),
        (None, ([], False)),
        ("", ([], False)),
        ({"q1": 10}, ([], False)),
        (["a", 2, None, "", " b "], (["a", "2", "b"], True)),
        ([], ([], True)),
        (["a", ["b"]], ([], True)),
        (["a", {"b": 1}], ([], True)),
    ],
)
def test_property_values(value: Any, expected: tuple[list[str], bool]) -> None:
    assert property_values(value) == expected


def test_a_note_says_its_scalar_and_list_properties_and_nothing_else() -> None:
    record = Record(
        text="body",
        ref="vault/Phoenix.md:14",
        time=datetime(2024, 1, 10, tzinfo=UTC),
        title="  Phoenix   Plan ",
        doc="Phoenix.md",
        meta={
            "front_matter": {
                "title": "Phoenix Plan",
                "Status": "draft",
                "status": "ignored: the key says status once already",
                "Due Date": "2024-04-05",
                "lead": "person:Carol  Diaz",
                "members": ["Alice", "Bob", "Alice"],
                "budget": {"q1": 10},
                "updated": "2024-03-01T09:00:00.123456+00:00",
                "cssclasses": ["wide"],
            },
            "updated": "2024-03-01T09:00:00.123456Z",
        },
    )
    note = note_of(record, "chunk-1")
    assert note is not None
    when = datetime(2024, 3, 1, 9, 0, 0, 123000, tzinfo=UTC)
    assert (note.subject, note.valid_from, note.doc, note.readable) == (
        "topic:phoenix plan",
        when,
        "Phoenix.md",
        True,
    )
    assert [(s.predicate, s.object, s.object_is_entity, s.single) for s in note.statements] == [
        ("status", "draft", False, True),
        ("due_date", "2024-04-05", False, True),
        ("lead", "person:carol diaz", True, True),
        ("members", "Alice", False, False),
        ("members", "Bob", False, False),
    ]
    for one in note.statements:
        assert (one.subject, one.valid_from, one.evidence, one.origin) == (
            "topic:phoenix plan",
            when,
            ("chunk-1",),
            "structure",
        )
    # It crosses from the reading process to the writer as it is.
    assert pickle.loads(pickle.dumps(note)) == note


def test_a_note_without_an_updated_time_counts_from_its_time() -> None:
    time = datetime(2024, 1, 10, tzinfo=UTC)
    record = Record(text="b", ref="n.md", time=time, title="N", meta={"front_matter": {"a": 1}})
    note = note_of(record, "c")
    assert note is not None
    assert note.valid_from == time
    assert note.statements[0].valid_from == time


@pytest.mark.parametrize(
    ("title", "meta"),
    [
        ("Plain", {}),  # no front matter: not a note of properties
        ("   ", {"front_matter": {"status": "x"}}),  # a title that names nothing
    ],
)
def test_records_that_are_no_note_of_properties(title: str, meta: dict[str, Any]) -> None:
    assert note_of(Record(text="b", ref="r", title=title, meta=meta), "c") is None


def test_a_note_whose_front_matter_was_unreadable_says_nothing_and_says_so() -> None:
    record = Record(
        text="---\nstatus: [x\n---\nbody",
        ref="r",
        title="N",
        meta={"front_matter": {}, "front_matter_unreadable": True},
    )
    assert note_of(record, "c") == Note("topic:n", None, "r", (), readable=False)


def test_the_keys_the_connector_reads_for_itself_are_no_facts() -> None:
    read = {*markdown._TIME_KEYS, *markdown._UPDATED_KEYS, "title", "tags", "tag", "author"}
    assert read | {"aliases", "alias"} <= SKIPPED_KEYS


# -- settling a timeline (worked by hand) ------------------------------------------------------

NOW1 = datetime(2024, 6, 1, tzinfo=UTC)
NOW2 = datetime(2024, 6, 2, tzinfo=UTC)


def row(
    id: str,
    obj: str,
    start: datetime | None,
    end: datetime | None = None,
    *,
    single: bool = True,
    origin: Any = "structure",
    evidence: tuple[str, ...] = ("c1",),
) -> Fact:
    return Fact(
        id=id,
        subject=PHOENIX,
        predicate="status",
        object=obj,
        valid_from=start,
        valid_to=end,
        recorded_at=NOW1,
        evidence=evidence,
        origin=origin,
        single=single,
        source_id="src",
    )


def says(
    obj: str, start: datetime | None, *, single: bool = True, evidence: str = "c1"
) -> Statement:
    return Statement(
        PHOENIX, "status", obj, start, evidence=(evidence,), origin="structure", single=single
    )


def shape(facts: list[Fact]) -> list[tuple[str, Any, Any, tuple[str, ...]]]:
    return [(f.object, f.valid_from, f.valid_to, f.evidence) for f in facts]


def test_a_new_value_closes_the_old_at_the_notes_new_time() -> None:
    change = settle([row("a", "draft", T1)], [says("accepted", T2)], T2, NOW2, source="src")
    assert change.expire == ["a"]
    assert shape(change.record) == [
        ("draft", T1, T2, ("c1",)),
        ("accepted", T2, None, ("c1",)),
    ]
    assert {f.recorded_at for f in change.record} == {NOW2}


def test_the_same_value_again_changes_nothing() -> None:
    rows = [row("a", "draft", T1)]
    assert settle(rows, [says("draft", T1)], T1, NOW2, source="src").empty
    # A later note time with the same value: it held all along.
    assert settle(rows, [says("draft", T2)], T2, NOW2, source="src").empty


def test_a_property_no_longer_said_closes_at_the_notes_time() -> None:
    change = settle([row("a", "draft", T1)], [], T2, NOW2, source="src")
    assert change.expire == ["a"]
    assert shape(change.record) == [("draft", T1, T2, ("c1",))]


def test_closing_at_or_before_a_rows_start_only_expires_it() -> None:
    change = settle([row("a", "draft", T2)], [], T1, NOW2, source="src")
    assert (change.expire, change.record) == (["a"], [])


def test_unreadable_front_matter_closes_nothing() -> None:
    assert settle([row("a", "draft", T1)], [], None, NOW2, source="src").empty


def test_rows_not_read_from_structure_are_left_to_their_author() -> None:
    asserted = row("a", "shipped", T1, origin="asserted")
    assert settle([asserted], [], T2, NOW2, source="src").empty


def test_one_of_many_values_closes_alone() -> None:
    rows = [row("a", "alice", T1, single=False), row("b", "bob", T1, single=False)]
    said = [says("alice", T2, single=False), says("dan", T2, single=False)]
    change = settle(rows, said, T2, NOW2, source="src")
    assert change.expire == ["b"]
    assert shape(change.record) == [("bob", T1, T2, ("c1",)), ("dan", T2, None, ("c1",))]


def test_a_note_whose_time_went_back_still_says_what_holds_now() -> None:
    change = settle([row("a", "draft", T2)], [says("accepted", T1)], T1, NOW2, source="src")
    assert change.expire == ["a"]
    assert shape(change.record) == [("accepted", T2, None, ("c1",))]


def test_a_value_on_a_new_chunk_is_recorded_again_on_it() -> None:
    change = settle(
        [row("a", "draft", T1)], [says("draft", T2, evidence="c2")], T2, NOW2, source="src"
    )
    assert change.expire == ["a"]
    assert shape(change.record) == [("draft", T1, None, ("c2",))]


def test_transaction_time_only_moves_forward() -> None:
    with pytest.raises(ValueError, match="only moves forward"):
        settle([row("a", "draft", T1)], [says("accepted", T2)], T2, NOW1 - timedelta(1), source="s")


# -- at ingest ---------------------------------------------------------------------------------


def first_chunk_ref(path: Path, front: str) -> str:
    """Where the note's first chunk starts: the line after its front matter."""
    return f"vault/{path.name}:{front.count(chr(10)) + 3}"


def test_ingest_makes_the_front_matter_facts_of_the_vault(
    memory: stratamem.Memory, vault: Path
) -> None:
    report = ingest(memory, vault)
    assert report.failed == []
    facts = memory.facts.recall()
    assert {said(f) for f in facts} == V1
    source = memory.sources.get(SCOPE)
    evidence = memory.get(facts[0].evidence[0])
    assert evidence.source_ref == first_chunk_ref(vault / "Phoenix.md", FRONT_V1)
    assert evidence.content.startswith("# Phoenix\n\nParagraph 1")
    for fact in facts:
        assert fact.subject == PHOENIX
        assert (fact.origin, fact.source_id, fact.evidence) == (
            "structure",
            source.id,
            (evidence.node_id,),
        )
        assert (fact.valid_from, fact.valid_to) == (T1, None)
    assert memory.facts.recall(PHOENIX, predicate="status")[0].object == "draft"


def test_bad_front_matter_makes_no_facts_and_the_note_is_still_ingested(
    memory: stratamem.Memory, vault: Path
) -> None:
    report = ingest(memory, vault)
    assert any(
        p.path.endswith("Broken.md") and "invalid front matter" in p.reason for p in report.problems
    )
    assert {f.subject for f in memory.facts.recall()} == {PHOENIX}
    hits = memory.search("front matter fails", sources=[SCOPE], mode="keyword").hits
    assert [h.source_ref for h in hits] == ["vault/Broken.md"]


def test_an_edited_note_closes_what_changed_at_its_new_time(
    memory: stratamem.Memory, vault: Path
) -> None:
    ingest(memory, vault)
    kept = {
        f.predicate: f.id for f in memory.facts.recall() if f.predicate in ("priority", "reviewed")
    }
    write_vault(vault, FRONT_V2)
    before = datetime.now(UTC).replace(microsecond=0)
    ingest(memory, vault)

    assert {said(f) for f in memory.facts.recall()} == {
        ("status", "accepted", True),
        ("priority", "2", True),
        ("reviewed", "false", True),
        ("members", "Alice Chen", False),
        ("members", "Dan Okafor", False),
        ("due", "2024-04-05", True),
    }
    assert {said(f) for f in memory.facts.recall(as_of=T2 - timedelta(days=1))} == V1
    # The history keeps the value as first believed (open, no longer believed), and both
    # spans as believed now.
    assert spans(memory, "status") == [
        ("draft", T1, None, False),
        ("draft", T1, T2, True),
        ("accepted", T2, None, True),
    ]
    assert spans(memory, "owner") == [
        ("Carol Diaz", T1, None, False),
        ("Carol Diaz", T1, T2, True),
    ]
    assert [
        (f.object, f.valid_from, f.valid_to)
        for f in memory.facts.history(PHOENIX, "members")
        if f.believed
    ] == [("Alice Chen", T1, None), ("Bob Martins", T1, T2), ("Dan Okafor", T2, None)]
    assert spans(memory, "due") == [("2024-04-05", T2, None, True)]
    # What did not change is the same row.
    assert {f.predicate: f.id for f in memory.facts.recall() if f.predicate in kept} == kept
    replaced = [f for f in memory.facts.history(PHOENIX, "status") if not f.believed]
    assert replaced[0].expired_at is not None
    assert replaced[0].expired_at >= before


def test_reading_the_same_notes_again_changes_nothing(
    memory: stratamem.Memory, vault: Path
) -> None:
    ingest(memory, vault)
    first = every_row(memory)
    ingest(memory, vault, parallel=True)
    assert every_row(memory) == first
    write_vault(vault, FRONT_V2)
    ingest(memory, vault)
    second = every_row(memory)
    assert second != first
    ingest(memory, vault)
    assert every_row(memory) == second


def test_a_new_first_chunk_becomes_the_evidence(memory: stratamem.Memory, vault: Path) -> None:
    ingest(memory, vault)
    write_vault(vault, FRONT_V1, body=BODY.replace("Paragraph 1", "Opening paragraph"))
    ingest(memory, vault)
    facts = memory.facts.recall()
    assert {said(f) for f in facts} == V1
    (evidence,) = {f.evidence for f in facts}
    assert memory.get(evidence[0]).content.startswith("# Phoenix\n\nOpening paragraph")
    assert {(f.valid_from, f.valid_to) for f in facts} == {(T1, None)}


def test_front_matter_that_turns_unreadable_leaves_the_facts_as_they_were(
    memory: stratamem.Memory, vault: Path
) -> None:
    ingest(memory, vault)
    first = every_row(memory)
    write_vault(vault, FRONT_V1.replace("status: draft", "status: [draft"))
    report = ingest(memory, vault)
    assert any(p.path.endswith("Phoenix.md") for p in report.problems)
    assert every_row(memory) == first


def test_a_removed_note_closes_its_facts_at_the_ingest(
    memory: stratamem.Memory, vault: Path
) -> None:
    ingest(memory, vault)
    (vault / "Phoenix.md").unlink()
    before = datetime.now(UTC).replace(microsecond=0)
    ingest(memory, vault)
    after = datetime.now(UTC)
    assert memory.facts.recall() == []
    ends = {f.valid_to for f in memory.facts.history(PHOENIX, "status") if f.believed}
    assert len(ends) == 1
    (end,) = ends
    assert end is not None
    assert before <= end <= after


def test_notes_of_one_title_the_latest_decides(memory: stratamem.Memory, vault: Path) -> None:
    (vault / "Phoenix copy.md").write_text(
        note_text(FRONT_V1.replace("2024-03-01T09:00:00Z", "2024-02-01T00:00:00Z"))
        .replace("status: draft", "status: idea")
        .replace("owner: Carol Diaz\n", ""),
        encoding="utf-8",
    )
    ingest(memory, vault)
    assert {said(f) for f in memory.facts.recall()} == V1
    first = every_row(memory)
    ingest(memory, vault)
    assert every_row(memory) == first


def test_a_failed_ingest_leaves_no_facts(
    memory: stratamem.Memory, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = 0
    real = structure.settle

    def failing(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 7:  # after some timelines were written
            raise ValueError("the clock went back")
        return real(*args, **kwargs)

    monkeypatch.setattr(structure, "settle", failing)
    report = ingest(memory, vault)
    assert calls == 7
    assert [s.scope for s in report.failed] == [SCOPE]
    assert memory.facts.recall() == []
    assert every_row(memory) == []
    assert SCOPE not in {s.scope for s in memory.sources.list()}


class _FailsAfterTheNotes:
    """The Markdown connector, whose records then fail: the source is rolled back."""

    name = "markdown"

    def read(self, path: Path, ctx: ReadContext) -> Iterator[SourceStream]:
        for stream in markdown.MarkdownConnector().read(path, ctx):
            yield dataclasses.replace(stream, records=self._then_fail(stream.records))

    @staticmethod
    def _then_fail(records: Any) -> Iterator[Record]:
        yield from records
        raise RuntimeError("the disk went away")


def test_a_source_that_fails_while_read_keeps_its_facts_as_they_were(
    memory: stratamem.Memory, vault: Path
) -> None:
    ingest(memory, vault)
    first = every_row(memory)
    write_vault(vault, FRONT_V2)
    report = ingest(memory, vault, connector=_FailsAfterTheNotes())
    assert [s.scope for s in report.failed] == [SCOPE]
    assert every_row(memory) == first


def test_a_locked_vault_takes_no_facts(memory: stratamem.Memory, vault: Path) -> None:
    ingest(memory, vault)
    first = every_row(memory)
    memory.locks.lock(SCOPE, passphrase="pw")
    write_vault(vault, FRONT_V2)
    report = ingest(memory, vault)
    assert [s.error for s in report.failed] == [
        f"source {SCOPE!r} is locked: unlock it to ingest into it"
    ]
    memory.locks.unlock(SCOPE, passphrase="pw")
    assert every_row(memory) == first


def test_a_principal_sees_the_facts_of_the_vaults_it_may_read(
    memory: stratamem.Memory, vault: Path, tmp_path: Path
) -> None:
    team = tmp_path / "team"
    team.mkdir()
    (team / "Roadmap.md").write_text(
        "---\nupdated: 2024-03-01T09:00:00Z\nstatus: planned\n---\n# Roadmap\n\nWhat comes next.\n",
        encoding="utf-8",
    )
    ingest(memory, vault)  # private, as documents are by default
    ingest(memory, team, access="team")
    memory.principals.add("bot", "team")
    memory.principals.add("me", "private")
    with memory.as_principal("bot") as bot:
        assert [(f.subject, f.object) for f in bot.facts.recall()] == [("topic:roadmap", "planned")]
        assert bot.facts.recall(PHOENIX) == []
        assert bot.facts.history(PHOENIX, "status") == []
    with memory.as_principal("me") as me:
        assert {f.subject for f in me.facts.recall()} == {PHOENIX}


def test_reading_in_a_child_process_gives_the_same_facts(
    store_location: str, locations: Any, vault: Path, tmp_path: Path
) -> None:
    found = []
    for parallel in (True, False):
        where = store_location if parallel else locations.new(store_location, tmp_path, "serial")
        with stratamem.open(where, embedder=None) as opened:
            ingest(opened, vault, parallel=parallel)
            found.append(
                sorted(
                    (f.subject, f.predicate, f.object, f.valid_from, f.evidence, f.single)
                    for f in every_row(opened)
                )
            )
    assert found[0] == found[1]
    assert len(found[0]) == len(V1)


def test_facts_stated_on_a_notes_evidence_share_its_timeline_and_are_not_closed(
    memory: stratamem.Memory, vault: Path
) -> None:
    ingest(memory, vault)
    chunk = memory.facts.recall(PHOENIX, predicate="status")[0].evidence
    later = datetime(2100, 1, 1, tzinfo=UTC)
    shipped = datetime(2024, 4, 1, tzinfo=UTC)
    memory.facts.remember(
        PHOENIX, "status", "shipped", valid_from=shipped, evidence=chunk, now=later
    )
    memory.facts.remember(PHOENIX, "sponsor", "Dan Okafor", evidence=chunk, now=later)
    first = every_row(memory)
    # Unchanged notes change nothing, though a change was stated at a later transaction time.
    assert ingest(memory, vault).failed == []
    assert every_row(memory) == first
    assert {said(f) for f in memory.facts.recall()} == (V1 - {("status", "draft", True)}) | {
        ("status", "shipped", True),
        ("sponsor", "Dan Okafor", True),
    }
    # A change cannot be recorded before it: the source fails and keeps what it had.
    write_vault(vault, FRONT_V2)
    (failed,) = ingest(memory, vault).failed
    assert failed.error is not None
    assert "transaction time only moves forward" in failed.error
    assert every_row(memory) == first
