"""Facts extracted by a model, against a real chat-completions server on 127.0.0.1
(:class:`stratamem.testing.FakeModelServer`) scripted per test."""

from __future__ import annotations

import json
import logging
import math
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from memory_kit import is_postgres, rows

import stratamem
from stratamem.errors import AccessDenied, LockError
from stratamem.memory.extract import (
    DECISIONS_SCHEMA,
    PROGRESS_PREFIX,
    SYSTEM_PROMPT,
    ExtractReport,
    extract_job_key,
)
from stratamem.store.facts import Fact
from stratamem.testing import FakeModelServer, chat_completion

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workspace"
ENG = "slack:#eng"
_LABEL = re.compile(r"^\[([0-9a-f]{32})((?: \| [^\n]*)?)\]$", re.MULTILINE)


def records(prompt: str) -> list[tuple[str, list[str], str]]:
    """The records of a user message: (node id, the label's other parts, the text)."""
    found = list(_LABEL.finditer(prompt))
    out = []
    for here, after in zip(found, [*found[1:], None], strict=True):
        end = after.start() if after is not None else len(prompt)
        parts = [p for p in here.group(2).split(" | ") if p]
        out.append((here.group(1), parts, prompt[here.end() : end].strip()))
    return out


def fact_for(node: str, parts: list[str], text: str) -> dict[str, Any]:
    """One fact per record, made from its label and its first words: what a model might say."""
    author = parts[1] if len(parts) > 1 else "nobody"
    return {
        "subject": f"person:{author}",
        "predicate": "wrote",
        "object": " ".join(text.split()[:6]) or "nothing",
        "valid_from": None,
        "many": True,
        "confidence": 0.8,
        "evidence": [node],
    }


def one_fact_each(prompt: str) -> str:
    return json.dumps({"facts": [fact_for(*r) for r in records(prompt)]})


class Model:
    """The server's chat reply: ``answer(prompt)``; every prompt is kept."""

    def __init__(self, answer: Callable[[str], str] = one_fact_each) -> None:
        self.answer = answer
        self.prompts: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, prompt: str) -> str:
        with self._lock:
            self.prompts.append(prompt)
        return self.answer(prompt)

    def nodes_asked(self) -> list[str]:
        return [node for prompt in self.prompts for node, _, _ in records(prompt)]


@pytest.fixture(scope="module")
def template(module_location: str) -> str:
    path = module_location
    with stratamem.open(path, embedder=None) as memory:
        memory.ingest(EXAMPLES / "slack-export", parallel=False)
        memory.ingest(EXAMPLES / "notes", parallel=False)
        memory.principals.add("reader", "team")
    return path


@pytest.fixture
def db(template: str, locations: Any, tmp_path: Path) -> str:
    return str(locations.copy(template, tmp_path, "store"))


@pytest.fixture
def model() -> Model:
    return Model()


@pytest.fixture
def server(model: Model) -> Iterator[FakeModelServer]:
    with FakeModelServer(reply=model) as running:
        yield running


