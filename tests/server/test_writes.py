"""Writes through a live server: ``POST /v1/ingest``, ``DELETE /v1/sources/{source}``,
``GET /v1/jobs/{id}`` over httpx, and the ``ingest`` and ``forget`` tools and the resources
over MCP (streamable HTTP at ``/mcp``, and stdio for ``stratamem mcp --allow-writes``).

One store per module: the Slack export (``team``, but ``slack:#incidents`` moved to ``ops``)
and the team mailbox (``eng``). Principals: ``writer`` (``research``, may write), ``reader``
(``research``), ``outsider`` (``team``) and ``teamwriter`` (``team``, may write). The
server's one ingest root holds copies of the examples, some of them with a message more;
beside it lies a folder none of them may read.
"""

from __future__ import annotations

import json
import shutil
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent, TextResourceContents
from serving import bearer, call_http, clients, connected, data, error, live, ok

import stratamem
from stratamem.ops import OPERATIONS
from stratamem.server.http import create_app
from stratamem.server.service import Service
from stratamem.testing import HashingEmbedder
from suite import PATIENCE_S

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "workspace"
FIXTURES = ROOT / "tests" / "fixtures"

# Words found in one added message each, and nowhere else.
GENERAL_NEWS = "marmalade-heron"
INCIDENTS_NEWS = "tangerine-walrus"
MAIL_NEWS = "wombat-harbour"
OUTSIDE_NEWS = "plover-lantern"

MISSING_ID = "0" * 32


@dataclass(frozen=True)
class Store:
    db: str
    root: Path  # the ingest root
    outside: Path  # beside the root
    tokens: dict[str, str]


def _add_slack_message(day: Path, text: str, ts: str) -> None:
    messages = json.loads(day.read_text())
    messages.append({"type": "message", "user": "U05QK3J8T2W", "text": text, "ts": ts})
    day.write_text(json.dumps(messages))


def _add_mail(mbox: Path, body: str) -> None:
    with mbox.open("a") as out:
        out.write(
            "\nFrom carol@acme.io Thu Mar 28 09:00:00 2024\n"
            "From: Carol Diaz <carol@acme.io>\n"
            "To: eng@acme.io\n"
            "Subject: One more thing\n"
            "Date: Thu, 28 Mar 2024 09:00:00 +0000\n"
            "Message-ID: <one-more-thing@acme.io>\n"
            'Content-Type: text/plain; charset="UTF-8"\n'
            "\n"
            f"{body}\n"
        )


def _slack_day(channel: str) -> Path:
    return sorted((EXAMPLES / "slack-export" / channel).glob("*.json"))[0]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, served_location: str) -> Store:
    base = tmp_path_factory.mktemp("writes").resolve()
    root, outside = base / "root", base / "outside"
    root.mkdir()
    (outside / "notes").mkdir(parents=True)
    (outside / "notes" / "secret.md").write_text(f"# Secret\n\nThe {OUTSIDE_NEWS} plan.\n")

    shutil.copytree(EXAMPLES / "notes", root / "research")
    shutil.copytree(FIXTURES / "markdown" / "til-like", root / "til")
    shutil.copytree(FIXTURES / "markdown" / "vault", root / "vault")
    (root / "later").mkdir()
    for n in range(3):
        (root / "later" / f"later-{n}.md").write_text(f"# Later {n}\n\nA note written late, {n}.\n")
    shutil.copytree(EXAMPLES / "slack-export", root / "slack")
    for channel, news in (("general", GENERAL_NEWS), ("incidents", INCIDENTS_NEWS)):
        day = root / "slack" / channel / _slack_day(channel).name
        _add_slack_message(day, f"Heads up: the {news} rollout starts today.", "1711000000.000100")
    (root / "mail").mkdir()
    shutil.copy(EXAMPLES / "mail" / "team.mbox", root / "mail" / "team.mbox")
    _add_mail(root / "mail" / "team.mbox", f"Please read the {MAIL_NEWS} doc before Friday.")
    # Ways out of the root: a linked folder, a folder holding a link out, and a link to a
    # folder inside the root that holds a link out.
    (root / "escape").symlink_to(outside / "notes", target_is_directory=True)
    (root / "leaky").mkdir()
    (root / "leaky" / "ok.md").write_text("# Fine\n\nNothing to see.\n")
    (root / "leaky" / "secret.md").symlink_to(outside / "notes" / "secret.md")
    # hopping/random (a channel new to the store) leads to hop, in the root, whose one day
    # leads out.
    shutil.copytree(EXAMPLES / "slack-export", root / "hopping")
    (root / "hop").mkdir()
    (root / "hop" / "2024-03-04.json").symlink_to(outside / "day.json")
    (outside / "day.json").write_text(
        json.dumps([{"type": "message", "user": "U1", "text": OUTSIDE_NEWS, "ts": "1709550000.1"}])
    )
    (root / "hopping" / "random").symlink_to(root / "hop", target_is_directory=True)

    db = served_location
    with stratamem.open(db, embedder=HashingEmbedder()) as memory:
        memory.ingest(EXAMPLES / "slack-export", parallel=False)
        memory.sources.set_access("slack:#incidents", scopes="ops")
        memory.ingest(EXAMPLES / "mail" / "team.mbox", access="eng", parallel=False)
        memory.indexes.embed()
        tokens = {
            "writer": memory.principals.add("writer", "research", write=True),
            "reader": memory.principals.add("reader", "research"),
            "outsider": memory.principals.add("outsider", "team"),
            "teamwriter": memory.principals.add("teamwriter", "team", write=True),
        }
    return Store(db, root, outside, tokens)


