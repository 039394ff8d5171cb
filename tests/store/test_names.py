"""Source names (:mod:`stratamem.store.names`): what a new source may be called, how a ref names
a source, where a writer's new names go; and who made each source, as stored."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import stratamem
from stratamem.errors import InvalidArgument
from stratamem.plugins import open_store
from stratamem.store.names import (
    check_name,
    looks_like_id,
    name_key,
    names_source,
    normal_name,
    placer,
)
from stratamem.store.sources import source_id_for
from stratamem.types import SourceKind

ID = source_id_for("vault")


@pytest.mark.parametrize(
    ("ref", "expected"),
    [
        (ID, True),
        (ID.upper().replace("SRC_", "src_"), True),
        ("SRC_" + ID[4:], False),
        (ID + "0", False),
        (ID[:-1], False),
        ("src_" + "g" * 16, False),
        ("vault", False),
    ],
)
def test_what_looks_like_an_id(ref: str, expected: bool) -> None:
    assert looks_like_id(ref) is expected


def test_a_ref_shaped_like_an_id_names_by_id_alone() -> None:
    assert names_source(ID, ID, "vault")
    assert not names_source(ID, "src_0000000000000000", ID)  # a decoy named like the id
    assert names_source("vault", ID, "vault")
    assert not names_source("Vault", ID, "vault")


@pytest.mark.parametrize(
    "name", ["slack:#eng", "mbox:personal", "memory/user:maya", "w/notes", "café", "n" * 512]
)
def test_good_names_pass(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize(
    ("name", "rule"),
    [
        ("", "needs a name"),
        ("n" * 513, "at most 512"),
        ("a\x00b", "control character"),
        ("a\rb", "control character"),
        ("a\x7fb", "control character"),
        ("a\u2029b", "control character"),
        (" a", "begins or ends with a space"),
        ("a\u00a0", "begins or ends with a space"),
        (ID, "looks like a source id"),
        ("cafe\u0301", "not in Unicode NFC form"),
    ],
)
def test_bad_names_name_the_rule(name: str, rule: str) -> None:
    with pytest.raises(InvalidArgument, match=rule):
        check_name(name)


def test_lookalikes_share_a_key() -> None:
    assert name_key("\uff4d\uff42\uff4f\uff58:personal") == name_key("mbox:personal")
    assert name_key("MBOX:Personal") == name_key("mbox:personal")
    assert name_key("Stra\u00dfe") == name_key("strasse")
    assert name_key("mbox:personal") != name_key("mbox:persona1")


def test_a_writers_names_go_in_its_namespace_unless_it_may_write_them() -> None:
    place = placer({"shared", "cafe\u0301"}, "bob")
    assert place("shared") == "shared"
    assert place("mbox:personal") == "bob/mbox:personal"
    assert place("bob/notes") == "bob/notes"
    assert place("cafe\u0301") == "cafe\u0301"  # a name stored before, as it is
    assert place("caf\u00e9") == "bob/caf\u00e9"
    assert place("notes ") == "notes "  # left as asked, for the store to refuse
    owner = placer({"cafe\u0301"}, None)
    assert owner("mbox:personal") == "mbox:personal"
    assert owner("cafe\u0301") == "cafe\u0301"
    assert owner("caf\u0065\u0301s") == normal_name("cafe\u0301s")


def test_the_store_records_who_made_a_source_and_refuses_bad_names(store_location: str) -> None:
    with open_store(store_location) as store:
        with store.transaction():
            store.upsert_source(
                scope="bob/notes",
                kind=SourceKind.RECORD,
                platform="p",
                location="",
                created_by="bob",
            )
            # A later write by another keeps who made it.
            store.upsert_source(
                scope="bob/notes", kind=SourceKind.RECORD, platform="p", location=""
            )
            store.upsert_source(scope="mine", kind=SourceKind.RECORD, platform="p", location="")
        assert {s.scope: s.created_by for s in store.sources()} == {
            "bob/notes": "bob",
            "mine": None,
        }
        for bad, by in (("Bob/Notes", None), ("\uff42ob/notes", "carol"), ("MINE", "bob")):
            with pytest.raises(InvalidArgument, match="too close to an existing source"):
                store.upsert_source(
                    scope=bad, kind=SourceKind.RECORD, platform="p", location="", created_by=by
                )
        with pytest.raises(InvalidArgument, match="looks like a source id"):
            store.upsert_source(scope=ID, kind=SourceKind.RECORD, platform="p", location="")
        # The same writer may name its own sources as it likes.
        store.upsert_source(
            scope="Bob/Notes", kind=SourceKind.RECORD, platform="p", location="", created_by="bob"
        )


def test_sources_of_a_store_from_before_count_as_the_owners(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with stratamem.open(path, embedder=None) as mem:
        mem.items.add("a note", source="notes")
    conn = sqlite3.connect(path)
    conn.executescript("ALTER TABLE sources DROP COLUMN created_by; PRAGMA user_version = 14;")
    conn.close()
    with stratamem.open(path, embedder=None) as mem:
        (found,) = mem.sources.list()
        assert (found.scope, found.created_by) == ("notes", None)
    # Run again from before it, the migration changes nothing.
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 14")
    conn.close()
    with stratamem.open(path, embedder=None) as mem:
        assert [s.created_by for s in mem.sources.list()] == [None]
