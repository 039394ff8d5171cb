"""What ``stratamem eval``, ``tune`` and ``calibrate`` use: datasets, the modes and baselines, runs,
tuning and reports. Import it where an evaluation starts: it is not part of ``stratamem.api``."""

from stratamem.eval.calibrate import facts_store, fit_calibration
from stratamem.eval.loading import load_dataset
from stratamem.eval.metrics import trec_eval
from stratamem.eval.report import write_report
from stratamem.eval.runner import BASELINES, MODES, evaluate, store_path, tune
from stratamem.retrieval.relevance import PACKAGED as PACKAGED_CALIBRATION

__all__ = [
    "BASELINES",
    "MODES",
    "PACKAGED_CALIBRATION",
    "evaluate",
    "facts_store",
    "fit_calibration",
    "load_dataset",
    "store_path",
    "trec_eval",
    "tune",
    "write_report",
]
