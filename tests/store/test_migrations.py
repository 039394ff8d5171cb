"""The one migration runner, over a backend made of lists: the order of steps, one
transaction each, the refusal of a newer store, and a failed step undone."""

from __future__ import annotations

import pytest

from stratamem.errors import SchemaError
from stratamem.store.migrations import migrate


class Steps:
    """A backend whose database is a version and a log of what ran and committed."""

    def __init__(self, steps: list[str], version: int = 0, *, fail: str | None = None) -> None:
        self.steps = steps
        self.committed = version
        self.pending: int | None = None
        self.applied: list[str] = []
        self.log: list[str] = []
        self.fail = fail

    def version(self) -> int:
        return self.committed if self.pending is None else self.pending

    def begin(self) -> None:
        self.log.append("begin")
        self.pending = self.committed

    def apply(self, step: str) -> None:
        if step == self.fail:
            raise RuntimeError(f"{step} failed")
        self.log.append(step)
        self.applied.append(step)

    def set_version(self, version: int) -> None:
        self.pending = version

    def commit(self) -> None:
        self.log.append("commit")
        assert self.pending is not None
        self.committed, self.pending = self.pending, None

    def rollback(self) -> None:
        self.log.append("rollback")
        self.pending = None


def test_each_missing_step_runs_in_order_in_a_transaction_of_its_own() -> None:
    schema = Steps(["one", "two", "three"], version=1)
    assert migrate(schema) == 1
    assert schema.committed == 3
    assert schema.log == ["begin", "two", "commit", "begin", "three", "commit"]
    assert migrate(schema) == 3
    assert schema.applied == ["two", "three"]  # nothing runs twice


def test_a_store_newer_than_the_code_is_refused_untouched() -> None:
    schema = Steps(["one", "two"], version=3)
    with pytest.raises(SchemaError, match="schema version 3 is newer than this stratamem knows"):
        migrate(schema)
    assert schema.log == []


def test_a_failed_step_is_rolled_back_and_the_earlier_ones_stay() -> None:
    schema = Steps(["one", "two", "three"], fail="two")
    with pytest.raises(RuntimeError, match="two failed"):
        migrate(schema)
    assert schema.committed == 1
    assert schema.log == ["begin", "one", "commit", "begin", "rollback"]


class Raced(Steps):
    """Another process migrates between this one's first look and its write lock."""

    def begin(self) -> None:
        if self.committed == 0:
            self.committed = len(self.steps)
        super().begin()


def test_a_step_another_process_ran_meanwhile_is_not_run_again() -> None:
    schema = Raced(["one", "two"])
    assert migrate(schema) == 0
    assert schema.applied == []
    assert schema.committed == 2
