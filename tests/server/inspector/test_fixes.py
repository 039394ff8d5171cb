"""Corrections from the inspector's pages (``/fix/...``), through httpx against uvicorn: each
one's confirmation page, its POST, and what the store holds after, read as the pages read it.

One store per module and backend: the Slack export (access ``team``), the team mailbox
(access ``eng``), a note folder to lock (``team``), memories (items) in ``team-memory``
(``team``) and facts stated by the owner, into ``slack:#eng`` (seen by ``team``) and into
``mbox:team`` (hidden from it). Principals: ``bot`` (``team``, may write) and ``reader``
(``team``, may not). Three servers, all over the same store: ``logins`` (tokens, writes on),
``owner`` (no tokens, writes on) and ``off`` (no tokens, writes off). Each test corrects its
own facts and items, so that none depends on another's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from html import unescape
from pathlib import Path
from typing import Any

import httpx
import jinja2
import pytest
from fastapi import FastAPI
from locked_store import FAST_KDF
from serving import live

import stratamem
from stratamem.access import crypto
from stratamem.server.http import create_app
from stratamem.server.inspector import views
from stratamem.server.inspector.app import TEMPLATES
from stratamem.server.service import Service
from stratamem.testing import HashingEmbedder
from suite import PATIENCE_S

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "workspace"
WHO = ("owner", "bot")
PASSPHRASE = "correct horse battery staple"
# Per writer, the facts and items it corrects: subject, predicate, value.
FACTS = {
    who: [(f"person:{who}{n} doe", "works_at", f"Acme {who}{n}") for n in range(3)] for who in WHO
}
HIDDEN_FACT = ("person:zed hidden", "works_at", "Umbrella")


@pytest.fixture(scope="module")
def store(served_location: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    notes = tmp_path_factory.mktemp("lockable")
    (notes / "secret.md").write_text("# Plans\n\nThe quokkalantern plan ships in May.\n")
    with stratamem.open(served_location, embedder=HashingEmbedder()) as memory:
        memory.ingest(EXAMPLES / "slack-export", parallel=False)
        memory.ingest(EXAMPLES / "mail" / "team.mbox", access="eng", parallel=False)
        memory.ingest(notes, access="team", scope="notes:lockable", parallel=False)
        facts: dict[str, list[str]] = {}
        for who, rows in FACTS.items():
            facts[who] = [
                memory.facts.remember(s, p, o, valid_from="2024-01-05", source="slack:#eng")
                .recorded[0]
                .id
                for s, p, o in rows
            ]
        for who in WHO:
            memory.facts.remember(f"person:{who} maya", "role", "engineer", source="slack:#eng")
            memory.facts.remember(
                f"person:{who} maya patel", "team", "platform", source="slack:#eng"
            )
        hidden = memory.facts.remember(*HIDDEN_FACT, source="mbox:team").recorded[0].id
        items = {}
        for who in WHO:
            for n in range(3):
                done = memory.items.add(
                    f"{who} memory {n}: Maya prefers morning meetings",
                    source="team-memory",
                    id=f"{who}-item-{n}",
                )
                items[f"{who}-{n}"] = done.chunks_added[0]
        memory.sources.set_access("team-memory", scopes=["team"])
        memory.indexes.embed()
        tokens = {
            "bot": memory.principals.add("bot", "team", write=True),
            "reader": memory.principals.add("reader", "team"),
        }
        hidden_node = memory.query_source("mbox:team", limit=1).hits[0].node_id
        ids = {s.scope: s.id for s in memory.sources.list()}
    return {
        "path": served_location,
        "facts": facts,
        "hidden_fact": hidden,
        "items": items,
        "hidden_node": hidden_node,
        "tokens": tokens,
        "ids": ids,
    }


@pytest.fixture(scope="module")
def apps(store: dict[str, Any]) -> Iterator[dict[str, FastAPI]]:
    with (
        Service(store["path"], embedder=HashingEmbedder(), allow_writes=True) as service,
        Service(store["path"], embedder=HashingEmbedder()) as read_only,
    ):
        yield {
            "logins": create_app(service, access_log=None),
            "owner": create_app(service, tokens_required=False, access_log=None),
            "off": create_app(read_only, tokens_required=False, access_log=None),
        }


@pytest.fixture(scope="module")
def urls(apps: dict[str, FastAPI]) -> Iterator[dict[str, str]]:
    with live(apps["logins"]) as logins, live(apps["owner"]) as owner, live(apps["off"]) as off:
        yield {"logins": logins, "owner": owner, "off": off}


def form_token(app: FastAPI, client: httpx.Client) -> str:
    """The form token of ``client``'s session, as a confirmation page would give it (for a
    page that refuses before showing one)."""
    client.get("/search")
    return str(app.state.inspector.sessions.csrf(client.cookies["stratamem_session"]))


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html
    return found.group(1)


def error_line(html: str) -> str:
    found = re.search(r'<p class="error" role="alert">([^<]*)</p>', html)
    assert found, html
    return unescape(found.group(1))


@contextmanager
def browser(urls: dict[str, str], who: str, store: dict[str, Any]) -> Iterator[httpx.Client]:
    """A client reading as ``who``: the owner's server, or a login on the logins server."""
    if who in ("owner", "off"):
        with httpx.Client(base_url=urls[who], timeout=PATIENCE_S) as client:
            yield client
        return
    with httpx.Client(base_url=urls["logins"], timeout=PATIENCE_S) as client:
        form = client.get("/login")
        answer = client.post(
            "/login", data={"token": store["tokens"][who], "csrf": csrf_of(form.text)}
        )
        assert answer.status_code == 303, answer.text
        yield client


