"""Entity resolution: the aliases each connector records from what its source states, fact
subjects in entity search, and merges and splits by hand, on both backends."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import stratamem
from stratamem.errors import InvalidArgument, NotFoundError
from stratamem.store.resolution import build
from stratamem.types import EntityDecision

MAYA_USERS = [
    {
        "id": "U01MAYA",
        "name": "maya",
        "real_name": "Maya Patel",
        "profile": {
            "real_name": "Maya Patel",
            "display_name": "maya",
            "email": "Maya@Example.com",
        },
    }
]


def _slack(folder: Path) -> Path:
    root = folder / "slack"
    (root / "eng").mkdir(parents=True)
    (root / "users.json").write_text(json.dumps(MAYA_USERS))
    (root / "channels.json").write_text(json.dumps([{"id": "C1", "name": "eng"}]))
    message = {"type": "message", "user": "U01MAYA", "ts": "1710000000.000100"}
    (root / "eng" / "2024-03-09.json").write_text(
        json.dumps([message | {"text": "the queue drains in order"}])
    )
    return root


MAIL = """From maya@example.com Sat Mar  9 10:00:00 2024
From: {sender}
To: team@example.com
Subject: queue
Message-ID: <{n}@example.com>
Date: Sat, 9 Mar 2024 10:00:00 +0000

