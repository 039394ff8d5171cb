"""The identity a source's scope names: written and read back alike, and never read out of a
connector's scope."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratamem.types import Identity, NodeKind, RetrievalHit, TreeKind

IDS = st.from_regex(r"[a-z0-9][a-z0-9_.@:-]{0,20}", fullmatch=True)
SESSIONS = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.@:+-]{0,20}", fullmatch=True)


@given(user=st.none() | IDS, agent=st.none() | IDS, session=st.none() | SESSIONS)
def test_a_scope_written_for_an_identity_reads_back_as_it(
    user: str | None, agent: str | None, session: str | None
) -> None:
    whose = Identity.of(user=user, agent=agent, session=session)
    scope = whose.scope("memory")
    assert Identity.parse(scope) == whose
    assert scope == "memory" if not whose else scope.startswith("memory/")


@pytest.mark.parametrize(
    "scope",
    [
        "memory",
        "facts:asserted",
        "slack:#eng",
        "mbox:team/user:maya",  # a connector's scope: its base holds a ':'
        "discord:guild/#general",
        "chat/session:s1/user:maya",  # out of order
        "chat/user:maya/user:bob",
        "chat/user:Maya",  # not as written (user ids are lower case)
        "chat/user:",
        "chat/owner:maya",
        "chat/user:maya/",
    ],
)
def test_other_scopes_name_nobody(scope: str) -> None:
    assert Identity.parse(scope) == Identity()
    assert not Identity.parse(scope)


def test_ids_are_checked_and_user_and_agent_ids_lower_cased() -> None:
    whose = Identity.of(user=" Maya@Example.com ", agent="Planner", session="Run-7")
    assert whose == Identity(user="maya@example.com", agent="planner", session="Run-7")
    assert whose.scope("chat") == "chat/user:maya@example.com/agent:planner/session:Run-7"
    assert whose.labels == ("user:maya@example.com", "agent:planner")
    assert whose.to_dict() == {"user": "maya@example.com", "agent": "planner", "session": "Run-7"}
    assert whose.holds(Identity(user="maya@example.com"))
    assert not whose.holds(Identity(user="bob"))
    for bad, error in [
        ({"user": "a/b"}, "bad user id 'a/b'"),
        ({"user": "   "}, "a user id cannot be blank"),
        ({"user": 7}, "a user id is a string, not int"),
        ({"agent": "x" * 59}, "longer than 58 characters"),
        ({"session": "s" * 129}, "longer than 128 characters"),
        ({"session": "[s]"}, "bad session id"),
    ]:
        with pytest.raises(ValueError, match=error):
            Identity.of(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bad base name 'chat:x'"):
        whose.scope("chat:x")


def test_a_hit_reads_its_identity_from_its_scope() -> None:
    hit = RetrievalHit(
        node_id="n",
        node_kind=NodeKind.LEAF,
        tree_id="t",
        tree_kind=TreeKind.SOURCE,
        tree_scope="chat/user:maya/session:s1",
        level=0,
        content="",
        entities=(),
        topics=(),
        time_start=None,
        time_end=None,
        score=0.0,
    )
    assert (hit.user, hit.agent, hit.session) == ("maya", None, "s1")
