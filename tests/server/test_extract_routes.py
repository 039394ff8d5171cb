"""Extraction by a model through a live server: ``POST /v1/extract`` over httpx and the
``extract`` tool over MCP, as a job, for the owner and for a principal that may write.

One store per module: ``notes:team`` (``team``) and ``notes:hr`` (``hr``), each with a note
about @carol, and a fact about her resting on the hr note. Principals: ``bot`` (``team``, may
write), ``reader`` (``team``), ``maya`` (``user:maya``, may write) and ``ghost`` (a scope
no source has, may write). The model, a scripted
chat-completions server on 127.0.0.1, updates every fact it is shown, retracts the hidden hr
fact by its id, and adds one fact per batch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest
from serving import clients, connected, data, error, ok, tool_error

import stratamem
from stratamem.memory import decide
from stratamem.server.http import create_app
from stratamem.server.service import Service
from stratamem.testing import FakeModelServer, held_facts, record_ids

SECRET = "CANARY-hr-7c1e"


@dataclass(frozen=True)
class Store:
    db: str
    tokens: dict[str, str]
    hidden_fact: str
    ids: dict[str, str]


class Model:
    """Updates each fact shown, retracts the hidden fact, adds one; keeps every prompt."""

    def __init__(self) -> None:
        self.hidden = ""
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        ids = record_ids(prompt)

        def one(action: str, **given: Any) -> dict[str, Any]:
            return dict.fromkeys(decide.DECISION_KEYS) | {"action": action, "evidence": ids} | given

        out = [
            one("update", fact=label, object="the pager", reason="moved")
            for label in held_facts(prompt)
        ]
        out.append(one("retract", fact=self.hidden, reason="gone"))
        out.append(one("add", subject="handle:carol", predicate="wrote", object="a note"))
        return json.dumps({"decisions": out})


@pytest.fixture(scope="module")
def model() -> Model:
    return Model()


@pytest.fixture(scope="module")
def fake(model: Model) -> Iterator[FakeModelServer]:
    with FakeModelServer(reply=model) as running:
        yield running


@pytest.fixture(scope="module")
def store(served_location: str, fake: FakeModelServer, model: Model) -> Store:
    db = served_location
    with stratamem.open(db, embedder=None) as memory:
        memory.items.add("@carol carries the pager", source="notes:team", id="t1")
        memory.sources.set_access("notes:team", scopes="team")
        memory.items.add(f"@carol pay review {SECRET}", source="notes:hr", id="h1")
        memory.sources.set_access("notes:hr", scopes="hr")
        (hr,) = memory.store.iter_chunks(memory.sources.get("notes:hr").id)
        written = memory.facts.remember("handle:carol", "salary", SECRET, evidence=[hr.id])
        memory.facts.set_extraction(fake.base_url, "m")
        tokens = {
            "bot": memory.principals.add("bot", "team", write=True),
            "reader": memory.principals.add("reader", "team"),
            "maya": memory.principals.add("maya", "user:maya", write=True),
            "ghost": memory.principals.add("ghost", "nothing", write=True),
        }
        ids = {s.scope: s.id for s in memory.sources.list()}
    model.hidden = written.recorded[0].id
    return Store(db, tokens, written.recorded[0].id, ids)


@pytest.fixture(scope="module")
def service(store: Store) -> Iterator[Service]:
    with Service(store.db, embedder=None, allow_writes=True) as served:
        yield served


@pytest.fixture(scope="module")
def api(service: Service, store: Store) -> Iterator[dict[str, httpx.Client]]:
    with clients(
        create_app(service, access_log=None),
        create_app(service, tokens_required=False, access_log=None),
        store.tokens,
    ) as found:
        yield found


def test_http_a_principal_extracts_what_it_reads_and_never_touches_what_it_does_not(
    api: dict[str, httpx.Client], store: Store, model: Model
) -> None:
    with stratamem.open(store.db, embedder=None) as owner:
        salary_before = owner.facts.history("handle:carol", "salary")
    before = len(model.prompts)
    report = ok(api["bot"].post("/v1/extract", json={"redo": True}))
    assert report["job"].startswith("job-")
    asked = model.prompts[before:]
    assert len(asked) == report["batches"] == 1
    assert SECRET not in asked[0]
    assert "salary" not in asked[0]
    text = json.dumps(report)
    assert SECRET not in text
    assert store.ids["notes:hr"] not in text
    (skip,) = report["skipped"]
    assert "not among the facts shown" in skip["reason"]
    assert report["added"] == 1
    with stratamem.open(store.db, embedder=None) as owner:
        assert owner.facts.history("handle:carol", "salary") == salary_before
        wrote = owner.facts.recall("handle:carol", predicate="wrote")
        assert store.ids["notes:team"] in {f.source_id for f in wrote}


def test_http_a_principal_cannot_name_a_source_it_does_not_read(
    api: dict[str, httpx.Client], store: Store, model: Model
) -> None:
    before = len(model.prompts)
    for name in ("notes:hr", store.ids["notes:hr"]):
        found = api["bot"].post("/v1/extract", json={"sources": [name]})
        assert "no source" in error(found, 404, "not_found")
    assert model.prompts[before:] == []


def test_http_a_principal_that_reads_no_source_extracts_nothing(
    api: dict[str, httpx.Client], store: Store, model: Model
) -> None:
    with stratamem.open(store.db, embedder=None) as owner:
        before_facts = owner.facts.recall("handle:carol")
    before = len(model.prompts)
    report = ok(api["ghost"].post("/v1/extract", json={"redo": True}))
    assert model.prompts[before:] == []
    assert report["sources"] == report["batches"] == report["facts"] == 0
    text = json.dumps(report)
    assert SECRET not in text
    assert "notes:" not in text
    with stratamem.open(store.db, embedder=None) as owner:
        assert owner.facts.recall("handle:carol") == before_facts


def test_http_a_principal_without_write_is_refused(
    api: dict[str, httpx.Client], model: Model
) -> None:
    before = len(model.prompts)
    assert "may not write" in error(api["reader"].post("/v1/extract", json={}), 403, "forbidden")
    assert model.prompts[before:] == []


def test_http_the_owner_is_shown_every_fact_and_may_change_it(
    api: dict[str, httpx.Client], store: Store, model: Model
) -> None:
    before = len(model.prompts)
    report = ok(api["owner"].post("/v1/extract", json={"sources": ["notes:hr"], "redo": True}))
    (prompt,) = model.prompts[before:]
    shown = [tuple(v[:3]) for v in held_facts(prompt).values()]
    assert ("handle:carol", "salary", SECRET) in shown
    assert report["updated"] >= 1


def test_mcp_a_principal_extracts_as_a_job(
    api: dict[str, httpx.Client], store: Store, model: Model
) -> None:
    url = str(api["bot"].base_url).rstrip("/")

    async def scenario() -> tuple[dict[str, Any], str]:
        async with connected(url, store.tokens["bot"]) as session:
            tools = {t.name for t in (await session.list_tools()).tools}
            assert "extract" in tools
            done = data(await session.call_tool("extract", {"redo": True}))
            refused = tool_error(
                await session.call_tool("extract", {"sources": [store.ids["notes:hr"]]})
            )
            return done, refused

    before = len(model.prompts)
    done, refused = anyio.run(scenario)
    assert done["job"].startswith("job-")
    assert done["batches"] == 1
    assert "no source" in refused
    assert all(SECRET not in p for p in model.prompts[before:])
    assert SECRET not in json.dumps(done)


def test_http_add_messages_with_extract_runs_as_the_principal(
    api: dict[str, httpx.Client], store: Store, model: Model
) -> None:
    before = len(model.prompts)
    body = {
        "messages": [{"role": "user", "content": "@carol handed me the pager"}],
        "user": "maya",
        "session": "s1",
        "extract": True,
    }
    done = ok(api["maya"].post("/v1/add_messages", json=body))
    assert done["job"].startswith("job-")
    assert done["added"] == 1
    report = done["extracted"]
    assert report["batches"] == 1
    (prompt,) = model.prompts[before:]
    assert "@carol handed me the pager" in prompt
    assert SECRET not in prompt
    assert SECRET not in json.dumps(done)
    with stratamem.open(store.db, embedder=None) as owner:
        wrote = owner.facts.recall("handle:carol", predicate="wrote")
        assert done["source_id"] in {f.source_id for f in wrote}
