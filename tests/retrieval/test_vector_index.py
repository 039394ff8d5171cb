from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from stratamem.retrieval.index import vectors as vector_index
from stratamem.retrieval.index.vectors import VectorIndex, id_set_checksum

DIM = 32
THRESHOLD = 2_000


def clustered(
    n: int, dim: int = DIM, *, clusters: int = 40, seed: int = 0
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """Unit vectors around random centres (spread differs per cluster), and their cluster.

    Uniform random vectors have no neighbourhoods and give HNSW a recall near 0.1; these do.
    """
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    spread = rng.uniform(0.5, 1.5, clusters)
    labels = rng.integers(0, clusters, n)
    points = centres[labels] + spread[labels, None] * rng.standard_normal((n, dim)) / np.sqrt(dim)
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    return points.astype(np.float32), labels


def reference(
    ids: npt.NDArray[np.int64],
    vectors: npt.ArrayLike,
    query: npt.ArrayLike,
    k: int,
    allow: npt.ArrayLike | None = None,
) -> tuple[list[int], npt.NDArray[np.float64]]:
    """A full scan: every score in float64, sorted by score descending then id ascending."""
    matrix = np.asarray(vectors, dtype=np.float32)
    matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    q = np.asarray(query, dtype=np.float32)[None, :]
    q = q / np.linalg.norm(q, axis=1, keepdims=True)  # as the index does, to the last bit
    scores = (matrix.astype(np.float64) * q[0].astype(np.float64)).sum(axis=1)
    rows = range(len(ids)) if allow is None else np.flatnonzero(np.isin(ids, allow))
    ranked = sorted(rows, key=lambda row: (-scores[row], ids[row]))[: max(k, 0)]
    return [int(ids[row]) for row in ranked], scores[ranked]


def recall(found: npt.NDArray[np.int64], truth: npt.NDArray[np.int64]) -> float:
    return float(
        np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(found, truth, strict=True)])
    )


@pytest.fixture(scope="module")
def data() -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    points, labels = clustered(3_200)
    return points[200:], labels[200:], points[:200]


@pytest.fixture(scope="module")
def ids() -> npt.NDArray[np.int64]:
    return np.arange(3_000, dtype=np.int64) * 7 + 3  # sparse, not slot numbers


@pytest.fixture(scope="module")
def exact(data, ids) -> VectorIndex:  # type: ignore[no-untyped-def]
    index = VectorIndex(DIM, hnsw_threshold=10**9)
    index.add(ids, data[0])
    return index


@pytest.fixture(scope="module")
def hnsw(data, ids) -> VectorIndex:  # type: ignore[no-untyped-def]
    index = VectorIndex(DIM, hnsw_threshold=THRESHOLD)
    index.add(ids, data[0])
    return index


# ------------------------------------------------------------------ exact path

vector_rows = hnp.arrays(np.int8, st.just(3), elements=st.integers(-2, 2)).filter(
    lambda row: bool(row.any())
)


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(vector_rows, max_size=30),
    raw_ids=st.lists(st.integers(0, 500), min_size=30, max_size=30, unique=True),
    query=vector_rows,
    k=st.integers(-1, 35),
    allow=st.none() | st.lists(st.integers(0, 520), max_size=40),
)
def test_exact_equals_a_sorted_full_scan(rows, raw_ids, query, k, allow) -> None:  # type: ignore[no-untyped-def]
    # A grid of small integers makes equal vectors, hence exact ties, common.
    ids = np.array(raw_ids[: len(rows)], dtype=np.int64)
    vectors = np.array(rows, dtype=np.float32).reshape(-1, 3)
    index = VectorIndex(3)
    index.add(ids, vectors)
    found, scores = index.search(query, k, allow=None if allow is None else np.array(allow))
    want, want_scores = reference(ids, vectors, query, k, allow)
    assert found.tolist() == want
    np.testing.assert_array_equal(scores, want_scores.astype(np.float32))


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.booleans(),
            st.lists(st.integers(0, 40), max_size=12),
            st.integers(0, 2**16),
        ),
        max_size=12,
    )
)
@pytest.mark.parametrize("threshold", [10**9, 12])  # 12: the graph is built, buried, compacted
def test_adds_and_removes_match_a_dict_model(ops, threshold: int) -> None:  # type: ignore[no-untyped-def]
    index = VectorIndex(4, hnsw_threshold=threshold)
    model: dict[int, npt.NDArray[np.float32]] = {}
    for is_add, batch, seed in ops:
        batch_ids = np.array(batch, dtype=np.int64)
        if is_add:
            vectors = np.random.default_rng(seed).standard_normal((len(batch), 4))
            index.add(batch_ids, vectors)
            for row_id, vector in zip(batch, vectors, strict=True):
                model[row_id] = vector  # the last occurrence wins
        else:
            removed = index.remove(batch_ids)
            assert removed == len(set(batch) & set(model))
            for row_id in batch:
                model.pop(row_id, None)
        assert len(index) == len(model)
        assert index.ids().tolist() == sorted(model)
    model_ids = np.array(sorted(model), dtype=np.int64)
    query = np.array([1.0, -0.5, 0.25, 2.0])
    found, _ = index.search(query, 50)
    if model:
        want, _ = reference(model_ids, [model[i] for i in sorted(model)], query, 50)
        assert found.tolist() == want
    else:
        assert found.tolist() == []


