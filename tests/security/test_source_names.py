"""Source names and who made each source, on both backends, through the operations a server
runs (a real :class:`Service`, its principals' calls made as they come over HTTP or MCP):

- a writer cannot squat a name the owner writes to later (``mbox:personal``, ``memory``,
  ``facts:asserted``, a user's memory): its new sources go in its namespace, and a
  read-only ``team`` principal never reads what the owner wrote after it;
- the owner's writes refuse a source a principal made unless told to join it;
- no name may look like a source id, and a ref that looks like one names a source by id
  alone (lock, forget, access, filters);
- a writer re-ingesting a source never takes away scopes it does not hold;
- new names are normalised and checked: spaces at the ends, control characters (NUL,
  newline, line separator), lookalikes of another writer's names.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import stratamem
from stratamem.errors import AccessDenied, InvalidArgument, NotFoundError
from stratamem.ops import call
from stratamem.server.service import Service, ServiceContext
from stratamem.store.sources import source_id_for
from stratamem.testing import HashingEmbedder

SECRET = "zqownersecret"
PASSPHRASE = "correct horse battery staple"


@dataclass
class Served:
    service: Service
    root: Path
    location: str

    def as_(self, who: str | None) -> ServiceContext:
        return ServiceContext(self.service, who)

    def call(self, who: str | None, name: str, args: dict[str, Any]) -> dict[str, Any]:
        return call(self.as_(who), name, args)

    def owner(self) -> stratamem.Memory:
        return self.service.owner_memory()


@pytest.fixture
def served(store_location: str, tmp_path: Path) -> Iterator[Served]:
    """A store with a writer ``w`` (team, may write) and a reader ``t`` (team), served with
    writes on and an ingest root."""
    with stratamem.open(store_location, embedder=None) as owner:
        owner.principals.add("w", ["team"], write=True)
        owner.principals.add("t", ["team"])
    root = tmp_path / "root"
    root.mkdir()
    with Service(
        store_location, embedder=HashingEmbedder(), allow_writes=True, ingest_roots=[root]
    ) as service:
        yield Served(service, root, store_location)


def mbox(path: Path, body: str) -> Path:
    path.write_text(
        "From alice@example.com Mon Jan  1 00:00:00 2024\n"
        "From: alice@example.com\n"
        "To: me@example.com\n"
        "Subject: hello\n"
        "Date: Mon, 01 Jan 2024 00:00:00 +0000\n"
        f"Message-ID: <{abs(hash(body))}@example.com>\n"
        "\n"
        f"{body}\n"
    )
    return path


def jsonl(path: Path, *texts: str) -> Path:
    path.write_text(
        "".join(json.dumps({"text": t, "id": str(i)}) + "\n" for i, t in enumerate(texts))
    )
    return path


def reads(served: Served, who: str | None, word: str) -> bool:
    """Whether ``who`` finds ``word`` anywhere: a keyword search, its sources and facts."""
    seen = [
        served.call(who, "search", {"query": word, "mode": "keyword", "limit": 50}),
        served.call(who, "sources", {}),
        served.call(who, "recall_facts", {}),
    ]
    return word in json.dumps(seen)


def scopes(served: Served) -> dict[str, Any]:
    return {s.scope: s for s in served.owner().sources.list()}


# -- squatting the owner's names ---------------------------------------------------------------


def squat_mail(served: Served) -> None:
    squatter = mbox(served.root / "personal.mbox", "zqsquatter hello")
    served.call("w", "ingest", {"path": str(squatter), "access": ["team"]})


def owner_mail(served: Served, folder: Path) -> None:
    mine = mbox(folder / "personal.mbox", f"{SECRET} bank details")
    report = served.call(None, "ingest", {"path": str(mine)})
    assert [s["scope"] for s in report["sources"]] == ["mbox:personal"]
    assert report["sources"][0]["error"] is None


def squat_memory(served: Served) -> None:
    served.call("w", "add", {"text": "zqsquatter note", "source": "memory"})


def owner_memory(served: Served, folder: Path) -> None:
    added = served.call(None, "add", {"text": f"{SECRET} my diary"})
    assert added["scope"] == "memory"


def squat_facts(served: Served) -> None:
    # An item source of the name the owner's facts go to by default.
    served.call("w", "add", {"text": "zqsquatter", "source": "facts:asserted"})


def owner_facts(served: Served, folder: Path) -> None:
    served.call(None, "remember", {"subject": "user:owner", "predicate": "pin", "object": SECRET})


SQUATS = {
    "mail": (squat_mail, owner_mail),
    "memory": (squat_memory, owner_memory),
    "facts": (squat_facts, owner_facts),
}


@pytest.mark.parametrize("name", SQUATS)
def test_a_writer_cannot_squat_a_name_the_owner_writes_to_later(
    served: Served, tmp_path: Path, name: str
) -> None:
    squat, write = SQUATS[name]
    squat(served)
    home = tmp_path / "home"
    home.mkdir()
    write(served, home)
    assert not reads(served, "t", SECRET)
    assert not reads(served, "w", SECRET)
    assert reads(served, None, SECRET)  # the owner wrote it


def test_a_writers_new_sources_go_in_its_namespace_and_are_its_own(served: Served) -> None:
    report = served.call(
        "w", "ingest", {"path": str(mbox(served.root / "personal.mbox", "zqw hello"))}
    )
    assert [s["scope"] for s in report["sources"]] == ["w/mbox:personal"]
    added = served.call("w", "add", {"text": "zqw note"})
    assert added["scope"] == "w/memory"
    served.call("w", "remember", {"subject": "topic:x", "predicate": "is", "object": "y"})
    found = scopes(served)
    assert {s: found[s].created_by for s in found} == {
        "w/mbox:personal": "w",
        "w/memory": "w",
        "w/facts:asserted": "w",
    }
    assert all(found[s].access == ("team",) for s in found)
    listed = served.call(None, "sources", {})["sources"]
    assert {s["scope"]: s["created_by"] for s in listed}["w/memory"] == "w"
    # A principal is not told who made what.
    assert all(s["created_by"] is None for s in served.call("w", "sources", {})["sources"])


def test_a_writer_keeps_writing_its_sources_of_before(served: Served) -> None:
    with served.owner().store.transaction():
        served.owner().store.upsert_source(
            scope="memory:w",
            kind=stratamem.SourceKind.RECORD,
            platform="memory",
            location="",
            access=["team"],
        )
    assert served.call("w", "add", {"text": "zqw note"})["scope"] == "memory:w"


def test_a_writer_writes_a_name_the_owner_lends_it(served: Served) -> None:
    served.owner().items.add("owner's shared note", source="shared")
    served.owner().sources.set_access("shared", scopes=["team"])
    report = served.call("w", "add", {"text": "zqw joins", "source": "shared"})
    assert report["scope"] == "shared"
    assert scopes(served)["shared"].created_by is None


# -- the owner joins a principal's source only when told to -------------------------------------


def test_the_owners_writes_refuse_a_principals_source_unless_told_to_join(
    served: Served, tmp_path: Path
) -> None:
    served.call("w", "add", {"text": "zqw note", "source": "notes"})
    owner = served.owner()
    refused = "source 'w/notes' was made by principal 'w': pass join"
    with pytest.raises(AccessDenied, match=refused):
        owner.items.add(SECRET, source="w/notes")
    with pytest.raises(AccessDenied, match=refused):
        owner.facts.remember("topic:x", "is", SECRET, source="w/notes")
    with pytest.raises(AccessDenied, match=refused):
        served.call(None, "add", {"text": SECRET, "source": "w/notes"})
    report = owner.ingest(jsonl(tmp_path / "n.jsonl", SECRET), scope="w/notes", trees=False)
    assert refused in (report.sources[0].error or "")
    assert not reads(served, "t", SECRET)
    owner.items.add("zqjoined", source="w/notes", join=True)
    assert served.call(None, "add", {"text": "zqjoined2", "source": "w/notes", "join": True})
    assert reads(served, "t", "zqjoined")


# -- identity names ------------------------------------------------------------------------------


def test_a_writer_cannot_squat_a_users_memory(served: Served) -> None:
    path = jsonl(served.root / "maya.jsonl", "zqsquatter")
    report = served.call(
        "w", "ingest", {"path": str(path), "scope": "memory/user:maya", "access": ["team"]}
    )
    served.call(None, "add", {"text": SECRET, "user": "maya"})
    assert not reads(served, "t", SECRET)
    assert [s["scope"] for s in report["sources"]] == ["w/memory/user:maya"]
    made = scopes(served)["memory/user:maya"]
    assert (made.access, made.created_by) == (("private", "user:maya"), None)
    # A name in its namespace that reads as a user's memory is refused too.
    with pytest.raises(AccessDenied, match="the memory of user 'maya'"):
        served.call("w", "add", {"text": "zqsquatter", "source": "user:maya"})
    report = served.call("w", "ingest", {"path": str(path), "scope": "user:maya"})
    assert "the memory of user 'maya'" in report["sources"][0]["error"]


def test_a_writer_holding_a_users_scope_keeps_that_memorys_scopes(served: Served) -> None:
    served.owner().principals.add("m", ["team", "user:maya"], write=True)
    served.call(None, "add", {"text": "maya's own", "user": "maya"})
    path = jsonl(served.root / "more.jsonl", "zqmore")
    report = served.call(
        "m", "ingest", {"path": str(path), "scope": "memory/user:maya", "access": ["team"]}
    )
    assert "may not change the scopes" in report["sources"][0]["error"]
    report = served.call("m", "ingest", {"path": str(path), "scope": "memory/user:maya"})
    assert report["sources"][0]["error"] is None
    assert scopes(served)["memory/user:maya"].access == ("private", "user:maya")


# -- ids and names -------------------------------------------------------------------------------


@pytest.mark.parametrize("case", [str.lower, str.upper])
def test_no_new_source_may_be_named_like_an_id(served: Served, case: Any) -> None:
    served.owner().items.add("zqvault", source="vault")
    real = source_id_for("vault")
    decoy = "src_" + case(real[4:])
    path = jsonl(served.root / "decoy.jsonl", "zqdecoy")
    report = served.call(None, "ingest", {"path": str(path), "scope": decoy})
    assert "looks like a source id" in report["sources"][0]["error"]
    report = served.call("w", "ingest", {"path": str(path), "scope": decoy})
    assert "looks like a source id" in report["sources"][0]["error"]
    if decoy == real:  # an item written by id goes to the source of that id
        assert served.owner().items.add("zqx", source=decoy).scope == "vault"
        return
    with pytest.raises(InvalidArgument, match="looks like a source id"):
        served.owner().items.add("zqdecoy", source=decoy)
    with pytest.raises(InvalidArgument, match="looks like a source id"):
        served.call("w", "add", {"text": "zqdecoy", "source": decoy})


def plant_decoy(served: Served, real: str) -> str:
    """A source whose name is ``real``'s id, as a store made before names were checked could
    hold one (a writer's ingest named it)."""
    store = served.owner().store
    decoy_scope = source_id_for(real)
    with store.transaction():
        store.conn.execute(
            "INSERT INTO sources (id, scope, kind, platform, location, title, meta, "
            f"ingested_at, access) VALUES ({store.dialect.marks(2)}, 'record', 'jsonl', '', '', "
            "'{}', 0, "
            "'[\"team\"]')",
            (source_id_for(decoy_scope), decoy_scope),
        )
    return decoy_scope


def test_a_ref_that_looks_like_an_id_names_a_source_by_id_alone(served: Served) -> None:
    owner = served.owner()
    owner.items.add(f"{SECRET} vault", source="vault")
    real = source_id_for("vault")
    decoy_id = source_id_for(plant_decoy(served, "vault"))
    owner.locks.lock(real, passphrase=PASSPHRASE)
    assert owner.store.is_locked(real)
    assert not owner.store.is_locked(decoy_id)
    owner.locks.unlock(real, passphrase=PASSPHRASE)
    assert not owner.store.is_locked(real)
    assert owner.sources.get(real).scope == "vault"
    owner.sources.set_access(real, add=["audit"])
    assert scopes(served)["vault"].access == ("audit", "private")
    assert "audit" not in owner.sources.get(decoy_id).access
    hits = owner.search(SECRET, mode="keyword", sources=[real]).hits
    assert [h.tree_scope for h in hits] == ["vault"]
    assert served.call(None, "forget", {"source": real})["removed"] >= 1
    assert "vault" not in scopes(served)
    assert owner.sources.get(decoy_id).id == decoy_id
    with pytest.raises(NotFoundError):
        owner.sources.get(real.upper().replace("SRC_", "src_"))


# -- scopes a writer does not hold ---------------------------------------------------------------


def test_a_writer_never_takes_away_scopes_it_does_not_hold(served: Served) -> None:
    owner = served.owner()
    owner.items.add("hr and team notes", source="hr-notes")
    owner.sources.set_access("hr-notes", scopes=["team", "hr"])
    path = jsonl(served.root / "hr.jsonl", "zqmore")
    report = served.call(
        "w", "ingest", {"path": str(path), "scope": "hr-notes", "access": ["team"]}
    )
    assert report["sources"][0]["error"] is None
    assert scopes(served)["hr-notes"].access == ("hr", "team")
    # It adds and removes what it holds.
    served.owner().principals.add("x", ["team", "eng"], write=True)
    served.call("x", "ingest", {"path": str(path), "scope": "hr-notes", "access": ["eng"]})
    assert scopes(served)["hr-notes"].access == ("eng", "hr")


# -- normalised names ----------------------------------------------------------------------------

BAD_NAMES = {
    "trailing space": ("notes ", "begins or ends with a space"),
    "leading space": (" notes", "begins or ends with a space"),
    "NUL": ("no\x00tes", "control character"),
    "newline": ("notes\nforged row", "control character"),
    "tab": ("no\ttes", "control character"),
    "line separator": ("no\u2028tes", "control character"),
    "C1": ("no\x85tes", "control character"),
    "too long": ("n" * 513, "at most 512"),
    "dot-dot part": ("../memory", "'.' or '..' part"),
    "dot part": ("notes/./x", "'.' or '..' part"),
    "bidi override": ("no\u202etes", "invisible format character"),
    "zero-width space": ("no\u200btes", "invisible format character"),
    "no-break space": ("no\u00a0tes", "a space other than"),
}


@pytest.mark.parametrize("case", BAD_NAMES)
def test_a_bad_name_is_refused_at_every_write(served: Served, case: str) -> None:
    name, rule = BAD_NAMES[case]
    with pytest.raises(InvalidArgument, match=rule):
        served.owner().items.add("zqx", source=name)
    if len(name) <= 200:  # the operations' own bound on a source name comes first
        with pytest.raises(InvalidArgument, match=rule):
            served.call("w", "add", {"text": "zqx", "source": name})
        path = jsonl(served.root / "bad.jsonl", "zqx")
        report = served.call("w", "ingest", {"path": str(path), "scope": name})
        assert rule in report["sources"][0]["error"]
    assert set(scopes(served)) <= {"w/notes"}


def test_a_name_is_taken_in_nfc_form(served: Served) -> None:
    decomposed = "cafe\u0301"
    assert served.owner().items.add("zqx", source=decomposed).scope == "caf\u00e9"
    assert served.owner().items.add("zqy", source=decomposed).scope == "caf\u00e9"
    assert list(scopes(served)) == ["caf\u00e9"]


@pytest.mark.parametrize("lookalike", ["W/notes", "\uff57/notes", "w/NOTES", "w/\uff4eotes"])
def test_a_name_too_close_to_another_writers_is_refused(served: Served, lookalike: str) -> None:
    served.call("w", "add", {"text": "zqw", "source": "notes"})
    with pytest.raises(InvalidArgument, match="too close to an existing source 'w/notes'"):
        served.owner().items.add("zqx", source=lookalike)
    # Nor can a principal whose name reads as w's be made, to write into W/notes.
    with pytest.raises(ValueError, match="reads as"):
        served.owner().principals.add("W", ["team"], write=True)
    # The same writer may name its own sources as it likes.
    served.call("w", "add", {"text": "zqw", "source": "NOTES"})


def test_the_fullwidth_lookalike_of_an_owners_name_lands_in_the_namespace(
    served: Served,
) -> None:
    served.owner().items.add("zqmine", source="mbox:personal")
    served.owner().sources.set_access("mbox:personal", scopes=["team"])
    added = served.call("w", "add", {"text": "zqw", "source": "\uff4d\uff42\uff4f\uff58:personal"})
    assert added["scope"] == "w/\uff4d\uff42\uff4f\uff58:personal"


# -- a session's memory ----------------------------------------------------------------------------


def test_a_writer_cannot_write_a_sessions_memory_without_its_user(served: Served) -> None:
    # A session alone names no user: its sources carry only ``private``, as the owner's
    # memory does, so a principal holding no such scope must not write there.
    owner = served.owner()
    owner.items.add(f"{SECRET} launch code", session="s1", id="pref-1")
    owner.facts.remember("person:maya", "title", f"{SECRET} title", session="s2")
    before = scopes(served)
    asked = [
        ("add", {"text": "overwritten", "session": "s1", "id": "pref-1"}),
        ("add", {"text": "zqnew", "session": "s9"}),
        (
            "remember",
            {"subject": "person:maya", "predicate": "title", "object": "intern", "session": "s2"},
        ),
        ("add_messages", {"messages": [{"role": "user", "content": "zqturn"}], "session": "s3"}),
    ]
    for name, args in asked:
        with pytest.raises(AccessDenied, match="user or an agent") as refused:
            served.call("w", name, args)
        assert SECRET not in str(refused.value)
    assert scopes(served) == before
    history = served.call(None, "item_history", {"id": "pref-1"})
    assert len(history["versions"]) == 1
    assert SECRET in json.dumps(served.call(None, "recall_facts", {"session": "s2"}))
