"""An absolute relevance in [0, 1] for a hit, comparable across queries.

The fused score of a search is rescaled per query (min-max per leg), so its best hit scores
about 1.0 whatever it matched. The relevance is instead read from the legs' *raw* signals,
which mean the same thing in every query, through a logistic model fitted on judged pairs:

    relevance = 1 / (1 + exp(-(b + Σ_i w_i · (x_i - μ_i) / σ_i)))

Features (a hit's raw signals, by name):

``cosine``
    the cosine of the query's vector and the hit's (the vector leg's own score). A hit the
    vector leg did not return is given the lowest cosine it returned (its own is no higher).
``keyword``
    the hit's BM25 score over what the query could score: ``bm25 / Σ_q idf(q)`` over the
    query's words, the idf counted over the documents ranked (a word found nowhere counts as
    in none). 1.0 is about "every word of the query once, in a text of mean length"; 0 is
    "not among the keyword leg's matches".
``graph``
    1 when the entity graph leg found the hit, else 0.
``fused``
    the hit's fused (within-query) score. Recorded with the others but used by no model:
    it is rescaled per query (the best hit of any query has about 1.0), so a model that
    leans on it tells a strong hit from a weak one within a query but not a query that has
    an answer from one that has none (fitted with it, the LoCoMo tune half's abstention
    AUROC fell from 0.99 to 0.96).

A :class:`Calibration` holds one logistic :class:`Model` per set of signals a search can
have: ``chunk`` (hybrid, every leg), ``chunk_keyword`` (keyword alone, or the vector leg
off), ``chunk_vector`` (the vector leg alone), ``chunk_graph``, and for facts ``fact`` (BM25
and cosine) and ``fact_keyword`` (BM25 alone). :meth:`Calibration.chunk` and
:meth:`Calibration.fact` take a mapping of the signals a hit has and use the first model of
their kind whose features are all given. The models and the default threshold of
``nothing_relevant`` are shipped in ``calibration.json`` beside this module (fitted by
``stratamem calibrate``, see ``docs/search.md``) and loaded once::

    from stratamem.retrieval.relevance import Calibration, chunk_features

    calibration = Calibration.load()  # the packaged file; or Calibration.load(path)
    calibration.chunk({"cosine": 0.61, "keyword": 0.8, "graph": 0.0})
    calibration.fact({"cosine": 0.55, "keyword": 0.4})
    calibration.threshold  # the default floor: below it a hit is not relevant

A list of hits shows its relevance going down the list (:func:`decreasing`): each hit shows
the lower of its own and that of every hit ranked above it, so a later stage that reorders
(MMR, a boost, a reranker) never shows a hit below one that claims less.

The fit (:func:`fit_logistic`) is Newton's method on the L2-regularised log-loss over
standardised features; no dependency beyond numpy.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from stratamem.types import RetrievalHit

BUILTIN = "builtin"
PACKAGED = Path(__file__).with_name("calibration.json")
FORMAT = 1
KINDS = ("chunk", "fact")
FEATURES = ("cosine", "keyword", "graph", "fused")
# What the default threshold is when a file names none.
DEFAULT_THRESHOLD = 0.5


@dataclass(frozen=True, slots=True)
class Model:
    """One logistic model over the named ``features`` (standardised by ``mean``/``scale``)."""

    name: str
    kind: str
    features: tuple[str, ...]
    coef: tuple[float, ...]
    intercept: float
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    pairs: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"model {self.name!r}: kind must be one of {', '.join(KINDS)}")
        sizes = {len(self.features), len(self.coef), len(self.mean), len(self.scale)}
        if len(sizes) != 1:
            raise ValueError(f"model {self.name!r}: features, coef, mean and scale differ in size")
        if any(s <= 0 or not math.isfinite(s) for s in self.scale):
            raise ValueError(f"model {self.name!r}: every scale must be a positive number")

    def predict(self, values: Mapping[str, float]) -> float:
        """The relevance of one hit from its signals (each feature must be given)."""
        z = self.intercept
        for name, w, mu, sigma in zip(self.features, self.coef, self.mean, self.scale, strict=True):
            z += w * (float(values[name]) - mu) / sigma
        return _sigmoid(z)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "features": list(self.features),
            "coef": [round(c, 8) for c in self.coef],
            "intercept": round(self.intercept, 8),
            "mean": [round(m, 8) for m in self.mean],
            "scale": [round(s, 8) for s in self.scale],
            "pairs": self.pairs,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Model:
        try:
            return cls(
                name=str(data["name"]),
                kind=str(data["kind"]),
                features=tuple(str(f) for f in data["features"]),
                coef=tuple(float(c) for c in data["coef"]),
                intercept=float(data["intercept"]),
                mean=tuple(float(m) for m in data["mean"]),
                scale=tuple(float(s) for s in data["scale"]),
                pairs=int(data.get("pairs", 0)),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"a calibration model lacks or misstates {exc}") from None


@dataclass(frozen=True, slots=True)
class Calibration:
    """The relevance models and the default ``nothing_relevant`` threshold."""

    name: str
    models: tuple[Model, ...]
    threshold: float = DEFAULT_THRESHOLD
    fitted_on: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"calibration {self.name!r}: threshold must be within [0, 1]")

    # -- scoring ---------------------------------------------------------------------------

    def chunk(self, features: Mapping[str, float]) -> float:
        """The relevance of a chunk (turn, document, item) hit from its signals."""
        return self._score("chunk", features)

    def fact(self, features: Mapping[str, float]) -> float:
        """The relevance of a fact hit from its signals."""
        return self._score("fact", features)

    def model_for(self, kind: str, features: Mapping[str, float]) -> Model | None:
        """The first model of ``kind`` whose features are all in ``features``."""
        for model in self.models:
            if model.kind == kind and all(f in features for f in model.features):
                return model
        return None

    def _score(self, kind: str, features: Mapping[str, float]) -> float:
        model = self.model_for(kind, features)
        if model is None:
            return 0.0  # no signal this calibration knows: nothing vouches for the hit
        return model.predict(features)

    # -- the file --------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "name": self.name,
            "threshold": round(self.threshold, 6),
            "fitted_on": self.fitted_on,
            "models": [m.to_dict() for m in self.models],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "calibration") -> Calibration:
        if not isinstance(data, Mapping) or data.get("format") != FORMAT:
            raise ValueError(f"{where}: not a calibration file of format {FORMAT}")
        try:
            return cls(
                name=str(data["name"]),
                models=tuple(Model.from_dict(m) for m in data["models"]),
                threshold=float(data.get("threshold", DEFAULT_THRESHOLD)),
                fitted_on=dict(data.get("fitted_on") or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None

    def save(self, path: Path) -> None:
        """Write the file atomically (a temporary file beside it, then renamed)."""
        text = json.dumps(self.to_dict(), indent=2) + "\n"
        handle, temp_name = tempfile.mkstemp(
            prefix=f".{path.name}.", suffix=".tmp", dir=path.parent
        )
        temp = Path(temp_name)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                file.write(text)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temp, path)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        with _LOADED_LOCK:
            _LOADED.pop(str(path.expanduser()), None)
            if path.resolve() == PACKAGED.resolve():
                _LOADED.pop(BUILTIN, None)

    @classmethod
    def read(cls, path: Path) -> Calibration:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: cannot read a calibration ({exc})") from None
        return cls.from_dict(data, where=str(path))

    @classmethod
    def load(cls, where: str | Path | None = None) -> Calibration:
        """The calibration ``where`` names (``builtin`` or None: the packaged file; else a
        path), read once per path and kept."""
        key = BUILTIN if where in (None, "", BUILTIN) else str(Path(str(where)).expanduser())
        with _LOADED_LOCK:
            found = _LOADED.get(key)
            if found is None:
                found = cls.read(PACKAGED if key == BUILTIN else Path(key))
                _LOADED[key] = found
            return found


_LOADED: dict[str, Calibration] = {}
_LOADED_LOCK = threading.Lock()


def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


# -- the signals -------------------------------------------------------------------------------


def chunk_features(
    *,
    cosine: float | None,
    bm25: float | None,
    ceiling: float | None,
    graph: bool | None,
    fused: float,
) -> dict[str, float]:
    """A chunk hit's signals by name. None leaves a signal out (its leg did not run):
    ``bm25`` is the hit's raw BM25 (0 where the keyword leg ran and missed it), ``ceiling``
    the query's Σ idf, ``graph`` whether the graph leg found the hit."""
    out: dict[str, float] = {"fused": float(fused)}
    if cosine is not None:
        out["cosine"] = float(cosine)
    if bm25 is not None and ceiling is not None:
        out["keyword"] = keyword_share(bm25, ceiling)
    if graph is not None:
        out["graph"] = 1.0 if graph else 0.0
    return out