def test_equal_vectors_tie_by_id_in_both_modes(data) -> None:  # type: ignore[no-untyped-def]
    points = data[0][:2_500]
    duplicate = points[0]
    ids = np.arange(len(points), dtype=np.int64) + 100
    # Three copies of one vector, scattered so BLAS computes them in different blocks.
    ids_with_copies = np.concatenate([ids, [7, 5_000, 3]])
    vectors = np.concatenate([points, [duplicate, duplicate, duplicate]])
    for threshold in (10**9, THRESHOLD):
        index = VectorIndex(DIM, hnsw_threshold=threshold)
        index.add(ids_with_copies, vectors)
        found, scores = index.search(duplicate, 4)
        assert found.tolist() == [3, 7, 100, 5_000]
        assert scores[0] == scores[1] == scores[2] == scores[3]


def test_batch_queries_match_single_queries(exact, hnsw, data) -> None:  # type: ignore[no-untyped-def]
    queries = data[2][:20]
    for index in (exact, hnsw):
        batch_ids, batch_scores = index.search(queries, 10)
        assert batch_ids.shape == batch_scores.shape == (20, 10)
        for row, query in enumerate(queries):
            ids, scores = index.search(query, 10)
            assert ids.tolist() == batch_ids[row].tolist()
            np.testing.assert_array_equal(scores, batch_scores[row])


# ------------------------------------------------------------------- HNSW path


def test_switches_to_hnsw_at_the_threshold(data, ids) -> None:  # type: ignore[no-untyped-def]
    index = VectorIndex(DIM, hnsw_threshold=THRESHOLD)
    index.add(ids[: THRESHOLD - 1], data[0][: THRESHOLD - 1])
    assert index.kind == "exact"
    index.add(ids[THRESHOLD - 1 : THRESHOLD], data[0][THRESHOLD - 1 : THRESHOLD])
    assert index.kind == "hnsw"
    assert len(index) == THRESHOLD


@pytest.mark.parametrize("k", [10, 100])
def test_hnsw_recall_against_exact(exact, hnsw, data, k: int) -> None:  # type: ignore[no-untyped-def]
    assert hnsw.kind == "hnsw"
    truth, _ = exact.search(data[2], k)
    found, scores = hnsw.search(data[2], k)
    assert recall(found, truth) >= 0.95
    assert (np.diff(scores, axis=1) <= 0).all()


def test_scores_agree_between_paths(exact, hnsw, data) -> None:  # type: ignore[no-untyped-def]
    exact_ids, exact_scores = exact.search(data[2], 10)
    hnsw_ids, hnsw_scores = hnsw.search(data[2], 10)
    same = exact_ids == hnsw_ids
    np.testing.assert_array_equal(exact_scores[same], hnsw_scores[same])


# ---------------------------------------------------------------------- allow


def far_cluster(data, ids, query) -> npt.NDArray[np.int64]:  # type: ignore[no-untyped-def]
    """The ids of the cluster whose members are, on average, least like the query."""
    points, labels, _ = data
    similarity = points @ query
    means = [similarity[labels == label].mean() for label in range(labels.max() + 1)]
    return ids[labels == int(np.argmin(means))]


