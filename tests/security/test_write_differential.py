"""The write path's differential test: a write a principal makes, and everything it reads after,
are the same whatever the store holds that it may not see.

For every operation a principal may call to write (the table's entries of access ``write``)
and for two writers (one of a team scope, one of a user's), the same calls run through the
operation table (``ops.table.call`` on a server's context, the code every door shares) against
two stores: (a) one that also holds sources hidden from the writer — other scopes, a locked
source, the very texts the writer writes (with vectors the embedding cache could hand out),
chunks waiting for a vector, seal jobs waiting and one that fails — and (b) one built from only
what the writer may read. The answers of the write, and of every read after it (search in each
mode with its legs explained, sources, stats, brief, facts, the item's history), must be equal
but for what is random by design (a new item's or fact's id, the clock: see
``security_kit.canonical``), and none may show a canary of the hidden sources. One live HTTP
server runs the same comparison for ingest. Extraction asks a scripted model
(:func:`echo_model`) that updates every fact it is shown and retracts a fact by an id it was
not shown: what a hidden source holds must change neither what it is shown nor what it does.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
import security_kit as kit
from security_kit import ECHOED, PrincipalSpec
from serving import bearer, call_http, live

from stratamem.memory.decide import DECISION_KEYS
from stratamem.ops.table import OPERATIONS, call
from stratamem.server.http import create_app
from stratamem.server.service import ServiceContext
from stratamem.store.sources import source_id_for
from stratamem.testing import FakeModelServer, held_facts, record_ids
from suite import PATIENCE_S

AT = "2024-03-02T10:00:00+00:00"
WINDOW = {"since": "2000-01-01", "until": "2100-01-01"}
Step = tuple[str, dict[str, Any]]


def _identity(writer: PrincipalSpec) -> dict[str, Any]:
    """Whose memory the writer writes: a user-scoped writer names its user."""
    return {"user": "maya"} if "user:maya" in writer.scopes else {}


def _add(writer: PrincipalSpec, text: str = ECHOED[0]) -> Step:
    return ("add", {"text": text, "id": "w-item", "time": AT, **_identity(writer)})


def _remember(writer: PrincipalSpec) -> Step:
    args = {"subject": "topic:queue", "predicate": "status", "object": ECHOED[1]}
    return ("remember", {**args, "valid_from": AT, **_identity(writer)})


# Two ids a writer names itself (facts it states), and a pair with an id only hidden sources
# name (an author of the HR source).
SEEN_PAIR = {"entity_a": "topic:queue", "entity_b": "person:maya patel"}
HIDDEN_PAIR = {"entity_a": "person:zorblat quimby", "entity_b": "topic:queue"}


def _fact_of(subject: str, writer: PrincipalSpec) -> Step:
    args = {"subject": subject, "predicate": "works_on", "object": "the queue"}
    return ("remember", {**args, "valid_from": AT, **_identity(writer)})


def _export(folder: Path) -> str:
    """The writer's export under the ingest root: the texts hidden sources hold too."""
    path = folder / "in" / "notes.jsonl"
    lines = [
        json.dumps({"id": f"n{n}", "text": text, "timestamp": 1_710_000_000 + n})
        for n, text in enumerate(ECHOED)
    ]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


# Each write as the calls it is made of: what it needs first, then the write itself. A later
# step takes what an earlier one answered (``answers``), as a client would.
Plan = Callable[[PrincipalSpec, Path, list[Any]], Step | None]


def _then_forget(writer: PrincipalSpec, folder: Path, answers: list[Any]) -> Step | None:
    report = answers[-1]
    if not isinstance(report, dict) or not report.get("sources"):
        return None
    return ("forget", {"source": report["sources"][0]["scope"]})


def _then_retract(writer: PrincipalSpec, folder: Path, answers: list[Any]) -> Step | None:
    written = answers[-1]
    if not isinstance(written, dict) or not written.get("recorded"):
        return None
    return ("retract", {"fact_id": written["recorded"][0]["id"]})


