"""The relevance calibration: its models, its file, its fit, and how a list shows it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from stratamem.eval.calibrate import (
    Pair,
    auroc,
    brier,
    choose_threshold,
    expected_calibration_error,
    fit,
    reliability,
)
from stratamem.retrieval.relevance import (
    MODELS,
    Calibration,
    Model,
    check_min_relevance,
    chunk_features,
    decreasing,
    fit_logistic,
    fit_model,
    keyword_share,
)


def test_the_packaged_calibration_loads_once_and_has_a_model_for_every_signal_set() -> None:
    calibration = Calibration.load()
    assert Calibration.load("builtin") is calibration
    assert {m.name for m in calibration.models} == {name for name, _, _ in MODELS}
    assert 0.0 < calibration.threshold < 1.0
    assert calibration.fitted_on.get("split") == "tune"


@pytest.mark.parametrize(
    "signals",
    [
        {"cosine": 0.9, "keyword": 1.5, "graph": 1.0, "fused": 1.0},
        {"cosine": -0.2, "keyword": 0.0, "graph": 0.0, "fused": 0.0},
        {"keyword": 3.0},
        {"cosine": 1.0},
        {"graph": 0.0},
    ],
)
def test_a_relevance_is_within_0_and_1(signals: dict[str, float]) -> None:
    value = Calibration.load().chunk(signals)
    assert 0.0 <= value <= 1.0


def test_a_stronger_match_is_more_relevant() -> None:
    calibration = Calibration.load()
    weak = {"cosine": 0.1, "keyword": 0.0, "graph": 0.0, "fused": 0.3}
    strong = {"cosine": 0.8, "keyword": 1.2, "graph": 0.0, "fused": 1.0}
    assert calibration.chunk(strong) > calibration.chunk(weak)
    assert calibration.fact({"cosine": 0.8, "keyword": 1.0, "fused": 1.0}) > calibration.fact(
        {"cosine": 0.05, "keyword": 0.0, "fused": 0.1}
    )


def test_the_first_model_whose_signals_are_all_given_is_used() -> None:
    calibration = Calibration.load()
    assert calibration.model_for("chunk", {"cosine": 0.5, "keyword": 0.1, "graph": 0, "fused": 1})
    chosen = calibration.model_for("chunk", {"keyword": 0.4, "fused": 0.9})
    assert chosen is not None
    assert chosen.name == "chunk_keyword"
    chosen = calibration.model_for("chunk", {"cosine": 0.4, "fused": 0.9})
    assert chosen is not None
    assert chosen.name == "chunk_vector"
    assert calibration.model_for("chunk", {"fused": 1.0}) is None
    assert calibration.chunk({"fused": 1.0}) == 0.0  # nothing vouches for the hit


def test_the_signals_leave_out_the_legs_that_did_not_run() -> None:
    assert chunk_features(cosine=None, bm25=None, ceiling=None, graph=None, fused=0.5) == {
        "fused": 0.5
    }
    found = chunk_features(cosine=0.4, bm25=3.0, ceiling=6.0, graph=True, fused=1.0)
    assert found == {"fused": 1.0, "cosine": 0.4, "keyword": 0.5, "graph": 1.0}
    assert keyword_share(5.0, 0.0) == 0.0
    assert keyword_share(100.0, 1.0) == 3.0


def test_a_list_shows_its_relevance_going_down() -> None:
    assert decreasing([0.9, 0.95, 0.4, 0.6, 0.1]) == [0.9, 0.9, 0.4, 0.4, 0.1]
    assert decreasing([]) == []


@pytest.mark.parametrize("bad", [-0.01, 1.5, math.nan, math.inf, True, "0.5"])
def test_a_bad_min_relevance_is_refused_in_one_line(bad: object) -> None:
    with pytest.raises(ValueError, match="min_relevance must be a number from 0 to 1"):
        check_min_relevance(bad)  # type: ignore[arg-type]


def test_a_good_min_relevance_passes() -> None:
    assert check_min_relevance(None) is None
    assert check_min_relevance(0) == 0.0
    assert check_min_relevance(1) == 1.0


def test_the_logistic_fit_recovers_known_weights() -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(4000, 2))
    truth = np.array([2.0, -1.0])
    p = 1 / (1 + np.exp(-(x @ truth + 0.5)))
    y = (rng.random(4000) < p).astype(np.float64)
    coef, intercept = fit_logistic(x, y, l2=0.0)
    assert np.allclose(coef, truth, atol=0.25)
    assert abs(intercept - 0.5) < 0.2


def _tiny_judged_set() -> list[Pair]:
    """Relevant hits have a high cosine and keyword share; the rest low ones."""
    pairs = []
    for i in range(40):
        step = i / 40
        pairs.append(
            Pair(
                {"cosine": 0.5 + step / 4, "keyword": 0.6 + step, "graph": 0.0, "fused": 0.9}, True
            )
        )
        pairs.append(
            Pair({"cosine": 0.1 + step / 4, "keyword": step / 2, "graph": 0.0, "fused": 0.8}, False)
        )
    # Some overlap, so the fit is not separable.
    pairs.append(Pair({"cosine": 0.2, "keyword": 0.1, "graph": 1.0, "fused": 0.7}, True))
    pairs.append(Pair({"cosine": 0.6, "keyword": 0.9, "graph": 1.0, "fused": 1.0}, False))
    return pairs


def test_a_refit_on_a_tiny_judged_set_round_trips_through_its_file(tmp_path: Path) -> None:
    chunks = _tiny_judged_set()
    facts = [Pair({"cosine": p.signals["cosine"], **p.signals}, p.relevant) for p in chunks]
    refit = fit(chunks, facts, name="tiny", threshold=0.4, fitted_on={"split": "tune"})
    assert [m.name for m in refit.models] == [name for name, _, _ in MODELS]
    high = {"cosine": 0.7, "keyword": 1.4, "graph": 0.0, "fused": 0.9}
    low = {"cosine": 0.15, "keyword": 0.05, "graph": 0.0, "fused": 0.8}
    assert refit.chunk(high) > 0.8 > 0.2 > refit.chunk(low)

    path = tmp_path / "calibration.json"
    refit.save(path)
    again = Calibration.load(path)
    assert again == Calibration.read(path)
    assert again.name == "tiny"
    assert again.threshold == 0.4
    assert again.chunk(high) == pytest.approx(refit.chunk(high), abs=1e-6)
    assert again.fact(low) == pytest.approx(refit.fact(low), abs=1e-6)
    # Saving again drops the kept copy: the next load reads the new file.
    Calibration("renamed", refit.models, 0.3).save(path)
    assert Calibration.load(path).name == "renamed"


def test_a_fit_needs_both_labels() -> None:
    rows = [{"cosine": 0.5}] * 3
    with pytest.raises(ValueError, match="all of one label"):
        fit_model("chunk_vector", "chunk", ("cosine",), rows, [True, True, True])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(format=99), "not a calibration file"),
        (lambda d: d.update(threshold=2.0), "threshold must be within"),
        (lambda d: d["models"][0].pop("coef"), "lacks or misstates"),
        (lambda d: d["models"][0]["scale"].__setitem__(0, 0.0), "positive number"),
        (lambda d: d["models"][0].update(kind="page"), "kind must be one of"),
    ],
)
def test_a_broken_calibration_file_is_refused_naming_the_file(
    tmp_path: Path, change: object, message: str
) -> None:
    data = Calibration.load().to_dict()
    change(data)  # type: ignore[operator]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message) as raised:
        Calibration.read(path)
    assert str(path) in str(raised.value)


def test_a_model_predicts_the_logistic_of_its_standardised_signals() -> None:
    model = Model("m", "chunk", ("cosine",), (2.0,), -1.0, (0.5,), (0.25,))
    assert model.predict({"cosine": 0.75}) == pytest.approx(1 / (1 + math.exp(-1.0)))


def test_the_measures_on_values_worked_out_by_hand() -> None:
    assert brier([1.0, 0.0, 0.5], [True, False, True]) == pytest.approx(0.25 / 3)
    assert auroc([0.9, 0.8], [0.1, 0.8]) == pytest.approx((2 + 1.5) / 4)
    table = reliability([0.05, 0.15, 0.95, 1.0], [False, True, True, True])
    assert [row["count"] for row in table] == [1, 1, 0, 0, 0, 0, 0, 0, 0, 2]
    assert table[9]["mean_predicted"] == 0.975
    assert table[9]["share_relevant"] == 1.0
    assert expected_calibration_error([0.05, 0.95], [False, True]) == pytest.approx(0.05)
    assert choose_threshold([0.8, 0.9, 0.7], [0.1, 0.2, 0.3]) == pytest.approx(0.5)
    assert choose_threshold([0.8, 0.9, 0.7], [0.1, 0.2, 0.85]) == pytest.approx(0.45)