@pytest.fixture(scope="module")
def service(store: Store) -> Iterator[Service]:
    with Service(
        store.db, embedder=HashingEmbedder(), allow_writes=True, ingest_roots=[store.root]
    ) as served:
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


def sources(client: httpx.Client) -> dict[str, dict[str, Any]]:
    return {s["scope"]: s for s in ok(client.get("/v1/sources"))["sources"]}


def found(client: httpx.Client, words: str) -> set[str]:
    """The sources whose chunks a keyword search for ``words`` finds."""
    body = {"query": words, "mode": "keyword", "limit": 50}
    return {h["source"] for h in ok(client.post("/v1/search", json=body))["hits"]}


def ingest(client: httpx.Client, path: Path | str, **options: Any) -> httpx.Response:
    return client.post("/v1/ingest", json={"path": str(path), **options})


# -- ingest --------------------------------------------------------------------------------------


def test_a_writer_ingests_under_the_root_for_its_own_scopes(
    api: dict[str, httpx.Client], store: Store
) -> None:
    report = ok(ingest(api["writer"], store.root / "research"))
    assert report["job"].startswith("job-")
    assert [(s["scope"], s["error"]) for s in report["sources"]] == [
        ("writer/notes:research", None)
    ]
    assert report["embedded"] == report["chunks"] > 0
    assert sources(api["owner"])["writer/notes:research"]["access"] == ["research"]
    assert sources(api["writer"])["writer/notes:research"]["chunks"] == report["chunks"]
    # (Other tests of this module may have put the writer's other sources beside it.)
    assert "writer/notes:research" in found(api["writer"], "queue")
    semantic = {"query": "background job queue", "mode": "vector", "limit": 5}
    hits = ok(api["reader"].post("/v1/search", json=semantic))["hits"]
    assert "writer/notes:research" in {h["source"] for h in hits}
    # A principal without the scope sees nothing of it.
    assert "writer/notes:research" not in sources(api["outsider"])
    assert "writer/notes:research" not in found(api["outsider"], "queue")
    assert "writer/notes:research" not in found(api["teamwriter"], "queue")


def test_a_principal_without_write_permission_is_refused(
    api: dict[str, httpx.Client], store: Store
) -> None:
    before = sources(api["owner"])
    for who in ("reader", "outsider"):
        message = error(ingest(api[who], store.root / "til"), 403, "forbidden")
        assert message == f"principal '{who}' may not write (principal add --write grants it)"
        # Refused before the path is looked at: no probing the server's files.
        assert error(ingest(api[who], "/no/such/path"), 403, "forbidden") == message
        assert error(api[who].delete("/v1/sources/slack:%23general"), 403, "forbidden") == message
    assert sources(api["owner"]) == before


@pytest.mark.parametrize("name", sorted(n for n, op in OPERATIONS.items() if op.access == "owner"))
def test_the_owners_operations_refuse_a_principal_that_may_write(
    api: dict[str, httpx.Client], name: str
) -> None:
    before = ok(api["owner"].post("/v1/principals", json={}))["principals"]
    listed = sources(api["owner"])
    args = dict(OPERATIONS[name].example)
    if name == "add_principal":
        args = {"name": "escalated", "scopes": ["*"], "write": True}
    for sent in (args, {}):
        answer = call_http(api["writer"], name, sent)
        assert error(answer, 403, "forbidden") == f"{name} is the owner's"
    assert ok(api["owner"].post("/v1/principals", json={}))["principals"] == before
    assert sources(api["owner"]) == listed