WRITES: dict[str, list[Plan]] = {
    "ingest": [lambda w, f, a: ("ingest", {"path": _export(f)})],
    "add": [lambda w, f, a: _add(w)],
    "edit": [
        lambda w, f, a: _add(w),
        lambda w, f, a: ("edit", {"id": "w-item", "text": ECHOED[1], **_identity(w)}),
    ],
    "rm": [
        lambda w, f, a: _add(w),
        lambda w, f, a: ("rm", {"id": "w-item", **_identity(w)}),
    ],
    "add_messages": [
        lambda w, f, a: (
            "add_messages",
            {
                "messages": [
                    {"role": "user", "content": ECHOED[0], "time": AT, "id": "t1"},
                    {"role": "assistant", "content": ECHOED[1], "time": AT, "id": "t2"},
                ],
                "user": "maya",
                "session": "s1",
            },
        )
    ],
    "remember": [lambda w, f, a: _remember(w)],
    "retract": [lambda w, f, a: _remember(w), _then_retract],
    "forget": [lambda w, f, a: ("ingest", {"path": _export(f)}), _then_forget],
    "merge_entities": [
        lambda w, f, a: _remember(w),
        lambda w, f, a: _fact_of("person:maya patel", w),
        # An id only hidden sources name answers as unknown, on both stores alike.
        lambda w, f, a: ("merge_entities", {**HIDDEN_PAIR}),
        lambda w, f, a: ("merge_entities", {**SEEN_PAIR}),
    ],
    "split_entities": [
        lambda w, f, a: _remember(w),
        lambda w, f, a: _fact_of("person:maya patel", w),
        lambda w, f, a: ("merge_entities", {**SEEN_PAIR}),
        lambda w, f, a: ("split_entities", {**HIDDEN_PAIR}),
        lambda w, f, a: ("split_entities", {**SEEN_PAIR}),
    ],
    # Twice: the second run is shown what the first wrote, and updates it.
    "extract": [
        lambda w, f, a: _remember(w),
        lambda w, f, a: ("extract", {"redo": True}),
        lambda w, f, a: ("extract", {"redo": True}),
    ],
}


def _decision(action: str, evidence: list[str], **given: Any) -> dict[str, Any]:
    return dict.fromkeys(DECISION_KEYS) | {"action": action, "evidence": evidence} | given


def echo_model(prompt: str) -> str:
    """What the extraction model answers: each fact shown updated (in the order of what they
    say, not of their labels), a fact retracted by an id it was not shown, and one fact added
    on the batch."""
    ids = record_ids(prompt)
    shown = sorted(held_facts(prompt).items(), key=lambda item: item[1])
    out = [
        _decision("update", ids, fact=label, object=ECHOED[1], reason="echo") for label, _ in shown
    ]
    out.append(_decision("retract", ids, fact="fact_" + "0" * 24, reason="guess"))
    out.append(_decision("add", ids, subject="topic:queue", predicate="status", object="echo"))
    return json.dumps({"decisions": out})


def reads_after(writer: PrincipalSpec) -> list[Step]:
    """What the writer reads once it has written."""
    whose = _identity(writer)
    return [
        ("search", {"query": ECHOED[0], "explain": True, "limit": 50}),
        ("search", {"query": "queue budget ledger", "mode": "keyword", "limit": 50}),
        ("search", {"query": ECHOED[1], "mode": "vector", "explain": True, "limit": 50}),
        ("search", {"query": "queue", "budget": 1500, "explain": True}),
        ("sources", {}),
        ("stats", {}),
        ("brief", {**WINDOW, "limit": 500}),
        ("query_facts", {"query": "queue status", "limit": 50}),
        ("recall_facts", {"subject": "topic:queue", **whose}),
        ("recall", {"query": "queue status owner", "limit": 50, **whose}),
        ("item_history", {"id": "w-item", **whose}),
        ("query_source", {"limit": 100}),
        ("search_entities", {"query": "a", "limit": 100}),
        ("entity_history", {}),
    ]


def test_the_table_lists_every_write_here() -> None:
    writes = {name for name, op in OPERATIONS.items() if op.access == "write"}
    assert writes == set(WRITES), "a write operation the differential test does not make"


