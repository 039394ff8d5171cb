"""Work oracles: what a principal's read costs the store must not grow with what it may not
see. Two stores differ only in how often a hidden source mentions an entity (3 times or 120
times); every read of the principal must run about as many SQLite virtual-machine steps in
both (a deterministic stand-in for time: the steps are counted, not timed).

Only SQL is counted. The in-memory keyword and entity indexes do numpy work over every
posting of a term or entity, hidden ones too, before the gate's mask drops them; that is not
seen here. The steps are SQLite's own count, which PostgreSQL has no counterpart of, so these
run on SQLite alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import security_kit as kit
from security_kit import ENG, T0, Item, PrincipalSpec, SourceSpec

from stratamem.api import Memory

ANN = PrincipalSpec("ann", ("eng",))
WINDOW = {"since": T0, "until": T0 + timedelta(days=30)}
SMALL, LARGE = 3, 120


def _hidden(count: int) -> SourceSpec:
    return SourceSpec(
        scopes=("bigsecret",),
        kind="record",
        access=("hr",),
        items=tuple(
            Item(
                f"b{n}",
                f"note {n} for @bigsecret on the queue, #bigtag, with @alice",
                T0 + timedelta(hours=n),
            )
            for n in range(count)
        ),
    )


READS: dict[str, Callable[[Memory], Any]] = {
    "sources": lambda m: m.sources.list(),
    "stats": lambda m: m.stats(),
    "trees": lambda m: m.trees.list(),
    "query_source": lambda m: m.query_source(),
    "query_global": lambda m: m.query_global(**WINDOW),
    "cover_window": lambda m: m.cover_window(**WINDOW),
    "search_entities": lambda m: m.search_entities("bigsec"),
    "related": lambda m: m.related("handle:bigsecret"),
    "get": lambda m: m.get("0" * 32),
    "keyword": lambda m: m.search("bigsecret queue", mode="keyword"),
    "vector": lambda m: m.search("bigsecret queue", mode="vector"),
    "graph": lambda m: m.search("@bigsecret @alice", mode="graph"),
    "hybrid": lambda m: m.search("@bigsecret queue"),
}
# Reads keyed by entity: the (entity_id, source_id) indexes keep them to the visible sources.
SCALING: dict[str, Callable[[Memory], Any]] = {
    "query_topic": lambda m: m.query_topic("handle:bigsecret"),
    "graph-in-a-window": lambda m: m.search("@bigsecret @alice", mode="graph", **WINDOW),
}


@pytest.fixture(scope="module")
def readers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[int, Memory]]:
    root = tmp_path_factory.mktemp("work")
    out = {}
    for count in (SMALL, LARGE):
        path = root / f"{count}.db"
        kit.build(path, [ENG, _hidden(count)], [ANN], quick_principals=True)
        out[count] = kit.open_memory(Path(path), principal=ANN.name)
    yield out
    for mem in out.values():
        mem.close()


def steps(mem: Memory, read: Callable[[Memory], Any]) -> int:
    """SQLite virtual-machine steps ``read`` runs (caches warmed by a first run)."""
    kit.outcome(lambda: read(mem), "")
    count = 0

    def step() -> int:
        nonlocal count
        count += 1
        return 0

    conn = mem.store.conn  # type: ignore[attr-defined]
    conn.set_progress_handler(step, 1)
    try:
        kit.outcome(lambda: read(mem), "")
    finally:
        conn.set_progress_handler(None, 1)
    return count


def _check(readers: dict[int, Memory], read: Callable[[Memory], Any]) -> None:
    small, large = steps(readers[SMALL], read), steps(readers[LARGE], read)
    # A deeper B-tree costs a step here and there; 40 times the hidden rows must not show.
    assert large <= small * 1.05 + 20, (small, large)


@pytest.mark.parametrize("name", sorted(READS))
def test_a_read_costs_nothing_for_what_is_hidden(readers, name: str) -> None:  # type: ignore[no-untyped-def]
    _check(readers, READS[name])
    tally = kit.counts("work oracles")
    tally.routes.add(name)
    tally.principals.add(ANN.name)
    tally.compared += 1


@pytest.mark.parametrize("name", sorted(SCALING))
def test_entity_keyed_reads_cost_nothing_for_what_is_hidden(readers, name: str) -> None:  # type: ignore[no-untyped-def]
    _check(readers, SCALING[name])


def test_the_step_counter_sees_a_read_that_scales(readers) -> None:  # type: ignore[no-untyped-def]
    # The owner sees the hidden source: its reads of it must cost more in the larger store.
    # (Its statistics count the chunks and mentions; the sources' listing reads the counts
    # kept per source, which cost the same in both.)
    owners = {n: kit.open_memory(Path(m.path)) for n, m in readers.items()}
    try:
        read = READS["stats"]
        assert steps(owners[LARGE], read) > steps(owners[SMALL], read) * 2
    finally:
        for mem in owners.values():
            mem.close()
