"""The entity postings' own arithmetic: the ranking helpers against numpy's plain answers."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from stratamem.store.tables.postings import _kth_highest, _unique_runs

# Few distinct values, so that most are tied, as entity-weight totals are.
totals = st.lists(st.sampled_from([0.25, 0.5, 1.0, 1.75, 2.0, 3.5]), min_size=1, max_size=60)


@given(values=totals, data=st.data())
def test_the_kth_highest_is_what_a_partition_finds(
    values: list[float], data: st.DataObject
) -> None:
    array = np.asarray(values, dtype=np.float64)
    k = data.draw(st.integers(1, len(values)))
    assert _kth_highest(array, k) == np.partition(array, len(array) - k)[len(array) - k]


runs = st.lists(st.lists(st.integers(0, 40), min_size=1, max_size=15), min_size=1, max_size=6)


@given(parts=runs)
def test_unique_runs_is_numpys_unique(parts: list[list[int]]) -> None:
    # Ascending runs, as each entity's postings are, offset by the set they belong to.
    values = np.concatenate(
        [np.asarray(sorted(set(p)), dtype=np.int64) + 100 * (i % 3) for i, p in enumerate(parts)]
    ).astype(np.int64)
    unique, inverse = _unique_runs(values)
    expected_unique, expected_inverse = np.unique(values, return_inverse=True)
    assert unique.tolist() == expected_unique.tolist()
    assert inverse.tolist() == expected_inverse.tolist()
    assert (unique[inverse] == values).all()
