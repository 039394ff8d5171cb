"""Reconciling extraction: the model is shown the facts held about what a batch mentions and
answers with add, update, retract and none decisions, applied with history kept, against a
real chat-completions server on 127.0.0.1 (:class:`stratamem.testing.FakeModelServer`)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import stratamem
from stratamem.memory import decide
from stratamem.memory.extract import ExtractConfig, Extractor
from stratamem.store.facts import Fact
from stratamem.testing import FakeModelServer, chat_completion, held_facts, record_ids

T1 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
T2 = datetime(2024, 4, 1, 9, 0, tzinfo=UTC)
NOTES = "notes:team"
Answer = Callable[[str, list[str]], list[dict[str, Any]]]


def decision(action: str, evidence: list[str], **given: Any) -> dict[str, Any]:
    """A decision as a model writes one: every key, null where not given."""
    out: dict[str, Any] = dict.fromkeys(decide.DECISION_KEYS)
    out.update(action=action, evidence=evidence, reason=given.pop("reason", ""), **given)
    return out


def nodes(prompt: str) -> list[str]:
    """The node ids of a prompt's records, in order."""
    return record_ids(prompt)


class Model:
    """The server's chat reply: ``answer(prompt, node ids)`` as decisions; prompts kept."""

    def __init__(self) -> None:
        self.answer: Answer = lambda prompt, ids: []
        self.prompts: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, prompt: str) -> str:
        with self._lock:
            self.prompts.append(prompt)
        return json.dumps({"decisions": self.answer(prompt, nodes(prompt))})


@pytest.fixture
def model() -> Model:
    return Model()


@pytest.fixture
def server(model: Model) -> Iterator[FakeModelServer]:
    with FakeModelServer(reply=model) as running:
        yield running


