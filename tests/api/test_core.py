"""What every facet shares: times given as strings, as the command line takes them, and
sources named in filters that must name a source the reader may see."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from locked_store import FAST_KDF, PASSPHRASE

import stratamem
from stratamem.access import crypto
from stratamem.api._core import when
from stratamem.errors import NotFoundError
from stratamem.testing import HashingEmbedder
from stratamem.types import Filters

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ENG = "slack:#eng"
CAROL = "person:carol diaz"
Call = Callable[[stratamem.Memory, Any], Any]

# Every time argument of a read, with one call that passes it ``t`` (the other times fixed).
READS: dict[str, Call] = {
    "search since": lambda m, t: m.search("deploy", since=t),
    "search until": lambda m, t: m.search("deploy", until=t),
    "query_source now": lambda m, t: m.query_source(ENG, time_window_days=400, now=t),
    "query_global since": lambda m, t: m.query_global(since=t, until="2100-01-01"),
    "query_global until": lambda m, t: m.query_global(since="2024-01-01", until=t),
    "query_topic since": lambda m, t: m.query_topic(CAROL, since=t),
    "query_topic until": lambda m, t: m.query_topic(CAROL, until=t),
    "cover_window since": lambda m, t: m.cover_window(since=t, until="2100-01-01"),
    "cover_window until": lambda m, t: m.cover_window(since="2024-01-01", until=t),
    "facts.recall as_of": lambda m, t: m.facts.recall(as_of=t),
    "facts.recall known_at": lambda m, t: m.facts.recall(known_at=t),
    "facts.history known_at": lambda m, t: m.facts.history(CAROL, "leads", known_at=t),
    "facts.query as_of": lambda m, t: m.facts.query("queue", as_of=t),
    "facts.query known_at": lambda m, t: m.facts.query("queue", known_at=t),
    "facts.search as_of": lambda m, t: m.facts.search("queue", as_of=t),
}

# Every time argument of a write.
WRITES: dict[str, Call] = {
    "items.add time": lambda m, t: m.items.add("Carol takes the pager", time=t),
    "items.edit time": lambda m, t: m.items.edit(m.items.add("a note", id="n1").id, time=t),
    "facts.remember valid_from": lambda m, t: m.facts.remember(CAROL, "leads", "x", valid_from=t),
    "facts.remember valid_to": lambda m, t: m.facts.remember(CAROL, "leads", "x", valid_to=t),
    "facts.remember now": lambda m, t: m.facts.remember(CAROL, "leads", "x", now=t),
    "facts.retract now": lambda m, t: m.facts.retract(
        m.facts.remember(CAROL, "likes", f"tea {t}", many=True, now=t).recorded[0].id, now=t
    ),
    "facts.consolidate now": lambda m, t: m.facts.consolidate(now=t),
    "ingest now": lambda m, t: m.ingest(FIXTURES / "jsonl" / "export.jsonl", now=t),
}


def argument(case: str) -> str:
    return case.rpartition(" ")[2]


def shape(found: Any) -> Any:
    """What a read answered, as comparable ids."""
    if hasattr(found, "hits"):
        return [h.node_id for h in found.hits], found.total
    return [getattr(getattr(x, "fact", x), "id", x) for x in found]


@pytest.fixture
def empty(store_location: str) -> Iterator[stratamem.Memory]:
    with stratamem.open(store_location, embedder=HashingEmbedder()) as memory:
        yield memory


# -- times ---------------------------------------------------------------------------------------


def test_when_reads_what_the_command_line_reads() -> None:
    now = datetime(2024, 3, 12, 9, 30, tzinfo=UTC)
    assert when("2024-03-12", "since") == datetime(2024, 3, 12, tzinfo=UTC)
    assert when("2024-03-12T09:30+02:00", "since") == datetime(2024, 3, 12, 7, 30, tzinfo=UTC)
    assert when("7d", "since", now=now) == datetime(2024, 3, 5, 9, 30, tzinfo=UTC)
    assert when(now, "since") is now
    assert when(None, "since") is None
    with pytest.raises(ValueError, match=r"^as_of: cannot read 'soon' as a time"):
        when("soon", "as_of")
    with pytest.raises(ValueError, match="valid_from must be a datetime or a time"):
        when(20240312, "valid_from")  # type: ignore[arg-type]


@pytest.mark.parametrize("case", sorted(READS))
def test_a_read_takes_a_time_as_a_string(shared: stratamem.Memory, case: str) -> None:
    read = READS[case]
    moment = datetime(2024, 3, 12, 10, 0, tzinfo=UTC)
    assert shape(read(shared, "2024-03-12T10:00")) == shape(read(shared, moment))
    assert shape(read(shared, "2024-03-12T12:00+02:00")) == shape(read(shared, moment))
    read(shared, "7d")  # a span back from now reads too


@pytest.mark.parametrize("case", sorted(READS))
def test_a_read_refuses_a_string_that_is_no_time(shared: stratamem.Memory, case: str) -> None:
    with pytest.raises(ValueError, match=rf"^{argument(case)}: cannot read 'next-ish' as a time"):
        READS[case](shared, "next-ish")


@pytest.mark.parametrize("case", sorted(WRITES))
def test_a_write_takes_a_time_as_a_string(empty: stratamem.Memory, case: str) -> None:
    WRITES[case](empty, "2024-05-01")
    WRITES[case](empty, "24h")


@pytest.mark.parametrize("case", sorted(WRITES))
def test_a_write_refuses_a_string_that_is_no_time_and_writes_nothing(
    empty: stratamem.Memory, case: str
) -> None:
    # What the call writes before it reaches the time (the item an edit corrects) is made first.
    with pytest.raises(ValueError, match=rf"^{argument(case)}: cannot read 'someday' as a time"):
        WRITES[case](empty, "someday")
    if case.startswith("facts.remember"):
        assert empty.facts.recall(CAROL) == []


def test_a_remembered_fact_read_as_of_a_string_time(empty: stratamem.Memory) -> None:
    empty.facts.remember(CAROL, "leads", "on-call", valid_from="2024-05-01", now="2024-05-02")
    empty.facts.remember(CAROL, "leads", "release", valid_from="2024-06-01", now="2024-06-02")
    assert [f.object for f in empty.facts.recall(CAROL, as_of="2024-05-15")] == ["on-call"]
    assert [f.object for f in empty.facts.recall(CAROL, as_of="2024-06-15")] == ["release"]
    before = empty.facts.recall(CAROL, as_of="2024-06-15", known_at="2024-05-03")
    assert [f.object for f in before] == ["on-call"]
    assert {f.valid_from for f in empty.facts.history(CAROL, "leads")} == {
        datetime(2024, 5, 1, tzinfo=UTC),
        datetime(2024, 6, 1, tzinfo=UTC),
    }


def test_an_item_written_at_a_string_time(empty: stratamem.Memory) -> None:
    write = empty.items.add("Carol takes the pager", time="2024-05-01T09:30")
    assert empty.items.get(write.id).time == datetime(2024, 5, 1, 9, 30, tzinfo=UTC)
    empty.items.edit(write.id, time="2024-05-02")
    assert empty.items.get(write.id).time == datetime(2024, 5, 2, tzinfo=UTC)


# -- sources named in filters ----------------------------------------------------------------------

# Every read that takes sources, with one call that names ``ref`` among them.
FILTERED: dict[str, Call] = {
    "search": lambda m, ref: m.search("deploy", sources=[ref]),
    "search keyword": lambda m, ref: m.search("deploy", sources=[ref], mode="keyword"),
    "query_source source": lambda m, ref: m.query_source(ref),
    "query_source filters": lambda m, ref: m.query_source(filters=Filters(sources=(ref,))),
    "query_global": lambda m, ref: m.query_global(
        since="2024-01-01", until="2100-01-01", filters=Filters(sources=(ref,))
    ),
    "query_topic": lambda m, ref: m.query_topic(CAROL, filters=Filters(sources=(ref,))),
    "cover_window": lambda m, ref: m.cover_window(
        since="2024-01-01", until="2100-01-01", filters=Filters(sources=(ref,))
    ),
    "drill_down": lambda m, ref: m.drill_down("nothing", filters=Filters(sources=(ref,))),
    "fetch_leaves": lambda m, ref: m.fetch_leaves(["nothing"], filters=Filters(sources=(ref,))),
    "facts.search": lambda m, ref: m.facts.search("queue", sources=[ref]),
    "facts.query": lambda m, ref: m.facts.query("queue", sources=[ref]),
}


@pytest.mark.parametrize("read", sorted(FILTERED))
def test_an_unknown_source_is_an_error_naming_close_matches(
    shared: stratamem.Memory, read: str
) -> None:
    with pytest.raises(NotFoundError) as raised:
        FILTERED[read](shared, "slack:#egn")
    assert str(raised.value) == (
        "no source with id or scope 'slack:#egn'; did you mean 'slack:#eng', 'slack:#general'?"
    )


@pytest.mark.parametrize("read", sorted(FILTERED))
def test_a_known_source_by_scope_or_id_reads(shared: stratamem.Memory, read: str) -> None:
    FILTERED[read](shared, ENG)
    FILTERED[read](shared, shared.sources.get(ENG).id)


# A fact's sources are named one by one (no patterns); a primitive's ``source`` is one source.
@pytest.mark.parametrize(
    "read", sorted(set(FILTERED) - {"query_source source", "facts.search", "facts.query"})
)
def test_a_scope_pattern_is_never_an_error(shared: stratamem.Memory, read: str) -> None:
    FILTERED[read](shared, "nowhere:*")
    FILTERED[read](shared, "slack:*")


def test_a_search_of_a_pattern_matching_nothing_is_empty(shared: stratamem.Memory) -> None:
    assert shared.search("deploy", sources=["nowhere:*"]).hits == ()
    assert shared.search("deploy", sources=["slack:*"]).hits


def test_an_unknown_source_with_nothing_close_names_none(shared: stratamem.Memory) -> None:
    with pytest.raises(NotFoundError) as raised:
        shared.search("deploy", sources=[ENG, "zzzzzzzzzz"])
    assert str(raised.value) == "no source with id or scope 'zzzzzzzzzz'"


def test_a_principal_is_not_told_of_a_source_it_may_not_read(small: stratamem.Memory) -> None:
    small.sources.set_access(ENG, scopes="eng")
    small.principals.add("reader", "team")
    hidden_id = small.sources.get(ENG).id
    with small.as_principal("reader") as reader:
        assert [s.scope for s in reader.sources.list()] == ["slack:#general"]
        for read in FILTERED.values():
            # As for a source that does not exist: only the sources it may read are offered.
            with pytest.raises(NotFoundError) as hidden:
                read(reader, ENG)
            assert str(hidden.value) == (
                "no source with id or scope 'slack:#eng'; did you mean 'slack:#general'?"
            )
            with pytest.raises(NotFoundError) as by_id:
                read(reader, hidden_id)
            assert str(by_id.value) == f"no source with id or scope {hidden_id!r}"
            with pytest.raises(NotFoundError) as close:
                read(reader, "slack:#en")
            assert "'slack:#eng'" not in str(close.value)
    with pytest.raises(NotFoundError, match=r"did you mean 'slack:#eng'"):
        small.search("deploy", sources=["slack:#en"])


def test_a_locked_source_is_known_to_the_owner(
    small: stratamem.Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(crypto, "DEFAULT_KDF", FAST_KDF)
    small.locks.lock(ENG, passphrase=PASSPHRASE)
    assert small.search("deploy", sources=[ENG]).hits == ()