@pytest.mark.parametrize(
    "where",
    [
        "{outside}/notes",
        "{outside}/notes/secret.md",
        "{outside}/no-such-file",
        "{root}/../outside/notes",
        "{root}/research/../../outside/notes/secret.md",
        "{root}/escape",
        "{root}/escape/secret.md",
        "/etc/passwd",
        "/",
    ],
)
def test_a_path_outside_the_root_is_refused(
    api: dict[str, httpx.Client], store: Store, where: str
) -> None:
    path = where.format(root=store.root, outside=store.outside)
    message = error(ingest(api["writer"], path), 403, "forbidden")
    # The path sent is not repeated back (see stratamem.server.echo), bar one too short to
    # tell from the message's own words.
    shown = path if len(path) < 3 else "<path>"
    assert message == f"{shown}: outside the server's ingest roots"
    assert OUTSIDE_NEWS not in json.dumps(sources(api["owner"]))


def test_a_folder_with_a_link_out_is_refused_whole(
    api: dict[str, httpx.Client], store: Store
) -> None:
    message = error(ingest(api["writer"], store.root / "leaky"), 403, "forbidden")
    # The folder sent is not repeated back; the file under it that links out is named.
    assert message == "<path>/secret.md: a link out of the server's ingest roots"
    assert "notes:leaky" not in sources(api["owner"])
    assert not found(api["owner"], OUTSIDE_NEWS)


def test_a_link_to_a_folder_in_the_root_that_links_out_reads_nothing_outside(
    api: dict[str, httpx.Client], store: Store
) -> None:
    response = ingest(api["writer"], store.root / "hopping")
    try:
        assert response.status_code in (200, 403), response.text
        assert not found(api["owner"], OUTSIDE_NEWS)
        assert "slack:#random" not in sources(api["owner"])
    finally:
        api["owner"].delete("/v1/sources/slack:%23random")  # leave the store as it was


def test_the_owner_reads_outside_the_root(api: dict[str, httpx.Client], store: Store) -> None:
    report = ok(ingest(api["owner"], store.outside / "notes", access=["board"]))
    assert [s["scope"] for s in report["sources"]] == ["notes:notes"]
    assert found(api["owner"], OUTSIDE_NEWS) == {"notes:notes"}
    assert ok(api["owner"].delete("/v1/sources/notes:notes"))["removed"] == report["chunks"]


@pytest.mark.parametrize(
    ("access", "foreign"),
    [(["team"], "team"), (["research", "eng"], "eng"), (["ops", "board"], "board, ops")],
)
def test_scopes_the_writer_does_not_hold_are_refused(
    api: dict[str, httpx.Client], store: Store, access: list[str], foreign: str
) -> None:
    message = error(ingest(api["writer"], store.root / "til", access=access), 403, "forbidden")
    assert message == f"principal 'writer' may not give scopes it does not hold: {foreign}"
    assert not {"notes:til", "writer/notes:til"} & set(sources(api["owner"]))


def test_empty_scopes_are_refused_as_unreadable(another_location: str, store: Store) -> None:
    # Written with no scopes, the channels would be hidden from every principal. A store of
    # its own: were they written, the other tests would see them so.
    db = another_location
    with stratamem.open(db, embedder=None) as memory:
        memory.ingest(EXAMPLES / "slack-export", parallel=False)
        tokens = {
            "teamwriter": memory.principals.add("teamwriter", "team", write=True),
            "outsider": memory.principals.add("outsider", "team"),
        }
    with (
        Service(db, embedder=None, allow_writes=True, ingest_roots=[store.root]) as served,
        live(create_app(served, access_log=None, mount_mcp=False)) as url,
        httpx.Client(base_url=url, headers=bearer(tokens["teamwriter"])) as teamwriter,
        httpx.Client(base_url=url, headers=bearer(tokens["outsider"])) as outsider,
    ):
        before = sources(outsider)
        response = ingest(teamwriter, store.root / "slack", access=[])
        if response.status_code == 200:
            outcome = {s["scope"]: s["error"] for s in response.json()["sources"]}
            assert set(outcome) == set(before)
            assert all(outcome.values()), outcome
        else:
            error(response, 403, "forbidden")
        assert sources(outsider) == before
        assert not found(outsider, GENERAL_NEWS)