def confirmed(client: httpx.Client, path: str, **fields: str) -> httpx.Response:
    """The confirmation page at ``path``, then its form posted with ``fields``."""
    page = client.get(path)
    assert page.status_code == 200, page.text
    return client.post(path, data={"csrf": csrf_of(page.text), **fields})


def entity(store: dict[str, Any], subject: str) -> views.EntityDetail:
    """The entity page's data, read as the owner."""
    with stratamem.open(store["path"], embedder=HashingEmbedder()) as memory:
        found = views.entity(memory, subject)
    assert found is not None
    return found


def fact_path(which: str, subject: str, fact: str) -> str:
    return f"/fix/{which}?" + httpx.QueryParams({"subject": subject, "fact": fact}).__str__()


# -- facts ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("who", WHO)
def test_a_retracted_fact_stays_in_the_timeline_as_retracted(
    urls: dict[str, str], store: dict[str, Any], who: str
) -> None:
    subject, predicate, value = FACTS[who][0]
    fact = store["facts"][who][0]
    with browser(urls, who, store) as client:
        page = client.get(fact_path("retract", subject, fact))
        assert page.status_code == 200
        assert f"Retract {subject} {predicate} {value} (valid 2024-01-05 → now)?" in page.text
        assert "stays in the history as retracted" in page.text
        assert 'class="cancel"' in page.text
        answer = client.post(fact_path("retract", subject, fact), data={"csrf": csrf_of(page.text)})
    assert answer.status_code == 303
    assert answer.headers["location"] == "/entities/entity?" + str(httpx.QueryParams(id=subject))
    row = next(f for f in entity(store, subject).facts if f.id == fact)
    assert row.ended == "retracted"
    assert row.value == value


@pytest.mark.parametrize("who", WHO)
def test_a_corrected_fact_is_superseded_by_the_new_value(
    urls: dict[str, str], store: dict[str, Any], who: str
) -> None:
    subject, _, value = FACTS[who][1]
    fact = store["facts"][who][1]
    with browser(urls, who, store) as client:
        answer = confirmed(
            client,
            fact_path("correct", subject, fact),
            value="Globex",
            valid_from="2024-06-01",
        )
    assert answer.status_code == 303, answer.text
    rows = entity(store, subject).facts
    old = next(f for f in rows if f.id == fact)
    assert old.ended == "superseded"
    assert old.superseded_with == "Globex"
    new = next(f for f in rows if f.value == "Globex")
    assert new.ended == ""
    assert views.when(new.valid_from) == "2024-06-01"
    # What held before the new value is kept, closed where it starts.
    assert any(f.value == value and f.ended == "closed" for f in rows)


