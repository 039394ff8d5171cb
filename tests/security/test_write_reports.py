"""What a write tells the principal that made it: its own work, and nothing of a hidden source.

A writer's ingest runs on the owner's memory (see ``ops/context.py``), over a store whose hidden
sources hold the very texts it writes (with vectors the embedding cache could reuse), chunks
waiting for a vector, seal jobs, and a seal that fails. Its report must equal the report of
the same ingest into a store holding only what the writer may read: ``embedded`` counts its
own chunks that got a vector (one reused from the cache included), ``trees`` its own seal
jobs, and nothing names a hidden scope. The same goes for the vector leg's status in a
search's explanation and for ``stats``, which shows the store's path and size to the owner
alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import security_kit as kit
from security_kit import ECHOED, T0, PrincipalSpec

import stratamem
from stratamem.ops.table import call
from stratamem.server.service import ServiceContext

TESS = kit.WRITERS[0]


@pytest.fixture(scope="module")
def stores(places: kit.Places, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The store with hidden sources and the store of what ``tess`` may read, kept for copies."""
    here = places.within(tmp_path_factory.mktemp("reports"))
    out = {}
    for name, specs in (
        ("full", kit.WRITE_SPECS),
        ("reduced", kit.visible_specs(TESS, kit.WRITE_SPECS[:-1])),
    ):
        location = here.new(name)
        kit.build_for_writes(location, specs, TESS)
        here.keep(location)
        out[name] = location
    out["folder"] = str(here.folder)
    return out


@contextmanager
def writing(
    places: kit.Places, stores: dict[str, str], which: str, folder: Path, who: str
) -> Iterator[ServiceContext]:
    """A copy of store ``which`` served (writes on, ingest root ``folder/in``), as ``who``."""
    location = places.within(folder).copy(stores[which], which)
    with kit.serve_for_writes(location, folder) as service:
        yield ServiceContext(service, who)


def echo_file(folder: Path) -> Path:
    """The writer's export: the texts the hidden and the locked sources hold too."""
    (folder / "in").mkdir(parents=True, exist_ok=True)
    path = folder / "in" / "notes.jsonl"
    lines = [
        json.dumps({"id": f"n{n}", "text": text, "timestamp": 1_710_000_000 + n})
        for n, text in enumerate(ECHOED)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def ingest_in_both(
    places: kit.Places, stores: dict[str, str], tmp_path: Path, *, embed_first: bool = False
) -> dict[str, dict[str, Any]]:
    """The writer's ingest of :func:`echo_file` in a copy of each store (``embed_first``: the
    owner embeds every chunk waiting for a vector before)."""
    out = {}
    for which in ("full", "reduced"):
        folder = tmp_path / which
        path = echo_file(folder)
        with writing(places, stores, which, folder, TESS.name) as ctx:
            if embed_first:
                ctx.service.owner_memory().indexes.embed()
            out[which] = kit.folder_masked(call(ctx, "ingest", {"path": str(path)}), folder)
    return out


def test_the_embedding_cache_is_no_oracle(places, stores, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    reports = ingest_in_both(places, stores, tmp_path, embed_first=True)
    # Both texts got a vector: from the cache in the full store (a hidden source holds them),
    # from the model in the other.
    assert reports["full"]["embedded"] == reports["reduced"]["embedded"] == len(ECHOED)


def test_an_ingest_report_counts_only_the_writers_own_work(places, stores, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    reports = ingest_in_both(places, stores, tmp_path)
    trees = reports["full"]["trees"]
    assert trees["trees"] == 1, trees  # its own source's seal, not the hidden ones waiting
    assert not trees["failed"], trees  # the hidden source's seal that fails is not its
    text = json.dumps(reports["full"]).lower()
    assert "broken-seal" not in text
    assert "echo-secret" not in text
    kit.assert_same(kit.canonical(reports["full"]), kit.canonical(reports["reduced"]))


def test_a_principals_stats_are_a_principal_only_stores(places, stores, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    got = {}
    for which in ("full", "reduced"):
        with writing(places, stores, which, tmp_path / which, TESS.name) as ctx:
            got[which] = call(ctx, "stats", {})
    assert "path" not in got["full"], got["full"]
    assert "bytes" not in got["full"], got["full"]
    assert got["full"] == got["reduced"]  # compared whole: nothing left out


def test_the_owner_is_shown_where_the_store_lies(places, stores, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with writing(places, stores, "reduced", tmp_path, None) as ctx:
        found = call(ctx, "stats", {})
    assert found["path"] == kit.shown_as(ctx.service.path)
    assert found["bytes"] > 0


# -- the vector leg's status -------------------------------------------------------------------

PEEK = PrincipalSpec("pia", ("eng",))


def _leg_store(places: kit.Places, location: str, *, hidden: bool) -> None:
    """The principal's source with no vector yet; with ``hidden``, a hidden source embedded
    before it was written (so the store has a model and vectors, none of them the
    principal's)."""
    if hidden:
        kit.build(location, [kit.HR], [PEEK], quick_principals=True)
    else:
        kit.build(location, [], [PEEK], quick_principals=True)
        # An empty store that never embedded.
        places.script(location, "DELETE FROM settings WHERE key IN ('embed.model', 'embed.dim')")
    with stratamem.open(location, embedder=None) as bare:
        for item in kit.ENG.items:
            bare.items.add(item.text, source="eng", id=item.id, time=item.time)
        bare.sources.set_access("eng", scopes=["eng"])


def test_the_vector_leg_says_no_vectors_yet_whatever_hidden_sources_hold(  # type: ignore[no-untyped-def]
    places, tmp_path: Path
) -> None:
    here = places.within(tmp_path)
    legs = {}
    for name, hidden in (("full", True), ("reduced", False)):
        location = here.new(name)
        _leg_store(here, location, hidden=hidden)
        with kit.open_memory(location, principal=PEEK.name) as mem:
            found = mem.search("queue SQLite", mode="vector", since=T0)
            legs[name] = (found.legs, found.total)
        here.drop(location)
    assert legs["full"] == legs["reduced"]
    assert legs["full"][0]["vector"].startswith("off: no vectors yet"), legs