def test_an_existing_source_the_writer_cannot_read_is_left_as_it_was(
    api: dict[str, httpx.Client], store: Store
) -> None:
    before = sources(api["owner"])["mbox:team"]
    for options in ({}, {"access": ["research"]}, {"sync": True}):
        report = ok(ingest(api["writer"], store.root / "mail" / "team.mbox", **options))
        (mail,) = report["sources"]
        # Written to a source of that name of its own: the hidden one is never named.
        assert mail["scope"] == "writer/mbox:team"
        assert mail["error"] is None
    after = sources(api["owner"])["mbox:team"]
    assert (after["chunks"], after["access"]) == (before["chunks"], ["eng"])
    assert after["ingested_at"] == before["ingested_at"]
    assert found(api["owner"], MAIL_NEWS) == {"writer/mbox:team"}
    assert "mbox:team" not in sources(api["writer"])


def test_a_hidden_source_is_left_alone_and_its_part_goes_to_the_writers_own(
    api: dict[str, httpx.Client], store: Store
) -> None:
    owner_before = sources(api["owner"])
    report = ok(ingest(api["teamwriter"], store.root / "slack"))
    outcome = {s["scope"]: s for s in report["sources"]}
    # A channel it reads takes its part; one another test forgot goes to its own, as new.
    eng = "slack:#eng" if "slack:#eng" in owner_before else "teamwriter/slack:#eng"
    assert set(outcome) == {"slack:#general", eng, "teamwriter/slack:#incidents"}
    assert outcome["slack:#general"]["added"] >= 1
    assert all(s["error"] is None for s in outcome.values())
    owner_after = sources(api["owner"])
    assert owner_after["slack:#incidents"]["chunks"] == owner_before["slack:#incidents"]["chunks"]
    assert owner_after["slack:#incidents"]["access"] == ["ops"]
    assert owner_after["teamwriter/slack:#incidents"]["created_by"] == "teamwriter"
    assert owner_after["slack:#general"]["access"] == ["team"]
    assert found(api["owner"], INCIDENTS_NEWS) == {"teamwriter/slack:#incidents"}
    assert found(api["owner"], GENERAL_NEWS) == {"slack:#general"}
    assert found(api["outsider"], GENERAL_NEWS) == {"slack:#general"}


# -- forget --------------------------------------------------------------------------------------


def test_forgetting_a_hidden_source_answers_as_a_missing_one(
    api: dict[str, httpx.Client],
) -> None:
    owner_view = sources(api["owner"])
    mail = owner_view["mbox:team"]
    for hidden, missing in (("mbox:team", "mbox:nope"), (mail["id"], MISSING_ID)):
        refused = api["writer"].delete(f"/v1/sources/{hidden}")
        absent = api["writer"].delete(f"/v1/sources/{missing}")
        refused_message = error(refused, 404, "not_found")
        assert refused_message == error(absent, 404, "not_found").replace(missing, hidden)
        assert "eng" not in refused_message.replace(hidden, "")
    assert sources(api["owner"]) == owner_view


def test_a_writer_forgets_its_own_source(api: dict[str, httpx.Client], store: Store) -> None:
    report = ok(ingest(api["writer"], store.root / "til"))
    assert found(api["writer"], "python") >= {"writer/notes:til"}
    own = sources(api["writer"])["writer/notes:til"]["id"]
    gone = ok(api["writer"].delete(f"/v1/sources/{own}"))
    assert gone["job"].startswith("job-")
    assert (gone["source"], gone["removed"]) == (own, report["chunks"])
    assert "writer/notes:til" not in sources(api["owner"])
    assert "writer/notes:til" not in found(api["owner"], "python")
    error(api["writer"].delete(f"/v1/sources/{own}"), 404, "not_found")


def test_a_writer_forgets_its_own_source_by_its_name_with_a_slash(
    api: dict[str, httpx.Client], store: Store
) -> None:
    report = ok(ingest(api["writer"], store.root / "til"))
    gone = ok(api["writer"].delete("/v1/sources/writer/notes:til"))
    assert gone["removed"] == report["chunks"]
    assert "writer/notes:til" not in sources(api["owner"])


