"""Facts through a live server: ``POST /v1/recall_facts``, ``/v1/fact_history``,
``/v1/query_facts``, ``/v1/facts``, ``DELETE /v1/facts/{id}`` and ``GET /v1/rollups`` over
httpx, and the ``recall_facts``, ``fact_history``, ``query_facts``, ``rollups``, ``remember``
and ``retract`` tools over MCP (streamable HTTP at ``/mcp``).

One store per module: the Slack export (``team``) and the example notes (``private``), served
with tokens required and writes allowed, and by a second app without tokens for the owner.
Principals: ``bot`` (``team``, may write), ``reader`` (``team``), ``outsider`` (``eng``, may
write), ``narrow`` (``team`` narrowed to ``slack:*``, may write) and ``asserted`` (``team``, may
write; its own facts would go by the name of the owner's default source).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp_types import CallToolResult, TextContent
from serving import bearer, clients, connected, data, error, live, ok

import stratamem
from stratamem.errors import NotFoundError
from stratamem.ops import MemoryContext, call
from stratamem.server.echo import without_echo
from stratamem.server.http import create_app
from stratamem.server.service import Service
from stratamem.store.rollups import Rollup

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "workspace"

MISSING_NODE = "0" * 32
MISSING_FACT = "fact_" + "0" * 24
PHOENIX = "topic:phoenix"
SECRET_CODENAME = "quokka-lantern"  # the object of a fact resting on a private note
ROLLED_AT = datetime(2024, 4, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Store:
    db: str
    tokens: dict[str, str]
    team_leaf: str  # a message of slack:#eng
    note_leaf: str  # a chunk of notes:notes, which no principal may read
    ids: dict[str, str]  # scope → source id


@pytest.fixture(scope="module")
def store(served_location: str) -> Store:
    db = served_location
    with stratamem.open(db, embedder=None) as memory:
        memory.ingest(EXAMPLES / "slack-export", parallel=False)
        memory.ingest(EXAMPLES / "notes", parallel=False)
        memory.trees.flush()
        summary = memory.query_source("slack:#eng").hits[0]
        team_leaf = memory.drill_down(summary.node_id, max_depth=32)[-1].node_id
        note_leaf = memory.search("release", sources=["notes:notes"], mode="keyword").hits[0]
        tokens = {
            "bot": memory.principals.add("bot", "team", write=True),
            "reader": memory.principals.add("reader", "team"),
            "outsider": memory.principals.add("outsider", "eng", write=True),
            "narrow": memory.principals.add("narrow", "team", sources=["slack:*"], write=True),
            "asserted": memory.principals.add("asserted", "team", write=True),
        }
        ids = {s.scope: s.id for s in memory.sources.list()}
    return Store(db, tokens, team_leaf, note_leaf.node_id, ids)


@pytest.fixture(scope="module")
def service(store: Store) -> Iterator[Service]:
    with Service(store.db, embedder=None, allow_writes=True) as served:
        yield served


@pytest.fixture(scope="module")
def api(service: Service, store: Store) -> Iterator[dict[str, httpx.Client]]:
    """A client per principal of a server with tokens, and ``owner`` of one without."""
    with clients(
        create_app(service, access_log=None),
        create_app(service, tokens_required=False, access_log=None),
        store.tokens,
    ) as found:
        yield found


def remember(client: httpx.Client, **body: Any) -> httpx.Response:
    return client.post("/v1/facts", json=body)


def recall(client: httpx.Client, **body: Any) -> list[dict[str, Any]]:
    found = ok(client.post("/v1/recall_facts", json=body))
    assert set(found) == {"facts"}
    return found["facts"]  # type: ignore[no-any-return]


def history(client: httpx.Client, subject: str, predicate: str, **body: Any) -> list[Any]:
    body = {"subject": subject, "predicate": predicate, **body}
    found = ok(client.post("/v1/fact_history", json=body))
    assert set(found) == {"facts"}
    return found["facts"]  # type: ignore[no-any-return]


def said(facts: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(f["subject"], f["predicate"], f["object"]) for f in facts]


def when(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


@pytest.fixture(scope="module")
def owned(api: dict[str, httpx.Client], store: Store) -> dict[str, Any]:
    """What the owner stated over HTTP: a value on a team message, then a new one; a fact on
    a private note; one with neither evidence nor source; one into a named team source."""
    owner = api["owner"]
    return {
        "planning": ok(
            remember(
                owner,
                subject=PHOENIX,
                predicate="status",
                object="planning",
                valid_from="2024-03-01",
                evidence=[store.team_leaf],
            )
        ),
        "shipping": ok(
            remember(
                owner,
                subject="topic:Phoenix",
                predicate="Status",
                object="shipping",
                valid_from="2024-03-10T00:00:00Z",
                evidence=[store.team_leaf],
            )
        ),
        "codename": ok(
            remember(
                owner,
                subject=PHOENIX,
                predicate="codename",
                object=SECRET_CODENAME,
                evidence=[store.note_leaf],
            )
        ),
        "lead": ok(remember(owner, subject="person:Carol Diaz", predicate="leads", object=PHOENIX)),
        "standup": ok(
            remember(
                owner,
                subject="topic:standup",
                predicate="time",
                object="09:30",
                source="slack:#general",
            )
        ),
    }


# -- what the owner states, and who reads it -------------------------------------------------------


def test_the_owner_s_facts_land_in_the_source_of_their_evidence_or_the_one_named(
    api: dict[str, httpx.Client], owned: dict[str, Any], store: Store
) -> None:
    homes = {name: {f["source_id"] for f in w["recorded"]} for name, w in owned.items()}
    scopes = {s["scope"]: s for s in ok(api["owner"].get("/v1/sources"))["sources"]}
    assert homes == {
        "planning": {store.ids["slack:#eng"]},
        "shipping": {store.ids["slack:#eng"]},
        "codename": {store.ids["notes:notes"]},
        "lead": {scopes["facts:asserted"]["id"]},
        "standup": {store.ids["slack:#general"]},
    }
    assert scopes["facts:asserted"]["access"] == ["private"]
    (first,) = owned["planning"]["recorded"]
    assert owned["planning"]["expired"] == []
    assert first["valid_from"] == "2024-03-01T00:00:00+00:00"
    assert first["evidence"] == [store.team_leaf]
    # The new value closes the old one: its row expires, and a copy ending at the change and
    # the new value are recorded.
    assert owned["shipping"]["expired"] == [first["id"]]
    copy, new = owned["shipping"]["recorded"]
    assert said([copy, new]) == [(PHOENIX, "status", "planning"), (PHOENIX, "status", "shipping")]
    assert (copy["valid_from"], copy["valid_to"]) == (first["valid_from"], new["valid_from"])
    assert new["valid_to"] is None
    assert owned["lead"]["recorded"][0]["object_is_entity"] is True
    for write in owned.values():
        assert write["job"].startswith("job-")
    everything = recall(api["owner"])
    assert set(said(everything)) >= {
        (PHOENIX, "status", "shipping"),
        (PHOENIX, "codename", SECRET_CODENAME),
        ("person:carol diaz", "leads", PHOENIX),
        ("topic:standup", "time", "09:30"),
    }


def test_a_principal_recalls_only_the_facts_of_sources_it_reads(
    api: dict[str, httpx.Client], owned: dict[str, Any], store: Store
) -> None:
    # The sources of the team scope: the export's channels, and any that the module's other
    # tests have written by now (a writer's facts go to a source of its scopes).
    sources = ok(api["owner"].get("/v1/sources"))["sources"]
    team = {s["id"] for s in sources if "team" in s["access"]}
    assert {store.ids[s] for s in ("slack:#eng", "slack:#general", "slack:#incidents")} <= team
    everything = recall(api["owner"], limit=10_000)
    for name in ("bot", "reader"):
        seen = recall(api[name], limit=10_000)
        assert seen == [f for f in everything if f["source_id"] in team]
        assert (PHOENIX, "status", "shipping") in said(seen)
        assert ("topic:standup", "time", "09:30") in said(seen)
        assert SECRET_CODENAME not in json.dumps(seen)
        assert "person:carol diaz" not in {f["subject"] for f in seen}
    assert [f for f in recall(api["outsider"]) if f["source_id"] in team] == []
    # A subject and predicate only a hidden source speaks of answers as one nobody does.
    hidden = api["bot"].post("/v1/recall_facts", json={"subject": PHOENIX, "predicate": "codename"})
    nobody = api["bot"].post("/v1/recall_facts", json={"subject": PHOENIX, "predicate": "no_such"})
    assert hidden.status_code == nobody.status_code == 200
    assert hidden.content == nobody.content == b'{"facts":[]}'
    for subject in ("person:carol diaz", "person:nobody at all"):
        assert recall(api["bot"], subject=subject) == []


def test_recall_as_of_and_known_at_take_iso_times_and_spans(
    api: dict[str, httpx.Client], owned: dict[str, Any]
) -> None:
    bot = api["bot"]
    (first,) = owned["planning"]["recorded"]
    rows = history(bot, PHOENIX, "status")
    old = next(r for r in rows if r["id"] == first["id"])
    copy, new = owned["shipping"]["recorded"]
    ask = {"subject": PHOENIX, "predicate": "status"}

    def objects(**body: Any) -> list[tuple[str, str | None]]:
        return [(f["object"], f["valid_to"]) for f in recall(bot, **ask, **body)]

    assert objects() == [("shipping", None)]
    assert objects(as_of="2024-03-05") == [("planning", "2024-03-10T00:00:00+00:00")]
    assert objects(as_of="2024-03-05T12:00") == objects(as_of="2024-03-05T12:00:00Z")
    assert objects(as_of="2024-03-10T00:00:00Z") == [("shipping", None)]
    assert objects(as_of="2024-03-09T23:59:59.999+00:00") == objects(as_of="2024-03-05")
    assert objects(as_of="2024-02-29T23:59:59Z") == []
    assert objects(as_of="1d") == [("shipping", None)]
    # As known before the new value: the old row, open-ended, holds on March 20 too.
    assert objects(known_at=old["recorded_at"]) == [("planning", None)]
    assert objects(as_of="2024-03-20", known_at=old["recorded_at"]) == [("planning", None)]
    assert objects(as_of="2024-03-20", known_at=old["expired_at"]) == [("shipping", None)]
    assert objects(as_of="2024-03-05", known_at=old["expired_at"]) == [
        ("planning", "2024-03-10T00:00:00+00:00")
    ]
    # Everything was recorded moments ago: an hour back nothing was known.
    assert objects(known_at="1h") == []
    assert objects(as_of="2024-03-20", known_at="1h") == []
    assert [f["id"] for f in recall(bot, **ask, as_of="2024-03-20", known_at="0d")] == [new["id"]]
    assert copy["id"] in {f["id"] for f in recall(bot, **ask, as_of="2024-03-01")}


def test_fact_history_shows_replaced_rows_with_when_they_stopped_being_believed(
    api: dict[str, httpx.Client], owned: dict[str, Any]
) -> None:
    (first,) = owned["planning"]["recorded"]
    copy, new = owned["shipping"]["recorded"]
    for name in ("bot", "reader", "owner"):
        rows = history(api[name], "topic:phoenix", "STATUS")
        assert [r["id"] for r in rows] == [first["id"], copy["id"], new["id"]]
        assert [r["object"] for r in rows] == ["planning", "planning", "shipping"]
        assert rows[0]["expired_at"] is not None
        assert when(rows[0]["expired_at"]) == when(rows[1]["recorded_at"])
        assert when(rows[0]["recorded_at"]) < when(rows[0]["expired_at"])  # type: ignore[operator]
        assert [r["expired_at"] for r in rows[1:]] == [None, None]
    then = history(api["bot"], PHOENIX, "status", known_at=rows[0]["recorded_at"])
    assert [r["id"] for r in then] == [first["id"]]
    assert history(api["bot"], PHOENIX, "status", known_at="1h") == []
    # The history of a predicate only a hidden source speaks of is empty, as for none.
    hidden = api["bot"].post("/v1/fact_history", json={"subject": PHOENIX, "predicate": "codename"})
    nobody = api["bot"].post("/v1/fact_history", json={"subject": PHOENIX, "predicate": "nope"})
    assert hidden.status_code == nobody.status_code == 200
    assert hidden.content == nobody.content
    assert [r["object"] for r in history(api["owner"], PHOENIX, "codename")] == [SECRET_CODENAME]


# -- what a principal states ----------------------------------------------------------------------


def test_a_writer_states_a_fact_on_evidence_it_reads_into_that_source(
    api: dict[str, httpx.Client], store: Store
) -> None:
    write = ok(
        remember(
            api["bot"],
            subject="topic:pager",
            predicate="owner",
            object="person:Alice Chen",
            evidence=[store.team_leaf],
        )
    )
    (row,) = write["recorded"]
    assert (row["source_id"], row["object"], row["evidence"]) == (
        store.ids["slack:#eng"],
        "person:alice chen",
        [store.team_leaf],
    )
    job = ok(api["bot"].get(f"/v1/jobs/{write['job']}"))
    assert (job["action"], job["state"]) == ("remember", "done")
    for name in ("bot", "reader", "owner"):
        assert [f["id"] for f in recall(api[name], subject="topic:pager")] == [row["id"]]
    assert recall(api["outsider"], subject="topic:pager") == []
    # Into a team source named, without evidence.
    named = ok(
        remember(
            api["bot"],
            subject="topic:pager",
            predicate="rota",
            object="weekly",
            source="slack:#general",
        )
    )
    assert named["recorded"][0]["source_id"] == store.ids["slack:#general"]


def test_hidden_evidence_or_source_answers_as_a_missing_one(
    api: dict[str, httpx.Client], store: Store, owned: dict[str, Any]
) -> None:
    # ``owned`` states the secret codename on the hidden note, which no answer may show.
    bot = api["bot"]
    ask = {"subject": "topic:leak", "predicate": "says", "object": "anything"}
    cases = [
        ({"evidence": [store.note_leaf]}, {"evidence": [MISSING_NODE]}),
        (
            {"evidence": [store.team_leaf, store.note_leaf]},
            {"evidence": [store.team_leaf, MISSING_NODE]},
        ),
        ({"source": "notes:notes"}, {"source": "notes:nope"}),
        ({"source": store.ids["notes:notes"]}, {"source": "src_" + "0" * 16}),
    ]
    for hidden, missing in cases:
        got = remember(bot, **ask, **hidden)
        want = remember(bot, **ask, **missing)
        error(got, 404, "not_found")
        error(want, 404, "not_found")
        name = hidden.get("source") or store.note_leaf
        other = missing.get("source") or MISSING_NODE
        assert got.content.replace(name.encode(), b"<id>") == want.content.replace(
            other.encode(), b"<id>"
        )
        assert SECRET_CODENAME.encode() not in got.content
    assert recall(api["owner"], subject="topic:leak") == []


def test_a_writer_s_fact_without_evidence_goes_to_a_source_of_its_own(
    api: dict[str, httpx.Client], store: Store
) -> None:
    first = ok(remember(api["bot"], subject="person:bob", predicate="mood", object="sunny"))
    again = ok(
        remember(
            api["bot"],
            subject="person:bob",
            predicate="mood",
            object="rainy",
            valid_from="2024-05-01",
        )
    )
    listed = ok(api["owner"].get("/v1/sources"))["sources"]
    own = {s["scope"]: s for s in listed}["bot/facts:asserted"]
    assert (own["access"], own["kind"]) == (["team"], "record")
    assert {f["source_id"] for f in first["recorded"] + again["recorded"]} == {own["id"]}
    assert again["expired"] == [first["recorded"][0]["id"]]
    for name in ("bot", "reader"):
        assert [f["object"] for f in recall(api[name], subject="person:bob")] == ["rainy"]
        assert own["id"] in {s["id"] for s in ok(api[name].get("/v1/sources"))["sources"]}
    assert recall(api["outsider"], subject="person:bob") == []
    assert history(api["outsider"], "person:bob", "mood") == []


def test_a_principal_without_write_permission_is_refused(
    api: dict[str, httpx.Client], owned: dict[str, Any], store: Store
) -> None:
    before = history(api["owner"], PHOENIX, "status")
    target = owned["shipping"]["recorded"][1]["id"]
    for response in (
        remember(api["reader"], subject="topic:reader", predicate="p", object="o"),
        remember(
            api["reader"],
            subject=PHOENIX,
            predicate="status",
            object="x",
            evidence=[store.team_leaf],
        ),
        api["reader"].delete(f"/v1/facts/{target}"),
    ):
        assert "principal 'reader' may not write" in error(response, 403, "forbidden")
    assert history(api["owner"], PHOENIX, "status") == before
    assert recall(api["owner"], subject="topic:reader") == []
    assert "facts:reader" not in {
        s["scope"] for s in ok(api["owner"].get("/v1/sources"))["sources"]
    }


def test_retracting_a_hidden_fact_answers_as_a_missing_one(
    api: dict[str, httpx.Client], owned: dict[str, Any]
) -> None:
    (codename,) = owned["codename"]["recorded"]
    (lead,) = owned["lead"]["recorded"]
    for fact in (codename["id"], lead["id"]):
        got = api["bot"].delete(f"/v1/facts/{fact}")
        want = api["bot"].delete(f"/v1/facts/{MISSING_FACT}")
        error(got, 404, "not_found")
        assert got.content.replace(fact.encode(), b"<id>") == want.content.replace(
            MISSING_FACT.encode(), b"<id>"
        )
    believed = {f["id"] for f in recall(api["owner"])}
    assert {codename["id"], lead["id"]} <= believed


def test_a_writer_retracts_a_fact_it_reads(api: dict[str, httpx.Client]) -> None:
    (row,) = ok(remember(api["bot"], subject="topic:typo", predicate="is", object="wrong"))[
        "recorded"
    ]
    gone = ok(api["bot"].delete(f"/v1/facts/{row['id']}"))
    assert (gone["expired"], gone["recorded"]) == ([row["id"]], [])
    assert gone["job"].startswith("job-")
    assert recall(api["bot"], subject="topic:typo") == []
    (kept,) = history(api["bot"], "topic:typo", "is")
    assert kept["id"] == row["id"]
    assert kept["expired_at"] is not None
    # A second correction changes nothing.
    assert ok(api["bot"].delete(f"/v1/facts/{row['id']}"))["expired"] == []
    assert history(api["bot"], "topic:typo", "is") == [kept]


def test_writes_are_off_unless_allowed(store: Store, owned: dict[str, Any]) -> None:
    target = owned["shipping"]["recorded"][1]["id"]
    with (
        Service(store.db, embedder=None) as read_only,
        live(create_app(read_only, access_log=None, mount_mcp=False)) as url,
        live(
            create_app(read_only, tokens_required=False, access_log=None, mount_mcp=False)
        ) as mine,
        httpx.Client(base_url=url, headers=bearer(store.tokens["bot"])) as bot,
        httpx.Client(base_url=mine) as owner,
    ):
        for client in (bot, owner):
            for response in (
                remember(client, subject="topic:off", predicate="p", object="o"),
                client.delete(f"/v1/facts/{target}"),
            ):
                assert "--allow-writes" in error(response, 403, "forbidden")
            assert [f["id"] for f in recall(client, subject=PHOENIX, predicate="status")] == [
                target
            ]
        assert recall(owner, subject="topic:off") == []


@pytest.mark.parametrize(
    ("route", "body", "words"),
    [
        (
            "/v1/facts",
            {"valid_from": "2024-03-10", "valid_to": "2024-03-01"},
            "valid_to (2024-03-01T00:00:00+00:00) must come after valid_from",
        ),
        ("/v1/facts", {"valid_from": "2024-03-10", "valid_to": "2024-03-10"}, "must come after"),
        ("/v1/facts", {"subject": "carol"}, "is not an entity id"),
        ("/v1/facts", {"subject": "planet:mars"}, "is not an entity id"),
        (
            "/v1/facts",
            {"sourcee": "slack:#eng"},
            "remember: no parameter <name>: did you mean 'source'?",
        ),
        ("/v1/facts", {"object": ""}, "remember: 'object' cannot be empty"),
        ("/v1/facts", {"predicate": "   "}, "remember: 'predicate' cannot be empty"),
        ("/v1/facts", {"valid_from": "someday"}, "'valid_from' cannot be read as a time"),
        (
            "/v1/facts",
            {"evidence": 5},
            "remember: 'evidence' must be a list of texts, got a number",
        ),
        ("/v1/facts", {"valid_from": "2024-02-30"}, "remember: 'valid_from' cannot be read"),
        ("/v1/recall_facts", {"subject": "carol"}, "is not an entity id"),
        ("/v1/recall_facts", {"limit": 0}, "recall_facts: 'limit' must be at least 1"),
        ("/v1/recall_facts", {"as_of": "the day after"}, "cannot be read as a time"),
        (
            "/v1/recall_facts",
            {"subjects": []},
            "recall_facts: no parameter <name>: did you mean 'subject'?",
        ),
        ("/v1/fact_history", {"predicate": None}, "fact_history: 'predicate' cannot be null"),
        ("/v1/fact_history", {"subject": "phoenix"}, "is not an entity id"),
    ],
)
def test_bad_bodies_are_422_and_change_nothing(
    api: dict[str, httpx.Client], route: str, body: dict[str, Any], words: str
) -> None:
    base = {"subject": "topic:bad", "predicate": "is", "object": "bad"}
    if route == "/v1/recall_facts":
        base = {}
    elif route == "/v1/fact_history":
        base = {"subject": "topic:bad", "predicate": "is"}
    before = recall(api["owner"], limit=10_000)
    for name in ("bot", "owner"):
        message = error(api[name].post(route, json={**base, **body}), 422, "invalid_request")
        assert words in message
        assert "\n" not in message
    assert recall(api["owner"], limit=10_000) == before


def test_the_rows_a_write_answers_with_are_the_rows_stored(
    api: dict[str, httpx.Client], store: Store
) -> None:
    first = ok(
        remember(
            api["bot"],
            subject="topic:precise",
            predicate="since",
            object="then",
            valid_from="2024-05-01T10:00:00.123456Z",
            evidence=[store.team_leaf],
        )
    )
    second = ok(
        remember(
            api["bot"],
            subject="topic:precise",
            predicate="since",
            object="now",
            valid_from="2024-05-02T10:00:00Z",
            evidence=[store.team_leaf],
        )
    )
    stored = {r["id"]: r for r in history(api["bot"], "topic:precise", "since")}
    for row in first["recorded"] + second["recorded"]:
        answered = {**row, "expired_at": stored.get(row["id"], {}).get("expired_at")}
        assert answered == stored.get(row["id"]), "a write answers with rows not as stored"


# -- a principal's own source: only one it can read -----------------------------------------------


def test_a_writer_never_leaves_a_fact_where_it_cannot_read_it(
    api: dict[str, httpx.Client],
) -> None:
    """``narrow`` holds ``team`` but reads ``slack:*`` alone: a source of its own named
    ``facts:narrow`` is not one it reads, so a fact put there would be lost to it (and
    read by others)."""
    response = remember(api["narrow"], subject="topic:narrowed", predicate="p", object="o")
    if response.status_code == 200:
        mine = {f["id"] for f in recall(api["narrow"], subject="topic:narrowed")}
        assert {r["id"] for r in response.json()["recorded"]} <= mine, (
            "the fact went to a source its writer cannot read"
        )
    else:
        error(response, 403, "forbidden")
        assert recall(api["owner"], subject="topic:narrowed") == []


def test_a_writer_named_like_the_owner_s_source_neither_reads_nor_changes_it(
    api: dict[str, httpx.Client],
) -> None:
    """The owner's facts stated without evidence live in ``facts:asserted`` (private); the
    principal ``asserted`` stating a fact without evidence must not write there, nor be
    answered with what is there."""
    (secret,) = ok(
        remember(
            api["owner"],
            subject="person:dana",
            predicate="salary",
            object="owner-only-figure",
            valid_from="2024-01-01",
        )
    )["recorded"]
    response = remember(
        api["asserted"],
        subject="person:dana",
        predicate="salary",
        object="guess",
        valid_from="2024-06-01",
    )
    assert "owner-only-figure" not in response.text
    assert secret["id"] not in response.text
    assert secret["source_id"] not in response.text
    # Its fact went to a source of its own: the owner's is as it was.
    rows = history(api["owner"], "person:dana", "salary")
    assert [f["id"] for f in rows if f["source_id"] == secret["source_id"]] == [secret["id"]]
    assert all(f["expired_at"] is None for f in rows)


# -- MCP -------------------------------------------------------------------------------------------


def tool_error(result: CallToolResult) -> str:
    assert result.is_error
    assert isinstance(result.content[0], TextContent)
    return result.content[0].text


def test_mcp_remember_and_retract_are_listed_only_where_writes_are_allowed(
    api: dict[str, httpx.Client], store: Store
) -> None:
    url = str(api["bot"].base_url).rstrip("/")

    async def scenario() -> tuple[dict[str, Any], set[str], set[str]]:
        async with connected(url, store.tokens["bot"]) as session:
            writable = {t.name: t for t in (await session.list_tools()).tools}
        async with connected(url, store.tokens["reader"]) as session:
            reader = {t.name for t in (await session.list_tools()).tools}
        with (
            Service(store.db, embedder=None) as read_only,
            live(create_app(read_only, access_log=None)) as other,
        ):
            async with connected(other, store.tokens["bot"]) as session:
                return writable, reader, {t.name for t in (await session.list_tools()).tools}

    writable, reader, read_only = anyio.run(scenario)
    assert {"recall_facts", "fact_history", "remember", "retract"} <= set(writable)
    # A principal without the write permission, and any on a server without writes, is
    # listed only what it may call.
    for listed in (reader, read_only):
        assert {"recall_facts", "fact_history", "query_facts", "rollups"} <= listed
        assert not {"remember", "retract"} & listed
    assert writable["remember"].input_schema["required"] == ["subject", "predicate", "object"]
    assert writable["retract"].input_schema["required"] == ["fact_id"]
    assert writable["fact_history"].input_schema["required"] == ["subject", "predicate"]
    assert writable["recall_facts"].input_schema["required"] == []
    assert writable["recall_facts"].annotations.read_only_hint is True  # type: ignore[union-attr]
    assert writable["remember"].annotations.read_only_hint is False  # type: ignore[union-attr]


def test_mcp_recall_and_fact_history_answer_as_the_http_api(
    api: dict[str, httpx.Client], owned: dict[str, Any], store: Store
) -> None:
    url = str(api["bot"].base_url).rstrip("/")
    asks = [
        {},
        {"limit": 2},
        {"subject": PHOENIX},
        {"subject": PHOENIX, "predicate": "status", "as_of": "2024-03-05"},
        {"subject": PHOENIX, "as_of": "2024-03-20", "known_at": "1h"},
        {"subject": "person:carol diaz"},
    ]
    wanted = [recall(api["bot"], **ask) for ask in asks]
    timeline = history(api["bot"], PHOENIX, "status")
    known = history(api["bot"], PHOENIX, "status", known_at=timeline[0]["recorded_at"])

    async def scenario() -> None:
        async with connected(url, store.tokens["bot"]) as session:
            for ask, want in zip(asks, wanted, strict=True):
                assert data(await session.call_tool("recall_facts", ask)) == {"facts": want}, ask
            args = {"subject": PHOENIX, "predicate": "status"}
            got = data(await session.call_tool("fact_history", args))["facts"]
            assert got == timeline
            assert [f["expired_at"] is not None for f in got] == [True, False, False]
            then = {**args, "known_at": timeline[0]["recorded_at"]}
            assert data(await session.call_tool("fact_history", then))["facts"] == known
            hidden = await session.call_tool("fact_history", {**args, "predicate": "codename"})
            nobody = await session.call_tool("fact_history", {**args, "predicate": "nope"})
            assert data(hidden) == data(nobody) == {"facts": []}
            message = tool_error(await session.call_tool("recall_facts", {"subject": "phoenix"}))
            assert "is not an entity id" in message

    assert any(wanted)
    assert SECRET_CODENAME not in json.dumps(wanted)
    anyio.run(scenario)


def test_mcp_remember_and_retract_as_a_writer(
    api: dict[str, httpx.Client], store: Store, owned: dict[str, Any]
) -> None:
    # ``owned`` states the codename fact on the hidden note that the bot may not retract.
    url = str(api["bot"].base_url).rstrip("/")
    (codename,) = [f for f in recall(api["owner"], subject=PHOENIX) if f["predicate"] == "codename"]

    args = {"subject": "topic:mcp", "predicate": "via", "object": "tool"}

    async def scenario() -> str:
        async with connected(url, store.tokens["bot"]) as session:
            write = data(await session.call_tool("remember", args))
            assert write["job"].startswith("job-")
            (row,) = write["recorded"]
            own = await session.call_tool("remember", {**args, "evidence": [store.team_leaf]})
            assert data(own)["recorded"][0]["source_id"] == store.ids["slack:#eng"]
            hidden = tool_error(
                await session.call_tool("remember", {**args, "evidence": [store.note_leaf]})
            )
            missing = tool_error(
                await session.call_tool("remember", {**args, "evidence": [MISSING_NODE]})
            )
            assert hidden == missing.replace(MISSING_NODE, store.note_leaf)
            hidden = tool_error(await session.call_tool("retract", {"fact_id": codename["id"]}))
            missing = tool_error(await session.call_tool("retract", {"fact_id": MISSING_FACT}))
            assert hidden == missing.replace(MISSING_FACT, codename["id"])
            gone = data(await session.call_tool("retract", {"fact_id": row["id"]}))
            assert (gone["expired"], gone["recorded"]) == ([row["id"]], [])
        async with connected(url, store.tokens["reader"]) as session:
            refused = tool_error(await session.call_tool("remember", args))
            assert "principal 'reader' may not write" in refused
        return str(row["id"])

    retracted = anyio.run(scenario)
    sources = {s["scope"]: s["id"] for s in ok(api["owner"].get("/v1/sources"))["sources"]}
    (row,) = [r for r in history(api["owner"], "topic:mcp", "via") if r["id"] == retracted]
    assert row["source_id"] == sources["bot/facts:asserted"]
    assert row["expired_at"] is not None
    assert [f["source_id"] for f in recall(api["bot"], subject="topic:mcp")] == [
        store.ids["slack:#eng"]
    ]
    assert codename["id"] in {f["id"] for f in recall(api["owner"], subject=PHOENIX)}


# -- query_facts and rollups -----------------------------------------------------------------------


def query_facts(client: httpx.Client, query: str, **body: Any) -> dict[str, Any]:
    found = ok(client.post("/v1/query_facts", json={"query": query, **body}))
    assert set(found) == {"facts", "total", "truncated", "nothing_relevant"}
    return found  # type: ignore[no-any-return]


def api_answer(service: Service, who: str | None, query: str, **options: Any) -> Any:
    """What the operation answers ``who`` run in this process on the memory it reads, on
    the wire."""
    with service.reading(who) as memory:
        try:
            found = call(MemoryContext(memory), "query_facts", {"query": query, **options})
        except NotFoundError as exc:
            return {"error": str(exc)}
    return json.loads(json.dumps(found))


@pytest.fixture(scope="module")
def rolled(store: Store, owned: dict[str, Any]) -> dict[str, Rollup]:
    """Rollups written straight into the store, as consolidation writes them, by another
    connection while the server serves: one of a team source, one of the private notes, one
    of both."""
    eng, notes = store.ids["slack:#eng"], store.ids["notes:notes"]
    made = {
        "team": Rollup("rollup_team", PHOENIX, "team", "h1", ROLLED_AT, 0.9, {"n": 1}, (eng,)),
        "private": Rollup(
            "rollup_private",
            PHOENIX,
            "private",
            "h2",
            ROLLED_AT,
            0.8,
            {"c": SECRET_CODENAME},
            (notes,),
        ),
        "both": Rollup(
            "rollup_both",
            "person:carol diaz",
            "private,team",
            "h3",
            ROLLED_AT,
            0.7,
            {"c": SECRET_CODENAME},
            (eng, notes),
        ),
    }
    with stratamem.open(store.db, embedder=None) as memory, memory.store.transaction():
        for rollup in made.values():
            memory.store.write_rollup(rollup)
    return made


def test_query_facts_answers_fact_hits_as_the_python_api(
    api: dict[str, httpx.Client], service: Service, owned: dict[str, Any], store: Store
) -> None:
    asks: list[tuple[str, dict[str, Any]]] = [
        ("phoenix status shipping", {}),
        ("phoenix codename quokka lantern", {}),
        ("status", {"subject": "topic:Phoenix", "as_of": "2024-03-05"}),
        ("status planning", {"as_of": "2024-03-20", "known_at": "1h"}),
        ("standup time", {"sources": ["slack:#general"], "limit": 1}),
    ]
    who = {"owner": None, "bot": "bot", "reader": "reader", "outsider": "outsider"}
    for name, principal in who.items():
        for query, body in asks:
            want = api_answer(service, principal, query, **body)
            if "error" in want:  # a source the caller may not read
                response = api[name].post("/v1/query_facts", json={"query": query, **body})
                # The server leaves out what the caller sent (stratamem.server.echo).
                said = dict.fromkeys(body.get("sources", ()), "sources")
                assert error(response, 404, "not_found") == without_echo(want["error"], said)
                continue
            got = query_facts(api[name], query, **body)
            if "known_at" in body:  # "1h" back from a moment later: compare the ids alone
                assert [h["id"] for h in got["facts"]] == [h["id"] for h in want["facts"]]
            else:
                assert got == want, (name, query)
            if name != "owner":
                assert SECRET_CODENAME not in json.dumps(got)
                assert store.ids["notes:notes"] not in json.dumps(got)
    (hit,) = query_facts(api["bot"], "phoenix status shipping", limit=1)["facts"]
    (new,) = [f for f in owned["shipping"]["recorded"] if f["object"] == "shipping"]
    leaf = ok(api["bot"].get(f"/v1/nodes/{store.team_leaf}"))
    assert hit == {
        "id": new["id"],
        "subject": PHOENIX,
        "predicate": "status",
        "object": "shipping",
        "valid_from": "2024-03-10T00:00:00Z",
        "valid_to": None,
        "source": "slack:#eng",
        "evidence": [store.team_leaf],
        "cites": {store.team_leaf: leaf["cite"]},
        "score": hit["score"],
        "relevance": hit["relevance"],
    }
    assert hit["score"] > 0
    assert 0 < hit["relevance"] <= 1
    secret = query_facts(api["owner"], "quokka lantern codename")["facts"][0]
    assert (secret["object"], secret["source"]) == (SECRET_CODENAME, "notes:notes")
    # A source hidden from the caller answers as one that does not exist.
    hidden = api["bot"].post("/v1/query_facts", json={"query": "x", "sources": ["notes:notes"]})
    missing = api["bot"].post("/v1/query_facts", json={"query": "x", "sources": ["notes:nope"]})
    assert error(hidden, 404, "not_found").replace("notes:notes", "<s>") == error(
        missing, 404, "not_found"
    ).replace("notes:nope", "<s>")


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"query": ""}, "query"),
        ({"query": "x", "as_of": "soon"}, "as_of"),
        ({"query": "x", "known_at": "2024-02-30"}, "known_at"),
        ({"query": "x", "limit": 0}, "limit"),
        ({"query": "x", "limit": 1001}, "limit"),
        ({"query": "x", "subject": ""}, "subject"),
        # A name it does not take is not repeated: the caller's text stays out of the answer.
        ({"query": "x", "nope": 1}, "no parameter <name>"),
        ({}, "query"),
    ],
)
def test_bad_query_facts_bodies_are_422_naming_the_field(
    api: dict[str, httpx.Client], body: dict[str, Any], where: str
) -> None:
    response = api["bot"].post("/v1/query_facts", json=body)
    error(response, 422, "invalid_request")
    assert where in response.text


def test_query_facts_refuses_a_subject_that_is_no_entity_id(api: dict[str, httpx.Client]) -> None:
    response = api["bot"].post("/v1/query_facts", json={"query": "x", "subject": "phoenix"})
    assert "is not an entity id" in error(response, 422, "invalid_request")


def test_rollups_answer_those_of_sources_the_caller_reads_all_of(
    api: dict[str, httpx.Client], service: Service, rolled: dict[str, Rollup]
) -> None:
    def ids(client: httpx.Client, **params: str) -> list[str]:
        found = ok(client.get("/v1/rollups", params=params))
        assert set(found) == {"rollups"}
        return [r["id"] for r in found["rollups"]]

    assert ids(api["owner"]) == ["rollup_team", "rollup_private", "rollup_both"]
    assert ids(api["owner"], subject="topic:Phoenix") == ["rollup_team", "rollup_private"]
    assert ids(api["owner"], limit="1") == ["rollup_team"]
    for name in ("bot", "reader", "narrow"):
        assert ids(api[name]) == ["rollup_team"]
        assert ids(api[name], subject="person:carol diaz") == []
        assert SECRET_CODENAME not in api[name].get("/v1/rollups").text
    assert ids(api["outsider"]) == []
    (team,) = ok(api["bot"].get("/v1/rollups"))["rollups"]
    with service.reading("bot") as memory:
        assert team == json.loads(json.dumps(memory.facts.rollups()[0].to_dict()))
    assert team["n"] == 1
    assert team["sources"] == list(rolled["team"].sources)
    bad = api["bot"].get("/v1/rollups", params={"subject": "phoenix"})
    assert "is not an entity id" in error(bad, 422, "invalid_request")
    error(api["bot"].get("/v1/rollups", params={"limit": "0"}), 422, "invalid_request")


def test_mcp_query_facts_and_rollups_answer_as_the_http_api(
    api: dict[str, httpx.Client], store: Store, rolled: dict[str, Rollup]
) -> None:
    url = str(api["bot"].base_url).rstrip("/")
    asks = [
        {"query": "phoenix status shipping"},
        {"query": "status", "subject": PHOENIX, "as_of": "2024-03-05", "limit": 2},
        {"query": "codename quokka lantern"},
        {"query": "standup", "sources": ["slack:#general"]},
    ]
    wanted = {name: [query_facts(api[name], **ask) for ask in asks] for name in ("bot", "narrow")}
    rollups = {name: ok(api[name].get("/v1/rollups"))["rollups"] for name in ("bot", "narrow")}

    async def scenario() -> None:
        for name in ("bot", "narrow"):
            async with connected(url, store.tokens[name]) as session:
                tools = {t.name: t for t in (await session.list_tools()).tools}
                assert tools["query_facts"].input_schema["required"] == ["query"]
                assert tools["query_facts"].annotations.read_only_hint is True  # type: ignore[union-attr]
                assert tools["rollups"].input_schema["required"] == []
                for ask, want in zip(asks, wanted[name], strict=True):
                    got = data(await session.call_tool("query_facts", ask))
                    assert got == want, (name, ask)
                    assert SECRET_CODENAME not in json.dumps(got)
                found = data(await session.call_tool("rollups", {}))
                assert found == {"rollups": rollups[name]}
                hidden = data(await session.call_tool("rollups", {"subject": "person:carol diaz"}))
                assert hidden == {"rollups": []}
                message = tool_error(
                    await session.call_tool("query_facts", {"query": "x", "subject": "x"})
                )
                assert "is not an entity id" in message
                message = tool_error(
                    await session.call_tool(
                        "query_facts", {"query": "x", "sources": ["notes:notes"]}
                    )
                )
                assert message.endswith("<sources>")  # not repeated back
                assert SECRET_CODENAME not in message

    assert any(w["facts"] for w in wanted["bot"])
    assert [r["id"] for r in rollups["bot"]] == ["rollup_team"]
    anyio.run(scenario)
