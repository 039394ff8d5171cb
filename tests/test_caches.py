"""``LastFew``: the bounded cache of what each reader's view of the store works out."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stratamem.store.caches import READERS, LastFew


def test_a_value_put_is_got_back_and_returned_by_put() -> None:
    cache: LastFew[list[int]] = LastFew(2)
    value = [1, 2]
    assert cache.put("a", value) is value
    assert cache.get("a") is value
    assert cache.get("b") is None
    assert len(cache) == 1


def test_the_least_recently_put_goes_first() -> None:
    cache: LastFew[str] = LastFew(2)
    cache.put("a", "A")
    cache.put("b", "B")
    cache.put("c", "C")
    assert len(cache) == 2
    assert cache.get("a") is None
    assert (cache.get("b"), cache.get("c")) == ("B", "C")


def test_a_get_makes_a_key_the_most_recently_used() -> None:
    cache: LastFew[str] = LastFew(2)
    cache.put("a", "A")
    cache.put("b", "B")
    assert cache.get("a") == "A"
    cache.put("c", "C")  # drops b, not a
    assert cache.get("b") is None
    assert cache.get("a") == "A"
    assert cache.get("c") == "C"


def test_a_miss_changes_nothing() -> None:
    cache: LastFew[str] = LastFew(2)
    cache.put("a", "A")
    cache.put("b", "B")
    assert cache.get("z") is None
    cache.put("c", "C")
    assert cache.get("a") is None
    assert len(cache) == 2


def test_putting_a_key_again_replaces_its_value_and_refreshes_it() -> None:
    cache: LastFew[str] = LastFew(2)
    cache.put("a", "A")
    cache.put("b", "B")
    cache.put("a", "A2")
    assert len(cache) == 2
    cache.put("c", "C")  # drops b: a was put again after it
    assert cache.get("a") == "A2"
    assert cache.get("b") is None


def test_keys_are_any_hashable_and_equal_keys_are_one() -> None:
    cache: LastFew[int] = LastFew(4)
    cache.put(("alice", 3), 1)
    cache.put(frozenset({"s1", "s2"}), 2)
    cache.put(None, 3)
    assert cache.get(("alice", 3)) == 1
    assert cache.get(frozenset({"s2", "s1"})) == 2
    assert cache.get(None) == 3


def test_clear_empties_it_and_it_fills_again() -> None:
    cache: LastFew[str] = LastFew(3)
    for key in "abc":
        cache.put(key, key.upper())
    cache.clear()
    assert len(cache) == 0
    assert all(cache.get(key) is None for key in "abc")
    cache.put("d", "D")
    assert cache.get("d") == "D"
    assert len(cache) == 1


def test_a_size_of_one_keeps_only_the_last() -> None:
    cache: LastFew[str] = LastFew(1)
    cache.put("a", "A")
    cache.put("b", "B")
    assert cache.get("a") is None
    assert cache.get("b") == "B"


def test_the_default_size_keeps_one_entry_per_reader() -> None:
    cache: LastFew[int] = LastFew()
    assert cache.size == READERS
    for reader in range(READERS + 1):
        cache.put(reader, reader)
    assert len(cache) == READERS
    assert cache.get(0) is None
    assert cache.get(READERS) == READERS


@pytest.mark.parametrize("size", [0, -1])
def test_a_size_below_one_is_refused(size: int) -> None:
    with pytest.raises(ValueError, match="size must be >= 1"):
        LastFew(size)


KEYS = 5


@settings(max_examples=300)
@given(
    size=st.integers(min_value=1, max_value=3),
    calls=st.lists(
        st.tuples(st.sampled_from(["get", "put"]), st.integers(min_value=0, max_value=KEYS - 1)),
        max_size=40,
    ),
)
def test_it_behaves_as_a_least_recently_used_list(size: int, calls: list[tuple[str, int]]) -> None:
    """Against a plain list of keys, most recent last: a get or put moves a key to the end,
    and a put past ``size`` drops from the front."""
    cache: LastFew[int] = LastFew(size)
    order: list[int] = []
    values: dict[int, int] = {}
    for step, (action, key) in enumerate(calls):
        if action == "put":
            assert cache.put(key, step) == step
            values[key] = step
            if key in order:
                order.remove(key)
            order.append(key)
            del order[: max(0, len(order) - size)]
        else:
            found = cache.get(key)
            if key in order:
                assert found == values[key]
                order.remove(key)
                order.append(key)
            else:
                assert found is None
        assert len(cache) == len(order) <= size
    for key in range(KEYS):
        assert (cache.get(key) is not None) == (key in order)
