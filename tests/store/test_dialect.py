"""Each piece of SQL the dialects spell differently, run on the engine it is written for."""

from __future__ import annotations

import json

import pytest

from stratamem.plugins import open_store
from stratamem.store.postgres.dialect import POSTGRES
from stratamem.store.sqlite.dialect import SQLITE


def test_a_store_speaks_its_own_dialect(store_location: str) -> None:
    with open_store(store_location) as store:
        assert store.dialect is (SQLITE if store.name == "sqlite" else POSTGRES)


def test_the_pieces_mean_the_same_on_both_engines(store_location: str) -> None:
    with open_store(store_location) as store:
        d, conn = store.dialect, store.conn
        items = json.dumps(["b", "a", "b"])
        rows = conn.execute(f"SELECT value FROM {d.json_rows} ORDER BY value", (items,))
        assert [r[0] for r in rows.fetchall()] == ["a", "b", "b"]
        same = f"SELECT {d.p} {d.is_} {d.p}, {d.p} {d.is_not} {d.p}"
        assert tuple(conn.execute(same, (None, None, None, "x")).fetchone()) == (1, 1)
        assert tuple(conn.execute(same, ("x", None, "x", "x")).fetchone()) == (0, 0)
        where = f"SELECT {d.strpos}({d.p}, {d.p}), {d.strpos}({d.p}, {d.p})"
        assert tuple(conn.execute(where, ("abcabc", "ca", "abc", "z")).fetchone()) == (3, 0)
        named = f"SELECT {d.named('x')} || {d.named('x')} || '{d.percent}'"
        assert conn.execute(named, {"x": "ab"}).fetchone()[0] == "abab%"
        grouped = f"SELECT {d.group_array('value')} FROM {d.json_rows}"
        assert json.loads(conn.execute(grouped, ('["a", "b"]',)).fetchone()[0]) == ["a", "b"]
        assert conn.execute(f"SELECT {d.group_array('value')} FROM {d.json_rows}", ("[]",))
        hinted = f"SELECT count(*) FROM settings WHERE {d.hint}key = {d.p}"
        assert conn.execute(hinted, ("store.id",)).fetchone()[0] == 1


def test_an_upsert_inserts_then_replaces_by_its_key(store_location: str) -> None:
    with open_store(store_location) as store:
        d = store.dialect
        upsert = d.upsert("settings", ("key", "value"), key=("key",))
        with store.transaction():
            store.conn.execute(upsert, ("dialect.test", "1"))
            store.conn.execute(upsert, ("dialect.test", "2"))
        assert store.get_setting("dialect.test") == "2"
        chosen = d.upsert(
            "settings",
            ("key", "value"),
            key=("key",),
            values=f"SELECT {d.p}, {d.p} WHERE {d.p} > 0",
        )
        with store.transaction():
            store.conn.execute(chosen, ("dialect.test", "3", 0))
        assert store.get_setting("dialect.test") == "2"


@pytest.mark.parametrize("n", [1, 499, 500, 501, 1200])
def test_batches_cover_every_value_once_with_a_mark_each(n: int) -> None:
    values = list(range(n))
    for d in (SQLITE, POSTGRES):
        parts = list(d.batches(values))
        assert [v for part, _ in parts for v in part] == values
        assert all(marks.count(d.p) == len(part) for part, marks in parts)
        assert all(len(part) <= 500 for part, _ in parts)