@pytest.fixture(scope="module")
def stores(places: kit.Places, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Per writer, the store with hidden sources and the store of what it may read."""
    here = places.within(tmp_path_factory.mktemp("differential"))
    out = {}
    for writer in kit.WRITERS:
        unlocked = [s for s in kit.WRITE_SPECS if s is not kit.LOCKED_ECHO]
        for which, specs in (
            ("full", kit.WRITE_SPECS),
            ("reduced", tuple(kit.visible_specs(writer, unlocked))),
        ):
            location = here.new(f"{which[0]}-{writer.name}")
            kit.build_for_writes(location, specs, writer)
            here.keep(location)
            out[f"{which}/{writer.name}"] = location
    return out


@functools.cache
def _model() -> FakeModelServer:
    return FakeModelServer(reply=echo_model).start()


def model_url() -> str:
    """The extraction model's base URL: one server for the module, so that both stores'
    reports name the same endpoint."""
    return _model().base_url


@pytest.fixture(scope="module", autouse=True)
def _stop_model() -> Any:
    yield
    if _model.cache_info().currsize:
        _model().close()
        _model.cache_clear()


def hidden_canaries(writer: PrincipalSpec) -> set[str]:
    """What of the hidden sources the writer must never be shown: their canaries, scopes and
    source ids, and the texts left waiting in them."""
    unlocked = [s for s in kit.WRITE_SPECS if s is not kit.LOCKED_ECHO]
    shown = kit.visible_specs(writer, unlocked)
    out = {t.split()[0].lower() for t in kit.PENDING_TEXTS}
    for spec in kit.WRITE_SPECS:
        if spec in shown:
            continue
        out.update(c.lower() for c in spec.canaries)
        out.update(spec.scopes)
        out.update(source_id_for(scope) for scope in spec.scopes)
    return out


def write_and_read(
    places: kit.Places, location: str, folder: Path, writer: PrincipalSpec, write: str
) -> list[Any]:
    """Every answer of ``write``'s calls and of the reads after it, on a copy of the store at
    ``location``, as the writer (each answer plain data, an error as ``kit.Raised``)."""
    copy = places.within(folder).copy(location, "store")
    answers: list[Any] = []
    if write == "extract":
        with kit.open_memory(copy) as owner:
            owner.facts.set_extraction(model_url(), "m")
    with kit.serve_for_writes(copy, folder) as served:
        ctx = ServiceContext(served, writer.name)
        for plan in WRITES[write]:
            step = plan(writer, folder, answers)
            if step is None:  # what it needed was refused: refused on both stores alike
                answers.append(None)
                continue
            op, args = step
            answers.append(kit.outcome(functools.partial(call, ctx, op, args), copy))
        for op, args in reads_after(writer):
            answers.append(kit.outcome(functools.partial(call, ctx, op, args), copy))
    # Where the store lies is the owner's to know (an error naming it has it put as <db>).
    shown = json.dumps(kit.plain(answers, leave_out=frozenset()), default=str)
    assert kit.shown_as(copy) not in shown, f"{write} as {writer.name} shows the store's place"
    return kit.folder_masked(answers, folder)


@pytest.mark.parametrize("writer", kit.WRITERS, ids=lambda w: w.name)
@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_write_and_what_is_read_after_it_are_the_same_without_hidden_sources(  # type: ignore[no-untyped-def]
    places, stores, tmp_path: Path, write: str, writer: PrincipalSpec
) -> None:
    got = write_and_read(places, stores[f"full/{writer.name}"], tmp_path / "full", writer, write)
    want = write_and_read(
        places, stores[f"reduced/{writer.name}"], tmp_path / "reduced", writer, write
    )
    canaries = hidden_canaries(writer)
    found = kit.leaked(got, canaries)
    tally = kit.counts("write differential")
    tally.routes.add(write)
    tally.principals.add(writer.name)
    tally.compared += 1
    tally.checks += (len(canaries) + 1) * len(got)  # and the store's place
    assert not found, f"{write} as {writer.name} shows hidden {found}"
    kit.assert_same(kit.canonical(got), kit.canonical(want))


# -- the same over HTTP ---------------------------------------------------------------------


def _served_ingest(places: kit.Places, location: str, folder: Path, writer: PrincipalSpec) -> Any:
    """The writer's ingest over a live HTTP server of a copy of the store, and its reads."""
    copy = places.within(folder).copy(location, "store")
    with kit.open_memory(copy) as owner:
        owner.principals.remove(writer.name)
        token = owner.principals.add(
            writer.name, list(writer.scopes), sources=list(writer.sources), write=True
        )
    out = []
    with (
        kit.serve_for_writes(copy, folder) as served,
        live(create_app(served, access_log=None)) as url,
    ):
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=url, headers=headers, timeout=PATIENCE_S) as client:
            for op, args in [("ingest", {"path": _export(folder)}), *reads_after(writer)]:
                response = call_http(client, op, args)
                out.append((response.status_code, response.json()))
    assert kit.shown_as(copy) not in json.dumps(out), "the store's place is shown"
    return kit.folder_masked(out, folder)


@pytest.mark.parametrize("writer", kit.WRITERS, ids=lambda w: w.name)
def test_an_ingest_over_http_is_the_same_without_hidden_sources(  # type: ignore[no-untyped-def]
    places, stores, tmp_path: Path, writer: PrincipalSpec
) -> None:
    got = _served_ingest(places, stores[f"full/{writer.name}"], tmp_path / "full", writer)
    want = _served_ingest(places, stores[f"reduced/{writer.name}"], tmp_path / "reduced", writer)
    assert got[0][0] == 200, got[0]
    canaries = hidden_canaries(writer)
    found = kit.leaked(got, canaries)
    tally = kit.counts("write differential, live HTTP")
    tally.routes.add("ingest")
    tally.principals.add(writer.name)
    tally.compared += 1
    tally.checks += (len(canaries) + 1) * len(got)
    assert not found, f"ingest over HTTP as {writer.name} shows hidden {found}"
    kit.assert_same(kit.canonical(got), kit.canonical(want))