def test_a_writer_forgets_a_shared_source_it_reads_by_id(api: dict[str, httpx.Client]) -> None:
    # teamwriter reads slack:#eng (team): it may forget it; outsider reads it no more.
    eng = sources(api["teamwriter"])["slack:#eng"]
    gone = ok(api["teamwriter"].delete(f"/v1/sources/{eng['id']}"))
    assert gone["removed"] == eng["chunks"] > 0
    assert "slack:#eng" not in sources(api["outsider"])
    assert "slack:#eng" not in sources(api["owner"])


# -- jobs ----------------------------------------------------------------------------------------


def test_a_write_past_the_time_limit_answers_202_and_its_job_tells_the_end(
    service: Service, store: Store
) -> None:
    gate = threading.Event()
    # Holds the writer thread, so the ingests queue behind it whatever the machine's speed.
    hold = service.submit("hold", None, lambda: {"held": gate.wait(PATIENCE_S)})
    app = create_app(service, tokens_required=False, timeout_s=1e-9, access_log=None)
    try:
        with live(app) as url, httpx.Client(base_url=url, timeout=PATIENCE_S) as owner:
            accepted = ingest(owner, store.root / "later")
            failing = ingest(owner, store.root / "no-such-folder")
            jobs = []
            for response in (accepted, failing):
                assert response.status_code == 202, response.text
                job = response.json()["job"]
                assert response.headers["location"] == f"/v1/jobs/{job['id']}"
                assert (job["action"], job["state"], job["started"]) == ("ingest", "queued", None)
                assert ok(owner.get(response.headers["location"]))["state"] == "queued"
                jobs.append(job["id"])
            gate.set()
            assert hold.future.result(timeout=PATIENCE_S) == {"held": True}
            for ident in jobs:
                service.job(ident, None).future.exception(timeout=PATIENCE_S)  # type: ignore[union-attr]
            done = ok(owner.get(f"/v1/jobs/{jobs[0]}"))
            assert done["state"] == "done"
            assert done["started"] <= done["finished"]
            assert [s["scope"] for s in done["result"]["sources"]] == ["notes:later"]
            assert done["result"]["embedded"] == done["result"]["chunks"] > 0
            with service.reading(None) as memory:
                assert memory.sources.get("notes:later").chunk_count == done["result"]["chunks"]
            failed = ok(owner.get(f"/v1/jobs/{jobs[1]}"))
            assert failed["state"] == "failed"
            assert "result" not in failed
            assert failed["error"]["code"] == "invalid_request"
            assert failed["error"]["status"] == 422
            assert "no such file or directory" in failed["error"]["message"]
            error(owner.get("/v1/jobs/job-0-000000000000"), 404, "not_found")
    finally:
        gate.set()


def test_a_job_is_seen_by_its_submitter_and_the_owner_alone(
    api: dict[str, httpx.Client], store: Store
) -> None:
    report = ok(ingest(api["writer"], store.root / "vault"))
    ident = report["job"]
    mine = ok(api["writer"].get(f"/v1/jobs/{ident}"))
    assert (mine["id"], mine["action"], mine["state"]) == (ident, "ingest", "done")
    assert mine["result"]["chunks"] == report["chunks"]
    assert ok(api["owner"].get(f"/v1/jobs/{ident}"))["state"] == "done"
    missing = "job-999999-000000000000"
    for other in ("reader", "outsider", "teamwriter"):
        message = error(api[other].get(f"/v1/jobs/{ident}"), 404, "not_found")
        assert message == error(api[other].get(f"/v1/jobs/{missing}"), 404, "not_found").replace(
            missing, ident
        )
    ok(api["writer"].delete(f"/v1/sources/{report['sources'][0]['source_id']}"))


def test_writes_are_off_unless_allowed(store: Store) -> None:
    with (
        Service(store.db, embedder=None) as read_only,
        live(create_app(read_only, access_log=None, mount_mcp=False)) as url,
        httpx.Client(base_url=url, headers=bearer(store.tokens["writer"])) as writer,
    ):
        for response in (
            ingest(writer, store.root / "til"),
            writer.delete("/v1/sources/notes:research"),
        ):
            assert "--allow-writes" in error(response, 403, "forbidden")


# -- MCP -----------------------------------------------------------------------------------------


def tool_error(result: CallToolResult) -> str:
    assert result.is_error
    assert isinstance(result.content[0], TextContent)
    return result.content[0].text