def test_a_bad_value_is_one_line_on_the_page_and_changes_nothing(
    urls: dict[str, str], store: dict[str, Any]
) -> None:
    subject, _, _value = FACTS["owner"][2]
    fact = store["facts"]["owner"][2]
    before = entity(store, subject).facts
    with browser(urls, "owner", store) as client:
        path = fact_path("correct", subject, fact)
        bad_time = confirmed(client, path, value="Initech", valid_from="not-a-dayzz")
        empty = confirmed(client, path, value="  ")
    assert bad_time.status_code == 422
    line = error_line(bad_time.text)
    assert "valid_from" in line
    assert "not-a-dayzz" not in line
    assert empty.status_code == 422
    assert error_line(empty.text) == "give the new value"
    assert entity(store, subject).facts == before


# -- items ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("who", WHO)
def test_an_edited_item_shows_its_new_text_and_keeps_its_history(
    urls: dict[str, str], store: dict[str, Any], who: str
) -> None:
    node = store["items"][f"{who}-0"]
    with browser(urls, who, store) as client:
        shown = client.get(f"/nodes/{node}")
        assert f'href="/fix/edit?node={node}"' in shown.text
        answer = confirmed(client, f"/fix/edit?node={node}", text=f"{who}: Maya prefers tea")
        assert answer.status_code == 303, answer.text
        where = answer.headers["location"]
        assert where.startswith("/nodes/")
        assert where != f"/nodes/{node}"
        after = client.get(where)
        assert f"{who}: Maya prefers tea" in after.text
        # The old text's node is no longer the item's: no correction of it is offered.
        assert client.get(f"/fix/edit?node={node}").status_code == 404
    with stratamem.open(store["path"], embedder=HashingEmbedder()) as memory:
        history = memory.items.history(f"{who}-item-0", source="team-memory")
    assert [v.action for v in history] == ["added", "edited"]
    assert history[0].text == f"{who} memory 0: Maya prefers morning meetings"


@pytest.mark.parametrize("who", WHO)
def test_a_removed_item_leaves_its_node_and_keeps_its_history(
    urls: dict[str, str], store: dict[str, Any], who: str
) -> None:
    node = store["items"][f"{who}-1"]
    with browser(urls, who, store) as client:
        page = client.get(f"/fix/remove?node={node}")
        assert "It leaves every index at once" in page.text
        answer = client.post(f"/fix/remove?node={node}", data={"csrf": csrf_of(page.text)})
        assert answer.status_code == 303, answer.text
        assert answer.headers["location"] == f"/sources/{store['ids']['team-memory']}"
        # Its node is kept for the history, but no longer the item's: nothing to correct.
        assert client.get(f"/fix/remove?node={node}").status_code == 404
    with stratamem.open(store["path"], embedder=HashingEmbedder()) as memory:
        history = memory.items.history(f"{who}-item-1", source="team-memory")
        found = memory.search(f"{who} memory 1", mode="keyword", limit=50).hits
    assert history[-1].action == "removed"
    assert node not in {h.node_id for h in found}


def test_an_empty_text_is_refused_on_the_page(urls: dict[str, str], store: dict[str, Any]) -> None:
    node = store["items"]["owner-2"]
    with browser(urls, "owner", store) as client:
        answer = confirmed(client, f"/fix/edit?node={node}", text="   ")
        assert answer.status_code == 422
        assert error_line(answer.text) == "give the new text"
        assert "owner memory 2" in client.get(f"/nodes/{node}").text


# -- entities ------------------------------------------------------------------------------------


@pytest.mark.parametrize("who", WHO)
def test_a_merge_names_both_and_the_merged_id_becomes_an_alias(
    urls: dict[str, str], store: dict[str, Any], who: str
) -> None:
    away, into = f"person:{who} maya", f"person:{who} maya patel"
    with browser(urls, who, store) as client:
        first = client.get("/fix/merge?" + str(httpx.QueryParams(entity=away)))
        assert first.status_code == 200
        assert 'name="into"' in first.text
        assert '<form method="get" action="/fix/merge"' in first.text
        path = "/fix/merge?" + str(httpx.QueryParams(entity=away, into=into))
        page = client.get(path)
        assert f"Merge {away} into {into}?" in page.text
        assert "1 fact" in page.text
        answer = client.post(path, data={"csrf": csrf_of(page.text)})
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == "/entities/entity?" + str(httpx.QueryParams(id=into))
    assert away in entity(store, into).aliases


