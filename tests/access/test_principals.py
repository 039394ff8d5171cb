"""Principals through the Python API: tokens, what the file keeps of them, and what a
principal may read and do."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from locked_store import holdings

import stratamem
from stratamem.api import Memory
from stratamem.errors import AccessDenied, NotFoundError
from stratamem.store.access import may_read, parse_scopes
from stratamem.types import Principal, Source, SourceKind

TOKEN = re.compile(r"stm_[0-9a-f]{12}_[A-Za-z0-9_-]{43}")
NO_MATCH = "the token matches no principal"

# Visible to `team` (chat, its kind's default), `private` (a document), `team` (chat).
SLACK = ("slack:#eng", "slack:#general")
NOTES = "jsonl:notes"
JSONL_CHAT = "jsonl:slack:#eng"


@pytest.fixture
def memory(store_location: str, fixtures_dir: Path) -> Iterator[Memory]:
    """A store of two Slack channels (chat), a JSONL chat source and JSONL notes (document)."""
    with stratamem.open(store_location, embedder=None) as mem:
        mem.ingest(fixtures_dir / "slack")
        mem.ingest(fixtures_dir / "jsonl" / "export.jsonl")
        yield mem


def scopes_seen(memory: Memory) -> list[str]:
    return [s.scope for s in memory.sources.list()]


def keyword_scopes(memory: Memory, query: str) -> set[str]:
    return {hit.tree_scope for hit in memory.search(query, mode="keyword").hits}


# -- tokens ----------------------------------------------------------------------------------


def test_a_token_has_the_documented_shape_and_names_its_principal(memory: Memory) -> None:
    first = memory.principals.add("bot", "team")
    second = memory.principals.add("other", "team")
    assert TOKEN.fullmatch(first)
    assert TOKEN.fullmatch(second)
    assert first != second
    found = memory.principals.authenticate(first)
    assert (found.name, found.scopes, found.sources, found.write) == ("bot", ("team",), (), False)
    assert memory.principals.authenticate(f"  {second}\n").name == "other"  # pasted with whitespace


def test_the_files_never_hold_a_token_or_its_secret(memory: Memory, store_location: str) -> None:
    tokens = [memory.principals.add("bot", "team"), memory.principals.add("eng", "eng,team")]
    tokens.append(memory.principals.rotate("bot"))
    memory.search("Redis", mode="keyword")

    def leaked(token: str) -> list[str]:
        secret = token[len("stm_") + 13 :]
        # Lowercased, as what holds the store is searched.
        return sorted(holdings(store_location, [token.lower().encode(), secret.lower().encode()]))

    if memory.store.name == "sqlite":
        # Read while the WAL still holds the writes.
        assert Path(f"{store_location}-wal").exists()
    assert [leaked(t) for t in tokens] == [[], [], []]
    memory.close()
    assert [leaked(t) for t in tokens] == [[], [], []]


def test_rotate_gives_a_new_token_and_the_old_one_stops_working(memory: Memory) -> None:
    old = memory.principals.add("bot", "team", sources=["slack:*"])
    new = memory.principals.rotate("bot")
    assert TOKEN.fullmatch(new)
    assert new != old
    with pytest.raises(AccessDenied, match=NO_MATCH):
        memory.principals.authenticate(old)
    found = memory.principals.authenticate(new)
    assert (found.name, found.scopes, found.sources) == ("bot", ("team",), ("slack:*",))
    assert found.created_at is not None
    assert found.rotated_at is not None
    assert found.rotated_at >= found.created_at
    with pytest.raises(NotFoundError, match="no principal named 'ghost'"):
        memory.principals.rotate("ghost")


def test_remove_ends_the_token_and_every_read(memory: Memory) -> None:
    token = memory.principals.add("bot", "team")
    reader = memory.as_principal("bot")
    try:
        assert scopes_seen(reader) == [JSONL_CHAT, *SLACK]
        memory.principals.remove("bot")
        with pytest.raises(AccessDenied, match=NO_MATCH):
            memory.principals.authenticate(token)
        # A memory already open for it reads as a principal with no scopes: nothing.
        assert scopes_seen(reader) == []
        assert not reader.search("Redis", mode="keyword").hits
        assert reader.stats()["chunks"] == 0
        assert reader.principal is not None
        assert reader.principal.scopes == ()
    finally:
        reader.close()
    with pytest.raises(AccessDenied, match="no principal named 'bot'"):
        memory.as_principal("bot")
    with pytest.raises(AccessDenied, match="no principal named 'bot'"):
        stratamem.open(memory.path, embedder=None, principal="bot")
    with pytest.raises(NotFoundError, match="no principal named 'bot'"):
        memory.principals.remove("bot")


def test_every_token_that_matches_nothing_gets_the_same_message(memory: Memory) -> None:
    token = memory.principals.add("bot", "team")
    removed = memory.principals.add("gone", "team")
    memory.principals.remove("gone")
    rotated = memory.principals.add("rotated", "team")
    memory.principals.rotate("rotated")
    token_id, secret = token[4:16], token[17:]
    wrong_secret = f"stm_{token_id}_{'A' * 43}"
    unknown_id = f"stm_{'0' * 12}_{secret}"
    bad = [
        "",
        "stm_",
        "not a token",
        token[:-1],
        token + "x",
        token.upper(),
        token.replace("stm_", "tok_"),
        wrong_secret,
        unknown_id,
        removed,
        rotated,
    ]
    messages = set()
    for candidate in bad:
        with pytest.raises(AccessDenied) as caught:
            memory.principals.authenticate(candidate)
        messages.add(str(caught.value))
    assert messages == {NO_MATCH}


@pytest.mark.parametrize(
    ("name", "scopes", "message"),
    [
        ("bad name", "team", "bad principal name"),
        ("-dash", "team", "bad principal name"),
        ("x" * 65, "team", "bad principal name"),
        ("bot", "", "needs at least one scope"),
        ("bot", " , ", "needs at least one scope"),
        ("bot", "Bad Label!", "bad access scope"),
        ("bot", "_leading", "bad access scope"),
    ],
)
def test_a_bad_principal_is_refused(memory: Memory, name: str, scopes: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        memory.principals.add(name, scopes)
    assert memory.principals.list() == []


def test_a_duplicate_principal_is_refused(memory: Memory) -> None:
    token = memory.principals.add("bot", "team")
    with pytest.raises(ValueError, match="a principal named 'bot' exists"):
        memory.principals.add("bot", "eng")
    assert memory.principals.authenticate(token).scopes == ("team",)


def test_principals_lists_without_secrets(memory: Memory) -> None:
    memory.principals.add("zed", "*", sources=["slack:#eng*", " "], write=True)
    memory.principals.add("amy", "Eng, team")
    listed = memory.principals.list()
    assert [p.name for p in listed] == ["amy", "zed"]
    assert listed[0].scopes == ("eng", "team")  # lowercased, sorted
    assert (listed[1].scopes, listed[1].sources, listed[1].write) == (
        ("*",),
        ("slack:#eng*",),
        True,
    )
    assert all(isinstance(p, Principal) for p in listed)


def test_a_store_in_memory_cannot_be_opened_for_a_principal() -> None:
    with stratamem.open(":memory:", embedder=None) as memory:
        memory.principals.add("bot", "team")
        with pytest.raises(ValueError, match="in memory"):
            memory.as_principal("bot")


# -- the read rule ---------------------------------------------------------------------------


def source(access: tuple[str, ...], *, scope: str = "slack:#eng", locked: bool = False) -> Source:
    return Source(
        id="src_0123456789abcdef",
        scope=scope,
        kind=SourceKind.CHAT,
        platform="slack",
        location="",
        access=access,
        locked=locked,
    )


@pytest.mark.parametrize(
    ("scopes", "globs", "access", "scope", "expected"),
    [
        (("eng",), (), ("eng", "team"), "slack:#eng", True),  # they share eng
        (("eng",), (), ("team",), "slack:#eng", False),  # nothing shared
        (("eng", "ops"), (), ("ops",), "slack:#eng", True),
        (("*",), (), ("anything",), "slack:#eng", True),  # * reads any source with a scope
        (("*",), (), (), "slack:#eng", False),  # ...but not one with none
        (("eng",), (), (), "slack:#eng", False),
        (("*",), ("slack:#eng*",), ("team",), "slack:#eng-alerts", True),  # globs narrow
        (("*",), ("slack:#eng*",), ("team",), "slack:#general", False),
        (("*",), ("src_0123456789abcdef",), ("team",), "slack:#general", True),  # by id
        (("eng",), ("slack:*",), ("team",), "slack:#eng", False),  # a glob never widens
        (("*",), ("SLACK:*",), ("team",), "slack:#eng", False),  # globs are case-sensitive
    ],
)
def test_may_read(
    scopes: tuple[str, ...],
    globs: tuple[str, ...],
    access: tuple[str, ...],
    scope: str,
    expected: bool,
) -> None:
    reader = Principal(name="p", scopes=scopes, sources=globs)
    assert may_read(reader, source(access, scope=scope)) is expected


def test_the_owner_reads_every_unlocked_source_and_nobody_a_locked_one() -> None:
    assert may_read(None, source(()))
    assert not may_read(None, source(("team",), locked=True))
    assert not may_read(Principal(name="p", scopes=("*",)), source(("team",), locked=True))


def test_parse_scopes() -> None:
    assert parse_scopes("Eng, team,,eng ") == ("eng", "team")
    assert parse_scopes(["ops", "mail:lkml", "a.b-c_d"]) == ("a.b-c_d", "mail:lkml", "ops")
    assert parse_scopes("*", allow_any=True) == ("*",)
    with pytest.raises(ValueError, match="bad access scope"):
        parse_scopes("*")
    with pytest.raises(ValueError, match="bad access scope"):
        parse_scopes("x" * 65)


def test_scopes_decide_what_every_read_sees(memory: Memory) -> None:
    memory.sources.set_access(NOTES, scopes="eng")
    memory.principals.add("team", "team")
    memory.principals.add("eng", "eng")
    memory.principals.add("any", "*")
    memory.principals.add("narrow", "*", sources=["slack:#eng*"])
    views = {name: memory.as_principal(name) for name in ("team", "eng", "any", "narrow")}
    try:
        assert scopes_seen(views["team"]) == [JSONL_CHAT, *SLACK]
        assert scopes_seen(views["eng"]) == [NOTES]
        assert scopes_seen(views["any"]) == [NOTES, JSONL_CHAT, *SLACK]
        assert scopes_seen(views["narrow"]) == ["slack:#eng"]
        # The hidden notes are found by the owner, and by no principal but those it allows.
        assert keyword_scopes(memory, "Numeric") == {NOTES}
        assert keyword_scopes(views["team"], "Numeric") == set()
        assert keyword_scopes(views["eng"], "Numeric") == {NOTES}
        # Totals count only what may be read.
        redis = memory.search("Redis", mode="keyword")
        seen = views["narrow"].search("Redis", mode="keyword")
        assert {h.tree_scope for h in seen.hits} <= {"slack:#eng"}
        assert seen.total == len(seen.hits) < redis.total
        assert views["eng"].stats()["sources"] == 1
        assert memory.stats()["sources"] == 4
        # The idf's chunk count is of the sources each may see.
        counts = {s.scope: s.chunk_count for s in memory.sources.list()}
        for name, view in views.items():
            seen_count = sum(counts[scope] for scope in scopes_seen(view))
            assert view.store.chunk_count() == seen_count, name
        assert views["team"].store.chunk_count() < memory.store.chunk_count()
        # A hidden node reads as one that does not exist.
        hidden = memory.search("Numeric", mode="keyword").hits[0].node_id
        assert views["team"].nodes([hidden]) == []
        # The reads a search makes of its candidates see it as none either.
        assert views["team"].store.chunk_heads([hidden]) == {}
        assert views["team"].store.chunks([hidden]) == []
        assert hidden in views["eng"].store.chunk_heads([hidden])
        assert views["team"].store.chunks_and_mentions([hidden]) == ([], {hidden: []})
        shown, named = views["eng"].store.chunks_and_mentions([hidden])
        assert [c.id for c in shown] == [hidden]
        assert named == memory.store.mentions_of([hidden])
        with pytest.raises(NotFoundError) as unseen:
            views["team"].get(hidden)
        with pytest.raises(NotFoundError) as missing:
            views["team"].get("0" * 32)
        assert str(unseen.value).replace(hidden, "ID") == str(missing.value).replace("0" * 32, "ID")
        with pytest.raises(NotFoundError, match="no source"):
            views["team"].sources.get(NOTES)
    finally:
        for view in views.values():
            view.close()


def test_a_source_with_no_scopes_is_the_owners_alone(memory: Memory) -> None:
    memory.sources.set_access("slack:#general", scopes=())
    memory.principals.add("any", "*")
    with memory.as_principal("any") as reader:
        assert "slack:#general" not in scopes_seen(reader)
    assert "slack:#general" in scopes_seen(memory)
    assert memory.sources.get("slack:#general").access == ()


def test_set_access_reaches_an_open_principal_at_its_next_read(memory: Memory) -> None:
    memory.principals.add("team", "team")
    with memory.as_principal("team") as reader:
        assert keyword_scopes(reader, "Numeric") == set()
        changed = memory.sources.set_access(NOTES, add="team")
        assert changed.access == ("private", "team")
        assert keyword_scopes(reader, "Numeric") == {NOTES}
        assert NOTES in scopes_seen(reader)
        memory.sources.set_access(NOTES, remove=["team"])
        assert keyword_scopes(reader, "Numeric") == set()
        memory.sources.set_access("slack:#eng", scopes="ops")
        assert scopes_seen(reader) == [JSONL_CHAT, "slack:#general"]
        memory.sources.set_access("slack:#eng", scopes="ops, team", remove="ops")
        assert scopes_seen(reader) == [JSONL_CHAT, *SLACK]


def test_set_access_validates_and_resolves(memory: Memory) -> None:
    with pytest.raises(ValueError, match="bad access scope"):
        memory.sources.set_access(NOTES, add="Bad Label!")
    with pytest.raises(ValueError, match="bad access scope"):
        memory.sources.set_access(NOTES, scopes="*")  # `*` is a principal's, never a source's
    with pytest.raises(NotFoundError):
        memory.sources.set_access("slack:#nowhere", scopes="team")
    by_id = memory.sources.get(NOTES).id
    assert memory.sources.set_access(by_id, scopes="eng").access == ("eng",)


# -- ingest ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("slack", {"slack:#eng": ("team",), "slack:#general": ("team",)}),
        ("email/sample.mbox", {"mbox:sample": ("private",)}),
        ("markdown/til-like", {"notes:til-like": ("private",)}),
        ("irc/phoenix-dev", {"irc:phoenix-dev": ("team",)}),
        ("jsonl/export.jsonl", {JSONL_CHAT: ("team",), NOTES: ("private",)}),
    ],
)
def test_ingest_gives_each_kind_its_default_scopes(
    store_location: str, fixtures_dir: Path, path: str, expected: dict[str, tuple[str, ...]]
) -> None:
    with stratamem.open(store_location, embedder=None) as memory:
        memory.ingest(fixtures_dir / path, trees=False)
        assert {s.scope: s.access for s in memory.sources.list()} == expected


def test_ingest_access_sets_the_scopes_of_every_source_read(
    store_location: str, fixtures_dir: Path
) -> None:
    export = fixtures_dir / "jsonl" / "export.jsonl"
    with stratamem.open(store_location, embedder=None) as memory:
        memory.ingest(export, access="Eng, ops", trees=False)
        assert {s.access for s in memory.sources.list()} == {("eng", "ops")}
        memory.sources.set_access(NOTES, add="team")
        memory.ingest(export, trees=False)  # an existing source keeps its own
        assert memory.sources.get(NOTES).access == ("eng", "ops", "team")
        memory.ingest(export, access=["hr"], trees=False)
        assert {s.access for s in memory.sources.list()} == {("hr",)}
        with pytest.raises(ValueError, match="bad access scope"):
            memory.ingest(export, access="no spaces")


# -- writes ----------------------------------------------------------------------------------


def test_a_principal_may_not_write_or_manage(memory: Memory, fixtures_dir: Path) -> None:
    memory.principals.add("bot", "*")
    before = memory.stats()
    with memory.as_principal("bot") as reader:
        refused = {
            "add": lambda: reader.items.add("a note"),
            "update": lambda: reader.items.edit("m1", text="changed"),
            "delete": lambda: reader.items.rm("m1"),
            "ingest": lambda: reader.ingest(fixtures_dir / "slack"),
            "embed": lambda: reader.indexes.embed(),
            "reindex": lambda: reader.indexes.reindex(),
            "forget": lambda: reader.sources.forget("slack:#eng"),
            "build_trees": lambda: reader.trees.build(),
            "flush": lambda: reader.trees.flush(),
            "set_access": lambda: reader.sources.set_access("slack:#eng", add="eng"),
            "add_principal": lambda: reader.principals.add("other", "team"),
            "principals": lambda: reader.principals.list(),
            "remove_principal": lambda: reader.principals.remove("bot"),
            "rotate_principal": lambda: reader.principals.rotate("bot"),
            "lock": lambda: reader.locks.lock("slack:#eng", passphrase="p"),
            "unlock": lambda: reader.locks.unlock("slack:#eng", passphrase="p"),
        }
        for call in refused.values():
            with pytest.raises(AccessDenied, match="principal 'bot' may not"):
                call()
    assert memory.stats() == before
    assert [p.name for p in memory.principals.list()] == ["bot"]
