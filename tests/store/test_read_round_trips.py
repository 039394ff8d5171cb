"""How many times a hybrid search asks its database: a bound that does not grow with the
limit or the candidate pool (counts, never timings), on both backends."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import stratamem
from sql_kit import round_trips
from stratamem.config import SearchConfig
from stratamem.testing import HashingEmbedder

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workspace"
QUERIES = ("why did we drop Redis for the cache", "release plan", "who owns the billing migration")
# What one search asks a PostgreSQL server: the BEGIN (which brings the snapshot and the
# settings), the keyword index's state, the vector leg's settings and its nearest neighbours,
# the turns around the chat candidates, the tie keys of equal scores (before the expansion
# picks its seeds and before the head is cut), the seeds' entities, the head's chunks, their
# vectors for MMR, the hits' entities, and the COMMIT; with a time filter, the graph leg's
# nodes and the expansion's entity-sharing chunks (every seed's in one read) besides.
PG_BOUND = 14
SQLITE_BOUND = 55  # statements: SQLite runs them in process, its PRAGMA checks included


@pytest.fixture(scope="module")
def store(module_location: str) -> str:
    """The example workspace (chats, mail and notes) with vectors; the principal ``reader``
    may read the chats and the mail, not the notes."""
    with stratamem.open(module_location, embedder=HashingEmbedder()) as memory:
        for part in ("slack-export", "mail/team.mbox", "notes"):
            memory.ingest(EXAMPLES / part)
        memory.indexes.embed()
        for source in memory.sources.list():
            scope = "team" if source.kind.value == "document" else "public"
            memory.sources.set_access(source.id, scopes=[scope])
        memory.principals.add("reader", ["public"])
    return module_location


@pytest.fixture(params=[None, "reader"], ids=["owner", "principal"])
def memory(store: str, request: pytest.FixtureRequest) -> Iterator[stratamem.Memory]:
    with stratamem.open(store, embedder=HashingEmbedder(), principal=request.param) as memory:
        memory.search("warm up the indexes")  # the first search builds them
        yield memory


def count(memory: stratamem.Memory, query: str, **kwargs: Any) -> int:
    """Round trips of the search once what it caches (the query's entities and aliases, the
    sources) is in memory: the second time it is run."""
    memory.search(query, **kwargs)
    with round_trips(memory) as sent:
        response = memory.search(query, **kwargs)
    assert response.hits, query
    return len(sent)


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("since", [None, datetime(2024, 1, 1, tzinfo=UTC)], ids=["all", "since"])
def test_a_search_asks_the_database_as_often_whatever_its_limit_or_pool(
    memory: stratamem.Memory, query: str, since: datetime | None
) -> None:
    few = count(memory, query, limit=3, since=since)
    many = count(memory, query, limit=60, since=since)
    wide = count(memory, query, limit=60, since=since, config=SearchConfig(pool=400))
    assert few == many == wide
    assert few <= (PG_BOUND if memory.store.name == "postgresql" else SQLITE_BOUND)


def test_the_count_sees_every_round_trip(memory: stratamem.Memory) -> None:
    with round_trips(memory) as sent:
        memory.search("release plan", limit=5)
    if memory.store.name == "postgresql":
        assert sent[0].startswith("BEGIN")
        assert sent[-1] == "COMMIT"
    assert any("FROM chunks" in s for s in sent)