@pytest.fixture
def memory(store_location: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[stratamem.Memory]:
    for name in ("STRATAMEM_EXTRACT_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with stratamem.open(store_location, embedder=None) as opened:
        yield opened


def extract(memory: stratamem.Memory, server: FakeModelServer, *sources: str) -> Any:
    return memory.facts.extract(
        sources or (NOTES,), endpoint=server.base_url, model="m", timeout=10.0, retries=0
    )


def history(memory: stratamem.Memory, subject: str, predicate: str) -> list[Fact]:
    return memory.facts.history(subject, predicate)


def test_add_update_retract_and_none_keep_the_history_with_the_reasons(
    memory: stratamem.Memory, server: FakeModelServer, model: Model
) -> None:
    memory.items.add("@carol leads on-call and likes tea", source=NOTES, id="n1", time=T1)
    model.answer = lambda prompt, ids: [
        decision("add", ids, subject="handle:carol", predicate="leads", object="on-call"),
        decision("add", ids, subject="handle:carol", predicate="likes", object="tea", many=True),
    ]
    first = extract(memory, server)
    assert (first.added, first.updated, first.retracted, first.kept) == (2, 0, 0, 0)
    assert first.skipped == []

    memory.items.add("@carol now leads payments and gave up tea", source=NOTES, id="n2", time=T2)

    def second(prompt: str, ids: list[str]) -> list[dict[str, Any]]:
        shown = {tuple(v[:3]): k for k, v in held_facts(prompt).items()}
        leads = shown[("handle:carol", "leads", "on-call")]
        likes = shown[("handle:carol", "likes", "tea")]
        return [
            decision("update", ids, fact=leads, object="payments", reason="she moved"),
            decision("retract", ids, fact=likes, reason="she gave up tea"),
            decision("none", [], fact=leads, reason="still about carol"),
        ]

    model.answer = second
    report = extract(memory, server)
    assert report.skipped == []
    assert (report.added, report.updated, report.retracted, report.kept) == (0, 1, 1, 1)
    assert [d.decision.action for d in report.decided] == ["update", "retract", "none"]
    assert report.decided[0].decision.reason == "she moved"
    (now,) = memory.facts.recall("handle:carol", predicate="leads")
    assert (now.object, now.valid_from, now.reason) == ("payments", T2, "she moved")
    assert memory.facts.recall("handle:carol", predicate="likes") == []

    leads = history(memory, "handle:carol", "leads")
    closed = [f for f in leads if f.object == "on-call" and f.believed]
    assert [(f.valid_to, f.reason) for f in closed] == [(T2, "she moved")]
    assert any(f.object == "on-call" and not f.believed and f.valid_to is None for f in leads)
    likes = history(memory, "handle:carol", "likes")
    (tea,) = [f for f in likes if f.believed]
    assert (tea.valid_to, tea.reason) == (T2, "she gave up tea")
    # The closing copy rests on what it rested on and on what closed it.
    assert set(report.decided[1].decision.evidence) <= set(tea.evidence)


def test_the_prompt_shows_the_held_facts_about_the_subjects_mentioned_only(
    memory: stratamem.Memory, server: FakeModelServer, model: Model
) -> None:
    memory.facts.remember("handle:carol", "leads", "on-call")
    memory.facts.remember("handle:dave", "leads", "payments")
    memory.facts.remember("topic:phoenix", "status", "shipped")
    memory.items.add("@carol wrote about it", source=NOTES, id="n1", time=T1)
    report = extract(memory, server)
    assert report.batches == 1
    (prompt,) = model.prompts
    shown = [tuple(v[:3]) for v in held_facts(prompt).values()]
    assert shown == [("handle:carol", "leads", "on-call")]
    assert prompt.index("Facts held now") < prompt.index("Records:")


def test_the_facts_whose_evidence_is_in_a_batch_are_shown_with_it(
    memory: stratamem.Memory, server: FakeModelServer, model: Model
) -> None:
    memory.items.add("the launch moved", source=NOTES, id="n1", time=T1)
    (chunk,) = memory.store.iter_chunks(memory.sources.get(NOTES).id)
    memory.facts.remember("topic:launch", "date", "2024-05-01", evidence=[chunk.id])
    memory.facts.extract([NOTES], endpoint=server.base_url, model="m", redo=True)
    shown = [tuple(v[:3]) for v in held_facts(model.prompts[-1]).values()]
    assert ("topic:launch", "date", "2024-05-01") in shown


def test_the_facts_shown_are_capped_and_the_prompt_says_so(
    memory: stratamem.Memory, server: FakeModelServer, model: Model
) -> None:
    for n in range(decide.MAX_HELD + 5):
        memory.facts.remember("handle:carol", f"knows_{n}", "x")
    memory.items.add("@carol", source=NOTES, id="n1", time=T1)
    extract(memory, server)
    assert len(held_facts(model.prompts[0])) == decide.MAX_HELD
    assert "(5 more facts about these subjects are not shown)" in model.prompts[0]


def bad_decisions(ids: list[str], hidden: str) -> list[tuple[Any, str]]:
    """Decisions a model may get wrong, each with what its skip must say."""
    carol = {"subject": "handle:carol", "object": "x"}
    return [
        (decision("add", ids, subject="planet:mars", predicate="is", object="red"), "entity id"),
        (decision("add", ["f" * 32], predicate="p", **carol), "is not a record of this batch"),
        ("just a string", "not an object"),
        (decision("launch", ids), "action must be one of"),
        (decision("add", ids, predicate="p" * 201, **carol), "longer than 200 characters"),
        (
            decision("add", ids, predicate="p", valid_from="2024-02-30", **carol),
            "not a date of the calendar",
        ),
        (decision("update", ids, fact="F9", object="x", reason="r"), "not among the facts shown"),
        (decision("retract", ids, fact=hidden, reason="r"), "not among the facts shown"),
        (decision("retract", ids, fact="F1"), "needs a reason"),
        (
            decision("update", ids, fact="F1", subject="handle:dave", object="x", reason="r"),
            "keeps",
        ),
        ({**decision("add", ids), "note": 1}, "unknown keys"),
        (
            decision("add", ids, subject="handle:" + "c" * 10_000, predicate="p", object="x"),
            "subject is longer than 500 characters",
        ),
    ]


def test_the_subjects_past_the_cap_are_left_out_and_the_prompt_says_so(
    memory: stratamem.Memory, server: FakeModelServer, model: Model
) -> None:
    handles = [f"@p{n:02d}" for n in range(decide.MAX_SUBJECTS + 3)]
    memory.items.add(" ".join(handles), source=NOTES, id="n1", time=T1)
    memory.facts.remember(f"handle:p{decide.MAX_SUBJECTS + 2:02d}", "leads", "x")
    extract(memory, server)
    (prompt,) = model.prompts
    assert held_facts(prompt) == {}  # the one fact held is of a subject past the cap
    assert "more subjects are mentioned; their facts are not shown" in prompt


def test_bad_decisions_are_skipped_with_their_reasons_and_the_good_one_kept(
    memory: stratamem.Memory, server: FakeModelServer, model: Model
) -> None:
    hidden = memory.facts.remember("handle:erin", "salary", "CANARY-91f2").recorded[0].id
    memory.facts.remember("handle:carol", "leads", "on-call")
    memory.items.add("@carol leads payments", source=NOTES, id="n1", time=T1)
    good = {"subject": "handle:carol", "predicate": "leads", "object": "pay"}
    model.answer = lambda prompt, ids: [
        *(item for item, _ in bad_decisions(ids, hidden)),
        decision("add", ids, **good),
    ]
    report = extract(memory, server)
    expected = [why for _, why in bad_decisions([], hidden)]
    reasons = {s.item: s.reason for s in report.skipped}
    assert sorted(reasons) == list(range(len(expected)))
    for index, why in enumerate(expected):
        assert why in reasons[index], (index, reasons[index])
    text = json.dumps(report.to_dict())
    assert "c" * 1000 not in text  # a reason never echoes a huge value
    assert "CANARY-91f2" not in text
    assert "salary" not in text
    assert report.added == 1
    # Each source keeps its own timeline: the add closes nothing held elsewhere.
    now = memory.facts.recall("handle:carol", predicate="leads")
    assert sorted(f.object for f in now) == ["on-call", "pay"]
    assert memory.facts.recall("handle:erin")[0].object == "CANARY-91f2"


def test_ten_thousand_decisions_are_read_up_to_the_cap(
    memory: stratamem.Memory, server: FakeModelServer, model: Model
) -> None:
    memory.items.add("@carol likes many things", source=NOTES, id="n1", time=T1)
    model.answer = lambda prompt, ids: [
        decision("add", ids, subject="handle:carol", predicate="likes", object=f"t{n}", many=True)
        for n in range(10_000)
    ]
    report = extract(memory, server)
    assert report.added == decide.MAX_DECISIONS
    (skip,) = report.skipped
    assert "holds 10000 decisions" in skip.reason
    assert len(memory.facts.recall("handle:carol", limit=100_000)) == decide.MAX_DECISIONS


@pytest.mark.parametrize(
    "content",
    [
        '{"decisions": [{"action": "add", "subject": "handle:car',
        "not JSON at all",
        '{"choices": []}',
        '{"verdicts": []}',
    ],
    ids=["truncated", "prose", "wrong-shape", "no-decisions"],
)
def test_an_unreadable_or_truncated_answer_skips_the_batch_and_writes_nothing(
    memory: stratamem.Memory, server: FakeModelServer, content: str
) -> None:
    memory.items.add("@carol leads", source=NOTES, id="n1", time=T1)
    server.queue(200, chat_completion(content))
    report = extract(memory, server)
    (skip,) = report.skipped
    assert (skip.batch, skip.item) == (1, None)
    assert "no readable answer" in skip.reason
    assert report.batches == 0
    assert memory.store.facts(believed_only=False) == []
    again = extract(memory, server)  # the chunk was left for the next run
    assert again.batches == 1


def test_a_429_waits_as_long_as_retry_after_says(
    memory: stratamem.Memory, server: FakeModelServer, model: Model
) -> None:
    memory.items.add("@carol leads", source=NOTES, id="n1", time=T1)
    server.queue(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "7"})
    waited: list[float] = []
    config = ExtractConfig(endpoint=server.base_url, model="m", backoff=0.5, retries=2)
    with Extractor(memory.store, config, sleep=waited.append) as extractor:
        extractor.enqueue([NOTES])
        report = extractor.run_pending()
    assert waited == [7.0]
    assert (report.retries, report.batches, report.failed) == (1, 1, [])


def test_a_429_that_persists_fails_the_job_with_the_reason(
    memory: stratamem.Memory, server: FakeModelServer
) -> None:
    memory.items.add("@carol leads", source=NOTES, id="n1", time=T1)
    for _ in range(3):
        server.queue(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "1"})
    config = ExtractConfig(endpoint=server.base_url, model="m", retries=2)
    with Extractor(memory.store, config, sleep=lambda s: None) as extractor:
        extractor.enqueue([NOTES])
        report = extractor.run_pending()
    (failed,) = report.failed
    assert "HTTP 429" in failed or "429" in failed
    assert "after 3 attempts" in failed
    assert memory.store.facts(believed_only=False) == []


