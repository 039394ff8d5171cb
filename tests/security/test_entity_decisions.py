"""Merges and splits of entities seen by a principal: a decision the owner made about an
alias only a hidden source states tells the principal nothing, and the principal's own merge
does what it would in a store without that source.

Each test builds two stores: ``full``, where the hidden ``notes:hr`` states that
``person:ann`` is ``person:ann lee`` and the owner split that alias, and ``reduced``, without
``notes:hr`` (and so without the split, which needs the alias). ``bot`` reads and writes
``notes:team``, which names both ids.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import security_kit as kit
from serving import live

import stratamem
from stratamem.server.http import create_app
from stratamem.server.service import Service
from suite import PATIENCE_S, scratch_database

A, B = "person:ann", "person:ann lee"
LEAVE_OUT = {"made_at", "undone_at", "id"}


@contextmanager
def _served(location: str, *, hidden: bool) -> Iterator[httpx.Client]:
    """``location`` built (see the module docstring) and served live; a client as ``bot``."""
    token = _build(location, hidden=hidden)
    headers = {"Authorization": f"Bearer {token}"}
    with (
        Service(location, embedder=None, allow_writes=True) as service,
        live(create_app(service, access_log=None)) as url,
        httpx.Client(base_url=url, headers=headers, timeout=PATIENCE_S) as client,
    ):
        yield client


def _build(location: str, *, hidden: bool) -> str:
    with stratamem.open(location, embedder=None) as owner:
        owner.items.add("ann reviewed the plan", source="notes:team", id="t1")
        owner.sources.set_access("notes:team", scopes="team")
        owner.facts.remember(A, "reviewed", "the plan", source="notes:team")
        owner.facts.remember(B, "leads", "the plan", source="notes:team")
        if hidden:
            owner.items.add("ann lee, also known as ann", source="notes:hr", id="h1")
            owner.sources.set_access("notes:hr", scopes="hr")
            hr = owner.sources.get("notes:hr").id
            with owner.store.transaction():
                owner.store.add_aliases(hr, [(A, B, "person note")])
            owner.entities.split(A, B)
        return owner.principals.add("bot", "team", write=True)


def _post(client: httpx.Client, route: str, body: dict[str, Any]) -> Any:
    answer = client.post(f"/v1/{route}", json=body)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _plain(decision: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in decision.items() if k not in LEAVE_OUT}


def _seen(client: httpx.Client) -> dict[str, Any]:
    history = _post(client, "entity_history", {})["decisions"]
    return {
        "history": [_plain(d) for d in history],
        "entities": _post(client, "search_entities", {"query": "ann"}),
    }


@pytest.fixture
def pair(
    store_location: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[httpx.Client, httpx.Client]]:
    if store_location.endswith(".db"):
        reduced = str(tmp_path / "reduced.db")
    else:
        reduced = scratch_database(request)
    with _served(store_location, hidden=True) as full, _served(reduced, hidden=False) as less:
        yield full, less


def test_the_owners_split_of_a_hidden_alias_is_not_in_a_principals_history(
    pair: tuple[httpx.Client, httpx.Client],
) -> None:
    full, reduced = pair
    assert _seen(full) == _seen(reduced)


def test_a_principals_merge_over_a_split_of_a_hidden_alias_is_a_merge(
    pair: tuple[httpx.Client, httpx.Client], store_location: str
) -> None:
    got = {}
    for name, client in zip(("full", "reduced"), pair, strict=True):
        done = _post(client, "merge_entities", {"entity_a": A, "entity_b": B})
        got[name] = _plain(done["decision"])
        got[name + " seen"] = _seen(client)
    assert got["full"] == got["reduced"]
    assert got["full"]["action"] == "merge"
    assert got["full seen"] == got["reduced seen"]
    # The owner's split stays: the principal merged the two, it did not undo the split.
    with stratamem.open(store_location, embedder=None) as owner:
        actions = {(d.action, d.active) for d in owner.entities.history()}
    assert actions == {("split", True), ("merge", True)}


SECRET_A, SECRET_B = "person:zqmergeleft", "person:zqmergeright"


def _decided(location: str) -> set[tuple[str, str]]:
    with stratamem.open(location, embedder=None) as owner:
        return {d.pair for d in owner.entities.history()}


def test_a_lock_seals_and_a_forget_removes_decisions_naming_what_only_that_source_names(
    store_location: str,
) -> None:
    """A merge of two ids only ``notes:vault`` names is sealed with it (its ids leave the
    store's plain text) and comes back on unlock; a forget removes it. A merge of ids another
    source also names stays as it is."""
    with stratamem.open(store_location, embedder=None) as owner:
        owner.items.add("left met right", source="notes:vault", id="v1")
        owner.facts.remember(SECRET_A, "met", SECRET_B, source="notes:vault")
        owner.facts.remember(SECRET_B, "knows", "ann", source="notes:vault")
        owner.items.add("ann reviewed the plan", source="notes:team", id="t1")
        owner.facts.remember(A, "reviewed", "the plan", source="notes:team")
        owner.facts.remember(B, "leads", "the plan", source="notes:vault")
        owner.facts.remember(B, "leads", "the plan", source="notes:team")
        owner.entities.merge(SECRET_A, SECRET_B)
        owner.entities.merge(A, B)
    both = {(SECRET_A, SECRET_B), (A, B)}
    assert _decided(store_location) == both
    with stratamem.open(store_location, embedder=None) as owner:
        owner.locks.lock("notes:vault", passphrase="pass phrase")
    assert kit.residue(store_location, ["zqmergeleft", "zqmergeright"]) == {}
    assert _decided(store_location) == {(A, B)}
    with stratamem.open(store_location, embedder=None) as owner:
        owner.locks.unlock("notes:vault", passphrase="pass phrase")
    assert _decided(store_location) == both
    with stratamem.open(store_location, embedder=None) as owner:
        owner.sources.forget("notes:vault")
    assert kit.residue(store_location, ["zqmergeleft", "zqmergeright"]) == {}
    assert _decided(store_location) == {(A, B)}
