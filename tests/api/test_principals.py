"""``mem.principals``: add, list, remove, rotate, authenticate."""

from __future__ import annotations

import pytest

import stratamem
from stratamem.errors import AccessDenied, NotFoundError


def test_a_principal_is_added_listed_rotated_and_removed(small: stratamem.Memory) -> None:
    token = small.principals.add("bot", "team", sources=["slack:#gen*"])
    (bot,) = small.principals.list()
    assert (bot.name, bot.scopes, bot.sources) == ("bot", ("team",), ("slack:#gen*",))
    assert small.principals.authenticate(token).name == "bot"

    rotated = small.principals.rotate("bot")
    assert rotated != token
    assert small.principals.authenticate(rotated).name == "bot"
    with pytest.raises(AccessDenied):
        small.principals.authenticate(token)

    small.principals.remove("bot")
    assert small.principals.list() == []
    with pytest.raises(NotFoundError, match="no principal named 'bot'"):
        small.principals.remove("bot")


def test_a_principal_reads_its_sources_and_manages_no_one(small: stratamem.Memory) -> None:
    small.principals.add("bot", "team", sources=["slack:#gen*"])
    with small.as_principal("bot") as bot:
        assert [s.scope for s in bot.sources.list()] == ["slack:#general"]
        with pytest.raises(AccessDenied, match="may not list principals"):
            bot.principals.list()
        with pytest.raises(AccessDenied, match="may not manage principals"):
            bot.principals.add("other", "team")
