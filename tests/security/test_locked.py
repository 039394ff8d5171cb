"""The route probe matrix over a store with locked sources: a locked source shapes nothing,
for the owner and for every principal, even one whose scopes the source shares. Every read
equals the same read of a store built without the locked sources, and shows no canary of
them (their ids are taken before they are locked).

Skips, saying why, while ``Memory.locks.lock`` raises ``NotImplementedError``; turns on by itself
once locking works.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
import route_probes as probes
import security_kit as kit
from security_kit import OWNER, CanaryWorld

import stratamem


def _locking_works() -> bool:
    with (
        tempfile.TemporaryDirectory() as folder,
        stratamem.open(Path(folder) / "probe.db", embedder=None) as memory,
    ):
        memory.items.add("probe", source="probe")
        try:
            memory.locks.lock("probe", passphrase="probe")
        except NotImplementedError:
            return False
        except Exception:
            return True  # on, so that the failure shows
    return True


pytestmark = pytest.mark.skipif(
    not _locking_works(), reason="locking is not implemented yet: Memory.locks.lock raises"
)

NAMED = ("vault", "vault-chat", "hr-secret", "eng", "nowhere")
CANARY_QUERIES = (
    "plutonic",
    "Vera Locksley",
    "@vaulthandle",
    "#vaulttag",
    "vera@canary-vault.example",
    "quasimodal",
    "@lockhandle #locktag",
)
PROBES = probes.probes_for(NAMED, canaries=CANARY_QUERIES)
# The owner, and a principal of one scope and one of any scope: both share the locked
# sources' scopes.
READERS = [OWNER, "ann", "cat"]
# What the owner is told of a locked source it names: that it exists, and is locked (a facts
# query, a search, a recall or a primitive filtered to one answers nothing, its text being
# sealed, where the store without it answers that there is no such source).
OWNER_KNOWS = frozenset(
    {
        "source",
        "tree",
        "item",
        "query_facts",
        "search",
        "recall",
        "query_source",
        "query_global",
        "query_topic",
        "cover_window",
        "drill_down",
        "fetch_leaves",
    }
)


@pytest.fixture(scope="module")
def locked_world(places: kit.Places):  # type: ignore[no-untyped-def]
    found = CanaryWorld(
        places.within(places.folder / "locked"), (*kit.SPECS, *kit.LOCKED), locked=kit.LOCKED
    )
    yield found
    found.close()


@pytest.fixture(scope="module")
def locked_refs(locked_world: CanaryWorld) -> dict[str, kit.Refs]:
    return {**kit.named_refs(locked_world.owner, ("hr-secret", "eng")), **locked_world.locked_refs}


def _without_locked(value: Any, reader: str, route: str) -> Any:
    """The owner's ``sources`` and ``stats`` list and count the locked sources by design
    (``stats`` counts them, in the store without them too, under ``locked``)."""
    if reader != OWNER:
        return value
    if route == "sources" and isinstance(value, list):
        return [s for s in value if not s.locked]
    if route == "stats" and isinstance(value, dict):
        return {k: v for k, v in value.items() if k != "locked"}
    return value


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.id)
def test_locked_sources_shape_nothing(  # type: ignore[no-untyped-def]
    locked_world, locked_refs, probe: probes.Probe, reader: str
) -> None:
    full = locked_world.read("full", reader)
    reduced = locked_world.read("reduced", reader)
    got = kit.outcome(lambda: probe.call(full, locked_refs), str(locked_world.full))
    want = kit.outcome(lambda: probe.call(reduced, locked_refs), str(locked_world.reduced(reader)))
    hidden = locked_world.hidden_from(reader)
    named = probes.echoes(locked_refs, probe.uses)
    if reader == OWNER and probe.route == "sources":
        named += [r.scope for r in locked_world.locked_refs.values()]
        named += [r.source_id for r in locked_world.locked_refs.values()]
    found = kit.leaked(got, hidden.canaries, named=named)
    tally = kit.counts("locked sources")
    tally.routes.add(probe.route)
    tally.principals.add(reader)
    tally.compared += 1
    tally.checks += len(hidden.canaries)
    assert not found, f"{probe.id} as {reader} shows locked {found}"
    if reader == OWNER and probe.route in OWNER_KNOWS and set(probe.uses) & {"vault", "vault-chat"}:
        return
    got, want = (_without_locked(v, reader, probe.route) for v in (got, want))
    kit.assert_same(kit.plain(got), kit.plain(want))


# A principal whose glob does not reach the locked sources: unlocking them in this process
# must not make them readable to it.
UNLOCKED_READERS = ["dan"]


@pytest.mark.parametrize("reader", UNLOCKED_READERS)
@pytest.mark.parametrize("probe", PROBES, ids=lambda p: p.id)
def test_unlocking_does_not_reach_past_the_scopes(  # type: ignore[no-untyped-def]
    locked_world, locked_refs, probe: probes.Probe, reader: str
) -> None:
    full = locked_world.read("unlocked", reader)
    reduced = locked_world.read("reduced-in-memory", reader)
    got = kit.outcome(lambda: probe.call(full, locked_refs), str(locked_world.full))
    want = kit.outcome(lambda: probe.call(reduced, locked_refs), str(locked_world.reduced(reader)))
    hidden = locked_world.hidden_from(reader)
    found = kit.leaked(got, hidden.canaries, named=probes.echoes(locked_refs, probe.uses))
    tally = kit.counts("locked sources, unlocked in process")
    tally.routes.add(probe.route)
    tally.principals.add(reader)
    tally.compared += 1
    tally.checks += len(hidden.canaries)
    assert not found, f"{probe.id} as {reader} shows locked {found}"
    kit.assert_same(kit.plain(got), kit.plain(want))


def test_the_owner_sees_locked_sources_listed_as_locked_and_empty(locked_world) -> None:  # type: ignore[no-untyped-def]
    listed = {s.scope: s for s in locked_world.owner.sources.list()}
    for spec in kit.LOCKED:
        source = listed[spec.scopes[0]]
        assert source.locked
        assert source.chunk_count == 0
    assert locked_world.owner.stats()["locked"] == len(kit.LOCKED)


def test_no_principal_lists_a_locked_source(locked_world) -> None:  # type: ignore[no-untyped-def]
    for spec in kit.PRINCIPALS:
        scopes = {s.scope for s in locked_world.read("full", spec.name).sources.list()}
        assert not scopes & {"vault", "vault-chat"}


# -- what the locked source's own row, and the store's files, keep ---------------------------------

# What only the locked channel's export says: its topic, its purpose, its member's id, name
# and handle, and its one message.
CHANNEL_CANARIES = (
    "zqtopicmarker",
    "zqpurposemarker",
    "uzqxmember1",
    "zqmemberquill",
    "zqquillhandle",
    "zqmessagemarker",
)
VAULT_ROOM = "slack:#vaultroom"
# Every column of ``sources``, by what it holds: of the source's content (sealed, and blank
# while it is locked: the value it then has), or not (its name, how it is read, by whom,
# when). A column missing here fails the test below: say which it is.
SEALED_COLUMNS = {"title": "", "location": "", "meta": "{}"}
NOT_CONTENT = frozenset(
    {"id", "scope", "kind", "platform", "access", "locked", "ingested_at", "created_by"}
)


def _slack_export(folder: Path) -> Path:
    """A Slack export of one channel whose topic, purpose and member say the canaries."""
    folder.mkdir(parents=True)
    user = {"id": "UZQXMEMBER1", "name": "zqquillhandle", "real_name": "Zqmemberquill Vane"}
    (folder / "users.json").write_text(json.dumps([{**user, "profile": user}]))
    channel = {
        "id": "CZQX0000001",
        "name": "vaultroom",
        "created": 1704067200,
        "members": ["UZQXMEMBER1"],
        "topic": {"value": "Zqtopicmarker numbers", "creator": "UZQXMEMBER1", "last_set": 1},
        "purpose": {"value": "Zqpurposemarker talk", "creator": "UZQXMEMBER1", "last_set": 1},
    }
    (folder / "channels.json").write_text(json.dumps([channel]))
    (folder / "vaultroom").mkdir()
    message = {
        "type": "message",
        "text": "Zqmessagemarker: the vault ledger moves on Friday",
        "user": "UZQXMEMBER1",
        "ts": "1710151200.000000",
    }
    (folder / "vaultroom" / "2024-03-11.json").write_text(json.dumps([message]))
    return folder


def _source_columns(location: str) -> list[str]:
    if kit.is_postgres(location):
        rows = kit.read_rows(
            location,
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'sources'"
            " AND table_schema = current_schema() ORDER BY ordinal_position",
        )
    else:
        rows = [(r[1],) for r in kit.read_rows(location, "PRAGMA table_info(sources)")]
    return [str(r[0]) for r in rows]


@pytest.fixture(scope="module")
def channel_locked(places: kit.Places) -> Any:  # type: ignore[misc]
    """A store with the canary channel ingested, embedded, sealed into trees and then locked;
    and its row as it was before."""
    here = places.within(places.folder / "channel-locked")
    export = _slack_export(here.folder / "export")
    location = here.new("store")
    with kit.open_memory(location) as mem:
        mem.ingest(export, now=kit.INGESTED_AT)
        mem.indexes.embed()
        mem.trees.flush()
        before = kit.read_rows(
            location, "SELECT title, location, meta FROM sources WHERE scope = ?", [VAULT_ROOM]
        )
        assert "zqtopicmarker" in str(before).lower()  # the canaries are there to be sealed
        mem.locks.lock(VAULT_ROOM, passphrase=kit.PASSPHRASE)
    return here, location, before


def test_a_locked_source_keeps_nothing_of_its_content_in_its_row(channel_locked) -> None:  # type: ignore[no-untyped-def]
    _, location, _ = channel_locked
    columns = _source_columns(location)
    unknown = [c for c in columns if c not in SEALED_COLUMNS and c not in NOT_CONTENT]
    assert not unknown, f"sources has columns {unknown} this test cannot tell: sealed or not?"
    names = ", ".join(columns)
    ((*row,),) = kit.read_rows(
        location, f"SELECT {names} FROM sources WHERE scope = ?", [VAULT_ROOM]
    )
    for column, value in zip(columns, row, strict=True):
        text = str(value).lower()
        assert not [c for c in CHANNEL_CANARIES if c in text], f"sources.{column}: {value!r}"
        if column in SEALED_COLUMNS:
            assert value == SEALED_COLUMNS[column], f"sources.{column}: {value!r}"
    tally = kit.counts("locked sources, rows and files")
    tally.routes.add("sources-row")
    tally.compared += 1
    tally.checks += len(columns) * len(CHANNEL_CANARIES)


def test_a_locked_source_leaves_no_canary_in_the_store_nor_in_a_copy(channel_locked) -> None:  # type: ignore[no-untyped-def]
    from stratamem.store.copy import copy_store

    here, location, _ = channel_locked
    assert kit.residue(location, CHANNEL_CANARIES) == {}
    target = str(here.folder / "copy" / "store.db")
    (here.folder / "copy").mkdir(exist_ok=True)
    copy_store(location, target)
    assert kit.residue(target, CHANNEL_CANARIES) == {}
    tally = kit.counts("locked sources, rows and files")
    tally.routes.update({"files", "copy"})
    tally.compared += 2
    tally.checks += 2 * len(CHANNEL_CANARIES)


def test_unlocking_puts_the_sources_row_back(channel_locked, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    here, location, before = channel_locked
    copy = here.within(tmp_path).copy(location, "unlocked")
    with kit.open_memory(copy) as mem:
        mem.locks.unlock(VAULT_ROOM, passphrase=kit.PASSPHRASE)
    after = kit.read_rows(
        copy, "SELECT title, location, meta FROM sources WHERE scope = ?", [VAULT_ROOM]
    )
    assert after == before