def test_a_decision_on_a_fact_of_a_locked_source_is_refused(
    memory: stratamem.Memory, server: FakeModelServer, model: Model
) -> None:
    memory.items.add("the vault", source="notes:vault", id="v1", time=T1)
    memory.facts.remember("handle:carol", "leads", "on-call", source="notes:vault")
    memory.items.add("@carol leads payments", source=NOTES, id="n1", time=T1)

    def answer(prompt: str, ids: list[str]) -> list[dict[str, Any]]:
        memory.locks.lock("notes:vault", passphrase="pw")  # locked after it was shown
        return [decision("update", ids, fact="F1", object="payments", reason="moved")]

    model.answer = answer
    report = extract(memory, server)
    (skip,) = report.skipped
    assert "may not write" in skip.reason
    assert report.updated == 0
    assert memory.facts.recall("handle:carol", predicate="leads") == []  # sealed, unchanged


def test_add_messages_with_extract_brings_the_user_s_facts_up_to_date(
    memory: stratamem.Memory, server: FakeModelServer, model: Model
) -> None:
    def lives(prompt: str, ids: list[str]) -> list[dict[str, Any]]:
        city = prompt.split("I live in ", 1)[1].split()[0]
        shown = [k for k, v in held_facts(prompt).items() if v[:2] == ["user:maya", "lives_in"]]
        if shown:
            return [decision("update", ids, fact=shown[0], object=city, reason="she moved")]
        return [decision("add", ids, subject="user:maya", predicate="lives_in", object=city)]

    model.answer = lives
    with pytest.raises(ValueError, match="no extraction endpoint"):
        memory.items.add_messages([{"role": "user", "content": "x"}], user="maya", extract=True)
    assert memory.sources.list() == []  # refused before anything was written
    memory.facts.set_extraction(server.base_url, "m")
    turn = {"role": "user", "content": "I live in paris", "time": T1.isoformat()}
    first = memory.items.add_messages([turn], user="maya", session="s1", extract=True)
    assert first.extracted is not None
    assert first.extracted["added"] == 1
    turn = {"role": "user", "content": "I live in berlin", "time": T2.isoformat()}
    second = memory.items.add_messages([turn], user="maya", session="s2", extract=True)
    assert second.to_dict()["extracted"]["updated"] == 1
    (now,) = memory.facts.recall("user:maya", predicate="lives_in")
    assert (now.object, now.valid_from, now.reason) == ("berlin", T2, "she moved")
    closed = [f for f in history(memory, "user:maya", "lives_in") if f.valid_to is not None]
    assert [(f.object, f.valid_to) for f in closed] == [("paris", T2)]
    plain = memory.items.add_messages([turn], user="maya", session="s3")
    assert "extracted" not in plain.to_dict()
