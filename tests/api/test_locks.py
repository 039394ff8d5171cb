"""``mem.locks``: lock, unlock."""

from __future__ import annotations

import pytest
from locked_store import FAST_KDF, PASSPHRASE

import stratamem
from stratamem.access import crypto
from stratamem.errors import AccessDenied

ENG = "slack:#eng"


def test_a_locked_source_reads_as_nothing_until_unlocked(
    small: stratamem.Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(crypto, "DEFAULT_KDF", FAST_KDF)
    before = [h.node_id for h in small.search("deploy", sources=[ENG]).hits]
    assert before
    small.locks.lock(ENG, passphrase=PASSPHRASE)
    assert small.sources.get(ENG).locked
    assert small.search("deploy", sources=[ENG]).hits == ()
    small.locks.unlock(ENG, passphrase=PASSPHRASE)
    assert not small.sources.get(ENG).locked
    assert [h.node_id for h in small.search("deploy", sources=[ENG]).hits] == before


def test_a_principal_may_not_lock(small: stratamem.Memory) -> None:
    small.principals.add("reader", "*")
    with small.as_principal("reader") as reader:
        with pytest.raises(AccessDenied, match="may not lock sources"):
            reader.locks.lock(ENG, passphrase=PASSPHRASE)
        with pytest.raises(AccessDenied, match="may not unlock sources"):
            reader.locks.unlock(ENG, passphrase=PASSPHRASE)
