"""Login sessions and form tokens, on a clock the tests move."""

from __future__ import annotations

import pytest

from stratamem.server.inspector.session import IDLE_S, Sessions


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_reads_as_its_principal_until_idle_too_long() -> None:
    clock = Clock()
    sessions = Sessions(clock=clock)
    made = sessions.start("bot")
    assert len(made.id) >= 43
    clock.now += IDLE_S - 1
    found = sessions.get(made.id)
    assert found is not None
    assert found.principal == "bot"
    clock.now += IDLE_S - 1  # used a moment ago: its idle time started again
    assert sessions.get(made.id) is not None
    clock.now += IDLE_S
    assert sessions.get(made.id) is None
    assert sessions.get(made.id) is None


def test_ended_and_unknown_sessions_are_none() -> None:
    sessions = Sessions()
    made = sessions.start(None)
    assert sessions.get(made.id) is not None
    sessions.end(made.id)
    assert sessions.get(made.id) is None
    assert sessions.get("") is None
    assert sessions.get(None) is None
    assert sessions.get("x" * 43) is None


def test_each_session_gets_its_own_id_and_form_token() -> None:
    sessions = Sessions()
    one, two = sessions.start("a"), sessions.start("a")
    assert one.id != two.id
    assert sessions.csrf_ok(one.id, sessions.csrf(one.id))
    assert not sessions.csrf_ok(one.id, sessions.csrf(two.id))
    assert not sessions.csrf_ok(one.id, sessions.csrf(one.id, purpose="login"))
    assert not sessions.csrf_ok(one.id, None)
    assert not sessions.csrf_ok(None, sessions.csrf(one.id))


def test_form_tokens_are_bound_to_the_app() -> None:
    one, two = Sessions(), Sessions()
    made = one.start("a")
    assert not two.csrf_ok(made.id, one.csrf(made.id))


def test_idle_time_must_be_positive() -> None:
    with pytest.raises(ValueError, match="idle_s"):
        Sessions(idle_s=0)