@pytest.mark.parametrize("mode", ["exact", "hnsw"])
@pytest.mark.parametrize("graph_filter", [False, True])
def test_allow_applies_before_the_limit(  # type: ignore[no-untyped-def]
    exact, hnsw, data, ids, mode, graph_filter, monkeypatch
) -> None:
    if graph_filter:  # let the HNSW path try the graph even for this small allowed set
        monkeypatch.setattr(vector_index, "EXACT_ALLOW_MIN", 0)
        monkeypatch.setattr(vector_index, "EXACT_ALLOW_FRACTION", 0.0)
    index = exact if mode == "exact" else hnsw
    for query in data[2][:10]:
        allowed = far_cluster(data, ids, query)
        unfiltered, _ = index.search(query, 10)
        assert not set(unfiltered.tolist()) & set(allowed.tolist())
        found, _ = index.search(query, 10, allow=allowed)
        assert found.tolist() == exact.search(query, 10, allow=allowed)[0].tolist()
        assert len(found) == 10
        assert set(found.tolist()) <= set(allowed.tolist())


def test_allow_random_tenth_on_the_graph(exact, hnsw, data, ids, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(vector_index, "EXACT_ALLOW_MIN", 0)
    allowed = np.random.default_rng(1).choice(ids, len(ids) // 10, replace=False)
    truth, _ = exact.search(data[2], 10, allow=allowed)
    found, _ = hnsw.search(data[2], 10, allow=allowed)
    assert np.isin(found, allowed).all()
    assert recall(found, truth) >= 0.95


@pytest.mark.parametrize("mode", ["exact", "hnsw"])
def test_allow_smaller_than_k_returns_what_is_allowed(exact, hnsw, data, ids, mode) -> None:  # type: ignore[no-untyped-def]
    index = exact if mode == "exact" else hnsw
    allowed = np.array([ids[5], ids[900], ids[900], 10**12], dtype=np.int64)  # dup and absent
    found, scores = index.search(data[2][0], 10, allow=allowed)
    assert sorted(found.tolist()) == sorted({int(ids[5]), int(ids[900])})
    assert len(scores) == 2
    empty, _ = index.search(data[2][:3], 10, allow=np.array([], dtype=np.int64))
    assert empty.shape == (3, 0)


# ------------------------------------------------------------ remove, replace


@pytest.mark.parametrize("threshold", [10**9, THRESHOLD])
def test_replace_and_remove(data, ids, threshold: int) -> None:  # type: ignore[no-untyped-def]
    index = VectorIndex(DIM, hnsw_threshold=threshold)
    index.add(ids, data[0])
    target = data[2][0]
    index.add(ids[42:43], target[None, :])  # replaced: now the best match, score 1
    found, scores = index.search(target, 3)
    assert found[0] == ids[42]
    assert scores[0] == pytest.approx(1.0, abs=1e-6)
    assert len(index) == len(ids)

    assert index.remove(np.array([ids[42], ids[42], 10**12])) == 1
    assert ids[42] not in index
    assert ids[42] not in index.search(target, 50)[0]
    assert len(index) == len(ids) - 1


@pytest.mark.parametrize("threshold", [10**9, THRESHOLD])
def test_stored_vectors_come_back_by_id_in_the_order_asked(data, ids, threshold: int) -> None:  # type: ignore[no-untyped-def]
    index = VectorIndex(DIM, hnsw_threshold=threshold)
    index.add(ids, data[0])
    index.remove(ids[10:11])
    asked = np.array([ids[500], 10**12, ids[3], ids[10], ids[500]])
    found, vectors = index.vectors(asked)
    assert found.tolist() == [ids[500], ids[3], ids[500]]
    normalised = data[0] / np.linalg.norm(data[0], axis=1, keepdims=True)
    np.testing.assert_allclose(vectors, normalised[[500, 3, 500]], atol=1e-6)
    assert index.vectors(np.array([], dtype=np.int64))[1].shape == (0, DIM)


def test_hnsw_compacts_after_many_removals(data, ids) -> None:  # type: ignore[no-untyped-def]
    index = VectorIndex(DIM, hnsw_threshold=THRESHOLD)
    index.add(ids, data[0])
    gone = ids[:500]  # < 20 % dead: marked, hidden, the graph kept
    index.remove(gone)
    assert index.kind == "hnsw"
    assert not np.isin(index.search(data[2], 100)[0], gone).any()
    index.remove(ids[500:1_200])  # > 20 % dead and < threshold live: rebuilt exact
    assert index.kind == "exact"
    assert len(index) == len(ids) - 1_200
    found, _ = index.search(data[2][0], 10)
    assert found.tolist() == reference(ids[1_200:], data[0][1_200:], data[2][0], 10)[0]


def test_rebuild_replaces_everything(data, ids) -> None:  # type: ignore[no-untyped-def]
    index = VectorIndex(DIM, hnsw_threshold=THRESHOLD)
    index.add(ids[:100], data[0][:100])
    index.rebuild(ids[1_000:], data[0][1_000:])
    assert index.kind == "hnsw"
    assert index.ids().tolist() == ids[1_000:].tolist()
    index.rebuild(np.array([], dtype=np.int64), np.empty((0, DIM)))
    assert len(index) == 0
    assert index.kind == "exact"
    assert index.search(data[2][0], 10)[0].tolist() == []


# ---------------------------------------------------------------- persistence


@pytest.mark.parametrize("threshold", [10**9, THRESHOLD])
def test_save_and_load_round_trip(tmp_path: Path, data, ids, threshold: int) -> None:  # type: ignore[no-untyped-def]
    index = VectorIndex(DIM, hnsw_threshold=threshold, signature="model-a/32", generation=4)
    index.add(ids, data[0])
    index.remove(ids[::13])  # dead nodes on the graph, moved rows on the exact path
    path = index.save(tmp_path / "vectors.smvi")
    assert [p.name for p in tmp_path.iterdir()] == ["vectors.smvi"]  # no temp file left

    raw = path.read_bytes()  # the vectors stay with the caller
    assert not any(row.astype("<f4").tobytes() in raw for row in index.vectors(ids[1:4])[1])
    live = np.arange(len(ids)) % 13 != 0
    loaded = VectorIndex.load(
        path,
        DIM,
        lambda: _ascending(ids[live], data[0][live]),  # what the caller gave, as a store does
        signature="model-a/32",
        generation=4,
        ids_checksum=id_set_checksum(ids[np.arange(len(ids)) % 13 != 0]),
        hnsw_threshold=threshold,
    )
    assert loaded is not None
    assert loaded.kind == index.kind
    assert loaded.ids_checksum == index.ids_checksum
    for allow in (None, ids[::3]):
        want = index.search(data[2], 10, allow=allow)
        got = loaded.search(data[2], 10, allow=allow)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    loaded.add(ids[:1], data[2][:1])  # still updatable
    assert loaded.search(data[2][0], 1)[0].tolist() == [ids[0]]


def test_header_is_documented_json(tmp_path: Path, hnsw) -> None:  # type: ignore[no-untyped-def]
    raw = hnsw.save(tmp_path / "v.smvi").read_bytes()
    assert raw[:8] == vector_index.MAGIC
    length = int.from_bytes(raw[8:12], "little")
    header = json.loads(raw[12 : 12 + length])
    assert header["library"] == "faiss"
    assert header["kind"] == "hnsw"
    assert header["count"] == len(hnsw)
    assert header["ids_sha256"] == hnsw.ids_checksum
    assert set(header) >= {"format_version", "library_version", "dim", "metric", "signature"}


def test_exact_file_loaded_above_threshold_builds_the_graph(tmp_path: Path, exact) -> None:  # type: ignore[no-untyped-def]
    path = exact.save(tmp_path / "v.smvi")
    loaded = VectorIndex.load(
        path, DIM, lambda: exact.vectors(exact.ids()), hnsw_threshold=THRESHOLD
    )
    assert loaded is not None
    assert loaded.kind == "hnsw"


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: raw[: len(raw) // 2],  # truncated
        lambda raw: raw[:-1],
        lambda raw: b"",
        lambda raw: b"garbage" * 100,
        lambda raw: raw[:40] + bytes([raw[40] ^ 0xFF]) + raw[41:],  # header byte
        lambda raw: raw[:-5000] + bytes([raw[-5000] ^ 1]) + raw[-4999:],  # payload bit
        lambda raw: vector_index.MAGIC + (2**31).to_bytes(4, "little") + raw[12:],
    ],
)
@pytest.mark.parametrize("mode", ["exact", "hnsw"])
def test_damaged_file_loads_as_none(tmp_path: Path, exact, hnsw, damage, mode: str) -> None:  # type: ignore[no-untyped-def]
    index = exact if mode == "exact" else hnsw
    path = index.save(tmp_path / "v.smvi")
    stored = index.vectors(index.ids())
    assert VectorIndex.load(path, DIM, lambda: stored, hnsw_threshold=index.hnsw_threshold)
    path.write_bytes(damage(path.read_bytes()))
    assert VectorIndex.load(path, DIM, lambda: stored, hnsw_threshold=index.hnsw_threshold) is None


@pytest.mark.parametrize(
    ("dim", "options"),
    [
        (DIM + 1, {}),
        (DIM, {"signature": "model-b/32"}),
        (DIM, {"generation": 2}),
        (DIM, {"ids_checksum": id_set_checksum([1, 2, 3])}),
    ],
)
def test_mismatched_file_loads_as_none(tmp_path: Path, exact, dim: int, options) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "v.smvi"
    saved = VectorIndex(DIM, signature="model-a/32", generation=1)
    saved.add(exact.ids()[:10], np.eye(10, DIM))
    saved.save(path)
    expected = {"signature": "model-a/32", "generation": 1, **options}
    assert VectorIndex.load(path, dim, _never, **expected) is None
    stored = saved.vectors(saved.ids())
    assert VectorIndex.load(path, DIM, lambda: stored, signature="model-a/32", generation=1)


@pytest.mark.parametrize("mode", ["exact", "hnsw"])
def test_vectors_of_other_rows_load_as_none(tmp_path: Path, exact, hnsw, mode: str) -> None:  # type: ignore[no-untyped-def]
    index = exact if mode == "exact" else hnsw
    path = index.save(tmp_path / "v.smvi")
    ids, matrix = index.vectors(index.ids())
    for wrong in ((ids[1:], matrix[1:]), (ids + 1, matrix), (ids, matrix[1:])):
        assert VectorIndex.load(path, DIM, lambda w=wrong: w) is None  # type: ignore[misc]


def test_loaded_index_serves_the_vectors_given(tmp_path: Path, hnsw) -> None:  # type: ignore[no-untyped-def]
    """The file keeps the graph, the caller the vectors: a vector changed since the file
    was written is the one a search scores."""
    path = hnsw.save(tmp_path / "v.smvi")
    ids, matrix = hnsw.vectors(hnsw.ids())
    changed = matrix.copy()
    changed[0] = -matrix[0]
    loaded = VectorIndex.load(path, DIM, lambda: (ids, changed))
    assert loaded is not None
    found, scores = loaded.search(-matrix[0], 1, allow=ids[:10])  # scored exactly
    assert found.tolist() == [ids[0]]
    assert scores[0] == pytest.approx(1.0, abs=1e-5)


def test_missing_file_loads_as_none(tmp_path: Path) -> None:
    assert VectorIndex.load(tmp_path / "absent.smvi", DIM, _never) is None


def _ascending(ids: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(ids)
    return ids[order], rows[order]


def _never() -> tuple[np.ndarray, np.ndarray]:
    raise AssertionError("the vectors are asked for only once the file passed its checks")


def test_save_needs_a_path_and_overwrites(tmp_path: Path) -> None:
    index = VectorIndex(2)
    with pytest.raises(ValueError, match="path"):
        index.save()
    index.path = tmp_path / "v.smvi"
    index.save()
    index.add(np.array([1]), np.array([[1.0, 0.0]]))
    index.save()
    loaded = VectorIndex.load(tmp_path / "v.smvi", 2, lambda: index.vectors(index.ids()))
    assert loaded is not None
    assert loaded.ids().tolist() == [1]


# ----------------------------------------------------------------- bad inputs


def test_wrong_query_dimension_names_both() -> None:
    index = VectorIndex(4)
    index.add(np.array([1]), np.ones((1, 4)))
    with pytest.raises(ValueError, match=r"dimension 3.*has 4"):
        index.search(np.ones(3), 1)
    with pytest.raises(ValueError, match=r"dimension 5.*has 4"):
        index.add(np.array([2]), np.ones((1, 5)))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_rejected(bad: float) -> None:
    index = VectorIndex(2)
    with pytest.raises(ValueError, match="NaN or infinity"):
        index.add(np.array([1, 2]), np.array([[1.0, 0.0], [bad, 1.0]]))
    assert len(index) == 0
    index.add(np.array([1]), np.array([[1.0, 0.0]]))
    with pytest.raises(ValueError, match="NaN or infinity"):
        index.search(np.array([bad, 1.0]), 1)


@pytest.mark.parametrize(
    ("ids", "vectors", "message"),
    [
        (np.array([1, 2]), np.ones((1, 2)), "2 ids but 1 vectors"),
        (np.array([[1]]), np.ones((1, 2)), "1-D"),
        (np.array([1.5]), np.ones((1, 2)), "integers"),
        (np.array([-1]), np.ones((1, 2)), "non-negative"),
        (np.array([1]), np.ones(2), "2-D"),
        (np.array([1]), np.zeros((1, 2)), "zero vector"),
    ],
)
def test_bad_additions_are_rejected(ids, vectors, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        VectorIndex(2).add(ids, vectors)


@pytest.mark.parametrize(
    "options", [{"dim": 0}, {"dim": 2, "m": 1}, {"dim": 2, "ef_search": 0}, {"dim": True}]
)
def test_bad_construction_is_rejected(options) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="must be an integer"):
        VectorIndex(**options)


@pytest.mark.parametrize("k", [0, -3])
def test_k_of_zero_or_less_gives_nothing(exact, data, k: int) -> None:  # type: ignore[no-untyped-def]
    ids, scores = exact.search(data[2][0], k)
    assert ids.shape == scores.shape == (0,)


def test_empty_index_gives_nothing() -> None:
    ids, scores = VectorIndex(3).search(np.ones(3), 5)
    assert ids.dtype == np.int64
    assert scores.dtype == np.float32
    assert ids.shape == (0,)
    assert VectorIndex(3).search(np.ones((2, 3)), 5)[0].shape == (2, 0)


def test_vectors_are_normalised_so_scores_are_cosines() -> None:
    index = VectorIndex(2)
    index.add(np.array([1, 2]), np.array([[3.0, 0.0], [1.0, 1.0]]))
    ids, scores = index.search(np.array([10.0, 0.0]), 2)
    assert ids.tolist() == [1, 2]
    np.testing.assert_allclose(scores, [1.0, np.sqrt(0.5)], rtol=1e-6)


def test_concurrent_searches_agree(hnsw, data) -> None:  # type: ignore[no-untyped-def]
    want = [hnsw.search(q, 10)[0].tolist() for q in data[2][:40]]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda q: hnsw.search(q, 10)[0].tolist(), data[2][:40]))
    assert got == want