async def tool_names(session: ClientSession) -> set[str]:
    return {t.name for t in (await session.list_tools()).tools}


def resource_text(result: Any) -> Any:
    (content,) = result.contents
    assert isinstance(content, TextResourceContents)
    return json.loads(content.text)


def test_mcp_write_tools_exist_only_where_writes_are_allowed(
    api: dict[str, httpx.Client], store: Store
) -> None:
    url = str(api["writer"].base_url).rstrip("/")

    async def scenario() -> tuple[set[str], set[str], set[str]]:
        async with connected(url, store.tokens["writer"]) as session:
            writable = await tool_names(session)
        async with connected(url, store.tokens["reader"]) as session:
            reader = await tool_names(session)
        with (
            Service(store.db, embedder=None) as read_only,
            live(create_app(read_only, tokens_required=False, access_log=None)) as other,
        ):
            async with connected(other, store.tokens["writer"]) as session:
                return writable, reader, await tool_names(session)

    writable, reader, read_only = anyio.run(scenario)
    assert {"ingest", "forget", "search", "sources"} <= writable
    assert "search" in read_only
    assert not {"ingest", "forget"} & read_only
    assert reader == read_only
    writes = {op.name for op in OPERATIONS.values() if op.access == "write"}
    assert {"add", "edit", "rm", "add_messages", "remember", "retract"} <= writes
    assert writable - read_only == writes


def test_mcp_a_writer_ingests_and_forgets(api: dict[str, httpx.Client], store: Store) -> None:
    url = str(api["writer"].base_url).rstrip("/")

    async def scenario() -> None:
        async with connected(url, store.tokens["writer"]) as session:
            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert tools["ingest"].input_schema["required"] == ["path"]
            assert tools["forget"].input_schema["required"] == ["source"]
            report = data(await session.call_tool("ingest", {"path": str(store.root / "vault")}))
            assert report["job"].startswith("job-")
            assert [(s["scope"], s["error"]) for s in report["sources"]] == [
                ("writer/notes:vault", None)
            ]
            assert report["embedded"] == report["chunks"] > 0
            listed = data(await session.call_tool("sources", {}))["sources"]
            assert "writer/notes:vault" in {s["scope"] for s in listed}

            outside = str(store.outside / "notes")
            assert "outside the server's ingest roots" in tool_error(
                await session.call_tool("ingest", {"path": outside})
            )
            assert "may not give scopes" in tool_error(
                await session.call_tool(
                    "ingest", {"path": str(store.root / "vault"), "access": ["eng"]}
                )
            )
            gone = data(await session.call_tool("forget", {"source": "writer/notes:vault"}))
            assert (gone["source"], gone["removed"]) == ("writer/notes:vault", report["chunks"])
            assert tool_error(await session.call_tool("forget", {"source": "writer/notes:vault"}))

    anyio.run(scenario)
    assert "writer/notes:vault" not in sources(api["owner"])


def test_mcp_write_tools_refuse_a_principal_without_write(
    api: dict[str, httpx.Client], store: Store
) -> None:
    url = str(api["reader"].base_url).rstrip("/")
    before = sources(api["owner"])
    seen = set(sources(api["reader"]))

    async def scenario() -> set[str]:
        async with connected(url, store.tokens["reader"]) as session:
            # Not listed to it, and refused when called all the same.
            assert not {"ingest", "forget"} & await tool_names(session)
            for name, arguments in (
                ("ingest", {"path": str(store.root / "til")}),
                ("forget", {"source": "notes:research"}),
            ):
                message = tool_error(await session.call_tool(name, arguments))
                assert "principal 'reader' may not write" in message
            # Reads still answer after the refusals, as the reader: whatever sources of its
            # scope the module's other tests have written by now, and nothing else.
            return {s["scope"] for s in data(await session.call_tool("sources", {}))["sources"]}

    assert anyio.run(scenario) == seen
    assert sources(api["owner"]) == before


def test_mcp_forgetting_a_hidden_source_answers_as_a_missing_one(
    api: dict[str, httpx.Client], store: Store
) -> None:
    url = str(api["writer"].base_url).rstrip("/")

    async def scenario() -> tuple[str, str]:
        async with connected(url, store.tokens["writer"]) as session:
            hidden = tool_error(await session.call_tool("forget", {"source": "mbox:team"}))
            missing = tool_error(await session.call_tool("forget", {"source": "mbox:nope"}))
            return hidden, missing

    hidden, missing = anyio.run(scenario)
    assert hidden == missing.replace("mbox:nope", "mbox:team")
    assert "mbox:team" in sources(api["owner"])