The queue drains in order.
"""


@pytest.fixture
def memory(store_location: str) -> Iterator[stratamem.Memory]:
    with stratamem.open(store_location, embedder=None) as opened:
        yield opened


def _aliases(memory: stratamem.Memory) -> set[tuple[str, str]]:
    return {(alias, entity) for alias, entity, _ in memory.store.alias_rows()}


def test_a_slack_profile_names_one_person(memory: stratamem.Memory, tmp_path: Path) -> None:
    memory.ingest(_slack(tmp_path))
    assert {
        ("person:maya", "person:maya patel"),
        ("handle:maya", "person:maya patel"),
        ("email:maya@example.com", "person:maya patel"),
        ("account:slack:u01maya", "person:maya patel"),
    } <= _aliases(memory)
    found = memory.search_entities("maya")
    assert [m.canonical_id for m in found] == ["person:maya patel"]
    assert set(found[0].aliases) >= {"person:maya", "email:maya@example.com"}


def test_a_fact_subject_is_found_and_resolves_through_the_profile(
    memory: stratamem.Memory, tmp_path: Path
) -> None:
    memory.facts.remember("person:maya", "leads", "the queue work")
    assert [m.canonical_id for m in memory.search_entities("maya")] == ["person:maya"]
    memory.ingest(_slack(tmp_path))
    found = memory.search_entities("maya")
    assert [m.canonical_id for m in found] == ["person:maya patel"]
    # The fact and the chat message both count.
    assert found[0].mention_count == 2
    assert "person:maya" in found[0].aliases


def test_discord_ids_and_user_names_name_the_nickname(
    memory: stratamem.Memory, fixtures_dir: Path
) -> None:
    memory.ingest(fixtures_dir / "discord")
    aliases = _aliases(memory)
    assert ("account:discord:1215000000000001002", "person:bob martins") in aliases
    assert ("person:bobm", "person:bob martins") in aliases
    assert ("handle:bobm", "person:bob martins") in aliases


@pytest.mark.parametrize(
    "sender",
    [
        "Thorsten Hertel <thorsten.hertel@example.com>",
        "Thorsten Hertel thorsten.hertel@example.com",
        "thorsten.hertel@example.com (Thorsten Hertel)",
    ],
)
def test_a_mail_sender_names_its_address(store_location: str, tmp_path: Path, sender: str) -> None:
    path = tmp_path / "team.mbox"
    path.write_text(MAIL.format(sender=sender, n=1))
    with stratamem.open(store_location, embedder=None) as memory:
        memory.ingest(path)
        assert ("email:thorsten.hertel@example.com", "person:thorsten hertel") in _aliases(memory)
        people = [m.canonical_id for m in memory.search_entities("hertel")]
        assert people == ["person:thorsten hertel"]


def test_front_matter_names_people(memory: stratamem.Memory, tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    (notes / "people").mkdir(parents=True)
    (notes / "people" / "Carol Diaz.md").write_text(
        "---\ntags: [people]\naliases: [Caz]\nemail: carol@acme.io\n---\n# Carol Diaz\n\nOn call.\n"
    )
    (notes / "sync.md").write_text(
        "---\nauthor: Dan Okafor <dan@acme.io>\nattendees: [Alice Chen]\n---\n# Sync\n\n"
        "With [[Alice Chen]] and [[Carol Diaz]].\n"
    )
    memory.ingest(notes)
    aliases = _aliases(memory)
    assert {
        ("note:carol diaz", "person:carol diaz"),
        ("note:people/carol diaz", "person:carol diaz"),
        ("person:caz", "person:carol diaz"),
        ("email:carol@acme.io", "person:carol diaz"),
        ("email:dan@acme.io", "person:dan okafor"),
        ("note:alice chen", "person:alice chen"),
    } <= aliases
    # The author is a person and an address, not one id of both.
    found = {m.canonical_id for m in memory.search_entities("dan", limit=10)}
    assert found == {"person:dan okafor"}


def test_reingest_changes_nothing(memory: stratamem.Memory, tmp_path: Path) -> None:
    root = _slack(tmp_path)
    memory.ingest(root)
    before = memory.store.alias_rows()
    again = memory.ingest(root)
    assert again.added == 0
    assert memory.store.alias_rows() == before


def test_merge_split_and_undo_round_trip(memory: stratamem.Memory, tmp_path: Path) -> None:
    memory.ingest(_slack(tmp_path))
    memory.facts.remember("person:m. patel", "owns", "the release")
    assert memory.search_entities("m. patel")[0].canonical_id == "person:m. patel"

    merged = memory.entities.merge("person:m. patel", "person:maya patel")
    assert (merged.action, merged.made_by, merged.undone_at) == ("merge", None, None)
    one = memory.search_entities("patel")
    assert [m.canonical_id for m in one] == ["person:maya patel"]
    assert "person:m. patel" in one[0].aliases
    topic = memory.query_topic("person:m. patel")
    assert topic.hits  # the merged id reaches the chat message of its entity

    undone = memory.entities.split("person:m. patel", "person:maya patel")
    assert undone.id == merged.id
    assert undone.undone_at is not None
    assert {m.canonical_id for m in memory.search_entities("patel")} == {
        "person:maya patel",
        "person:m. patel",
    }

    # A split of an alias a source states, and its undoing by a merge.
    split = memory.entities.split("person:maya", "person:maya patel")
    assert split.action == "split"
    assert "person:maya" not in memory.search_entities("patel")[0].aliases
    memory.entities.merge("person:maya", "person:maya patel")
    assert "person:maya" in memory.search_entities("patel")[0].aliases

    history = memory.entities.history()
    assert [(d.id, d.action, d.undone_at is not None) for d in history] == [
        (split.id, "split", True),
        (merged.id, "merge", True),
    ]
    assert [d.id for d in memory.entities.history(entity_id="person:m. patel")] == [merged.id]


def test_bad_merges_are_refused_and_change_nothing(
    memory: stratamem.Memory, tmp_path: Path
) -> None:
    memory.ingest(_slack(tmp_path))
    memory.facts.remember("person:m. patel", "owns", "the release")
    with pytest.raises(InvalidArgument, match="the same id"):
        memory.entities.merge("person:maya patel", "Person:Maya  Patel")
    with pytest.raises(NotFoundError, match="entity_a names no entity"):
        memory.entities.merge("person:nobody", "person:maya patel")
    with pytest.raises(InvalidArgument, match="not an entity id"):
        memory.entities.merge("maya", "person:maya patel")
    with pytest.raises(InvalidArgument, match="one entity already"):
        memory.entities.merge("person:maya", "person:maya patel")
    with pytest.raises(InvalidArgument, match="no merge or alias joins"):
        memory.entities.split("person:m. patel", "person:maya patel")
    assert memory.entities.history() == []
    memory.entities.merge("person:m. patel", "person:maya patel")
    with pytest.raises(InvalidArgument, match="cycle"):
        memory.entities.merge("person:maya patel", "person:m. patel")
    assert len(memory.entities.history()) == 1


def test_a_principal_cannot_merge_what_it_cannot_see(
    memory: stratamem.Memory, tmp_path: Path, store_location: str
) -> None:
    from stratamem.entities import merges

    memory.ingest(_slack(tmp_path), access=["team"])
    memory.items.add("the keys are in the safe", source="vault")
    memory.facts.remember("person:secret agent", "holds", "the keys", source="vault")
    memory.principals.add("reader", "team")
    with stratamem.open(store_location, embedder=None, principal="reader") as theirs:
        assert theirs.search_entities("secret") == []
        with pytest.raises(NotFoundError, match="entity_a names no entity"):
            merges.merge(theirs.store, memory.store, "person:secret agent", "person:maya")
        # The owner merges them; the reader, who cannot see one of the two, is not told.
        memory.entities.merge("person:secret agent", "person:maya patel")
        found = theirs.search_entities("maya")
        assert "person:secret agent" not in found[0].aliases
        assert theirs.entities.history() == []
        assert "secret" not in json.dumps([m.to_dict() for m in found], default=str)


def test_resolution_is_independent_of_order() -> None:
    rows = [
        ("person:maya", "person:maya patel", "slack users.json"),
        ("email:maya@example.com", "person:maya patel", "mbox author"),
        ("person:maya", "person:maya lopez", "discord author"),
    ]
    one = build(rows, [])
    other = build(list(reversed(rows)), [])
    assert one == other
    assert one.canonical("person:maya") == "person:maya lopez"  # ties by id, deterministic
    split = EntityDecision(1, "split", "person:maya", "person:maya lopez", None, None)
    apart = build(rows, [split])
    assert apart.canonical("person:maya") == "person:maya patel"
    assert apart.canonical("person:maya lopez") == "person:maya lopez"


def test_a_display_name_reaches_the_person_in_the_graph_leg(
    memory: stratamem.Memory, tmp_path: Path
) -> None:
    from stratamem.retrieval.legs.graph import graph_leg
    from stratamem.types import Filters

    memory.ingest(_slack(tmp_path))
    nodes, matched = graph_leg(memory.store, "what did maya say", Filters(), 10)
    assert "person:maya patel" in matched
    assert nodes


def test_a_locked_source_states_nothing_until_unlocked(
    memory: stratamem.Memory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from stratamem.access import crypto

    monkeypatch.setattr(crypto, "DEFAULT_KDF", crypto.Scrypt(n=2**10, r=8, p=1))
    memory.ingest(_slack(tmp_path))
    stated = memory.store.alias_rows()
    memory.locks.lock("slack:#eng", passphrase="correct horse")
    assert memory.store.alias_rows() == []
    # Sealed with the source, not only hidden: no row of it is left in plain text.
    rows = memory.store.conn.execute("SELECT count(*) FROM entity_aliases").fetchone()
    assert rows[0] == 0
    assert memory.search_entities("maya") == []
    memory.locks.unlock("slack:#eng", passphrase="correct horse")
    assert memory.store.alias_rows() == stated


def test_decision_ids_do_not_count_the_decisions(memory: stratamem.Memory, tmp_path: Path) -> None:
    """A reader who sees some decisions cannot tell from their ids how many it does not."""
    memory.ingest(_slack(tmp_path))
    memory.facts.remember("person:m. patel", "owns", "the release")
    made = [
        memory.entities.merge("person:m. patel", "person:maya patel"),
        memory.entities.split("person:maya", "person:maya patel"),
        memory.entities.merge("person:maya", "person:maya patel"),
    ]
    ids = sorted({d.id for d in made})
    assert len(ids) == 2  # the last merge undid the split
    assert ids[0] != 1
    assert ids[1] - ids[0] != 1


def test_a_principal_sees_who_decided_only_as_you_the_owner_or_another(
    memory: stratamem.Memory, tmp_path: Path, store_location: str
) -> None:
    memory.ingest(_slack(tmp_path), access=["team"])
    memory.items.add("who owns what", source="notes")
    memory.facts.remember("person:m. patel", "owns", "the release", source="notes")
    memory.facts.remember("person:dan", "owns", "the pager", source="notes")
    memory.facts.remember("person:dan okafor", "owns", "the pager", source="notes")
    memory.sources.set_access("notes", scopes="team")
    memory.principals.add("bot", "team", write=True)
    memory.principals.add("zqothername", "team", write=True)
    memory.entities.split("person:maya", "person:maya patel")
    with stratamem.open(store_location, embedder=None, principal="zqothername") as other:
        from stratamem.entities import merges

        merges.merge(other.store, memory.store, "person:dan", "person:dan okafor", by="zqothername")
    with stratamem.open(store_location, embedder=None, principal="bot") as bot:
        merges.merge(bot.store, memory.store, "person:m. patel", "person:maya patel", by="bot")
        seen = {d.pair: (d.made_by, d.undone_by) for d in bot.entities.history()}
    assert seen == {
        ("person:maya", "person:maya patel"): ("owner", None),
        ("person:dan", "person:dan okafor"): ("another principal", None),
        ("person:m. patel", "person:maya patel"): ("you", None),
    }
    names = {d.pair: d.made_by for d in memory.entities.history()}
    assert names[("person:dan", "person:dan okafor")] == "zqothername"
    assert names[("person:maya", "person:maya patel")] is None


def test_two_writers_at_once_record_two_decisions(store_location: str) -> None:
    """Two processes' stores merging at once (threads, each with its own store) both commit,
    each decision with an id of its own."""
    import threading

    with stratamem.open(store_location, embedder=None) as owner:
        for subject in ("person:a", "person:b", "person:c", "person:d"):
            owner.facts.remember(subject, "x", "1")
    start = threading.Barrier(2)
    made: dict[str, int] = {}
    failed: list[BaseException] = []

    def write(a: str, b: str) -> None:
        try:
            with stratamem.open(store_location, embedder=None) as mine:
                start.wait(timeout=30)
                made[a] = mine.entities.merge(a, b).id
        except BaseException as exc:
            failed.append(exc)

    threads = [
        threading.Thread(target=write, args=("person:a", "person:b")),
        threading.Thread(target=write, args=("person:c", "person:d")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not failed, failed
    assert len(set(made.values())) == 2
    with stratamem.open(store_location, embedder=None) as owner:
        assert {d.id for d in owner.entities.history()} == set(made.values())