# ------------------------------------------------------------------ resolved allow-lists


@pytest.mark.parametrize("threshold", [10**9, THRESHOLD])
def test_a_resolved_allow_list_answers_as_its_ids_do(data, ids, threshold: int) -> None:  # type: ignore[no-untyped-def]
    index = VectorIndex(DIM, hnsw_threshold=threshold)
    index.add(ids, data[0])
    rng = np.random.default_rng(7)
    for size in (40, 900, 2_700):
        wanted = np.sort(rng.choice(ids, size=size, replace=False))
        resolved = index.allowed(wanted)
        for query in data[2][:20]:
            by_ids = index.search(query, 10, allow=wanted)
            by_resolved = index.search(query, 10, allow=resolved)
            assert by_ids[0].tolist() == by_resolved[0].tolist()
            np.testing.assert_allclose(by_ids[1], by_resolved[1], rtol=0, atol=1e-6)


@pytest.mark.parametrize("threshold", [10**9, THRESHOLD])
def test_a_resolved_allow_list_follows_adds_and_removes(data, ids, threshold: int) -> None:  # type: ignore[no-untyped-def]
    index = VectorIndex(DIM, hnsw_threshold=threshold)
    index.add(ids, data[0])
    wanted = ids[:500]
    resolved = index.allowed(wanted)
    query = data[0][3]
    index.remove(ids[3:4])  # the query's own row, which ranked first
    found, _ = index.search(query, 5, allow=resolved)
    assert int(ids[3]) not in found.tolist()
    assert found.tolist() == index.search(query, 5, allow=wanted)[0].tolist()
    index.add(ids[3:4], data[0][3:4])
    found, _ = index.search(query, 5, allow=resolved)
    assert found[0] == ids[3]