def keyword_share(bm25: float, ceiling: float) -> float:
    """BM25 over the query's Σ idf, kept within [0, 3]."""
    if ceiling <= 0 or not math.isfinite(bm25):
        return 0.0
    return min(max(bm25 / ceiling, 0.0), 3.0)


def decreasing(values: Sequence[float]) -> list[float]:
    """``values`` as shown down a ranked list: each the lowest of itself and those above."""
    shown: list[float] = []
    low = 1.0
    for value in values:
        low = min(low, value)
        shown.append(low)
    return shown


def floor(
    hits: Sequence[RetrievalHit], min_relevance: float | None, threshold: float
) -> tuple[list[RetrievalHit], bool]:
    """(the hits whose relevance reaches ``min_relevance``, all of them when None; whether
    none reaches the floor: ``min_relevance``, else ``threshold``). A hit without a
    relevance counts as 0."""

    def level(hit: RetrievalHit) -> float:
        return 0.0 if hit.relevance is None else hit.relevance

    kept = list(hits) if min_relevance is None else [h for h in hits if level(h) >= min_relevance]
    bar = threshold if min_relevance is None else min_relevance
    return kept, not any(level(h) >= bar for h in hits)


def check_min_relevance(value: float | None, *, where: str = "min_relevance") -> float | None:
    """``value`` if it is None or a number within [0, 1]; else a one-line ValueError."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where} must be a number from 0 to 1")
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{where} must be a number from 0 to 1, got {value!r}")
    return float(value)


# -- the fit -------------------------------------------------------------------------------------


FloatArray = npt.NDArray[np.float64]


def fit_logistic(
    x: FloatArray, y: FloatArray, *, l2: float = 1e-3, iterations: int = 50
) -> tuple[FloatArray, float]:
    """(weights, intercept) minimising the mean log-loss of ``sigmoid(x·w + b)`` against the
    0/1 labels ``y``, plus ``l2 / 2 · |w|²``, by Newton's method (the intercept is not
    penalised). ``x`` should be standardised."""
    rows, cols = x.shape
    if rows == 0:
        raise ValueError("no judged pairs to fit on")
    design = np.hstack([x, np.ones((rows, 1))])
    theta = np.zeros(cols + 1)
    penalty = np.full(cols + 1, l2)
    penalty[-1] = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(design @ theta, -35, 35)))
        gradient = design.T @ (p - y) / rows + penalty * theta
        weight = p * (1 - p)
        hessian = (design.T * weight) @ design / rows + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hessian, gradient)
        theta -= step
        if float(np.max(np.abs(step))) < 1e-9:
            break
    return theta[:-1], float(theta[-1])


def fit_model(
    name: str,
    kind: str,
    features: Sequence[str],
    rows: Sequence[Mapping[str, float]],
    labels: Sequence[bool],
    *,
    l2: float = 1e-3,
) -> Model:
    """A :class:`Model` fitted on judged pairs: each row's signals and whether it is relevant.
    Rows lacking one of ``features`` are skipped."""
    kept = [
        (row, bool(label))
        for row, label in zip(rows, labels, strict=True)
        if all(f in row for f in features)
    ]
    if not kept:
        raise ValueError(f"model {name!r}: no judged pair has {', '.join(features)}")
    if len({label for _, label in kept}) < 2:
        raise ValueError(f"model {name!r}: the judged pairs are all of one label")
    x = np.asarray([[float(r[f]) for f in features] for r, _ in kept], np.float64)
    y = np.asarray([1.0 if label else 0.0 for _, label in kept], np.float64)
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale = np.where(scale > 1e-9, scale, 1.0)
    coef, intercept = fit_logistic((x - mean) / scale, y, l2=l2)
    return Model(
        name=name,
        kind=kind,
        features=tuple(features),
        coef=tuple(float(c) for c in coef),
        intercept=intercept,
        mean=tuple(float(m) for m in mean),
        scale=tuple(float(s) for s in scale),
        pairs=len(kept),
    )


#: The models a calibration fits, in the order they are tried: (name, kind, features).
MODELS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("chunk", "chunk", ("cosine", "keyword", "graph")),
    ("chunk_keyword", "chunk", ("keyword",)),
    ("chunk_vector", "chunk", ("cosine",)),
    ("chunk_graph", "chunk", ("graph",)),
    ("fact", "fact", ("cosine", "keyword")),
    ("fact_keyword", "fact", ("keyword",)),
)

__all__ = [
    "BUILTIN",
    "MODELS",
    "Calibration",
    "Model",
    "check_min_relevance",
    "chunk_features",
    "decreasing",
    "fit_logistic",
    "fit_model",
    "floor",
    "keyword_share",
]