# -- the same through the inspector's corrections -----------------------------------------------

_CSRF = re.compile(r'name="csrf" value="[^"]+"')


def _page_writes(places: kit.Places, location: str, folder: Path, writer: PrincipalSpec) -> Any:
    """The writer's corrections from the inspector's pages (each confirmation page, then its
    form posted) on a live server of a copy of the store, with what it needs written first
    and read after through the API."""
    copy = places.within(folder).copy(location, "store")
    with kit.open_memory(copy) as owner:
        owner.principals.remove(writer.name)
        token = owner.principals.add(
            writer.name, list(writer.scopes), sources=list(writer.sources), write=True
        )
    out: list[Any] = []
    with (
        kit.serve_for_writes(copy, folder) as served,
        live(create_app(served, access_log=None)) as url,
        httpx.Client(base_url=url, headers=bearer(token), timeout=PATIENCE_S) as api,
        httpx.Client(base_url=url, timeout=PATIENCE_S) as page,
    ):
        login = page.get("/login")
        found = _CSRF.search(login.text)
        assert found
        csrf = found.group(0).split('value="')[1][:-1]
        assert page.post("/login", data={"token": token, "csrf": csrf}).status_code == 303

        def api_call(op: str, args: dict[str, Any]) -> Any:
            response = call_http(api, op, args)
            out.append((response.status_code, response.json()))
            return response.json()

        def fix(path: str, **fields: str) -> str:
            shown = page.get(path)
            # The route, not what it names: a hidden id asked for is the writer's own echo.
            out.append((path.partition("?")[0], shown.status_code, _CSRF.sub("csrf", shown.text)))
            if shown.status_code != 200:
                return ""
            token = _CSRF.search(shown.text)
            assert token
            form = {"csrf": token.group(0).split('value="')[1][:-1], **fields}
            done = page.post(path, data=form)
            out.append((done.status_code, done.headers.get("location"), done.text))
            return done.headers.get("location") or ""

        added = api_call(*_add(writer))
        said = api_call(*_remember(writer))
        api_call(*_fact_of("person:maya patel", writer))
        node = added.get("chunks_added", [""])[0]
        node = fix(f"/fix/edit?node={node}", text=ECHOED[1]).removeprefix("/nodes/")
        fact = said.get("recorded", [{}])[0].get("id", "")
        query = {"subject": "topic:queue", "fact": fact}
        fix(f"/fix/correct?{urlencode(query)}", value=ECHOED[0], valid_from="2024-03-05")
        held = api_call("recall_facts", {"subject": "topic:queue", **_identity(writer)})
        for row in held.get("facts", []):
            fix(f"/fix/retract?{urlencode({'subject': 'topic:queue', 'fact': row['id']})}")
        fix(f"/fix/merge?{urlencode({'entity': HIDDEN_PAIR['entity_a'], 'into': 'topic:queue'})}")
        pair = {"entity": SEEN_PAIR["entity_a"], "into": SEEN_PAIR["entity_b"]}
        fix(f"/fix/merge?{urlencode(pair)}")
        fix(f"/fix/remove?node={node}")
        for op, args in reads_after(writer):
            api_call(op, args)
    assert kit.shown_as(copy) not in json.dumps(out), "the store's place is shown"
    return kit.folder_masked(out, folder)


@pytest.mark.parametrize("writer", kit.WRITERS, ids=lambda w: w.name)
def test_corrections_from_the_pages_are_the_same_without_hidden_sources(  # type: ignore[no-untyped-def]
    places, stores, tmp_path: Path, writer: PrincipalSpec
) -> None:
    got = _page_writes(places, stores[f"full/{writer.name}"], tmp_path / "full", writer)
    want = _page_writes(places, stores[f"reduced/{writer.name}"], tmp_path / "reduced", writer)
    # Each correction got as far as its change: edit, correct, retract, merge, remove.
    posted = [entry for entry in got if len(entry) == 3 and entry[0] == 303]
    assert len(posted) == 5, got
    canaries = hidden_canaries(writer)
    found = kit.leaked(got, canaries)
    tally = kit.counts("write differential, inspector corrections")
    tally.routes.update({"/fix/edit", "/fix/correct", "/fix/retract", "/fix/merge", "/fix/remove"})
    tally.principals.add(writer.name)
    tally.compared += 1
    tally.checks += (len(canaries) + 1) * len(got)
    assert not found, f"corrections as {writer.name} show hidden {found}"
    kit.assert_same(kit.canonical(got), kit.canonical(want))