def test_mcp_resources_list_and_read_as_the_principal(
    api: dict[str, httpx.Client], store: Store
) -> None:
    url = str(api["outsider"].base_url).rstrip("/")
    visible = sources(api["outsider"])
    general = visible["slack:#general"]
    body = {"mode": "keyword", "limit": 1}
    leaf = ok(
        api["outsider"].post(
            "/v1/search", json={**body, "query": "redis", "sources": ["slack:#general"]}
        )
    )
    leaf_id = leaf["hits"][0]["node_id"]
    mail = ok(
        api["owner"].post(
            "/v1/search", json={**body, "query": "snapshot", "sources": ["mbox:team"]}
        )
    )
    hidden_id = mail["hits"][0]["node_id"]
    hidden_source = sources(api["owner"])["mbox:team"]["id"]

    async def failure(session: ClientSession, uri: str) -> str:
        with pytest.raises(MCPError) as caught:
            await session.read_resource(uri)
        return caught.value.message

    async def scenario() -> None:
        async with connected(url, store.tokens["outsider"]) as session:
            listed = {str(r.uri) for r in (await session.list_resources()).resources}
            assert "stratamem://sources" in listed
            templates = {
                t.uri_template for t in (await session.list_resource_templates()).resource_templates
            }
            assert templates >= {"stratamem://sources/{source_id}", "stratamem://nodes/{node_id}"}

            every = resource_text(await session.read_resource("stratamem://sources"))
            assert {s["scope"] for s in every["sources"]} == set(visible)

            one = resource_text(await session.read_resource(f"stratamem://sources/{general['id']}"))
            assert (one["id"], one["scope"]) == (general["id"], "slack:#general")
            assert one["summaries"]
            assert all(s["source"] == "slack:#general" for s in one["summaries"])

            node = resource_text(await session.read_resource(f"stratamem://nodes/{leaf_id}"))
            assert (node["node_id"], node["source"]) == (leaf_id, "slack:#general")
            assert node["text"]

            for hidden, missing in (
                (f"stratamem://nodes/{hidden_id}", f"stratamem://nodes/{MISSING_ID}"),
                (f"stratamem://sources/{hidden_source}", f"stratamem://sources/{MISSING_ID}"),
            ):
                refused = await failure(session, hidden)
                absent = await failure(session, missing)
                assert refused == absent.replace(MISSING_ID, hidden.rsplit("/", 1)[1])
                assert "mbox" not in refused

    anyio.run(scenario)


# -- stratamem mcp over stdio --------------------------------------------------------------------


@pytest.mark.slow
def test_stdio_mcp_with_writes_allowed_ingests_under_its_root(
    tmp_path: Path, store_location: str
) -> None:
    db = store_location
    root = tmp_path / "root"
    shutil.copytree(FIXTURES / "markdown" / "til-like", root / "til")
    with stratamem.open(db, embedder=None) as memory:
        memory.principals.add("writer", "research", write=True)

    server = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "stratamem",
            "--db",
            str(db),
            "--as",
            "writer",
            "mcp",
            "--allow-writes",
            "--ingest-root",
            str(root),
        ],
        # The server process runs the code under test.
        env={
            "STRATAMEM_SUMMARIZER": "extractive",
            "PYTHONPATH": str(Path(stratamem.__file__).parents[1]),
        },
    )

    async def scenario() -> None:
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            assert {"ingest", "forget"} <= await tool_names(session)
            assert "outside the server's ingest roots" in tool_error(
                await session.call_tool("ingest", {"path": str(tmp_path)})
            )
            arguments = {"path": str(root / "til"), "embed": False}
            report = data(await session.call_tool("ingest", arguments))
            assert [(s["scope"], s["error"]) for s in report["sources"]] == [
                ("writer/notes:til", None)
            ]
            assert report["chunks"] > 0
            listed = data(await session.call_tool("sources", {}))["sources"]
            assert [s["scope"] for s in listed] == ["writer/notes:til"]

    anyio.run(scenario)
    with stratamem.open(db, embedder=None) as memory:
        (written,) = memory.sources.list()
    assert (written.scope, written.access, written.created_by) == (
        "writer/notes:til",
        ("research",),
        "writer",
    )
