"""A lock seals every version of a source's items with the rest of it (no version's text is
left in plaintext, and none reads), and an unlock puts the history back as it was."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from locked_store import CANARIES, PASSPHRASE, SECRET, SECRET_ID, TREES, Db, residue

import stratamem
from stratamem.errors import NotFoundError
from stratamem.testing import HashingEmbedder

CLOSED_ONLY = "zqxcanarydelta"  # the text of a closed version alone: no other row holds it


def test_a_lock_seals_every_version_and_an_unlock_restores_them(
    store_copy: Callable[[], str], open_db: Callable[[str | Path], Db]
) -> None:
    db = store_copy()
    conn = open_db(db)
    with stratamem.open(db, embedder=HashingEmbedder(), tree_config=TREES) as mem:
        first = mem.items.add(f"Plan {CLOSED_ONLY} with {CANARIES[0]}", source=SECRET, id="plan")
        mem.items.edit("plan", text="Plan approved")
        mem.items.add("A note kept in plain sight", id="plain")
        history = mem.items.history("plan")
        assert history[0].text.startswith(f"Plan {CLOSED_ONLY}")
        (old_chunk,) = first.chunks_added
        assert mem.get(old_chunk).explain["item"]["version"] == 1
        before = _rows(conn)
        assert before[0] >= 3  # the secret source's item, and both versions of the plan
        assert before[1] >= 2

        mem.locks.lock(SECRET, passphrase=PASSPHRASE)
        assert residue(db) == {}
        assert _rows(conn) == (0, 0)
        assert CLOSED_ONLY.encode() not in _held(conn)
        with pytest.raises(NotFoundError):
            mem.items.history("plan")
        with pytest.raises(NotFoundError):
            mem.items.get("plan", as_of=history[0].recorded_at)
        assert mem.nodes(["plan", old_chunk]) == []
        assert [v.text for v in mem.items.history("plain")] == ["A note kept in plain sight"]

        mem.locks.unlock(SECRET, passphrase=PASSPHRASE)
        assert _rows(conn) == before
        assert mem.items.history("plan") == history
        assert mem.get("plan").content == "Plan approved"
        assert mem.get(old_chunk).content.startswith(f"Plan {CLOSED_ONLY}")


def _rows(conn: Db) -> tuple[int, int]:
    """The secret source's rows of item versions and of their chunk ids."""
    row = conn.execute(
        "SELECT (SELECT count(*) FROM item_versions WHERE source_id = ?),"
        " (SELECT count(*) FROM item_nodes WHERE source_id = ?)",
        (SECRET_ID, SECRET_ID),
    ).fetchone()
    return int(row[0]), int(row[1])


def _held(conn: Db) -> bytes:
    """Every version's body, whatever its source."""
    return b"".join(bytes(row[0]) for row in conn.execute("SELECT body FROM item_versions"))