# -- locks ---------------------------------------------------------------------------------------


def test_the_owner_locks_and_unlocks_a_source_with_its_passphrase(
    urls: dict[str, str], store: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(crypto, "DEFAULT_KDF", FAST_KDF)
    source = store["ids"]["notes:lockable"]

    def locked() -> bool:
        with stratamem.open(store["path"], embedder=HashingEmbedder()) as memory:
            return memory.sources.get(source).locked

    with browser(urls, "owner", store) as client:
        differ = confirmed(client, f"/fix/lock?source={source}", passphrase="a", again="b")
        assert differ.status_code == 422
        assert error_line(differ.text) == "the two passphrases differ: type it twice"
        assert not locked()
        answer = confirmed(
            client, f"/fix/lock?source={source}", passphrase=PASSPHRASE, again=PASSPHRASE
        )
        assert answer.status_code == 303, answer.text
        assert answer.headers["location"] == "/sources"
        assert locked()
        assert client.get(f"/fix/lock?source={source}").status_code == 409
        wrong = confirmed(client, f"/fix/unlock?source={source}", passphrase="not it")
        assert wrong.status_code == 422
        assert error_line(wrong.text).startswith("wrong passphrase")
        assert "not it" not in wrong.text
        assert locked()
        answer = confirmed(client, f"/fix/unlock?source={source}", passphrase=PASSPHRASE)
        assert answer.status_code == 303, answer.text
        assert not locked()


# -- refusals ------------------------------------------------------------------------------------


def corrections(store: dict[str, Any]) -> list[str]:
    subject, _, _ = FACTS["owner"][2]
    fact = store["facts"]["owner"][2]
    return [
        fact_path("retract", subject, fact),
        fact_path("correct", subject, fact),
        f"/fix/edit?node={store['items']['owner-2']}",
        f"/fix/remove?node={store['items']['owner-2']}",
        "/fix/merge?" + str(httpx.QueryParams(entity="person:owner maya")),
        f"/fix/lock?source={store['ids']['notes:lockable']}",
    ]


def test_a_principal_without_write_permission_is_refused(
    urls: dict[str, str], apps: dict[str, FastAPI], store: dict[str, Any]
) -> None:
    node = store["items"]["owner-2"]
    with browser(urls, "reader", store) as client:
        assert "/fix/" not in client.get(f"/nodes/{node}").text
        token = form_token(apps["logins"], client)
        for path in corrections(store):
            for answer in (client.get(path), client.post(path, data={"csrf": token})):
                assert answer.status_code == 403, path
                assert error_line(answer.text) == "principal 'reader' may not write"


def test_a_writer_may_not_lock(
    urls: dict[str, str], apps: dict[str, FastAPI], store: dict[str, Any]
) -> None:
    source = store["ids"]["notes:lockable"]
    with browser(urls, "bot", store) as client:
        token = form_token(apps["logins"], client)
        for path in (f"/fix/lock?source={source}", f"/fix/unlock?source={source}"):
            for answer in (client.get(path), client.post(path, data={"csrf": token})):
                assert answer.status_code == 403
                assert error_line(answer.text) == "only the owner locks and unlocks sources"


def test_writes_off_show_no_correction_and_refuse_each(
    urls: dict[str, str], apps: dict[str, FastAPI], store: dict[str, Any]
) -> None:
    node = store["items"]["owner-2"]
    with browser(urls, "off", store) as client:
        assert "/fix/" not in client.get(f"/nodes/{node}").text
        token = form_token(apps["off"], client)
        for path in corrections(store):
            for answer in (client.get(path), client.post(path, data={"csrf": token})):
                assert answer.status_code == 403, path
                assert "writes are off" in error_line(answer.text)
    assert "owner memory 2" in entity_text(urls, store, node)


def entity_text(urls: dict[str, str], store: dict[str, Any], node: str) -> str:
    with browser(urls, "owner", store) as client:
        return client.get(f"/nodes/{node}").text


def test_a_post_without_its_form_token_is_refused_and_changes_nothing(
    urls: dict[str, str], store: dict[str, Any]
) -> None:
    subject, _, _ = FACTS["owner"][2]
    before = entity(store, subject).facts
    with browser(urls, "owner", store) as client:
        for path in corrections(store):
            for data in ({}, {"csrf": "0" * 64}):
                answer = client.post(path, data={**data, "text": "x", "value": "x"})
                assert answer.status_code == 403, path
    assert entity(store, subject).facts == before
    assert "owner memory 2" in entity_text(urls, store, store["items"]["owner-2"])


def test_hidden_targets_answer_as_missing_ones(
    urls: dict[str, str], apps: dict[str, FastAPI], store: dict[str, Any]
) -> None:
    hidden_subject = HIDDEN_FACT[0]
    pairs = [
        (
            fact_path("retract", hidden_subject, store["hidden_fact"]),
            fact_path("retract", "person:nobody at all", "fact_" + "0" * 24),
        ),
        (
            fact_path("correct", "person:bot0 doe", store["hidden_fact"]),
            fact_path("correct", "person:bot0 doe", "fact_" + "0" * 24),
        ),
        (f"/fix/edit?node={store['hidden_node']}", f"/fix/edit?node={'0' * 32}"),
        (f"/fix/remove?node={store['hidden_node']}", f"/fix/remove?node={'0' * 32}"),
        (
            "/fix/merge?" + str(httpx.QueryParams(entity=hidden_subject)),
            "/fix/merge?" + str(httpx.QueryParams(entity="person:nobody at all")),
        ),
        (
            "/fix/merge?"
            + str(httpx.QueryParams(entity="person:bot maya patel", into=hidden_subject)),
            "/fix/merge?"
            + str(httpx.QueryParams(entity="person:bot maya patel", into="person:nobody")),
        ),
    ]
    with browser(urls, "bot", store) as client:
        token = form_token(apps["logins"], client)
        for hidden, missing in pairs:
            for method in ("GET", "POST"):
                data = {"csrf": token, "value": "x", "text": "x"} if method == "POST" else None
                a = client.request(method, hidden, data=data)
                b = client.request(method, missing, data=data)
                assert a.status_code == b.status_code == 404, (hidden, a.text)
                assert error_line(a.text) == error_line(b.text)
    with stratamem.open(store["path"], embedder=HashingEmbedder()) as memory:
        hidden_row = next(f for f in memory.facts.about(hidden_subject))
    assert hidden_row.expired_at is None


# -- the links on the pages ---------------------------------------------------------------------


def rendered(template: str, **values: Any) -> str:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    views.register(env)
    base = {"who": "owner", "owner": True, "logins": False, "csrf": "t", "path": "/"}
    return env.get_template(template).render({**base, **values})


@pytest.mark.parametrize("may_write", [True, False])
def test_the_entity_and_source_pages_offer_corrections_only_to_writers(
    store: dict[str, Any], may_write: bool
) -> None:
    with stratamem.open(store["path"], embedder=HashingEmbedder()) as memory:
        detail = views.entity(memory, "person:owner maya patel")
        source = views.source(memory, "notes:lockable")
    page = rendered("entity.html", detail=detail, may_write=may_write)
    assert ('action="/fix/merge"' in page) is may_write
    assert ("/fix/correct?subject=" in page) is may_write
    assert ("/fix/retract?subject=" in page) is may_write
    shown = rendered("source.html", detail=source, may_write=may_write)
    assert ("/fix/lock?source=" in shown) is may_write
    # A writer that is not the owner is offered no lock.
    assert "/fix/lock" not in rendered(
        "source.html", detail=source, may_write=may_write, owner=False, who="bot"
    )


def test_a_change_the_operation_refuses_is_one_line_on_the_page(
    urls: dict[str, str], store: dict[str, Any]
) -> None:
    same = "person:owner maya patel"
    with stratamem.open(store["path"], embedder=HashingEmbedder()) as memory:
        before = memory.entities.history()
    with browser(urls, "owner", store) as client:
        path = "/fix/merge?" + str(httpx.QueryParams(entity=same, into=same))
        answer = confirmed(client, path)
    assert answer.status_code == 422
    assert (
        error_line(answer.text)
        == "entity_a and entity_b are the same id: nothing to merge or split"
    )
    with stratamem.open(store["path"], embedder=HashingEmbedder()) as memory:
        assert memory.entities.history() == before