@pytest.fixture
def memory(db: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[stratamem.Memory]:
    for name in ("STRATAMEM_EXTRACT_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with stratamem.open(db, embedder=None) as opened:
        yield opened


def model_facts(memory: stratamem.Memory) -> list[Fact]:
    rows = memory.store.facts(believed_only=False, limit=1_000_000)
    return [f for f in rows if f.origin == "model"]


def said(facts: list[Fact]) -> set[tuple[Any, ...]]:
    """What the facts say, whenever and under whatever ids they were recorded."""
    return {
        (
            f.subject,
            f.predicate,
            f.object,
            f.valid_from,
            f.valid_to,
            f.evidence,
            f.confidence,
            f.source_id,
            f.single,
            f.believed,
        )
        for f in facts
    }


def extract(memory: stratamem.Memory, server: FakeModelServer, *sources: str, **kw: Any) -> Any:
    kw.setdefault("batch_size", 4)
    kw.setdefault("timeout", 10.0)
    return memory.facts.extract(sources, endpoint=server.base_url, model="m", **kw)


def test_facts_are_written_with_origin_model_on_the_cited_chunks(
    memory: stratamem.Memory, server: FakeModelServer, model: Model
) -> None:
    eng = memory.sources.get(ENG)
    chunks = list(memory.store.iter_chunks(eng.id))
    report = extract(memory, server, ENG)
    assert report.failed == []
    assert report.skipped == []
    assert report.sources == 1
    assert report.batches == math.ceil(len(chunks) / 4) == len(server.requests)
    assert report.chunks == len(chunks)
    assert sorted(model.nodes_asked()) == sorted(c.id for c in chunks)
    request = server.requests[0].payload
    assert request["model"] == "m"
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert request["messages"][0]["content"] == SYSTEM_PROMPT
    assert request["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "decisions", "strict": True, "schema": DECISIONS_SCHEMA},
    }
    assert server.requests[0].path == "/v1/chat/completions"
    assert "authorization" not in server.requests[0].headers  # no key given, none sent
    facts = model_facts(memory)
    assert len(facts) == report.facts == report.recorded == len(chunks)
    by_id = {c.id: c for c in chunks}
    for fact in facts:
        (node,) = fact.evidence
        assert fact.source_id == eng.id
        assert fact.confidence == 0.8
        assert fact.predicate == "wrote"
        assert fact.valid_from == by_id[node].time_start  # no date said: the chunk's time
        assert fact.object == " ".join(by_id[node].content.split()[:6])
    # The facts read as any other: recall, search.
    assert memory.facts.recall(facts[0].subject, predicate="wrote")
    assert memory.facts.search(facts[0].object)


def test_a_date_the_text_gives_and_confidence_clamped(
    memory: stratamem.Memory, server: FakeModelServer, model: Model
) -> None:
    def dated(prompt: str) -> str:
        node = records(prompt)[0][0]
        item = {
            "subject": "Person:Carol  Diaz",
            "predicate": "Leads On-Call",
            "object": "person:Bob Martins",
            "valid_from": "2024-03-01",
            "many": False,
            "confidence": 7,
            "evidence": [node],
        }
        return json.dumps({"facts": [item]})

    model.answer = dated
    extract(memory, server, "slack:#incidents")
    (fact,) = model_facts(memory)
    assert (fact.subject, fact.predicate, fact.object) == (
        "person:carol diaz",
        "leads_on-call",
        "person:bob martins",
    )
    assert fact.object_is_entity
    assert fact.single
    assert fact.valid_from is not None
    assert fact.valid_from.isoformat() == "2024-03-01T00:00:00+00:00"
    assert fact.confidence == 1.0


BAD_ITEMS: list[tuple[Any, str]] = [
    ("just a string", "not an object"),
    ({"subject": "planet:mars"}, "missing"),
    ("extra", "unknown keys"),
    ("planet:mars", "is not an entity id"),
    ("hallucinated", "is not a record of this batch"),
    ("no-evidence", "non-empty list"),
    ("next tuesday", "valid_from must be null or an ISO 8601"),
    ("2024-13-45", "is not a date"),
    ("high", "confidence must be a number"),
    ("nan", "confidence must be a number"),
    ("many", "many must be true or false"),
    ("", "predicate must be non-empty text"),
]


def _bad(case: Any, node: str) -> Any:
    good = fact_for(node, ["", "alice"], "a good fact")
    if not isinstance(case, str) or case == "just a string":
        return case
    if case == "extra":
        return {**good, "note": "more"}
    if case == "planet:mars":
        return {**good, "subject": case}
    if case == "hallucinated":
        return {**good, "evidence": [node, "f" * 32]}
    if case == "no-evidence":
        return {**good, "evidence": []}
    if case in ("next tuesday", "2024-13-45"):
        return {**good, "valid_from": case}
    if case == "high":
        return {**good, "confidence": "high"}
    if case == "nan":
        return {**good, "confidence": float("nan")}
    if case == "many":
        return {**good, "many": "yes"}
    return {**good, "predicate": case}


def test_items_breaking_the_schema_are_skipped_and_the_rest_kept(
    memory: stratamem.Memory, server: FakeModelServer, model: Model
) -> None:
    def mixed(prompt: str) -> str:
        node = records(prompt)[0][0]
        items = [_bad(case, node) for case, _ in BAD_ITEMS]
        items.insert(3, fact_for(node, ["", "alice"], "the one good fact"))
        return json.dumps({"facts": items}, allow_nan=True)

    model.answer = mixed
    report = extract(memory, server, "slack:#incidents")
    assert report.batches == 1
    (fact,) = model_facts(memory)
    assert fact.object == "the one good fact"
    assert report.facts == 1
    reasons = {s.item: s.reason for s in report.skipped}
    assert len(report.skipped) == len(BAD_ITEMS)
    for position, (_, expected) in enumerate(BAD_ITEMS):
        index = position if position < 3 else position + 1
        assert expected in reasons[index], (index, reasons[index])
    assert all(s.batch == 1 and s.source == "slack:#incidents" for s in report.skipped)
    # The batch was answered: its chunks are done, and a rerun asks nothing.
    server.reset()
    assert extract(memory, server, "slack:#incidents").batches == 0
    assert server.requests == []


def test_an_unreadable_answer_is_asked_again(
    memory: stratamem.Memory, server: FakeModelServer
) -> None:
    server.queue(200, chat_completion("this is not JSON {"))
    server.queue(200, chat_completion(json.dumps({"result": []})))
    server.queue(200, b"<html>not a completion</html>")
    report = extract(memory, server, "slack:#incidents", retries=3)
    assert report.retries == 3
    assert len(server.requests) == 4
    assert report.skipped == []
    assert len(model_facts(memory)) == report.facts > 0


def test_a_batch_without_a_readable_answer_is_skipped_and_asked_next_run(
    memory: stratamem.Memory, server: FakeModelServer, model: Model
) -> None:
    server.queue(200, chat_completion("no facts here"))
    report = extract(memory, server, "slack:#incidents", retries=0)
    (skipped,) = report.skipped
    assert skipped.batch == 1
    assert skipped.item is None
    assert "not JSON" in skipped.reason
    assert report.batches == 0
    assert model_facts(memory) == []
    assert report.failed == []  # the job is done; its chunks wait for the next run
    report = extract(memory, server, "slack:#incidents")
    assert report.batches == 1
    assert len(model_facts(memory)) == report.facts > 0


def test_a_server_error_then_success_is_retried(
    memory: stratamem.Memory, server: FakeModelServer
) -> None:
    server.queue(500, {"error": {"message": "overloaded"}})
    server.queue(503, {"error": {"message": "loading"}}, headers={"Retry-After": "0"})
    report = extract(memory, server, "slack:#incidents")
    assert report.retries == 2
    assert report.failed == []
    assert len(model_facts(memory)) == report.facts > 0


def test_a_slow_answer_past_the_timeout_is_asked_again(
    memory: stratamem.Memory, server: FakeModelServer
) -> None:
    server.queue(200, chat_completion(json.dumps({"facts": []})), delay=60)
    report = extract(memory, server, "slack:#incidents", timeout=2.0)
    assert report.retries == 1
    assert report.failed == []
    assert len(server.requests) == 2
    assert len(model_facts(memory)) == report.facts > 0


def test_timeouts_that_persist_fail_the_job_for_a_later_run(
    memory: stratamem.Memory, server: FakeModelServer
) -> None:
    for _ in range(2):
        server.queue(200, chat_completion(json.dumps({"facts": []})), delay=60)
    report = extract(memory, server, "slack:#incidents", ENG, timeout=0.3, retries=1)
    assert len(report.failed) == 1
    assert "no answer within 0.3 s" in report.failed[0]
    assert report.failed[0].startswith("slack:#incidents: ")
    assert model_facts(memory) == []
    # Both jobs wait for a later run: the failed one after its backoff.
    assert memory.store.jobs.counts(kind="extract") == {"pending": 2}
    assert memory.store.jobs.failed() == []


def test_an_unauthorised_answer_fails_the_job_naming_the_endpoint(
    memory: stratamem.Memory, server: FakeModelServer
) -> None:
    server.queue(401, {"error": {"message": "Incorrect API key provided"}})
    report = extract(memory, server, "slack:#incidents", ENG, api_key="sk-wrong")
    (failure,) = report.failed
    assert f"{server.base_url}/chat/completions (HTTP 401)" in failure
    assert "check the API key" in failure
    assert "Incorrect API key provided" in failure
    assert report.retries == 0
    assert len(server.requests) == 1
    incidents = memory.sources.get("slack:#incidents")
    assert memory.store.jobs.failed() == [
        (extract_job_key(incidents.id), failure.split(": ", 1)[1])
    ]
    assert memory.store.jobs.counts(kind="extract") == {"failed": 1, "pending": 1}
    assert model_facts(memory) == []


def test_a_rerun_sends_nothing_and_a_redo_changes_nothing(
    memory: stratamem.Memory, server: FakeModelServer
) -> None:
    first = extract(memory, server, ENG)
    before = model_facts(memory)
    server.reset()
    again = extract(memory, server, ENG)
    assert (again.batches, again.facts, len(server.requests)) == (0, 0, 0)
    redo = extract(memory, server, ENG, redo=True)
    assert redo.batches == first.batches
    assert redo.facts == first.facts
    assert redo.recorded == 0
    assert {f.id for f in model_facts(memory)} == {f.id for f in before}


def test_only_new_chunks_are_sent(
    memory: stratamem.Memory, server: FakeModelServer, model: Model
) -> None:
    extract(memory, server, ENG)
    asked = len(model.nodes_asked())
    written = memory.items.add("Erin joins the platform team on Monday.", source=ENG, author="erin")
    assert written.chunks_added
    report = extract(memory, server, ENG)
    assert report.chunks == len(written.chunks_added)
    assert sorted(model.nodes_asked()[asked:]) == sorted(written.chunks_added)


def test_a_forgotten_source_read_again_is_extracted_again(
    memory: stratamem.Memory, server: FakeModelServer
) -> None:
    first = extract(memory, server, "slack:#incidents")
    memory.sources.forget("slack:#incidents")
    assert model_facts(memory) == []
    memory.ingest(EXAMPLES / "slack-export", parallel=False)
    again = extract(memory, server, "slack:#incidents")
    assert again.chunks == first.chunks
    assert len(model_facts(memory)) == first.facts


def test_a_locked_source_is_never_sent(
    memory: stratamem.Memory, server: FakeModelServer, tmp_path: Path
) -> None:
    canary = "CANARY-7f3a9 the vault code is 4471"
    notes = tmp_path / "secret"
    notes.mkdir()
    (notes / "vault.md").write_text(f"# Vault\n\n{canary}\n")
    memory.ingest(notes, scope="notes:secret", parallel=False)
    memory.locks.lock("notes:secret", passphrase="correct horse")
    report = extract(memory, server)
    locked = [s for s in report.skipped if s.source == "notes:secret"]
    assert len(locked) == 1
    assert "locked" in locked[0].reason
    assert report.sources == len(memory.sources.list())
    assert server.requests, "the other sources were extracted"
    bodies = [json.dumps(r.payload) for r in server.requests]
    assert not any("CANARY-7f3a9" in body for body in bodies)
    secret = memory.sources.get("notes:secret")
    assert not [f for f in model_facts(memory) if f.source_id == secret.id]


def test_a_source_locked_while_queued_is_never_sent(
    memory: stratamem.Memory, server: FakeModelServer, tmp_path: Path
) -> None:
    notes = tmp_path / "secret"
    notes.mkdir()
    (notes / "vault.md").write_text("# Vault\n\nCANARY-7f3a9 the vault code is 4471\n")
    memory.ingest(notes, scope="notes:secret", parallel=False)
    secret = memory.sources.get("notes:secret")
    memory.store.jobs.enqueue("extract", extract_job_key(secret.id), {"source_id": secret.id})
    memory.locks.lock("notes:secret", passphrase="correct horse")
    result = memory.facts.extract(pending=True, endpoint=server.base_url, model="m")
    assert [s.source for s in result.skipped] == ["notes:secret"]
    assert "locked" in result.skipped[0].reason
    assert server.requests == []
    assert memory.store.jobs.counts(kind="extract") == {"done": 1}


def test_a_principal_cannot_extract(
    db: str, memory: stratamem.Memory, server: FakeModelServer
) -> None:
    with memory.as_principal("reader") as reader:
        with pytest.raises(AccessDenied, match="may not extract facts"):
            extract(reader, server)
        with pytest.raises(AccessDenied):
            reader.facts.set_extraction(server.base_url, "m")
    assert server.requests == []


def test_a_memory_with_unlocked_sources_cannot_extract(
    db: str, memory: stratamem.Memory, server: FakeModelServer, tmp_path: Path
) -> None:
    notes = tmp_path / "secret"
    notes.mkdir()
    (notes / "vault.md").write_text("# Vault\n\nCANARY-7f3a9\n")
    memory.ingest(notes, scope="notes:secret", parallel=False)
    memory.locks.lock("notes:secret", passphrase="pw")
    unlocked = stratamem.open(db, embedder=None, unlock={"notes:secret": "pw"})
    with unlocked, pytest.raises(LockError, match="cannot extract"):
        extract(unlocked, server)
    assert server.requests == []


def test_the_api_key_is_sent_and_kept_nowhere(
    db: str,
    memory: stratamem.Memory,
    server: FakeModelServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    key = "sk-canary-b8e1d2c4a9f0"
    monkeypatch.setenv("STRATAMEM_EXTRACT_API_KEY", key)
    memory.facts.set_extraction(server.base_url, "m")
    server.queue(500, {"error": {"message": "retry me"}})
    with caplog.at_level(logging.DEBUG):
        report = memory.facts.extract(["slack:#incidents"])
    assert report.retries == 1
    assert {r.headers.get("authorization") for r in server.requests} == {f"Bearer {key}"}
    memory.store.close()
    if is_postgres(db):  # no row of any table holds it
        for (table,) in rows(db, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"):
            found = rows(db, f"SELECT count(*) FROM {table} t WHERE strpos(t::text, ?) > 0", key)
            assert found == [(0,)], table
    for suffix in ("", "-wal", "-shm"):
        path = Path(f"{db}{suffix}")
        if path.exists():
            assert key.encode() not in path.read_bytes(), path
    assert key not in json.dumps(report.to_dict())
    assert key not in caplog.text


def test_ingest_extracts_the_sources_it_changed_when_enabled(
    memory: stratamem.Memory, server: FakeModelServer, model: Model, tmp_path: Path
) -> None:
    notes = tmp_path / "journal"
    notes.mkdir()
    (notes / "monday.md").write_text("# Monday\n\nDan moved to the payments team.\n")
    assert memory.facts.extraction() is None
    memory.ingest(notes, scope="notes:journal", parallel=False)
    assert server.requests == []  # off: nothing is sent
    memory.facts.set_extraction(server.base_url, "m")
    assert memory.facts.extraction() == (server.base_url, "m")
    (notes / "tuesday.md").write_text("# Tuesday\n\nErin leads the release.\n")
    memory.ingest(notes, scope="notes:journal", parallel=False)
    journal = memory.sources.get("notes:journal")
    asked = model.nodes_asked()
    assert sorted(asked) == sorted(c.id for c in memory.store.iter_chunks(journal.id))
    assert {f.source_id for f in model_facts(memory)} == {journal.id}
    assert memory.store.get_setting(PROGRESS_PREFIX + journal.id)
    memory.facts.set_extraction(None)
    assert memory.facts.extraction() is None
    (notes / "wednesday.md").write_text("# Wednesday\n\nNothing happened.\n")
    memory.ingest(notes, scope="notes:journal", parallel=False)
    assert len(model.nodes_asked()) == len(asked)


def test_ingest_goes_on_when_extraction_fails(
    memory: stratamem.Memory, server: FakeModelServer, tmp_path: Path
) -> None:
    notes = tmp_path / "journal"
    notes.mkdir()
    (notes / "monday.md").write_text("# Monday\n\nDan moved to the payments team.\n")
    memory.facts.set_extraction(server.base_url, "m")
    server.queue(401, {"error": {"message": "no key"}})
    report = memory.ingest(notes, scope="notes:journal", parallel=False)
    assert report.chunks > 0
    assert report.failed == []
    assert model_facts(memory) == []
    assert [key for key, _ in memory.store.jobs.failed()] == [
        extract_job_key(memory.sources.get("notes:journal").id)
    ]


def test_bad_configuration_is_refused(memory: stratamem.Memory) -> None:
    with pytest.raises(ValueError, match="no extraction endpoint"):
        memory.facts.extract()
    with pytest.raises(ValueError, match="http"):
        memory.facts.extract(endpoint="ftp://host/v1", model="m")
    with pytest.raises(ValueError, match="must not hold credentials"):
        memory.facts.set_extraction("http://user:secret@127.0.0.1:1/v1", "m")
    with pytest.raises(ValueError, match="model"):
        memory.facts.set_extraction("http://127.0.0.1:1/v1", "")
    assert memory.facts.extraction() is None


def test_the_report_as_json(memory: stratamem.Memory, server: FakeModelServer) -> None:
    report: ExtractReport = extract(memory, server, "slack:#incidents")
    data = report.to_dict()
    assert data["endpoint"] == f"{server.base_url}/chat/completions"
    assert (data["facts"], data["batches"], data["retries"]) == (report.facts, 1, 0)
    assert json.loads(json.dumps(data)) == data
